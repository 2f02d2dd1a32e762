//! One module per subcommand.

pub mod bench;
pub mod completions;
pub mod deploy;
pub mod jobs;
pub mod local;
pub mod new;
pub mod plan;
pub mod profile;
pub mod render;
pub mod schema;
pub mod validate;

use std::path::Path;

use hetgen_spec::{Checked, Job, Report};

use crate::exit::Failure;

/// The folder a spec's relative paths (channels' `local_path`) start from.
pub fn spec_dir(spec: &Path) -> &Path {
    spec.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Reads and checks the spec at `path`.
pub fn check(path: &Path) -> Result<Checked, Failure> {
    let text = std::fs::read_to_string(path).map_err(|source| Failure::Read {
        path: path.to_owned(),
        hint: if source.kind() == std::io::ErrorKind::NotFound {
            "give the spec's path, or create one with `hetgen new NAME`".to_owned()
        } else {
            "check that the file is readable UTF-8 text".to_owned()
        },
        source,
    })?;
    Ok(hetgen_spec::check(&path.display().to_string(), &text))
}

/// Reads and checks the spec; prints its problems; fails when it has errors.
pub fn load(path: &Path) -> Result<(Job, Report), Failure> {
    let checked = check(path)?;
    if !checked.report.problems.is_empty() {
        eprint!("{}", crate::output::render_report(&checked.report));
    }
    match checked.job {
        Some(job) => Ok((job, checked.report)),
        None => Err(Failure::InvalidSpec(Box::new(checked.report))),
    }
}

/// Runs an AWS call on a small runtime of its own: only the AWS commands need async.
pub fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a single-threaded tokio runtime starts")
        .block_on(future)
}
