//! AWS's PyTorch training image, as the hosts of a local run see it.
//!
//! On SageMaker each host is a container of the image: a Python with PyTorch and AWS's training
//! toolkit, and no hetgen; the toolkit installs the hetgen wheel from the job's source bundle.
//! A local run gives every host the same: a Python environment of its own (`<run>/image/<host>`,
//! a venv without packages of its own) that sees the packages of a *base* environment (one with
//! `torch`, `sagemaker-training` and `sagemaker-pytorch-training`) through a folder of links to
//! them that leaves hetgen's out. So the toolkit's `pip install -r requirements.txt` really
//! installs the bundle's wheel, into that host's environment alone, and a broken wheel fails
//! here as it would there. The base's scripts (`train`, `torchrun`, …) are copied into each
//! host's `bin`, those that ran the base's Python made to run the host's, as the image has them
//! on its `PATH`.
//!
//! The base environment is the first folder on `PATH` with the toolkit's `train` and a
//! `python` beside it, else the project's PyTorch venv (`scripts/torch-env.sh`).
//!
//! [`platform_environment`] is a host's whole environment: what SageMaker gives a container
//! (the request's `Environment`, `TRAINING_JOB_NAME`, `TRAINING_JOB_ARN`) and the image's own
//! `ENV` lines, plus the few things a process on this machine needs that docs/spec.md lists.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::LocalError;
use crate::layout::{Host, JobEnvironment, Layout};

/// The toolkit's entry for AWS's PyTorch training images: the image's `ENV` sets it, and the
/// toolkit's `train` runs it.
pub const TRAINING_MODULE: &str = "sagemaker_pytorch_container.training:main";

/// The image's `ENV` lines that matter to a training process (AWS's PyTorch training image
/// Dockerfiles, `docker/pytorch/Dockerfile.{cpu,cuda}` in aws/deep-learning-containers), less
/// `PATH` and the library paths, which are this machine's.
const IMAGE_ENV: [(&str, &str); 7] = [
    ("SAGEMAKER_TRAINING_MODULE", TRAINING_MODULE),
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("PYTHONUNBUFFERED", "1"),
    ("PYTHONIOENCODING", "UTF-8"),
    ("LANG", "C.UTF-8"),
    ("LC_ALL", "C.UTF-8"),
    ("DLC_CONTAINER_TYPE", "training"),
];

/// The system folders of the image's `PATH`, after its Python environment's `bin`.
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Variables of the caller's environment a local host keeps, none of which the platform sets:
/// what running a process on this machine needs (`HOME` for pip's and torch's caches, `USER`,
/// `TMPDIR`, `TZ`), the GPU selection, and Rust's diagnostics switches.
const LOCAL_ONLY: [&str; 6] = [
    "HOME",
    "USER",
    "TMPDIR",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "RUST_BACKTRACE",
];

/// What the base environment is asked, without importing the toolkit (its import lays out a
/// training tree wherever `SAGEMAKER_BASE_DIR` points): one `missing:` line per thing it lacks,
/// and its `site:` folder.
const CHECK: &str = r#"
import importlib.metadata as metadata, re, sysconfig
def version(dist):
    try:
        return tuple(int(n) for n in re.findall(r"\d+", metadata.version(dist))[:2])
    except metadata.PackageNotFoundError:
        return None
training = version("sagemaker-training")
if training is None or training < (4, 3):
    print("missing: sagemaker-training>=4.3")
pytorch = version("sagemaker-pytorch-training")
if pytorch is None or pytorch[0] != 3:
    print("missing: sagemaker-pytorch-training>=3,<4")
if version("torch") is None:
    print("missing: torch")
print("site:", sysconfig.get_paths()["purelib"])
"#;

/// The environment a run's image stands on: checked, before anything of the run is written.
#[derive(Debug, Clone)]
pub struct Base {
    /// Its `bin` folder.
    bin: PathBuf,
    /// Its `site-packages` folder.
    site: PathBuf,
}

