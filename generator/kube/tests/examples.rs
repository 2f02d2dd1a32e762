//! Every example, rendered for Kubeflow Trainer, is accepted as the API server would accept
//! it: the pytorch example as it is (it has a `[kubernetes]` section), every other with one
//! added, so each shape of job (built-in trainer, script, Python dataset, homogeneous, several
//! GPUs) renders objects the pinned CRDs and their CEL rules accept.

use std::path::{Path, PathBuf};

use hetgen_fixtures::repo;

const SECTION: &str = "\n[kubernetes]\nimage = \"registry.example.com/example:1\"\n";

#[test]
fn every_example_renders_objects_the_api_server_accepts() {
    let mut checked = Vec::new();
    let examples = std::fs::read_dir(repo().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| match p.extension() {
            Some(ext) if ext == "toml" => Some(p),
            None if p.join("hetgen.toml").is_file() => Some(p.join("hetgen.toml")),
            _ => None,
        });
    for path in examples {
        let mut text = std::fs::read_to_string(&path).unwrap();
        if !text.contains("\n[kubernetes]") {
            text.push_str(SECTION);
        }
        let (job, objects) = accepted_objects(&path, &text);
        // The pods they make: one per host of every group.
        let pods = hetgen_kube::pods::pods(&objects.runtime, &objects.trainjob).unwrap();
        assert_eq!(
            pods.len() as u32,
            job.groups.iter().map(|g| g.count).sum::<u32>(),
            "{}",
            path.display()
        );
        checked.push(path);
    }
    assert!(checked.len() >= 6, "{checked:?}");
}

#[test]
fn a_data_port_set_in_the_environment_is_the_one_the_pods_expose_and_probe() {
    // The server and the trainers read `HETGEN_DATA_PORT` from the pods' environment; the
    // `containerPort` and the readiness probe must follow it, or the data pods are never Ready.
    let jobs = pytorch_replicated_jobs(|text| {
        text.replace(
            "\n[kubernetes]\n",
            "\n[kubernetes]\nenvironment = { HETGEN_DATA_PORT = \"17000\" }\n",
        )
    });
    let data: Vec<_> = jobs.iter().filter(|j| j["name"] != "node").collect();
    assert!(!data.is_empty());
    for job in data {
        let container = &job["template"]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["ports"][0]["containerPort"], 17000, "{container}");
        assert_eq!(
            container["readinessProbe"]["grpc"]["port"], 17000,
            "{container}"
        );
        assert!(
            container["env"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["name"] == "HETGEN_DATA_PORT" && e["value"] == "17000"),
            "{container}"
        );
    }
}

#[test]
fn pods_that_ask_for_gpus_tolerate_gpu_node_taints_and_others_do_not() {
    // EKS and GKE taint GPU node groups `nvidia.com/gpu:NoSchedule`: a trainer pod without the
    // toleration would stay Pending there. A data pod has no business on those nodes.
    let jobs = pytorch_replicated_jobs(|text| text);
    for job in &jobs {
        let pod = &job["template"]["spec"]["template"]["spec"];
        let wants_gpus = !pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"].is_null();
        let tolerates = pod["tolerations"].as_array().is_some_and(|t| {
            t.iter().any(|t| {
                t["key"] == "nvidia.com/gpu"
                    && t["operator"] == "Exists"
                    && t["effect"] == "NoSchedule"
            })
        });
        assert_eq!(tolerates, wants_gpus, "{}: {pod}", job["name"]);
        // The example's trainer group is ml.g5.xlarge (one GPU), its data group ml.c5.xlarge.
        assert_eq!(wants_gpus, job["name"] == "node", "{}", job["name"]);
    }
}

/// The job of the spec `text` (read from `path`) and its objects, which the API server, as the
/// offline check sees it, accepts.
fn accepted_objects(path: &Path, text: &str) -> (hetgen_spec::Job, hetgen_kube::Objects) {
    let result = hetgen_spec::check_file(path, text.as_bytes());
    let job = result
        .job
        .unwrap_or_else(|| panic!("{} is invalid: {:?}", path.display(), result.report));
    let objects = hetgen_kube::objects(&job).expect("a [kubernetes] section");
    let files: Vec<(PathBuf, String)> = objects
        .files()
        .into_iter()
        .map(|(name, text)| (path.with_file_name(name), text))
        .collect();
    let found = hetgen_kube::validate::check(&files);
    assert!(
        found.is_empty(),
        "{}:\n{}",
        path.display(),
        found
            .iter()
            .map(|d| format!("{}: {d}\n", d.location()))
            .collect::<String>()
    );
    (job, objects)
}

