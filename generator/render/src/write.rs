//! Putting rendered files on disk, and telling when the files on disk are stale.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::{Ownership, Rendered};

/// Writing a rendered file failed.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("cannot write `{}`", path.display())]
#[diagnostic(
    code("hetgen::render::write"),
    help("check that the output folder is writable and the disk is not full")
)]
pub struct WriteError {
    path: PathBuf,
    #[source]
    source: io::Error,
}

/// Writes `rendered` under `out/<job>/` and returns the paths written. Each file is written to a
/// temporary sibling and renamed into place, so a file is either old or new, never half-written.
/// Scaffold files that already exist are left alone.
pub fn write(rendered: &Rendered, out: &Path) -> Result<Vec<PathBuf>, WriteError> {
    let root = out.join(&rendered.dir);
    let mut written = Vec::new();
    for file in &rendered.files {
        let path = root.join(&file.path);
        if file.ownership == Ownership::Scaffold && path.exists() {
            continue;
        }
        let fail = |source| WriteError {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(fail)?;
        }
        let tmp = path.with_file_name(format!(
            ".{}.hetgen-tmp",
            path.file_name().unwrap_or_default().to_string_lossy()
        ));
        fs::write(&tmp, &file.contents)
            .and_then(|()| fs::rename(&tmp, &path))
            .map_err(|e| {
                let _ = fs::remove_file(&tmp);
                fail(e)
            })?;
        written.push(path);
    }
    Ok(written)
}

/// A generated file whose contents on disk differ from what the spec renders to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    /// Path of the file on disk.
    pub path: PathBuf,
    /// Unified diff from the file on disk to the rendered contents; `None` when it is missing.
    pub diff: Option<String>,
}

/// Compares the generated files of `rendered` with `out/<job>/` without writing anything.
pub fn check(rendered: &Rendered, out: &Path) -> Vec<Stale> {
    let root = out.join(&rendered.dir);
    rendered
        .files
        .iter()
        .filter(|f| f.ownership == Ownership::Generated)
        .filter_map(|file| {
            let path = root.join(&file.path);
            match fs::read_to_string(&path) {
                Ok(on_disk) if on_disk == file.contents => None,
                Ok(on_disk) => {
                    let diff = similar::TextDiff::from_lines(&on_disk, &file.contents)
                        .unified_diff()
                        .context_radius(2)
                        .header(
                            &format!("{} (on disk)", file.path),
                            &format!("{} (rendered)", file.path),
                        )
                        .to_string();
                    Some(Stale {
                        path,
                        diff: Some(diff),
                    })
                }
                Err(_) => Some(Stale { path, diff: None }),
            }
        })
        .collect()
}
