//! Hosts of a job on AWS's PyTorch image, started as that image starts them: through AWS's
//! training toolkit.
//!
//! On SageMaker every host of such a job starts as the request's `ContainerEntrypoint` says
//! (hetgen's start of the image, [`hetgen_spec::framework::CONTAINER_ENTRYPOINT`], which passes
//! a stop's SIGTERM on), which runs the image's `start_with_right_hostname.sh train` and so the
//! image's `train` (the `sagemaker-training` toolkit with `SAGEMAKER_TRAINING_MODULE=sagemaker_pytorch_container.training:main`): it
//! waits until every host's name resolves, downloads and unpacks the source bundle named by
//! `sagemaker_submit_directory` into an empty `/opt/ml/code`, installs its `requirements.txt`
//! (the hetgen wheel) and runs `python hetgen_launcher.py --key value …` with the `SM_*`
//! variables of the training environment, outside any distribution group: hetgen's launcher,
//! from the wheel, starts torchrun across the trainer group itself. A failure is written to
//! `/opt/ml/output/failure` (unless the launcher wrote one first) and `train` exits 1.
//!
//! A local run does exactly that, with the toolkit from PyPI in a Python environment of each
//! host's own that has PyTorch and the toolkit but no hetgen ([`crate::image`]), so the
//! toolkit installs the bundle's wheel as it does on SageMaker. `SAGEMAKER_BASE_DIR` stands for
//! `/opt/ml`, and the bundle is the same tarball at a local path, which the toolkit unpacks as
//! it would the S3 object. Nothing of hetgen's own set-up reaches these hosts: no
//! `HETGEN_JOB_FILE` or `HETGEN_CODE_DIR`, which the bundle's entry point sets from where the
//! toolkit unpacked it, as on SageMaker.
//!
//! # Each host a small container
//!
//! The toolkit resolves every host's name through the system resolver before it runs the entry
//! point (twice, retrying for up to 15 minutes), where hetgen's runtime reads
//! `HETGEN_HOSTS_FILE`. Each host process therefore starts in a private mount namespace in
//! which a hosts file of its own (the machine's `/etc/hosts` plus one line per simulated host)
//! is bound over `/etc/hosts`, so `algo-N` resolves to its loopback address for that process
//! and its children alone (the toolkit's wait, a script that connects by name): the machine's
//! `/etc/hosts` is never touched. It also gets a PID namespace of its own
//! (`unshare --pid --fork`), in which `train` is process 1 as in the container: when it ends,
//! the kernel ends everything the host started, torchrun's workers in their own process group
//! included, as the container's end does on SageMaker.
//!
//! Both need `CAP_SYS_ADMIN`: as root (containers, CI) the host gets the namespaces directly;
//! otherwise it first enters a user namespace of its own in which it is root (as
//! `unshare --map-root-user --mount` does; files it writes still belong to the caller), where
//! the kernel allows unprivileged user namespaces. Where neither works the hosts get
//! `SM_STUDIO_LOCAL_MODE=true` instead, the toolkit's own switch that skips both of its name
//! waits and changes nothing else, and the run says so: hetgen's launcher, which starts
//! torchrun and reaches the data servers, resolves names through `HETGEN_HOSTS_FILE` either way.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, open};
use rustix::mount::{MountPropagationFlags, mount_bind, mount_change};
use rustix::process::{getgid, getuid};
use rustix::thread::{UnshareFlags, unshare_unsafe};

use crate::LocalError;

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
            hetgen_spec::framework::SUBMIT_DIRECTORY_HP.to_owned(),
            serde_json::to_string(&path).expect("strings serialize"),
        );
        hps
    }
}

/// Why a run's hosts are not contained, for the run's notes.
pub const UNCONTAINED: &str = "hosts cannot have namespaces of their own here (that needs root, \
     or unprivileged user namespaces, and util-linux's `unshare`): the toolkit's wait for host \
     names is skipped (SM_STUDIO_LOCAL_MODE=true), and only hetgen resolves them";

/// Readies the laid-out hosts of a run on AWS's image: an empty code folder each (the toolkit
/// unpacks the bundle only into an empty one, as in the image), and the hosts file every host
/// sees as `/etc/hosts`. Returns how to contain a host, `None` where this machine cannot.
pub fn prepare_hosts(
    layout: &crate::Layout,
    path: &str,
) -> Result<Option<(HostsBinding, PathBuf)>, LocalError> {
    for host in &layout.cluster.hosts {
        let code = layout.host_dir(host).join("code");
        std::fs::create_dir_all(&code)
            .map_err(|source| LocalError::Write { path: code, source })?;
    }
    let file = layout.job_dir.join("etc-hosts");
    let text = etc_hosts(&layout.cluster.hosts_file());
    std::fs::write(&file, text).map_err(|source| LocalError::Write {
        path: file.clone(),
        source,
    })?;
    Ok(find_unshare(path).and_then(|u| containment(&u, &file).map(|b| (b, u))))
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
    /// For a caller without `CAP_SYS_ADMIN`: `uid_map` and `gid_map` of a user namespace in
    /// which the caller is root.
    user: Option<(Vec<u8>, Vec<u8>)>,
}

