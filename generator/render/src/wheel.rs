//! The hetgen wheel of a hetgen that was itself installed from one.
//!
//! `pip install hetgen-….whl` puts the `hetgen` command in the environment's `bin` and the
//! package beside it in `site-packages`, but keeps no copy of the wheel. A job on AWS's PyTorch
//! image must still ship that wheel in its source bundle (the image installs it from there), so
//! [`repack`] writes the installed distribution back into a wheel: every file its `RECORD`
//! lists under `site-packages`, checked against the hash pip recorded, with a fresh `RECORD`.
//! Left out are what pip made at install time (`INSTALLER`, `REQUESTED`, `direct_url.json`,
//! byte code) and the files installed outside `site-packages`: the console-script wrappers,
//! which pip writes again from `entry_points.txt`, and the `hetgen` command itself, which no
//! host runs (it is most of the wheel's size). The hosts therefore import exactly the files
//! this command runs beside.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::bundle::BundleError;

/// Where the wheel a source bundle ships comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chosen {
    /// Named by the caller (`--wheel`, or `HETGEN_WHEEL`).
    Named(PathBuf),
    /// The hetgen this command was installed from, packed as its wheel again.
    Installed(PathBuf),
    /// The release build beside a hetgen built from source (`scripts/wheel.sh --release`).
    Release(PathBuf),
    /// The debug build beside a hetgen built from source (`make wheel`): its pipeline runs
    /// many times slower than the release build's.
    Debug(PathBuf),
}

impl Chosen {
    pub fn path(&self) -> &Path {
        match self {
            Chosen::Named(p) | Chosen::Installed(p) | Chosen::Release(p) | Chosen::Debug(p) => p,
        }
    }
}

/// The wheel a source bundle ships, by this rule, first match wins:
///
/// 1. `named`: the caller's (`--wheel`, else `HETGEN_WHEEL`);
/// 2. for a hetgen installed from its wheel (`exe` is the command pip installed), that
///    installation packed as its wheel again, into `out` (a folder of the job's render), so
///    that the hosts import exactly the files this command runs beside;
/// 3. for a hetgen built from source, the wheel built beside it in the same target folder
///    (`exe` is `<target>/<profile>/hetgen`): the release build (`wheels-release/`) when there
///    is one, since a job on SageMaker should not preprocess with a debug build, else the debug
///    build (`wheels/`).
///
/// A chosen path that holds no wheel is the bundle's to report (`no-wheel`, with how to build
/// one).
pub fn choose(named: Option<&Path>, exe: &Path, out: &Path) -> Result<Chosen, BundleError> {
    if let Some(path) = named {
        return Ok(Chosen::Named(path.to_owned()));
    }
    let name = crate::wheel_file_name();
    if let Some(dist_info) = installed_dist_info(exe) {
        return repack(&dist_info, &out.join(&name)).map(Chosen::Installed);
    }
    let target = exe
        .parent()
        .and_then(Path::parent)
        .map(Path::to_owned)
        .unwrap_or_default();
    let release = target.join("wheels-release").join(&name);
    if release.is_file() {
        return Ok(Chosen::Release(release));
    }
    Ok(Chosen::Debug(target.join("wheels").join(name)))
}

/// The `dist-info` folder of the hetgen installed with the command at `exe`: the environment's
/// `lib/python3.*/site-packages/hetgen-<version>.dist-info` whose `RECORD` lists `exe`. `None`
/// for a hetgen built from source.
pub fn installed_dist_info(exe: &Path) -> Option<PathBuf> {
    let exe = exe.canonicalize().ok()?;
    let prefix = exe.parent()?.parent()?;
    let dist_info = format!("hetgen-{}.dist-info", env!("CARGO_PKG_VERSION"));
    ["lib", "lib64"]
        .iter()
        .filter_map(|lib| std::fs::read_dir(prefix.join(lib)).ok())
        .flatten()
        .flatten()
        .map(|python| python.path().join("site-packages").join(&dist_info))
        .find(|dir| {
            let Ok(record) = std::fs::read_to_string(dir.join("RECORD")) else {
                return false;
            };
            let site = dir.parent().unwrap_or(dir);
            record
                .lines()
                .filter_map(|l| l.split(',').next())
                .any(|path| site.join(path).canonicalize().is_ok_and(|p| p == exe))
        })
}

