//! Building the rendered launcher crate, once, into a target folder shared between runs.
//!
//! The launcher depends on `hetgen-runtime = "0.1.0"` from crates.io, which SageMaker images get
//! from the registry; on this machine the runtime comes from the hetgen source tree instead, by
//! a `[patch.crates-io]` given on the command line (the rendered files stay as they are, so
//! `hetgen render --check` keeps passing).

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::LocalError;

/// Overrides where the runtime source is (a `runtime/launch` folder).
pub const RUNTIME_PATH_VAR: &str = "HETGEN_RUNTIME_PATH";

/// Crates of the data path that debug builds optimize all the same (the workspace's
/// `[profile.dev.package.*]` lists the same ones; a test keeps them equal). A local job's hosts
/// run a debug launcher unless `--release`: without these its data hosts would decode and
/// augment an order of magnitude slower than the instances they stand for, and the trainer
/// would wait on them.
pub const OPTIMIZED: [&str; 10] = [
    "hetgen-pipeline",
    "png",
    "fdeflate",
    "miniz_oxide",
    "flate2",
    "crc32fast",
    "simd-adler32",
    "adler2",
    "fast_image_resize",
    "jpeg-encoder",
];

/// How to build one rendered launcher.
#[derive(Debug, Clone)]
pub struct LauncherBuild {
    /// The rendered `launcher/` folder (holding Cargo.toml).
    pub crate_dir: PathBuf,
    /// The `runtime/launch` folder of a hetgen source tree; `None` for a hetgen that knows none
    /// (the wheel's).
    pub runtime: Option<PathBuf>,
    /// Cargo's target folder, shared between runs and jobs so dependencies build once.
    pub target_dir: PathBuf,
    /// Build with optimizations.
    pub release: bool,
    /// The cargo to run.
    pub cargo: PathBuf,
}

/// The runtime source of the tree this hetgen was compiled in.
#[cfg(feature = "source-tree")]
fn built_from() -> Option<PathBuf> {
    Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../runtime/launch"))
}

/// A hetgen built without `source-tree` (the wheel's) knows no source tree of its own.
#[cfg(not(feature = "source-tree"))]
fn built_from() -> Option<PathBuf> {
    None
}

impl LauncherBuild {
    /// The defaults: `$HETGEN_RUNTIME_PATH`, else the tree this hetgen was built from (with the
    /// `source-tree` feature); `$CARGO_TARGET_DIR`, else `launcher-target` in hetgen's cache
    /// folder ([`hetgen_env::cache_dir`]), else the crate's own `target`; `$CARGO`, else `cargo`.
    pub fn new(crate_dir: PathBuf, release: bool) -> LauncherBuild {
        let runtime = std::env::var_os(RUNTIME_PATH_VAR)
            .map(PathBuf::from)
            .or_else(built_from);
        let target_dir = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .or_else(|| hetgen_env::cache_dir().map(|cache| cache.join("launcher-target")))
            .unwrap_or_else(|| crate_dir.join("target"));
        let cargo = std::env::var_os("CARGO").map_or_else(|| PathBuf::from("cargo"), PathBuf::from);
        LauncherBuild {
            crate_dir,
            runtime,
            target_dir,
            release,
            cargo,
        }
    }

    /// Where cargo puts the binary.
    pub fn binary(&self) -> PathBuf {
        self.target_dir
            .join(if self.release { "release" } else { "debug" })
            .join("launcher")
    }

