//! The source bundle of a job on AWS's PyTorch image: `sourcedir.tar.gz`, what the image's
//! training toolkit downloads (`sagemaker_submit_directory`), unpacks and runs.
//!
//! Its root holds the files of the spec's `source_dir` and, beside them, hetgen's: the entry
//! point `hetgen_launcher.py` and `requirements.txt` (rendered into `build/<job>/bundle/`),
//! `hetgen-job.json` (the rendered `job.json`) and the hetgen wheel. Left out of `source_dir`:
//! the render output folder, names starting with `.` (`.git`, `.venv`, …), `__pycache__`, and
//! the local folders of the job's channels, which are data, shipped as channels. Symbolic
//! links are followed: the bundle holds what they point to, as a user who ships the folder
//! expects, since nothing outside the bundle exists on the instance. A link to a folder that
//! contains it (`self -> .`) would hold itself forever, so it is left out; a link to nothing is
//! an error, since the script may need what it meant to point to.
//!
//! [`bundle`] writes both forms under `build/<job>/`: the folder `sourcedir/` (what the SDK
//! files hand to the SDK as `source_dir`) and the archive `sourcedir.tar.gz` (what `hetgen
//! deploy` uploads). The archive is deterministic (sorted entries, time 0, owner 0, modes 0644
//! or 0755), so the same inputs give the same bytes. Both are built beside their final place
//! and renamed into it, so a failure leaves the previous bundle, never half of one.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use hetgen_spec::Job;
use hetgen_spec::framework::{JOB_FILE, PROGRAM};
use hetgen_spec::model::ScriptTrainer;

use crate::{bundle_requirements, wheel_file_name};

/// The bundle's folder under `build/<job>/`.
pub const FOLDER: &str = "sourcedir";
/// The bundle's archive under `build/<job>/`: the file name its S3 key ends in.
pub const ARCHIVE: &str = hetgen_spec::framework::BUNDLE_FILE;
/// The toolkit installs this file, and only this one: hetgen's.
const REQUIREMENTS: &str = "requirements.txt";

/// What a bundle is made of.
#[derive(Debug, Clone)]
pub struct Inputs<'a> {
    /// The resolved job; it must run on AWS's PyTorch image.
    pub job: &'a Job,
    /// The spec's folder: `source_dir` and channel folders are relative to it.
    pub spec_dir: &'a Path,
    /// The render output folder (`build/`), left out when it is inside `source_dir`.
    pub out_dir: &'a Path,
    /// The hetgen wheel to ship.
    pub wheel: &'a Path,
}

/// A bundle written to disk.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// `build/<job>/sourcedir`.
    pub dir: PathBuf,
    /// `build/<job>/sourcedir.tar.gz`.
    pub archive: PathBuf,
    /// Files in it, by their path in the archive.
    pub files: Vec<String>,
    /// The archive's size in bytes.
    pub bytes: u64,
}

