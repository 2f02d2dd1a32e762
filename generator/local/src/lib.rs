//! `hetgen deploy --local`: a heterogeneous SageMaker training job as a simulated cluster on one
//! machine, one process per host.
//!
//! SageMaker's own local mode refuses heterogeneous clusters. This crate runs the exact rendered
//! job instead, so it can be debugged before it costs anything:
//!
//! - [`layout`]: host names `algo-1..N` handed out over the groups in shuffled order (as SageMaker
//!   does), one loopback address per host, and one `/opt/ml` tree per host in the job folder with
//!   `resourceconfig.json`, `hyperparameters.json`, `inputdataconfig.json` and the channels, plus
//!   the environment (`SAGEMAKER_BASE_DIR`, `SM_*`, `HETGEN_*`) every host process gets.
//! - `job`: a run's options ([`RunOptions`]) and the run set up on disk ([`LocalJob`]), which
//!   runs its hosts and writes the record; `sagemaker` sets up the run of a SageMaker job
//!   ([`prepare`]), [`kube`] that of its Kubeflow Trainer objects, `script` what a script-mode
//!   trainer host needs on this machine.
//! - [`launcher`]: building the rendered launcher crate against this hetgen's runtime, cached.
//! - [`framework`]: a job on AWS's PyTorch image, whose hosts start through AWS's training
//!   toolkit from the source bundle, each in namespaces of its own that name the other hosts.
//! - [`cpus`]: optional CPU sets per host, so runs of different clusters compare fairly.
//! - [`supervise`]: running the hosts and ending the job as SageMaker would (Completed, Failed,
//!   Stopped), leaving no process behind.
//! - [`record`]: `job-record.json` in the job folder.
//! - [`run_dir`]: a run's folder, its files, and finding a run again by its folder or name.
//! - [`trainer_rate`]: `hetgen profile --trainer`, the user's script timed under `torchrun`
//!   with input replayed from memory, so that no step waits for data.
//! - [`bench`]: one job run three ways for `hetgen bench` (preprocessing on the trainer hosts,
//!   on data hosts, on both), the trainers on the same cores each time, measured: the
//!   built-in trainer from its summary, a script from the Loader's step lines.
//!
//! # Host isolation: loopback addresses, not network namespaces
//!
//! Each host gets its own address in a `127.x.y.0/24` block chosen at random per run (Linux
//! routes all of `127.0.0.0/8` to the loopback interface, with no setup), and its name resolves
//! to it through a hosts file named by `HETGEN_HOSTS_FILE` that the runtime reads before DNS.
//! Every data server can then listen on the same port (16000) as on SageMaker, and a host that
//! connects to the wrong name fails as it would there. Network namespaces would isolate more
//! (a host could not reach another's port through `127.0.0.1`), but they need `CAP_SYS_ADMIN`
//! or unprivileged user namespaces, which CI containers and many laptops do not grant; a local
//! run that only works as root would not be run. The hetgen runtime only ever connects to
//! resolved host names, so the extra isolation would test nothing it does.
//!
//! Linux only: process groups and `PR_SET_PDEATHSIG` keep processes from outliving the run, and
//! `sched_setaffinity` gives CPU sets.

pub mod bench;
pub mod cpus;
mod error;
pub mod framework;
pub mod image;
mod job;
pub mod joblog;
pub mod kube;
pub mod launcher;
pub mod layout;
pub mod record;
pub mod run_dir;
mod sagemaker;
mod script;
pub mod supervise;
pub mod traceback;
pub mod trainer_rate;

pub use cpus::CpuPolicy;
pub use error::LocalError;
pub use framework::FrameworkRun;
pub use image::Image;
pub use job::{LocalJob, RunOptions, default_job_dir, spec_max_runtime};
pub use launcher::LauncherBuild;
pub use layout::{Cluster, Host, JobEnvironment, Layout};
pub use record::{HostRecord, JobRecord};
pub use run_dir::RunDir;
pub use sagemaker::prepare;
pub use supervise::{Exit, HostCommand, Limits, Observer, Outcome, Status, StopRequests, Stream};

/// The trainer's per-step line, as the supervisor hands it to an [`Observer`].
pub use hetgen_spec::step::StepLine as Step;