impl Base {
    /// The base environment on `path` ([`base_bin`]), if it has what the image has.
    pub fn find(path: &str) -> Result<Base, LocalError> {
        let bin = base_bin(path)?;
        let python = bin.join("python");
        let mut missing = Vec::new();
        if !bin.join("train").is_file() {
            missing.push("the toolkit's `train`".to_owned());
        }
        if !bin.join("torchrun").is_file() {
            missing.push("`torchrun`".to_owned());
        }
        let mut site = None;
        match std::process::Command::new(&python)
            .args(["-c", CHECK])
            .env_clear()
            .env("PATH", SYSTEM_PATH)
            .stdin(std::process::Stdio::null())
            .output()
        {
            Ok(out) if out.status.success() => {
                for line in String::from_utf8_lossy(&out.stdout).lines() {
                    if let Some(m) = line.strip_prefix("missing: ") {
                        missing.push(m.to_owned());
                    } else if let Some(s) = line.strip_prefix("site: ") {
                        site = Some(PathBuf::from(s));
                    }
                }
            }
            Ok(out) => missing.push(format!(
                "a working `python` ({}: {})",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => missing.push(format!("a working `python` ({e})")),
        }
        if site.is_none() && missing.is_empty() {
            missing.push("a `python` that says where its packages are".to_owned());
        }
        match site {
            Some(site) if missing.is_empty() => Ok(Base { bin, site }),
            _ => Err(LocalError::NoToolkit {
                environment: Some(bin.parent().unwrap_or(&bin).to_owned()),
                missing,
                fix: format!(
                    "install it: `{} -m pip install torch 'sagemaker-training>=4.3' \
                     'sagemaker-pytorch-training>=3,<4'` (hetgen is not needed there: each \
                     host installs the bundle's wheel, as on SageMaker; in a hetgen checkout, \
                     `scripts/torch-env.sh` makes such a venv)",
                    python.display()
                ),
            }),
        }
    }

    /// The toolkit's `train` the hosts' copies come from.
    pub fn train(&self) -> PathBuf {
        self.bin.join("train")
    }

    /// Links the base's packages, hetgen's left out, into `<run_dir>/image/site-packages`.
    pub fn lay_out(&self, run_dir: &Path) -> Result<Image, LocalError> {
        let dir = run_dir.join("image");
        let packages = dir.join("site-packages");
        std::fs::create_dir_all(&packages).map_err(write_error(&packages))?;
        for entry in std::fs::read_dir(&self.site)
            .map_err(write_error(&self.site))?
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_hetgen(&name) || name == "__pycache__" {
                continue;
            }
            let link = packages.join(&name);
            std::os::unix::fs::symlink(entry.path(), &link).map_err(write_error(&link))?;
        }
        Ok(Image {
            base: self.clone(),
            dir,
        })
    }
}

fn write_error(path: &Path) -> impl FnOnce(std::io::Error) -> LocalError + use<> {
    let path = path.to_owned();
    move |source| LocalError::Write { path, source }
}

/// A run's image: its base and the folder of links to the base's packages.
#[derive(Debug, Clone)]
pub struct Image {
    base: Base,
    /// `<run>/image`: the packages folder and one environment per host.
    dir: PathBuf,
}

impl Image {
    /// A Python environment of `host`'s own over the image's packages, as its container has:
    /// returns its `bin` folder, with `python` and the base's scripts in it (those that run
    /// the base's Python run the host's instead).
    pub fn host_environment(&self, host: &Host) -> Result<PathBuf, LocalError> {
        let venv = self.dir.join(&host.name);
        let made = std::process::Command::new(self.base.bin.join("python"))
            .args(["-m", "venv", "--without-pip"])
            .arg(&venv)
            .env_clear()
            .env("PATH", SYSTEM_PATH)
            .stdin(std::process::Stdio::null())
            .output();
        let failed = |why: String| LocalError::Write {
            path: venv.clone(),
            source: std::io::Error::other(why),
        };
        match made {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                return Err(failed(
                    String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                ));
            }
            Err(e) => return Err(failed(e.to_string())),
        }
        // The venv's own site folder, whose `.pth` files `site` reads at start-up.
        let site = std::fs::read_dir(venv.join("lib"))
            .ok()
            .and_then(|d| {
                d.flatten()
                    .find(|e| e.file_name().to_string_lossy().starts_with("python"))
            })
            .map(|e| e.path().join("site-packages"))
            .filter(|s| s.is_dir())
            .ok_or_else(|| failed("the new venv has no lib/python*/site-packages".to_owned()))?;
        // The image's packages as a site folder of the venv's, not a bare path: `addsitedir`
        // also reads the `.pth` files there, as the base's own Python does at start-up (an
        // editable install's path or import hook, setuptools' `distutils-precedence.pth`).
        let pth = site.join("hetgen-image.pth");
        let packages = self.dir.join("site-packages");
        let packages =
            serde_json::to_string(&packages.to_string_lossy()).expect("a string serializes");
        std::fs::write(&pth, format!("import site; site.addsitedir({packages})\n"))
            .map_err(write_error(&pth))?;
        let bin = venv.join("bin");
        let python = bin.join("python");
        for entry in std::fs::read_dir(&self.base.bin)
            .map_err(write_error(&self.base.bin))?
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            let target = bin.join(&name);
            // hetgen's commands come with the wheel the toolkit installs; the venv made its own
            // interpreter and activation scripts.
            if name.starts_with("hetgen") || target.exists() || !entry.path().is_file() {
                continue;
            }
            let Ok(text) = std::fs::read(entry.path()) else {
                continue;
            };
            let text = match rebased(&text, &self.base.bin, &python) {
                Some(text) => text,
                None => text,
            };
            std::fs::write(&target, text).map_err(write_error(&target))?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))
                .map_err(write_error(&target))?;
        }
        let start = bin.join(START_SCRIPT);
        std::fs::write(&start, START).map_err(write_error(&start))?;
        Ok(bin)
    }
}

