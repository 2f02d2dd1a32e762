//! The job a loader streams: found from its `spec` (a `hetgen.toml` or a rendered `job.json`) or
//! from the job this process runs inside, and the folders of its channels on this host.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hetgen_env::Env;
use hetgen_spec::model::Job;
use pyo3::prelude::*;

use crate::errors::{self, ConfigurationError, SpecError};

/// The job's environment when this process runs inside a job (SageMaker, `deploy --local`, or a
/// Kubernetes pod, which `hetgen_env` recognises by its `HETGEN_KUBE_*` variables).
pub(crate) fn job_env() -> PyResult<Option<Env>> {
    Env::load_if_present().map_err(|e| errors::to_py(&e))
}

/// The job of `spec`, else that of the job this process runs inside (its `job.json`).
pub(crate) fn find(spec: Option<&Path>, env: Option<&Env>) -> PyResult<Job> {
    match spec {
        Some(path) => load_spec(path),
        None if env.is_some() => load_job_file(None),
        None => Err(ConfigurationError::new_err(
            "no job: pass `spec` (a hetgen.toml or job.json), or run inside a hetgen job \
             (where resourceconfig.json, or on Kubernetes the HETGEN_KUBE_* variables, and \
             HETGEN_JOB_FILE describe it)",
        )),
    }
}

/// A spec (`hetgen.toml`, validated as `hetgen validate` does) or a rendered `job.json`.
fn load_spec(path: &Path) -> PyResult<Job> {
    if path.extension().is_some_and(|e| e == "json") {
        return load_job_file(Some(path));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| SpecError::new_err(format!("cannot read the spec {}: {e}", path.display())))?;
    let checked = hetgen_spec::check_file(path, &bytes);
    checked.job.ok_or_else(|| {
        SpecError::new_err(describe_problems(
            &path.display().to_string(),
            &checked.report,
        ))
    })
}

fn load_job_file(path: Option<&Path>) -> PyResult<Job> {
    hetgen_env::load_job(path)
        .map(|(_, file)| file.job)
        .map_err(|e| errors::to_py(&e))
}

/// Every error of a spec, one `file:line:column: message` block each, as `hetgen validate`
/// reports them (without colour).
fn describe_problems(name: &str, report: &hetgen_spec::Report) -> String {
    /// Beyond this, a count: a message is read by a person.
    const SHOWN: usize = 20;
    let errors: Vec<_> = report
        .problems
        .iter()
        .filter(|p| p.severity == hetgen_spec::Severity::Error)
        .collect();
    let count = match errors.len() {
        1 => "1 error".to_owned(),
        n => format!("{n} errors"),
    };
    let mut out = format!("{name}: invalid spec ({count})");
    for p in errors.iter().take(SHOWN) {
        let at = match p.line_col() {
            Some((line, column)) => format!("{name}:{line}:{column}"),
            None => name.to_owned(),
        };
        out.push_str(&format!("\n{at}: {} [{}]", p.message, p.code));
        if let Some(help) = &p.help {
            out.push_str(&format!("\n  help: {help}"));
        }
    }
    if errors.len() > SHOWN {
        out.push_str(&format!("\n… and {} more", errors.len() - SHOWN));
    }
    out
}

/// Channel name → folder for this host's own pipeline: the `channels` given, else the job's
/// (inside a job, without a `spec`), else the spec's ([`spec_channels`]), else none.
pub(crate) fn channel_dirs(
    given: Option<BTreeMap<String, PathBuf>>,
    env: Option<&Env>,
    spec: Option<&Path>,
    job: &Job,
) -> PyResult<BTreeMap<String, PathBuf>> {
    match (given, env, spec) {
        (Some(channels), _, _) => Ok(channels),
        (None, Some(env), None) => Ok(env.channel_dirs.clone()),
        (None, _, Some(spec)) => spec_channels(job, spec),
        (None, None, None) => Ok(BTreeMap::new()),
    }
}

/// Channel name → folder for a local run of a spec: each channel's `local_path` (or a `uri`
/// that is a path), relative to the spec's folder.
fn spec_channels(job: &Job, spec: &Path) -> PyResult<BTreeMap<String, PathBuf>> {
    let base = spec.parent().unwrap_or(Path::new("."));
    let mut out = BTreeMap::new();
    for channel in &job.channels {
        if let Some(path) = &channel.local_path {
            out.insert(channel.name.clone(), base.join(path));
        } else if job.pipeline.source.channel() == Some(channel.name.as_str()) {
            return Err(ConfigurationError::new_err(format!(
                "the source reads channel `{}`, which is only in `{}`: pass its local folder as \
                 `channels={{\"{}\": \"path/to/folder\"}}` or give it a `local_path` in the spec",
                channel.name, channel.uri, channel.name
            )));
        }
    }
    Ok(out)
}
