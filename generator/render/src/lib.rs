//! # hetgen-render
//!
//! Turns a resolved [`Job`] into the files of `build/<job>/`:
//!
//! | file | what it is |
//! |---|---|
//! | `create-training-job.json` | the exact CreateTrainingJob request ([`request`]) |
//! | `estimator.py` | the same job through the SageMaker Python SDK 3.x (`ModelTrainer`) |
//! | `estimator_sdk2.py` | the same job through the SageMaker Python SDK 2.x (`Estimator`) |
//! | `job.json` | the resolved job, read by the launcher inside every instance |
//! | `launcher/` | a Cargo crate whose `main` starts the instance's role |
//! | `proto/hetgen/data/v1/data.proto` | the data service contract |
//! | `Dockerfile` | the bring-your-own training image |
//! | `bundle/` | on AWS's PyTorch image: the entry point and `requirements.txt` of the source bundle ([`bundle`]) |
//! | `kubeflow/` | with `[kubernetes]`: the job's Kubeflow Trainer `TrainingRuntime` and `TrainJob` (`hetgen_kube`) |
//!
//! The two JSON files are serialized from typed structs (exact, no comment possible); the rest
//! are minijinja templates embedded from `templates/`, whose folder tree is the output tree
//! (`templates/launcher/Cargo.toml.j2` → `launcher/Cargo.toml`). Undefined template variables
//! are errors. Rendering happens wholly in memory, so a failure writes nothing.

pub mod bundle;
pub mod request;
mod templates;
pub mod wheel;
mod write;

use hetgen_env::JobFile;
use hetgen_spec::Job;
use hetgen_spec::model::ScriptTrainer;
use serde::Serialize;
use sha2::{Digest, Sha256};

pub use templates::TemplateError;
pub use write::{Stale, WriteError, check, write};

/// PyTorch release the trainer's libtorch comes from (tch 0.26 is built against it).
pub const TORCH_VERSION: &str = "2.13.0";
/// The tch release the runtime uses.
pub const TCH_VERSION: &str = "0.26";
/// The SageMaker Python SDK that `estimator.py` is written for (3.x, `ModelTrainer`); the test
/// suite runs it with the release pinned in `requirements/sdk3.txt`.
pub const SDK3_REQUIREMENT: &str = "sagemaker>=3.27,<4";
/// The SageMaker Python SDK that `estimator_sdk2.py` is written for (2.x, `Estimator`); the test
/// suite runs it with the release pinned in `requirements/sdk2.txt`.
pub const SDK2_REQUIREMENT: &str = "sagemaker>=2.257,<3";

/// The hetgen wheel's file name, exactly as the project's wheel build (`scripts/wheel.sh`,
/// maturin with a manylinux repair) names it: the source bundle of a job on AWS's PyTorch image
/// ships it under this name and its `requirements.txt` installs it by this name.
pub fn wheel_file_name() -> String {
    format!(
        "hetgen-{}-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        env!("CARGO_PKG_VERSION")
    )
}

/// The script's own requirements file as the source bundle names it: where the spec's
/// `requirements` is, except that a `requirements.txt` at the bundle's root is hetgen's (the
/// toolkit installs only that one), so the user's goes in beside it as
/// `user-requirements.txt`.
pub fn bundle_requirements(script: &ScriptTrainer) -> Option<String> {
    let path = script.requirements.as_deref()?;
    Some(if path == "requirements.txt" {
        "user-requirements.txt".to_owned()
    } else {
        path.to_owned()
    })
}

/// The data service contract, owned by the runtime and copied into every rendered job.
pub const DATA_PROTO: &str = include_str!("../../../runtime/proto/hetgen/data/v1/data.proto");

/// Whether hetgen owns a file or the user does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// Rewritten by every render and compared by `render --check`.
    Generated,
    /// Written once when missing, then the user's to edit (the launcher's `main.rs`).
    Scaffold,
}

/// One rendered file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// Path relative to the job's folder, `/`-separated.
    pub path: String,
    /// Full contents.
    pub contents: String,
    /// Who owns it after it is written.
    pub ownership: Ownership,
}

/// Everything rendered for one job.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The job's folder name under the output directory (the job name).
    pub dir: String,
    /// The files, in a stable order.
    pub files: Vec<File>,
}

/// The spec a job came from, for the "generated from" line and the spec hash.
#[derive(Debug, Clone, Copy)]
pub struct SpecOrigin<'a> {
    /// The spec's file name as shown in generated headers (no directories, so output does not
    /// depend on where the spec lives).
    pub file_name: &'a str,
    /// The spec's exact text.
    pub text: &'a str,
}

impl SpecOrigin<'_> {
    /// Hex SHA-256 of the spec text.
    pub fn sha256(&self) -> String {
        let digest = Sha256::digest(self.text.as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Renders every file of `job`.
pub fn render(job: &Job, origin: SpecOrigin<'_>) -> Result<Rendered, TemplateError> {
    let sha = origin.sha256();
    let mut files = Vec::new();
    let request = job
        .sagemaker
        .as_ref()
        .map(|sm| request::create_training_job(job, sm, &sha));
    if let Some(request) = &request {
        files.push(generated(request::REQUEST_FILE, json(request)));
    }
    let job_file = JobFile {
        generated_by: format!("hetgen {}", env!("CARGO_PKG_VERSION")),
        spec: origin.file_name.to_owned(),
        spec_sha256: sha.clone(),
        job: job.clone(),
    };
    files.push(generated(hetgen_env::JOB_FILE_NAME, job_file.to_json()));
    files.extend(templates::render_all(job, request.as_ref(), origin, &sha)?);
    if let Some(objects) = hetgen_kube::objects(job) {
        files.extend(objects.files().into_iter().map(|(path, yaml)| {
            generated(
                path,
                format!("# {}\n{yaml}", generated_notice(origin, &sha)),
            )
        }));
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Rendered {
        dir: job.name.clone(),
        files,
    })
}

/// "Generated by hetgen … from …": the first line of every file `hetgen render` rewrites.
pub(crate) fn generated_notice(origin: SpecOrigin<'_>, sha: &str) -> String {
    format!(
        "Generated by hetgen {} from `{}` (sha256 {}). Do not edit: change the spec and run `hetgen render`.",
        env!("CARGO_PKG_VERSION"),
        origin.file_name,
        &sha[..12]
    )
}

fn generated(path: &str, contents: String) -> File {
    File {
        path: path.to_owned(),
        contents,
        ownership: Ownership::Generated,
    }
}

fn json(value: &impl Serialize) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("rendered structs serialize");
    text.push('\n');
    text
}