/// Writes the distribution installed at `dist_info` as the wheel `out` (made atomically, the
/// same bytes for the same files) and returns `out`.
pub fn repack(dist_info: &Path, out: &Path) -> Result<PathBuf, BundleError> {
    let site = dist_info.parent().unwrap_or(dist_info);
    let dist_name = dist_info
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let record_path = dist_info.join("RECORD");
    let record = std::fs::read_to_string(&record_path).map_err(|source| BundleError::Io {
        path: record_path.clone(),
        source,
    })?;
    let made_by_pip = ["INSTALLER", "REQUESTED", "direct_url.json", "RECORD"]
        .map(|name| format!("{dist_name}/{name}"));
    let mut files = Vec::new();
    for line in record.lines().filter(|l| !l.is_empty()) {
        let mut fields = line.rsplitn(3, ',');
        let (_size, hash, path) = (fields.next(), fields.next(), fields.next());
        let (Some(hash), Some(path)) = (hash, path) else {
            return Err(installed(
                &record_path,
                format!("`{line}` is not a RECORD line"),
            ));
        };
        let path = path.trim_matches('"');
        if path.starts_with("../")
            || path.starts_with('/')
            || path.contains("__pycache__/")
            || path.ends_with(".pyc")
            || made_by_pip.iter().any(|p| p == path)
        {
            continue;
        }
        let bytes = std::fs::read(site.join(path)).map_err(|source| BundleError::Io {
            path: site.join(path),
            source,
        })?;
        let digest = format!("sha256={}", urlsafe_base64(&Sha256::digest(&bytes)));
        if hash != digest {
            return Err(installed(
                &site.join(path),
                "differs from the file pip installed (its RECORD hash)".to_owned(),
            ));
        }
        files.push((path.to_owned(), digest, bytes));
    }

    let tmp = out.with_extension("whl.tmp");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|source| BundleError::Io {
            path: dir.to_owned(),
            source,
        })?;
    }
    let written = write_wheel(&tmp, &dist_name, &files).map_err(std::io::Error::other);
    if let Err(source) = written.and_then(|()| std::fs::rename(&tmp, out)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(BundleError::Io {
            path: out.to_owned(),
            source,
        });
    }
    Ok(out.to_owned())
}

fn installed(path: &Path, why: String) -> BundleError {
    BundleError::Installed {
        path: path.to_owned(),
        why,
    }
}

/// The wheel: `files` in RECORD order, then the new RECORD, with fixed timestamps so that the
/// same files make the same bytes (and the bundle the same hash).
fn write_wheel(
    path: &Path,
    dist_name: &str,
    files: &[(String, String, Vec<u8>)],
) -> zip::result::ZipResult<()> {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path)?);
    let options = |mode: u32| {
        zip::write::FileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .last_modified_time(zip::DateTime::default())
            .unix_permissions(mode)
    };
    let mut record = String::new();
    for (name, digest, bytes) in files {
        // Shared libraries keep their execute bit, as maturin writes them.
        let mode = if name.ends_with(".so") || name.contains(".so.") {
            0o755
        } else {
            0o644
        };
        zip.start_file(name.as_str(), options(mode))?;
        zip.write_all(bytes)?;
        record.push_str(&format!("{name},{digest},{}\n", bytes.len()));
    }
    let record_name = format!("{dist_name}/RECORD");
    record.push_str(&format!("{record_name},,\n"));
    zip.start_file(record_name, options(0o644))?;
    zip.write_all(record.as_bytes())?;
    zip.finish()?.sync_all()?;
    Ok(())
}