/// The image's own entry script, which hetgen's start of the container runs.
const START_SCRIPT: &str = "start_with_right_hostname.sh";

/// What stands in for it: the image's script (aws/deep-learning-containers,
/// `scripts/docker/pytorch/start_with_right_hostname.sh`) less what concerns the machine it
/// runs on: it builds a `gethostname()` that returns the host's name and preloads it into
/// `train`, where here every host shares this machine's name, and it starts CUDA's compat
/// libraries on a GPU image.
const START: &str = r#"#!/usr/bin/env bash
if [[ "$1" = "train" ]]; then
     train
else
     eval "$@"
fi
"#;

/// A script whose `#!` line runs a Python in `base_bin`, made to run `python` instead.
fn rebased(text: &[u8], base_bin: &Path, python: &Path) -> Option<Vec<u8>> {
    let rest = text.strip_prefix(b"#!")?;
    let end = rest.iter().position(|&b| b == b'\n')?;
    let interpreter = std::str::from_utf8(&rest[..end]).ok()?.trim();
    let interpreter = Path::new(interpreter.split_whitespace().next()?);
    let runs_base = interpreter.parent() == Some(base_bin)
        && interpreter
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("python"));
    if !runs_base {
        return None;
    }
    let mut out = format!("#!{}", python.display()).into_bytes();
    out.extend_from_slice(&rest[end..]);
    Some(out)
}

/// hetgen's own files in a site-packages folder, which the image does not have.
fn is_hetgen(name: &str) -> bool {
    name == "hetgen"
        || name == "hetgen.libs"
        || (name.starts_with("hetgen-") && name.ends_with(".dist-info"))
        || name.starts_with("hetgen-base-env")
}

/// The base environment's `bin`: the first folder on `path` with the toolkit's `train` and a
/// `python` beside it, else the project's PyTorch venv.
fn base_bin(path: &str) -> Result<PathBuf, LocalError> {
    let has = |dir: &Path, program: &str| dir.join(program).is_file();
    let venv_bin = crate::launcher::torch_venv_dir().map(|v| v.join("bin"));
    std::env::split_paths(path)
        .find(|d| has(d, "train") && has(d, "python"))
        .or_else(|| venv_bin.clone().filter(|b| has(b, "python")))
        .ok_or_else(|| LocalError::NoToolkit {
            environment: None,
            missing: vec![
                "a Python environment with PyTorch and AWS's training toolkit".to_owned(),
            ],
            fix: format!(
                "install `torch 'sagemaker-training>=4.3' 'sagemaker-pytorch-training>=3,<4'` \
                 into a venv and put its `bin` on PATH (hetgen is not needed in it: each host \
                 installs the bundle's wheel, as on SageMaker){}",
                venv_bin
                    .map(|b| format!(
                        "; in a hetgen checkout, `scripts/torch-env.sh` makes one (`{}`)",
                        b.parent().unwrap_or(&b).display()
                    ))
                    .unwrap_or_default()
            ),
        })
}

