//! Hosts of a job on AWS's PyTorch image, started as that image starts them: through AWS's
//! training toolkit.
//!
//! On SageMaker every host of such a job runs the image's `train` (the `sagemaker-training`
//! toolkit with `SAGEMAKER_TRAINING_MODULE=sagemaker_pytorch_container.training:main`): it
//! waits until every host's name resolves, downloads and unpacks the source bundle named by
//! `sagemaker_submit_directory` into `/opt/ml/code`, installs its `requirements.txt` (the
//! hetgen wheel) and runs `python hetgen_launcher.py --key value …`. A local run does exactly
//! that, with the toolkit from PyPI installed in the Python environment the job uses (the
//! project's PyTorch venv, `scripts/torch-env.sh`): the only differences are that
//! `SAGEMAKER_BASE_DIR` stands for `/opt/ml` and that the bundle is a local file instead of an
//! S3 object, both of which the toolkit supports.
//!
//! # Each host a small container
//!
//! The toolkit resolves every host's name through the system resolver (its DNS wait), where
//! hetgen's runtime reads `HETGEN_HOSTS_FILE`. Each host process therefore starts in a private
//! mount namespace in which a hosts file of its own (the machine's `/etc/hosts` plus one line
//! per simulated host) is bound over `/etc/hosts`, so `algo-N` resolves to its loopback
//! address for that process and its children alone: the machine's `/etc/hosts` is never
//! touched. It also gets a PID namespace of its own (`unshare --pid --fork`), in which `train`
//! is process 1 as in the container: when it ends, the kernel ends everything the host
//! started, torchrun's workers in their own process group included, as the container's end
//! does on SageMaker. Both need `CAP_SYS_ADMIN` (root, as in containers and CI). Without it
//! the hosts get `SM_STUDIO_LOCAL_MODE=true` instead, the toolkit's own switch that skips its
//! DNS wait, and the run says so: hetgen's launcher, which starts torchrun and reaches the data
//! servers, resolves names through `HETGEN_HOSTS_FILE` either way.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::LocalError;

/// The toolkit's entry for AWS's PyTorch training images.
pub const TRAINING_MODULE: &str = "sagemaker_pytorch_container.training:main";

/// What a local run of a job on AWS's PyTorch image needs besides the job.
#[derive(Debug, Clone)]
pub struct FrameworkRun {
    /// The source bundle (`sourcedir.tar.gz`), standing in for the S3 object.
    pub bundle: PathBuf,
    /// The rendered request's `HyperParameters`, as SageMaker writes them to
    /// `hyperparameters.json` (every value JSON-encoded).
    pub hyperparameters: BTreeMap<String, String>,
}

impl FrameworkRun {
    /// `hyperparameters.json` of the run: the request's, with the bundle's local path as
    /// `sagemaker_submit_directory`.
    pub fn hyperparameters(&self) -> BTreeMap<String, String> {
        let mut hps = self.hyperparameters.clone();
        let path = self.bundle.display().to_string();
        hps.insert(
            "sagemaker_submit_directory".to_owned(),
            serde_json::to_string(&path).expect("strings serialize"),
        );
        hps
    }
}

/// The Python environment's `bin` folder that has the toolkit's `train`, hetgen's launcher
/// and `torchrun`: the first folder on `path` with all three, else the project's PyTorch venv.
pub fn toolkit_bin(path: &str) -> Result<PathBuf, LocalError> {
    let complete = |dir: &Path| {
        ["train", "hetgen-launcher", "torchrun"]
            .iter()
            .all(|p| dir.join(p).is_file())
    };
    std::env::split_paths(path)
        .find(|d| complete(d))
        .or_else(|| {
            crate::launcher::torch_venv_dir()
                .map(|v| v.join("bin"))
                .filter(|b| complete(b))
        })
        .ok_or(LocalError::NoToolkit)
}

/// `/etc/hosts` as each host sees it: the machine's own, then the simulated hosts.
pub fn etc_hosts(cluster_lines: &str) -> String {
    let mut text = std::fs::read_to_string("/etc/hosts")
        .unwrap_or_else(|_| "127.0.0.1 localhost\n::1 localhost\n".to_owned());
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(cluster_lines);
    text
}

/// A hosts file to bind over `/etc/hosts` in the child's own mount namespace; the pieces are
/// made before `fork`, since only system calls may run between `fork` and `exec`.
#[derive(Debug, Clone)]
pub struct HostsBinding {
    source: CString,
}

impl HostsBinding {
    /// Binds `file`.
    pub fn new(file: &Path) -> HostsBinding {
        HostsBinding {
            source: CString::new(file.as_os_str().as_bytes()).expect("paths have no NUL"),
        }
    }

    /// In the child, before `exec`: a private mount namespace with the file over `/etc/hosts`.
    ///
    /// # Safety
    /// Only system calls; for `pre_exec`.
    pub unsafe fn apply(&self) -> std::io::Result<()> {
        let check = |rc: libc::c_int| {
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        // SAFETY: plain system calls on NUL-terminated strings that outlive them.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            // Mounts made here must not propagate back to the machine's namespace.
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                self.source.as_ptr(),
                c"/etc/hosts".as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ))
        }
    }
}

/// `unshare --pid --fork --kill-child PROGRAM`: `PROGRAM` as process 1 of a PID namespace of
/// its own (util-linux's `unshare` waits for it, passing its exit status on, and ignores the
/// SIGTERM meant for the host while it does).
pub fn in_pid_namespace(unshare: &Path, program: &Path) -> (PathBuf, Vec<String>) {
    (
        unshare.to_owned(),
        vec![
            "--pid".to_owned(),
            "--fork".to_owned(),
            "--kill-child".to_owned(),
            program.display().to_string(),
        ],
    )
}

/// util-linux's `unshare`, on `path`.
pub fn find_unshare(path: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/bin")])
        .map(|d| d.join("unshare"))
        .find(|p| p.is_file())
}

/// Whether this process may make a host a container: its own `/etc/hosts` and PID namespace
/// (tried on `true`).
pub fn can_contain(unshare: &Path, file: &Path) -> bool {
    use std::os::unix::process::CommandExt;
    let binding = HostsBinding::new(file);
    let (program, mut args) = in_pid_namespace(unshare, Path::new("true"));
    args.pop();
    args.push("true".to_owned());
    let mut probe = std::process::Command::new(program);
    probe.args(args);
    // SAFETY: `apply` makes only system calls.
    unsafe {
        probe.pre_exec(move || binding.apply());
    }
    probe
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_stands_in_for_the_s3_object() {
        let run = FrameworkRun {
            bundle: PathBuf::from("/jobs/x/sourcedir.tar.gz"),
            hyperparameters: BTreeMap::from([
                (
                    "sagemaker_submit_directory".to_owned(),
                    "\"s3://b/x/source/sourcedir.tar.gz\"".to_owned(),
                ),
                ("epochs".to_owned(), "3".to_owned()),
            ]),
        };
        let hps = run.hyperparameters();
        assert_eq!(
            hps["sagemaker_submit_directory"],
            "\"/jobs/x/sourcedir.tar.gz\""
        );
        assert_eq!(hps["epochs"], "3");
    }

    #[test]
    fn every_host_sees_localhost_and_the_cluster() {
        let text = etc_hosts("127.1.2.1 algo-1\n");
        assert!(text.ends_with("127.1.2.1 algo-1\n"), "{text}");
        assert!(text.contains("localhost"), "{text}");
    }
}