impl HostsBinding {
    /// Binds `file` in a mount namespace of the child's own, which needs `CAP_SYS_ADMIN`.
    pub fn privileged(file: &Path) -> HostsBinding {
        HostsBinding {
            source: CString::new(file.as_os_str().as_bytes()).expect("paths have no NUL"),
            user: None,
        }
    }

    /// Binds `file` from inside a user namespace of the child's own, in which this process's
    /// user is root (`unshare --map-root-user --mount`); the kernel may refuse it.
    pub fn in_user_namespace(file: &Path) -> HostsBinding {
        let (uid, gid) = (getuid().as_raw(), getgid().as_raw());
        HostsBinding {
            user: Some((
                format!("0 {uid} 1\n").into_bytes(),
                format!("0 {gid} 1\n").into_bytes(),
            )),
            ..HostsBinding::privileged(file)
        }
    }

    /// Whether the child becomes root of a user namespace of its own.
    pub fn is_user_namespace(&self) -> bool {
        self.user.is_some()
    }

    /// In the child, before `exec` (a `pre_exec` hook): a private mount namespace with the
    /// file over `/etc/hosts`. Only system calls on what was made before `fork` (C strings and
    /// byte buffers, no allocation), as a hook between `fork` and `exec` must be. Called
    /// anywhere else, it would move the calling process itself into the new namespaces.
    pub fn apply(&self) -> std::io::Result<()> {
        let namespaces = match self.user {
            None => UnshareFlags::NEWNS,
            Some(_) => UnshareFlags::NEWUSER | UnshareFlags::NEWNS,
        };
        // SAFETY: `unshare` is unsafe for `CLONE_FILES` alone (a thread could be left with
        // descriptors of a table it no longer shares), which is not asked for here.
        unsafe { unshare_unsafe(namespaces) }?;
        if let Some((uid_map, gid_map)) = &self.user {
            // An unprivileged process may map its group only once `setgroups` is off.
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", uid_map)?;
            write_file(c"/proc/self/gid_map", gid_map)?;
        }
        // Mounts made here must not propagate back to the machine's namespace.
        mount_change(
            c"/",
            MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
        )?;
        mount_bind(self.source.as_c_str(), c"/etc/hosts")?;
        Ok(())
    }
}

/// `data` into the file `path` in one write, with system calls only (for `pre_exec`).
fn write_file(path: &CStr, data: &[u8]) -> std::io::Result<()> {
    let file = open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    match rustix::io::write(&file, data)? {
        n if n == data.len() => Ok(()),
        // A map file takes its text whole or not at all.
        _ => Err(std::io::ErrorKind::WriteZero.into()),
    }
}

/// `unshare --pid --fork --kill-child PROGRAM ARGS…`: `PROGRAM` as process 1 of a PID
/// namespace of its own (util-linux's `unshare` waits for it, passing its exit status on, and
/// ignores the SIGTERM meant for the host while it does).
pub fn in_pid_namespace(unshare: &Path, program: &Path, args: &[String]) -> (PathBuf, Vec<String>) {
    let mut all = vec![
        "--pid".to_owned(),
        "--fork".to_owned(),
        "--kill-child".to_owned(),
        program.display().to_string(),
    ];
    all.extend(args.iter().cloned());
    (unshare.to_owned(), all)
}

/// util-linux's `unshare`, on `path`.
pub fn find_unshare(path: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/bin")])
        .map(|d| d.join("unshare"))
        .find(|p| p.is_file())
}

/// How hosts can be small containers here, binding `file` over their `/etc/hosts`: directly
/// (root), else in a user namespace each, else not at all. Each way is tried on `true`, hosts
/// file and PID namespace both.
pub fn containment(unshare: &Path, file: &Path) -> Option<HostsBinding> {
    [
        HostsBinding::privileged(file),
        HostsBinding::in_user_namespace(file),
    ]
    .into_iter()
    .find(|binding| contains(unshare, binding, Path::new("true")))
}

/// Whether `program` runs, and succeeds, as a host would with `binding`.
pub fn contains(unshare: &Path, binding: &HostsBinding, program: &Path) -> bool {
    use std::os::unix::process::CommandExt;
    let (unshare, args) = in_pid_namespace(unshare, program, &[]);
    let mut probe = std::process::Command::new(unshare);
    probe.args(args);
    let binding = binding.clone();
    // SAFETY: `apply` makes only system calls, as a hook between fork and exec must.
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