/// Why no bundle was written.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum BundleError {
    /// The job runs on an image of its own, which carries its code.
    #[error(
        "`{job}` runs on its own image (`image_uri`), which carries its code: it has no source bundle"
    )]
    #[diagnostic(
        code("hetgen::bundle::own-image"),
        help(
            "build the image from the rendered Dockerfile; or remove `image_uri` (and keep a `script` trainer) to run on AWS's PyTorch image"
        )
    )]
    NotFramework {
        /// The job.
        job: String,
    },
    /// The job has nowhere to run but here.
    #[error("`{job}` has no `[sagemaker]` section: it has no source bundle")]
    #[diagnostic(
        code("hetgen::bundle::no-sagemaker"),
        help(
            "a `script` trainer runs on AWS's PyTorch image with a `[sagemaker]` section that has `region`, `role_arn` and `output_path` and no `image_uri`"
        )
    )]
    NoSageMaker {
        /// The job.
        job: String,
    },
    /// No wheel at the path given.
    #[error("no hetgen wheel at {}", path.display())]
    #[diagnostic(
        code("hetgen::bundle::no-wheel"),
        help(
            "build it with `make wheel` in a hetgen checkout (it lands in the target folder's `wheels/`), or pass `--wheel PATH` / set `HETGEN_WHEEL`"
        )
    )]
    NoWheel {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A file that is not this hetgen's manylinux wheel.
    #[error("{} is not this hetgen's wheel `{expected}`", path.display())]
    #[diagnostic(
        code("hetgen::bundle::wrong-wheel"),
        help(
            "the bundle ships the manylinux wheel of the same hetgen version (its data protocol must match): build it with `make wheel` from this hetgen's source"
        )
    )]
    WrongWheel {
        /// The file given.
        path: PathBuf,
        /// The name it should have.
        expected: String,
    },
    /// A user file has the name of one of hetgen's.
    #[error("`{file}` in `{source_dir}` has the name of a file hetgen adds to the bundle")]
    #[diagnostic(code("hetgen::bundle::collision"))]
    Collision {
        /// The path inside `source_dir`.
        file: String,
        /// The spec's `source_dir`.
        source_dir: String,
        /// What to do.
        #[help]
        help: String,
    },
    /// A rendered file is missing: the job was not rendered.
    #[error("{} is missing", path.display())]
    #[diagnostic(
        code("hetgen::bundle::not-rendered"),
        help("run `hetgen render` first")
    )]
    NotRendered {
        /// The missing file.
        path: PathBuf,
    },
    /// A symbolic link in `source_dir` points to nothing.
    #[error("{} is a symbolic link to nothing", path.display())]
    #[diagnostic(
        code("hetgen::bundle::broken-link"),
        help(
            "the bundle holds what links point to: point it at a file or folder, or remove it (names starting with `.` are left out)"
        )
    )]
    BrokenLink {
        /// The link.
        path: PathBuf,
    },
    /// The installed hetgen does not match what pip installed, so it cannot be shipped as its
    /// wheel.
    #[error("the installed hetgen cannot be packed as its wheel: {}: {why}", path.display())]
    #[diagnostic(
        code("hetgen::bundle::installed"),
        help(
            "reinstall hetgen (`pip install --force-reinstall hetgen-….whl`), or pass the wheel itself with `--wheel PATH`"
        )
    )]
    Installed {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// Reading or writing failed.
    #[error("{}: {source}", path.display())]
    #[diagnostic(code("hetgen::bundle::io"))]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BundleError + '_ {
    move |source| BundleError::Io {
        path: path.to_owned(),
        source,
    }
}

/// One file of the bundle: where its bytes come from and whether it is executable.
#[derive(Debug, Clone)]
struct Entry {
    from: PathBuf,
    executable: bool,
}

/// The script of a job that has a source bundle: one on AWS's PyTorch image. Callers check
/// it before anything else, so that a job without one is told so first.
pub fn script(job: &Job) -> Result<&ScriptTrainer, BundleError> {
    let Some(sm) = &job.sagemaker else {
        return Err(BundleError::NoSageMaker {
            job: job.name.clone(),
        });
    };
    match (job.trainer.script(), &sm.framework) {
        (Some(script), Some(_)) => Ok(script),
        _ => Err(BundleError::NotFramework {
            job: job.name.clone(),
        }),
    }
}