/// The pytorch example (which keeps its outputs on a claim) with every other pod setting of
/// `[kubernetes]` set, its objects checked as the API server would check them.
fn with_pod_settings() -> hetgen_kube::Objects {
    pytorch_objects(|text| {
        text.replace(
            "\n[kubernetes]\n",
            "\n[kubernetes]\n\
             tolerations = [{ key = \"dedicated\", value = \"ml\", effect = \"NoSchedule\" }]\n\
             reserve = { cpu = 1.5, memory_gib = 2 }\n\
             pod_annotations = { \"example.com/owner\" = \"vision\" }\n\
             pod_labels = { team = \"vision\" }\n",
        )
    })
}

/// Every pod the controllers would make carries the spec's annotations and labels (and no
/// mesh sidecar, which would keep it from completing); the trainer pods keep their model and
/// checkpoints on the output claim.
#[test]
fn the_pods_carry_the_specs_metadata_and_the_trainers_its_output_claim() {
    let objects = with_pod_settings();
    let pods = hetgen_kube::pods::pods(&objects.runtime, &objects.trainjob).unwrap();
    assert_eq!(pods.len(), 4);
    for pod in &pods {
        let (annotations, labels) = (&pod.annotations, &pod.labels);
        assert_eq!(annotations["example.com/owner"], "vision", "{}", pod.name);
        assert_eq!(labels["sidecar.istio.io/inject"], "false", "{}", pod.name);
        assert_eq!(labels["team"], "vision", "{}", pod.name);
        let outputs: Vec<_> = pod
            .container
            .mounts
            .iter()
            .filter(|m| m.volume == "outputs")
            .map(|m| (m.path.as_str(), m.sub_path.as_str()))
            .collect();
        if pod.replicated_job == "node" {
            assert_eq!(
                outputs,
                [
                    ("/opt/ml/model", "pytorch-digits/model"),
                    ("/opt/ml/checkpoints", "pytorch-digits/checkpoints")
                ]
            );
            assert_eq!(pod.claims["outputs"], "digits-outputs");
        } else {
            assert_eq!(outputs, []);
        }
    }
}

/// Every pod tolerates the spec's taints and requests its instance type less the node's
/// reserve.
#[test]
fn every_pod_tolerates_the_specs_taints_and_requests_its_instance_less_the_reserve() {
    let objects = with_pod_settings();
    for job in objects.runtime["spec"]["template"]["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
    {
        let pod = &job["template"]["spec"]["template"]["spec"];
        let tolerations = pod["tolerations"].as_array().unwrap();
        assert!(
            tolerations.contains(&serde_json::json!(
                { "key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule" }
            )),
            "{pod}"
        );
        // ml.c5.xlarge and ml.g5.xlarge: 4 vCPUs, 8 and 16 GiB.
        let requests = &pod["containers"][0]["resources"]["requests"];
        assert_eq!(requests["cpu"], "2500m", "{}", job["name"]);
        let memory = if job["name"] == "node" {
            "14336Mi"
        } else {
            "6144Mi"
        };
        assert_eq!(requests["memory"], memory, "{}", job["name"]);
    }
    // What Trainer fills the `node` pods from: the TrainJob's resources, reserve included.
    assert_eq!(
        objects.trainjob["spec"]["trainer"]["resourcesPerNode"]["requests"]["cpu"],
        "2500m"
    );
}

/// The runtime's replicatedJobs of the pytorch example, its spec text edited by `edit`.
fn pytorch_replicated_jobs(edit: impl FnOnce(String) -> String) -> Vec<serde_json::Value> {
    pytorch_objects(edit).runtime["spec"]["template"]["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
        .clone()
}

/// The objects of the pytorch example, its spec text edited by `edit`, accepted as the API
/// server would accept them.
fn pytorch_objects(edit: impl FnOnce(String) -> String) -> hetgen_kube::Objects {
    let path = repo().join("examples/pytorch/hetgen.toml");
    let text = edit(std::fs::read_to_string(&path).unwrap());
    accepted_objects(&path, &text).1
}
