//! hetgen's own rules: what the API server or the Trainer and JobSet controllers would refuse,
//! or get wrong, that the CRD schemas cannot say. One function a rule; each reads the objects
//! of one check (all files together) and reports against the object at fault.
//!
//! `dependsOn` together with `startupPolicyOrder: InOrder` is not here: the JobSet and runtime
//! CRDs have a CEL rule for it, which the schema check evaluates and locates at the order.

use hetgen_spec::MAX_POD_NAME;
use serde_json::Value;

use super::yaml::{child, item};
use super::{Finding, Object, code};

/// The label Trainer sets on the replicatedJob its trainer runs in, and the name it requires
/// of that job and of its main container.
const ANCESTOR: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
const NODE: &str = "node";

/// The longest DNS label, and so the longest pod hostname.
const MAX_LABEL: usize = 63;

/// Every rule, on every object; findings name the object by its index in `objects`.
pub(crate) fn check(objects: &[Object]) -> Vec<(usize, Finding)> {
    let mut out = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        let mut found = Vec::new();
        depends_on_earlier_jobs(o, &mut found);
        trainer_job_is_node(o, &mut found);
        runtime_ref_names_a_given_runtime(o, objects, &mut found);
        pod_hostnames_fit(o, objects, &mut found);
        out.extend(found.into_iter().map(|f| (i, f)));
    }
    out
}

/// The path of the JobSet spec inside an object of `kind`, if it has one.
fn jobset_spec(kind: &str) -> Option<&'static str> {
    match kind {
        "JobSet" => Some("spec"),
        "TrainingRuntime" | "ClusterTrainingRuntime" => Some("spec.template.spec"),
        _ => None,
    }
}

/// Follows a dotted path of plain field names.
fn at<'v>(value: &'v Value, path: &str) -> &'v Value {
    path.split('.').fold(value, |v, k| &v[k])
}

fn is_runtime(kind: &str) -> bool {
    matches!(kind, "TrainingRuntime" | "ClusterTrainingRuntime")
}

/// (a) JobSet starts a replicatedJob after those it depends on, and requires them to come
/// earlier in the list: a `dependsOn` naming a later job, itself or no job is refused.
fn depends_on_earlier_jobs(o: &Object, out: &mut Vec<Finding>) {
    let Some(spec) = jobset_spec(o.kind) else {
        return;
    };
    let jobs_path = child(spec, "replicatedJobs");
    let Some(jobs) = at(&o.doc.value, spec)["replicatedJobs"].as_array() else {
        return;
    };
    let names: Vec<&str> = jobs
        .iter()
        .map(|j| j["name"].as_str().unwrap_or(""))
        .collect();
    for (i, job) in jobs.iter().enumerate() {
        let Some(deps) = job["dependsOn"].as_array() else {
            continue;
        };
        for (d, dep) in deps.iter().enumerate() {
            let Some(name) = dep["name"].as_str() else {
                continue;
            };
            let path = child(&item(&child(&item(&jobs_path, i), "dependsOn"), d), "name");
            match names.iter().position(|n| *n == name) {
                Some(j) if j < i => {}
                Some(j) if j == i => out.push(
                    Finding::value(&path, code!("depends-on"), format!("replicatedJob `{name}` depends on itself"))
                        .hint("remove this `dependsOn` entry"),
                ),
                Some(_) => out.push(
                    Finding::value(
                        &path,
                        code!("depends-on"),
                        format!("replicatedJob `{}` depends on `{name}`, which comes after it", names[i]),
                    )
                    .hint(&format!("JobSet requires dependencies to be listed first: move `{name}` before `{}`", names[i])),
                ),
                None => {
                    let earlier = names[..i].iter().copied();
                    let hint = match hetgen_spec::did_you_mean(name, earlier) {
                        Some(s) => format!("did you mean `{s}`?"),
                        None if i == 0 => "the first replicatedJob can depend on none".into(),
                        None => format!(
                            "it can depend on {}",
                            names[..i].iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                        ),
                    };
                    out.push(
                        Finding::value(
                            &path,
                            code!("depends-on"),
                            format!("replicatedJob `{}` depends on `{name}`, which is no replicatedJob here", names[i]),
                        )
                        .hint(&hint),
                    );
                }
            }
        }
    }
}

/// (c) Trainer finds the trainer's pods by the ancestor label and configures the replicatedJob
/// named `node` and its container named `node` (numNodes, the PET_* variables, the TrainJob's
/// image and command): a trainer job under another name, or without a `node` container, runs
/// without them.
fn trainer_job_is_node(o: &Object, out: &mut Vec<Finding>) {
    if !is_runtime(o.kind) {
        return;
    }
    let jobs_path = "spec.template.spec.replicatedJobs";
    let Some(jobs) = at(&o.doc.value, jobs_path).as_array() else {
        return;
    };
    for (i, job) in jobs.iter().enumerate() {
        if job["template"]["metadata"]["labels"][ANCESTOR].as_str() != Some("trainer") {
            continue;
        }
        let job_path = item(jobs_path, i);
        let name = job["name"].as_str().unwrap_or("");
        if name != NODE {
            out.push(
                Finding::value(
                    &child(&job_path, "name"),
                    code!("trainer-job"),
                    format!("replicatedJob `{name}` is labelled `{ANCESTOR}: trainer` but is not named `{NODE}`"),
                )
                .hint(&format!("Trainer configures the trainer in the replicatedJob named `{NODE}`: rename it")),
            );
        }
        let containers = &job["template"]["spec"]["template"]["spec"]["containers"];
        let has_node = containers
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["name"].as_str() == Some(NODE)));
        if !has_node {
            out.push(
                Finding::key(
                    &format!("{job_path}.template.spec.template.spec.containers"),
                    code!("trainer-job"),
                    format!("replicatedJob `{name}` runs the trainer but has no container named `{NODE}`"),
                )
                .hint(&format!("Trainer sets the trainer's image, command and PET_* variables on the container named `{NODE}`")),
            );
        }
    }
}