/// Writes the bundle of the job rendered in `job_dir` (`build/<job>/`).
pub fn bundle(inputs: &Inputs<'_>, job_dir: &Path) -> Result<Bundle, BundleError> {
    let entries = entries(inputs, job_dir)?;
    let dir = job_dir.join(FOLDER);
    let archive = job_dir.join(ARCHIVE);

    let tmp_dir = job_dir.join(format!(".{FOLDER}.tmp-{}", std::process::id()));
    let tmp_archive = job_dir.join(format!(".{ARCHIVE}.tmp-{}", std::process::id()));
    let written =
        write_folder(&entries, &tmp_dir).and_then(|()| write_archive(&entries, &tmp_archive));
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp_dir);
        let _ = std::fs::remove_file(&tmp_archive);
        return Err(e);
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
    }
    std::fs::rename(&tmp_dir, &dir).map_err(io(&dir))?;
    std::fs::rename(&tmp_archive, &archive).map_err(io(&archive))?;
    let bytes = std::fs::metadata(&archive).map_err(io(&archive))?.len();
    Ok(Bundle {
        dir,
        archive,
        files: entries.into_keys().collect(),
        bytes,
    })
}

/// Every file of the bundle, by its path in the archive, sorted.
fn entries(inputs: &Inputs<'_>, job_dir: &Path) -> Result<BTreeMap<String, Entry>, BundleError> {
    let job = inputs.job;
    let script = script(job)?;
    let wheel_name = wheel_file_name();
    if !inputs.wheel.is_file() {
        return Err(BundleError::NoWheel {
            path: inputs.wheel.to_owned(),
        });
    }
    if inputs.wheel.file_name().and_then(|n| n.to_str()) != Some(wheel_name.as_str()) {
        return Err(BundleError::WrongWheel {
            path: inputs.wheel.to_owned(),
            expected: wheel_name,
        });
    }

    let source = inputs.spec_dir.join(&script.source_dir);
    let source = source.canonicalize().map_err(io(&source))?;
    let mut skip: BTreeSet<PathBuf> = job
        .channels
        .iter()
        .filter_map(|c| c.local_path.as_ref())
        .filter_map(|p| inputs.spec_dir.join(p).canonicalize().ok())
        .collect();
    skip.extend(inputs.out_dir.canonicalize().ok());
    let mut user = BTreeMap::new();
    collect(&source, &source, &skip, &mut Vec::new(), &mut user)?;

    // A root `requirements.txt` of the user's travels under another name when the spec names
    // it; any other would silently be replaced by hetgen's.
    let renamed = bundle_requirements(script);
    if let Some(entry) = user.remove(REQUIREMENTS) {
        if renamed.as_deref() == Some("user-requirements.txt") {
            user.insert("user-requirements.txt".to_owned(), entry);
        } else {
            return Err(BundleError::Collision {
                file: REQUIREMENTS.to_owned(),
                source_dir: script.source_dir.clone(),
                help: "the toolkit installs only the bundle's root `requirements.txt`, which is \
                       hetgen's: set `[trainer] requirements = \"requirements.txt\"` so that \
                       hetgen's installs yours after the wheel"
                    .to_owned(),
            });
        }
    }
    let ours: [(&str, PathBuf); 4] = [
        (PROGRAM, job_dir.join("bundle").join(PROGRAM)),
        (REQUIREMENTS, job_dir.join("bundle").join(REQUIREMENTS)),
        (JOB_FILE, job_dir.join(hetgen_env::JOB_FILE_NAME)),
        (wheel_name.as_str(), inputs.wheel.to_owned()),
    ];
    let mut all = user;
    for (name, from) in ours {
        if !from.is_file() {
            return Err(BundleError::NotRendered { path: from });
        }
        if all.contains_key(name) {
            return Err(BundleError::Collision {
                file: name.to_owned(),
                source_dir: script.source_dir.clone(),
                help: format!(
                    "rename or remove `{name}`: hetgen's own file of that name goes there"
                ),
            });
        }
        all.insert(
            name.to_owned(),
            Entry {
                from,
                executable: false,
            },
        );
    }
    Ok(all)
}