/// RFC 4648's URL-safe base64 without padding, as wheel RECORDs write hashes.
fn urlsafe_base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_named_wheel_wins_then_the_installed_one_then_the_builds_beside_the_command() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        let named = root.path().join("mine.whl");
        let built = root.path().join("target/debug/hetgen");
        assert_eq!(
            choose(Some(&named), &built, &out).unwrap(),
            Chosen::Named(named.clone())
        );
        let name = crate::wheel_file_name();
        let target = root.path().join("target");
        assert_eq!(
            choose(None, &built, &out).unwrap(),
            Chosen::Debug(target.join("wheels").join(&name))
        );
        std::fs::create_dir_all(target.join("wheels-release")).unwrap();
        std::fs::write(target.join("wheels-release").join(&name), b"PK").unwrap();
        assert_eq!(
            choose(None, &built, &out).unwrap(),
            Chosen::Release(target.join("wheels-release").join(&name))
        );
        let installed = install(&root.path().join("venv"));
        let chosen = choose(None, &installed, &out).unwrap();
        assert_eq!(chosen, Chosen::Installed(out.join(&name)));
        assert!(chosen.path().is_file());
    }

    /// A site-packages with a small installed hetgen, and the command that came with it.
    fn install(root: &Path) -> PathBuf {
        let site = root.join("lib/python3.11/site-packages");
        let dist = site.join(format!("hetgen-{}.dist-info", env!("CARGO_PKG_VERSION")));
        std::fs::create_dir_all(site.join("hetgen/__pycache__")).unwrap();
        std::fs::create_dir_all(&dist).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        let files: [(&str, &[u8]); 4] = [
            ("hetgen/__init__.py", b"x = 1\n"),
            ("hetgen/_native.abi3.so", b"\x7fELF"),
            (
                &format!("hetgen-{}.dist-info/WHEEL", env!("CARGO_PKG_VERSION")),
                b"Wheel-Version: 1.0\n",
            ),
            ("../../../bin/hetgen", b"#!binary"),
        ];
        let mut record = String::new();
        for (path, bytes) in files {
            std::fs::write(site.join(path), bytes).unwrap();
            let hash = urlsafe_base64(&Sha256::digest(bytes));
            record.push_str(&format!("{path},sha256={hash},{}\n", bytes.len()));
        }
        std::fs::write(
            site.join("hetgen/__pycache__/__init__.cpython-311.pyc"),
            b"",
        )
        .unwrap();
        std::fs::write(dist.join("INSTALLER"), "pip\n").unwrap();
        record.push_str("hetgen/__pycache__/__init__.cpython-311.pyc,,\n");
        record.push_str(&format!(
            "hetgen-{}.dist-info/INSTALLER,sha256=x,4\n",
            env!("CARGO_PKG_VERSION")
        ));
        std::fs::write(dist.join("RECORD"), record).unwrap();
        root.join("bin/hetgen")
    }

    fn names(wheel: &Path) -> Vec<String> {
        let mut archive = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
        (0..archive.len())
            .map(|i| archive.by_index(i).unwrap().name().to_owned())
            .collect()
    }

    #[test]
    fn the_installed_package_becomes_a_wheel_again_without_what_pip_made() {
        let dir = tempfile::tempdir().unwrap();
        let exe = install(dir.path());
        let dist = installed_dist_info(&exe).expect("the command's dist-info is found");
        let wheel = repack(&dist, &dir.path().join("out/h.whl")).unwrap();
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(
            names(&wheel),
            [
                "hetgen/__init__.py".to_owned(),
                "hetgen/_native.abi3.so".to_owned(),
                format!("hetgen-{version}.dist-info/WHEEL"),
                format!("hetgen-{version}.dist-info/RECORD"),
            ]
        );
        let first = std::fs::read(&wheel).unwrap();
        repack(&dist, &wheel).unwrap();
        assert_eq!(
            std::fs::read(&wheel).unwrap(),
            first,
            "same files, same bytes"
        );
    }

    #[test]
    fn a_file_changed_after_install_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let exe = install(dir.path());
        let dist = installed_dist_info(&exe).unwrap();
        std::fs::write(dist.parent().unwrap().join("hetgen/__init__.py"), "x = 2\n").unwrap();
        let error = repack(&dist, &dir.path().join("h.whl")).unwrap_err();
        assert!(error.to_string().contains("__init__.py"), "{error}");
        assert!(!dir.path().join("h.whl").exists());
    }

    #[test]
    fn a_command_built_from_source_has_no_installed_wheel() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::write(dir.path().join("bin/hetgen"), "").unwrap();
        assert_eq!(installed_dist_info(&dir.path().join("bin/hetgen")), None);
    }
}