/// The kind a TrainJob's `runtimeRef` names (the CRD's default when left out) and its name.
fn runtime_ref<'a>(o: &'a Object) -> Option<(&'a str, &'a str)> {
    let r = &o.doc.value["spec"]["runtimeRef"];
    let name = r["name"].as_str()?;
    Some((r["kind"].as_str().unwrap_or("ClusterTrainingRuntime"), name))
}

/// The runtime among `objects` that TrainJob `o` refers to.
fn referenced_runtime<'a, 'o>(o: &Object, objects: &'a [Object<'o>]) -> Option<&'a Object<'o>> {
    let (kind, name) = runtime_ref(o)?;
    objects.iter().find(|r| {
        r.kind == kind
            && r.name() == Some(name)
            && (kind == "ClusterTrainingRuntime" || same_namespace(o, r))
    })
}

/// Whether two namespaced objects are in the same namespace; one written without a namespace
/// goes to whichever the client uses, so it matches any.
fn same_namespace(a: &Object, b: &Object) -> bool {
    match (a.namespace(), b.namespace()) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    }
}

/// (d) When runtimes are given with a TrainJob, its `runtimeRef` must name one of them: a
/// reference to a runtime the cluster already has is fine alone, but next to the runtime it
/// was rendered with, a mismatch is a typo.
fn runtime_ref_names_a_given_runtime(o: &Object, objects: &[Object], out: &mut Vec<Finding>) {
    if o.kind != "TrainJob" {
        return;
    }
    let Some((kind, name)) = runtime_ref(o) else {
        return;
    };
    let runtimes: Vec<&Object> = objects.iter().filter(|r| is_runtime(r.kind)).collect();
    if runtimes.is_empty() || referenced_runtime(o, objects).is_some() {
        return;
    }
    let same_kind = runtimes
        .iter()
        .filter(|r| r.kind == kind)
        .filter_map(|r| r.name());
    let hint = if let Some(other) = runtimes.iter().find(|r| r.name() == Some(name)) {
        if other.kind != kind {
            format!("`{name}` is a {}: set `kind: {}`", other.kind, other.kind)
        } else {
            format!(
                "`{name}` is in namespace `{}`: put the TrainJob there",
                other.namespace().unwrap_or("")
            )
        }
    } else if let Some(s) = hetgen_spec::did_you_mean(name, same_kind) {
        format!("did you mean `{s}`?")
    } else {
        let given: Vec<String> = runtimes
            .iter()
            .filter_map(|r| Some(format!("{} `{}`", r.kind, r.name()?)))
            .collect();
        format!("the files give {}", given.join(", "))
    };
    out.push(
        Finding::value(
            "spec.runtimeRef.name",
            code!("runtime-ref"),
            format!("TrainJob refers to {kind} `{name}`, which none of the files gives"),
        )
        .hint(&hint),
    );
}

/// (e) With `enableDNSHostnames`, JobSet names each pod `<jobset>-<replicatedJob>-<job
/// index>-<pod index>` (the JobSet is named after the TrainJob) plus a 5-character suffix, and
/// its webhook (`pkg/webhooks/jobset_webhook.go`, v0.12.0) refuses the JobSet when that whole
/// name is not a DNS label: at most 63 characters with the suffix, [`MAX_POD_NAME`] without.
/// Refused, the JobSet is never made, and Trainer records only a Warning event.
fn pod_hostnames_fit(o: &Object, objects: &[Object], out: &mut Vec<Finding>) {
    let (name, jobs, nodes) = match o.kind {
        "TrainJob" => {
            let Some(runtime) = referenced_runtime(o, objects) else {
                return;
            };
            let nodes = o.doc.value["spec"]["trainer"]["numNodes"]
                .as_u64()
                .or_else(|| runtime.doc.value["spec"]["mlPolicy"]["numNodes"].as_u64());
            (
                o.name(),
                &runtime.doc.value["spec"]["template"]["spec"]["replicatedJobs"],
                nodes,
            )
        }
        "JobSet" => (o.name(), &o.doc.value["spec"]["replicatedJobs"], None),
        _ => return,
    };
    let (Some(name), Some(jobs)) = (name, jobs.as_array()) else {
        return;
    };
    for job in jobs {
        let Some(job_name) = job["name"].as_str() else {
            continue;
        };
        let replicas = job["replicas"].as_u64().unwrap_or(1).max(1);
        // Trainer sets the trainer job's parallelism to numNodes.
        let pods = match (job_name == NODE, nodes) {
            (true, Some(n)) => n,
            _ => job["template"]["spec"]["parallelism"].as_u64().unwrap_or(1),
        }
        .max(1);
        let longest = format!("{name}-{job_name}-{}-{}", replicas - 1, pods - 1);
        // Only the length: a name with bad characters is reported by the name checks already.
        if longest.len() > MAX_POD_NAME {
            out.push(
                Finding::value(
                    "metadata.name",
                    code!("hostname"),
                    format!(
                        "pod name `{longest}` is {} characters long, more than the {MAX_POD_NAME} JobSet allows before the pod's random suffix",
                        longest.len()
                    ),
                )
                .hint(&format!(
                    "JobSet names pods `<{}>-<replicatedJob>-<job index>-<pod index>-<5 random characters>` and refuses the JobSet when that is over a DNS label's {MAX_LABEL}: shorten `{name}` or `{job_name}`",
                    o.kind.to_lowercase()
                )),
            );
        }
    }
}