/// `host`'s whole environment on AWS's image: the job's `Environment` (the spec's, `--env`,
/// the job token), `TRAINING_JOB_NAME` and `TRAINING_JOB_ARN` as the platform sets them, the
/// image's `ENV` with `bin` first on `PATH`, and what only a local host needs: its `/opt/ml`
/// (`SAGEMAKER_BASE_DIR`), the hosts file (`HETGEN_HOSTS_FILE`), [`LOCAL_ONLY`] from the
/// caller, and where hosts cannot have namespaces of their own, the toolkit's local-mode
/// switch.
pub fn platform_environment(
    layout: &Layout,
    host: &Host,
    shared: &JobEnvironment,
    bin: &Path,
    region: &str,
    contained: bool,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = IMAGE_ENV
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    env.insert(
        "PATH".to_owned(),
        format!("{}:{SYSTEM_PATH}", bin.display()),
    );
    for key in LOCAL_ONLY {
        if let Some(value) = shared.inherited.get(key) {
            env.insert(key.to_owned(), value.clone());
        }
    }
    env.insert(
        hetgen_env::BASE_DIR_VAR.to_owned(),
        layout.host_dir(host).display().to_string(),
    );
    // The hosts share this machine's network: the hosts file gives each its own loopback
    // address, which hetgen's data server listens on (on SageMaker it listens on every
    // interface of its own container).
    env.insert(
        hetgen_env::HOSTS_FILE_VAR.to_owned(),
        layout.hosts_file().display().to_string(),
    );
    if !contained {
        env.insert("SM_STUDIO_LOCAL_MODE".to_owned(), "true".to_owned());
    }
    let name = layout
        .job_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    env.insert(
        "TRAINING_JOB_ARN".to_owned(),
        format!("arn:aws:sagemaker:{region}:000000000000:training-job/{name}"),
    );
    env.insert("TRAINING_JOB_NAME".to_owned(), name);
    env.extend(shared.variables.iter().cloned());
    env.insert(hetgen_env::TOKEN_VAR.to_owned(), shared.token.clone());
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_s_python_scripts_run_the_host_s_python() {
        let base = Path::new("/base/bin");
        let host = Path::new("/run/image/algo-1/bin/python");
        let script = b"#!/base/bin/python3.11\nimport sys\n";
        assert_eq!(
            rebased(script, base, host).unwrap(),
            b"#!/run/image/algo-1/bin/python\nimport sys\n"
        );
        assert_eq!(rebased(b"#!/bin/sh\nexit 0\n", base, host), None);
        assert_eq!(rebased(b"\x7fELF", base, host), None);
    }

    #[test]
    fn a_hosts_python_reads_the_base_environments_pth_files() {
        // A base with an editable install: a `.pth` naming a folder outside site-packages.
        let dir = tempfile::tempdir().unwrap();
        let (bin, site, project) = (
            dir.path().join("base/bin"),
            dir.path().join("base/site"),
            dir.path().join("project"),
        );
        for d in [&bin, &site, &project] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::os::unix::fs::symlink("/usr/bin/python3", bin.join("python")).unwrap();
        std::fs::write(project.join("editable_mod.py"), "VALUE = 7\n").unwrap();
        std::fs::write(
            site.join("__editable__.project.pth"),
            format!("{}\n", project.display()),
        )
        .unwrap();
        let base = Base { bin, site };
        let image = base.lay_out(&dir.path().join("run")).unwrap();
        let host = Host {
            name: "algo-1".into(),
            group: "data".into(),
            instance_group: "data".into(),
            instance_type: "ml.c5.xlarge".into(),
            role: hetgen_spec::model::Role::Data,
            address: std::net::Ipv4Addr::LOCALHOST,
            vcpus: None,
        };
        let python = image.host_environment(&host).unwrap().join("python");
        let out = std::process::Command::new(python)
            .args(["-c", "import editable_mod; print(editable_mod.VALUE)"])
            .env_clear()
            .env("PATH", SYSTEM_PATH)
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "7",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn the_image_has_no_hetgen() {
        for name in [
            "hetgen",
            "hetgen.libs",
            "hetgen-0.1.0.dist-info",
            "hetgen-base-env.pth",
        ] {
            assert!(is_hetgen(name), "{name}");
        }
        for name in ["torch", "hetgenx", "numpy-2.0.dist-info"] {
            assert!(!is_hetgen(name), "{name}");
        }
    }
}