    /// Builds the launcher, telling `on_line` each line cargo prints, and returns a path to the
    /// binary that later builds of other jobs (same target folder, same binary name) do not
    /// replace: a hard link (or copy) `keep_as`.
    pub fn build(
        &self,
        keep_as: &Path,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<PathBuf, LocalError> {
        let Some(runtime) = &self.runtime else {
            return Err(LocalError::NoSourceTree);
        };
        let runtime = runtime
            .canonicalize()
            .ok()
            .filter(|p| p.join("Cargo.toml").is_file())
            .ok_or_else(|| LocalError::RuntimeSource {
                path: runtime.clone(),
            })?;
        self.seed_lock_file(&runtime)?;
        let lock = self.lock_target()?;
        self.run_cargo(self.cargo_command(&runtime), on_line)?;
        keep(&self.binary(), keep_as)?;
        drop(lock);
        Ok(keep_as.to_owned())
    }

    /// Every job's launcher is the binary `launcher` in the shared target folder: the lock
    /// returned is held from the build until this job's copy is kept, so that two runs starting
    /// at once cannot swap each other's binaries.
    fn lock_target(&self) -> Result<std::fs::File, LocalError> {
        std::fs::create_dir_all(&self.target_dir).map_err(|source| LocalError::Write {
            path: self.target_dir.clone(),
            source,
        })?;
        let lock_path = self.target_dir.join(".hetgen-launcher.lock");
        std::fs::File::create(&lock_path)
            .and_then(|f| f.lock().map(|()| f))
            .map_err(|source| LocalError::Write {
                path: lock_path,
                source,
            })
    }

    /// `cargo build` of the launcher crate against `runtime`, the hetgen runtime's source.
    fn cargo_command(&self, runtime: &Path) -> Command {
        let patch = format!(
            "patch.crates-io.hetgen-runtime.path={}",
            toml_string(&runtime.display().to_string())
        );
        let mut cmd = Command::new(&self.cargo);
        cmd.arg("build")
            .arg("--manifest-path")
            .arg(self.crate_dir.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&self.target_dir)
            .args(["--config", &patch])
            // The hetgen workspace builds with line tables only; matching it lets the two share
            // compiled dependencies in one target folder, and keeps the binary small.
            .args(["--config", "profile.dev.debug=\"line-tables-only\""])
            .args(OPTIMIZED.iter().flat_map(|krate| {
                [
                    "--config".to_owned(),
                    format!("profile.dev.package.{krate}.opt-level=3"),
                ]
            }))
            .args(["--color", "never"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if self.release {
            cmd.arg("--release");
        }
        if let Some(venv) = torch_venv() {
            // The launcher links libtorch through torch-sys, which finds the PyTorch wheel via
            // the `python` first on PATH. Without this a plain `hetgen deploy --local` would
            // need the caller to set both variables by hand.
            let path = std::env::var_os("PATH").unwrap_or_default();
            let mut paths = vec![venv.join("bin")];
            paths.extend(std::env::split_paths(&path));
            cmd.env("LIBTORCH_USE_PYTORCH", "1");
            if let Ok(joined) = std::env::join_paths(paths) {
                cmd.env("PATH", joined);
            }
        }
        cmd
    }

    /// Runs `cmd`, handing each line cargo writes to stderr to `on_line`.
    fn run_cargo(&self, mut cmd: Command, on_line: &mut dyn FnMut(&str)) -> Result<(), LocalError> {
        let mut child = cmd.spawn().map_err(|source| LocalError::NoCargo {
            cargo: self.cargo.clone(),
            source,
        })?;
        let stderr = child.stderr.take().expect("stderr is piped");
        for line in BufReader::new(stderr).lines() {
            match line {
                Ok(line) => on_line(&line),
                Err(_) => break,
            }
        }
        let status = child.wait().map_err(|source| LocalError::NoCargo {
            cargo: self.cargo.clone(),
            source,
        })?;
        if !status.success() {
            return Err(LocalError::Build {
                dir: self.crate_dir.clone(),
                status: status.to_string(),
            });
        }
        Ok(())
    }

    /// Starts the launcher's lock file from the hetgen workspace's, so it resolves the same
    /// versions the runtime was tested with and reuses what the workspace compiled.
    fn seed_lock_file(&self, runtime: &Path) -> Result<(), LocalError> {
        let lock = self.crate_dir.join("Cargo.lock");
        let workspace_lock = runtime.join("../../Cargo.lock");
        if lock.exists() || !workspace_lock.is_file() {
            return Ok(());
        }
        std::fs::copy(&workspace_lock, &lock)
            .map(|_| ())
            .map_err(|source| LocalError::Write { path: lock, source })
    }
}

/// Where `scripts/torch-env.sh` keeps the project's PyTorch venv: `$HETGEN_TORCH_VENV`, default
/// `torch` in hetgen's cache folder ([`hetgen_env::cache_dir`]; it may not exist).
pub(crate) fn torch_venv_dir() -> Option<PathBuf> {
    std::env::var_os("HETGEN_TORCH_VENV")
        .map(PathBuf::from)
        .or_else(|| hetgen_env::cache_dir().map(|cache| cache.join("torch")))
}

/// The PyTorch venv, when it exists and the caller has not pointed torch-sys at a libtorch
/// already.
fn torch_venv() -> Option<PathBuf> {
    if std::env::var_os("LIBTORCH").is_some() || std::env::var_os("LIBTORCH_USE_PYTORCH").is_some()
    {
        return None;
    }
    let venv = torch_venv_dir()?;
    venv.join("bin/python").is_file().then_some(venv)
}

/// Checks that `path` is a file this user may execute.
pub fn check_executable(path: &Path) -> Result<PathBuf, LocalError> {
    let bad = || LocalError::Launcher {
        path: path.to_owned(),
    };
    let meta = std::fs::metadata(path).map_err(|_| bad())?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err(bad());
    }
    path.canonicalize().map_err(|_| bad())
}

fn keep(binary: &Path, keep_as: &Path) -> Result<(), LocalError> {
    let write_error = |source| LocalError::Write {
        path: keep_as.to_owned(),
        source,
    };
    if let Some(parent) = keep_as.parent() {
        std::fs::create_dir_all(parent).map_err(write_error)?;
    }
    match std::fs::remove_file(keep_as) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(write_error(e)),
    }
    // A hard link costs nothing and keeps this build's file even when cargo relinks the name;
    // across file systems it has to be a copy.
    if std::fs::hard_link(binary, keep_as).is_err() {
        std::fs::copy(binary, keep_as).map_err(write_error)?;
    }
    Ok(())
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launcher_optimizes_the_crates_the_workspace_optimizes() {
        // Equal lists let the launcher reuse what the workspace compiled (same profile, same
        // artifacts), and keep a local job's data path as fast as the tests measured it.
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
        let text = std::fs::read_to_string(manifest).unwrap();
        let workspace: toml::Table = toml::from_str(&text).unwrap();
        let mut optimized: Vec<&str> = workspace["profile"]["dev"]["package"]
            .as_table()
            .unwrap()
            .iter()
            .filter(|(_, settings)| {
                settings.get("opt-level").and_then(|o| o.as_integer()) == Some(3)
            })
            .map(|(name, _)| name.as_str())
            .collect();
        optimized.sort_unstable();
        let mut ours = OPTIMIZED.to_vec();
        ours.sort_unstable();
        assert_eq!(optimized, ours);
    }
}
