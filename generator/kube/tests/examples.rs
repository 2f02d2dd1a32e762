//! Every example, rendered for Kubeflow Trainer, is accepted as the API server would accept
//! it: the pytorch example as it is (it has a `[kubernetes]` section), every other with one
//! added, so each shape of job (built-in trainer, script, Python dataset, homogeneous, several
//! GPUs) renders objects the pinned CRDs and their CEL rules accept.

use std::path::PathBuf;

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
        let result = hetgen_spec::check_file(&path, text.as_bytes());
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