/// Adds the files under `dir` to `out`, by their `/`-separated path relative to `root`.
/// `above` holds the real folders `dir` is in.
fn collect(
    root: &Path,
    dir: &Path,
    skip: &BTreeSet<PathBuf>,
    above: &mut Vec<PathBuf>,
    out: &mut BTreeMap<String, Entry>,
) -> Result<(), BundleError> {
    // Only a link to a folder that contains it would recurse forever; two links to one
    // folder elsewhere both ship it, as a copy of the tree would.
    let real = dir.canonicalize().map_err(io(dir))?;
    if above.contains(&real) || skip.contains(&real) {
        return Ok(());
    }
    above.push(real);
    for item in std::fs::read_dir(dir).map_err(io(dir))? {
        let item = item.map_err(io(dir))?;
        let name = item.file_name();
        let Some(name) = name.to_str() else {
            // The toolkit's tarfile would mangle it, and no script imports such a name.
            continue;
        };
        if name.starts_with('.') || name == "__pycache__" {
            continue;
        }
        let path = item.path();
        // `metadata` follows links: the bundle holds what they point to.
        let meta = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && path.is_symlink() => {
                return Err(BundleError::BrokenLink { path });
            }
            meta => meta.map_err(io(&path))?,
        };
        if meta.is_dir() {
            collect(root, &path, skip, above, out)?;
        } else if meta.is_file() {
            let relative = path
                .strip_prefix(root)
                .expect("walked from the root")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.insert(
                relative,
                Entry {
                    from: path,
                    executable: meta.permissions().mode() & 0o100 != 0,
                },
            );
        }
    }
    above.pop();
    Ok(())
}

fn write_folder(entries: &BTreeMap<String, Entry>, dir: &Path) -> Result<(), BundleError> {
    for (name, entry) in entries {
        let to = dir.join(name);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::copy(&entry.from, &to).map_err(io(&entry.from))?;
    }
    std::fs::create_dir_all(dir).map_err(io(dir))
}

fn write_archive(entries: &BTreeMap<String, Entry>, path: &Path) -> Result<(), BundleError> {
    let file = std::fs::File::create(path).map_err(io(path))?;
    let gzip = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gzip);
    for (name, entry) in entries {
        let bytes = std::fs::read(&entry.from).map_err(io(&entry.from))?;
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(if entry.executable { 0o755 } else { 0o644 });
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, name, bytes.as_slice())
            .map_err(io(&entry.from))?;
    }
    let gzip = tar.into_inner().map_err(io(path))?;
    let mut file = gzip.finish().map_err(io(path))?;
    file.flush().map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn files(root: &Path) -> Result<Vec<String>, BundleError> {
        let mut out = BTreeMap::new();
        collect(root, root, &BTreeSet::new(), &mut Vec::new(), &mut out)?;
        Ok(out.into_keys().collect())
    }

    #[test]
    fn links_ship_what_they_point_to_but_never_themselves() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("code");
        let shared = dir.path().join("shared");
        std::fs::create_dir_all(root.join("lib")).unwrap();
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::write(shared.join("util.py"), "").unwrap();
        std::fs::write(root.join("lib/model.py"), "").unwrap();
        // Outside the folder: shipped, twice over two links.
        symlink(&shared, root.join("a")).unwrap();
        symlink(&shared, root.join("lib/b")).unwrap();
        symlink(shared.join("util.py"), root.join("util.py")).unwrap();
        // Loops: left out, wherever they point up to.
        symlink(".", root.join("self")).unwrap();
        symlink("..", root.join("lib/up")).unwrap();
        assert_eq!(
            files(&root).unwrap(),
            ["a/util.py", "lib/b/util.py", "lib/model.py", "util.py"]
        );

        symlink("missing.py", root.join("gone.py")).unwrap();
        let err = files(&root).unwrap_err();
        assert!(
            matches!(&err, BundleError::BrokenLink { path } if path == &root.join("gone.py")),
            "{err}"
        );
        // A dot-name is never looked at, broken or not (an editor's lock file).
        std::fs::remove_file(root.join("gone.py")).unwrap();
        symlink("nobody@host", root.join(".#model.py")).unwrap();
        assert_eq!(files(&root).unwrap().len(), 4);
    }
}
