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
pub mod joblog;
pub mod kube;
pub mod launcher;
pub mod layout;
pub mod record;
pub mod run_dir;
pub mod supervise;
pub mod traceback;
pub mod trainer_rate;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use hetgen_env::Summary;
use hetgen_spec::Job;
use hetgen_spec::model::Role;

pub use cpus::CpuPolicy;
pub use error::LocalError;
pub use framework::FrameworkRun;
pub use image::Image;
pub use launcher::LauncherBuild;
pub use layout::{Cluster, Host, JobEnvironment, Layout};
pub use record::{HostRecord, JobRecord};
pub use run_dir::RunDir;
pub use supervise::{Exit, HostCommand, Limits, Observer, Outcome, Status, StopRequests, Stream};

/// The trainer's per-step line, as the supervisor hands it to an [`Observer`].
pub use hetgen_spec::step::StepLine as Step;

/// Everything a run needs besides the job.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The job folder to create (it must not exist).
    pub job_dir: PathBuf,
    /// The program every host runs as `PROGRAM train`.
    pub launcher: PathBuf,
    /// The rendered job.json.
    pub job_file: PathBuf,
    /// The spec's folder: relative channel paths start there.
    pub spec_dir: PathBuf,
    /// The caller's environment (filtered by [`layout::inherited_environment`]).
    pub caller_env: BTreeMap<String, String>,
    /// `--env` flags, after the spec's environment.
    pub env: Vec<(String, String)>,
    /// CPU sets.
    pub cpus: CpuPolicy,
    /// Max runtime and grace period.
    pub limits: Limits,
    /// Seeds the host shuffle; `None` for a fresh one per run. The loopback block is always
    /// fresh, so that runs at the same time never share addresses, seeded or not.
    pub seed: Option<u64>,
    /// A job on AWS's PyTorch image: every host starts through AWS's training toolkit, from
    /// the source bundle, instead of running `launcher` ([`framework`]).
    pub framework: Option<FrameworkRun>,
    /// An earlier run of the job to continue: every host starts with the checkpoints all of
    /// its hosts left, as SageMaker restores a job's whole checkpoint location into every
    /// host's `/opt/ml/checkpoints`. `None` starts from none.
    pub resume_from: Option<PathBuf>,
}

/// A run set up on disk, ready to start.
#[derive(Debug, Clone)]
pub struct LocalJob {
    /// The job's name.
    pub name: String,
    /// The files of the run.
    pub layout: Layout,
    /// One per host, `algo-1` first.
    pub commands: Vec<HostCommand>,
    /// The program every host runs.
    pub launcher: PathBuf,
    /// Max runtime and grace period.
    pub limits: Limits,
    /// What the caller should know about how the run differs from SageMaker.
    pub notes: Vec<String>,
}

/// The spec's max runtime, when it has a `[sagemaker]` section.
pub fn spec_max_runtime(job: &Job) -> Option<Duration> {
    job.sagemaker
        .as_ref()
        .map(|sm| Duration::from_secs(sm.max_runtime_s))
}

/// `<job_root>/local/<job>-<timestamp>`, with `-2`, `-3`, … when runs start within a second.
pub fn default_job_dir(job_root: &Path, name: &str, now: SystemTime) -> PathBuf {
    let stem = format!("{name}-{}", hetgen_spec::model::name_timestamp(now));
    let local = RunDir::runs_of(job_root);
    let mut dir = local.join(&stem);
    let mut n = 2;
    while dir.exists() {
        dir = local.join(format!("{stem}-{n}"));
        n += 1;
    }
    dir
}

/// Lays out the run of `job` on disk and works out each host's command.
#[allow(
    clippy::too_many_lines,
    reason = "the local run's layout in the order a host sees it; to be split into per-step functions with lib.rs's helpers"
)]
pub fn prepare(job: &Job, options: RunOptions) -> Result<LocalJob, LocalError> {
    let mut rng = match options.seed {
        Some(seed) => fastrand::Rng::with_seed(seed),
        None => fastrand::Rng::new(),
    };
    let mut variables: Vec<(String, String)> = job
        .sagemaker
        .as_ref()
        .map(|sm| sm.environment.clone().into_iter().collect())
        .unwrap_or_default();
    variables.extend(options.env.iter().cloned());
    let mut inherited = layout::inherited_environment(options.caller_env.clone());
    let on_image = options.framework.is_some();
    if let Some(script) = job.trainer.script() {
        let code = match on_image {
            true => None,
            false => Some(script_code(script, &options.spec_dir, &mut inherited)?),
        };
        script_environment(code, &mut variables);
    }
    let port = data_port(&variables, &inherited);

    let total: usize = job.groups.iter().map(|g| g.count as usize).sum();
    // Not from the seeded generator: two runs with one seed at once (parallel tests, a
    // repeated `--seed`) would pick the same block, and one's trainer could reach the other's
    // data servers.
    let base = free_block(&mut fastrand::Rng::new(), total, port);
    let cluster = Cluster::assign(job, &mut rng, base)?;
    let channels = layout::local_channels(job, &options.spec_dir)?;
    let job_dir = absolute(&options.job_dir);
    // Hosts run in their own trees, so a relative program path would name nothing there.
    let launcher = absolute(&options.launcher);
    let mut layout = Layout::new(job, cluster, channels, job_dir);
    if let Some(run) = &options.framework {
        layout.hyperparameters = run.hyperparameters();
    }
    let cpu_sets = cpus::allot(options.cpus, &layout.cluster.hosts, &cpus::available())?;
    // Checked before anything is written: a run that cannot start leaves no folder.
    let base = match on_image {
        true => Some(image::Base::find(
            inherited.get("PATH").map_or("", String::as_str),
        )?),
        false => None,
    };
    let earlier = match &options.resume_from {
        Some(run) => Some(layout::checkpoints_of(run)?),
        None => None,
    };
    layout.write()?;
    if let Some(files) = &earlier {
        layout.restore_checkpoints(files)?;
    }
    let mut notes = Vec::new();
    if let (Some(run), Some(files)) = (&options.resume_from, &earlier) {
        notes.push(format!(
            "continuing the run in {}: every host starts with the {} checkpoint file(s) its \
             hosts left",
            run.display(),
            files.len()
        ));
    }
    let image = match &base {
        Some(base) => Some(base.lay_out(&layout.job_dir)?),
        None => None,
    };
    let hosts_binding = match &image {
        Some(_) => contain_hosts(&layout, &inherited, &mut notes)?,
        None => None,
    };

    let shared = JobEnvironment {
        inherited,
        variables,
        job_file: image.is_none().then(|| absolute(&options.job_file)),
        token: hetgen_env::job_token().map_err(|e| LocalError::Random {
            message: e.to_string(),
        })?,
    };
    let region = job.sagemaker.as_ref().map_or("", |sm| sm.region.as_str());
    let program = match &image {
        Some(image) => HostProgram::Toolkit {
            image,
            binding: hosts_binding.as_ref(),
            region,
        },
        None => HostProgram::Launcher(&launcher),
    };
    let commands = host_commands(&layout, &shared, program, cpu_sets)?;
    Ok(LocalJob {
        name: job.name.clone(),
        layout,
        commands,
        launcher: base.as_ref().map_or(launcher, image::Base::train),
        limits: options.limits,
        notes,
    })
}

/// The data servers' port, which the hosts' loopback block must leave free: the last
/// `HETGEN_DATA_PORT` the job sets, else the caller's, else the default.
pub(crate) fn data_port(
    variables: &[(String, String)],
    inherited: &BTreeMap<String, String>,
) -> u16 {
    let set = variables
        .iter()
        .rev()
        .map(|(k, v)| (k.as_str(), v.as_str()));
    let inherited = inherited.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    hetgen_spec::data_port::data_port_in(set.chain(inherited))
}

/// The hosts of a job on AWS's image, each in namespaces of its own where this machine allows
/// it; where it does not, they run uncontained (and [`image::platform_environment`] tells the
/// toolkit it is in local mode).
fn contain_hosts(
    layout: &Layout,
    inherited: &BTreeMap<String, String>,
    notes: &mut Vec<String>,
) -> Result<Option<(framework::HostsBinding, PathBuf)>, LocalError> {
    let path = inherited
        .get("PATH")
        .map(String::as_str)
        .unwrap_or_default();
    let contained = framework::prepare_hosts(layout, path)?;
    if contained.is_none() {
        notes.push(framework::UNCONTAINED.to_owned());
    }
    Ok(contained)
}

/// What SageMaker's `IMAGE train` runs on every host.
enum HostProgram<'a> {
    /// hetgen's launcher, in hetgen's image.
    Launcher(&'a Path),
    /// The toolkit's `train`, in AWS's image (each host a Python environment of its own): in a
    /// PID namespace of its own where the hosts are contained (`binding`: their hosts file and
    /// `unshare`).
    Toolkit {
        image: &'a Image,
        binding: Option<&'a (framework::HostsBinding, PathBuf)>,
        region: &'a str,
    },
}

/// One command per host, `algo-1` first, each on its CPU set.
fn host_commands(
    layout: &Layout,
    shared: &JobEnvironment,
    program: HostProgram<'_>,
    cpu_sets: Vec<Option<Vec<usize>>>,
) -> Result<Vec<HostCommand>, LocalError> {
    let binding = match &program {
        HostProgram::Toolkit { binding, .. } => binding.map(|(b, _)| b.clone()),
        HostProgram::Launcher(_) => None,
    };
    layout
        .cluster
        .hosts
        .iter()
        .zip(cpu_sets)
        .map(|(host, cpus)| {
            let (program, args, env) = match &program {
                HostProgram::Toolkit {
                    image,
                    binding,
                    region,
                } => {
                    let bin = image.host_environment(host)?;
                    let env = image::platform_environment(
                        layout,
                        host,
                        shared,
                        &bin,
                        region,
                        binding.is_some(),
                    );
                    // The container's start, exactly as the request has it.
                    use hetgen_spec::framework::{CONTAINER_ARGUMENTS, CONTAINER_ENTRYPOINT};
                    let [program, entry @ ..] = CONTAINER_ENTRYPOINT;
                    let args: Vec<String> = entry
                        .iter()
                        .chain(&CONTAINER_ARGUMENTS)
                        .map(|a| (*a).to_owned())
                        .collect();
                    let (program, args) = match binding {
                        Some((_, unshare)) => {
                            framework::in_pid_namespace(unshare, Path::new(program), &args)
                        }
                        None => (PathBuf::from(program), args),
                    };
                    (program, args, env)
                }
                HostProgram::Launcher(launcher) => (
                    launcher.to_path_buf(),
                    vec!["train".to_owned()],
                    layout.environment(host, shared),
                ),
            };
            Ok(HostCommand {
                host: host.clone(),
                program,
                args,
                env,
                base_dir: layout.host_dir(host),
                cpus,
                hosts_binding: binding.clone(),
                waits_for: Vec::new(),
            })
        })
        .collect()
}

/// The code of a script-mode trainer host on hetgen's own image: the spec's `source_dir`,
/// standing in for the image's `/opt/ml/code`, with `torchrun` (and the hetgen wheel beside it)
/// on PATH.
pub(crate) fn script_code(
    script: &hetgen_spec::model::ScriptTrainer,
    spec_dir: &Path,
    inherited: &mut BTreeMap<String, String>,
) -> Result<PathBuf, LocalError> {
    let code = absolute(&spec_dir.join(&script.source_dir));
    if !code.is_dir() {
        return Err(LocalError::SourceDir { path: code });
    }
    let path = inherited.get("PATH").cloned().unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    let no_torchrun = || LocalError::NoTorchrun {
        script: script.script.clone(),
    };
    let torchrun = match dirs
        .iter()
        .map(|d| d.join("torchrun"))
        .find(|t| t.is_file())
    {
        Some(torchrun) => torchrun,
        None => {
            // The project's PyTorch venv (`scripts/torch-env.sh`) stands in for the image.
            let bin = launcher::torch_venv_dir()
                .map(|v| v.join("bin"))
                .filter(|b| b.join("torchrun").is_file())
                .ok_or_else(no_torchrun)?;
            dirs.insert(0, bin.clone());
            bin.join("torchrun")
        }
    };
    let path = std::env::join_paths(&dirs).map_err(|_| no_torchrun())?;
    inherited.insert("PATH".to_owned(), path.to_string_lossy().into_owned());
    check_hetgen(&torchrun, inherited)?;
    Ok(code)
}

/// Before any host starts: the Python that `torchrun` runs scripts with (its `#!` line) can
/// import hetgen, or the script would fail on every trainer host at `import hetgen`.
fn check_hetgen(torchrun: &Path, env: &BTreeMap<String, String>) -> Result<(), LocalError> {
    let shebang = std::fs::read(torchrun)
        .ok()
        .and_then(|bytes| {
            let first = bytes.split(|b| *b == b'\n').next()?.to_vec();
            let line = String::from_utf8(first).ok()?;
            let interpreter = line
                .strip_prefix("#!")?
                .split_whitespace()
                .next()?
                .to_owned();
            Some(PathBuf::from(interpreter))
        })
        .filter(|p| p.is_absolute());
    let python = shebang.unwrap_or_else(|| torchrun.with_file_name("python3"));
    let fail = |detail: String| LocalError::NoHetgen {
        torchrun: torchrun.to_owned(),
        python: python.clone(),
        detail,
    };
    let out = std::process::Command::new(&python)
        .args(["-c", "import hetgen"])
        .env_clear()
        .envs(env)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| fail(format!("cannot run `{}`: {e}", python.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Err(fail(last.trim().to_owned()))
}

/// What a script-mode trainer host needs on this machine besides its code (`code`, on hetgen's
/// own image): a free rendezvous port, since simulated hosts share the machine's ports. Gloo
/// and NCCL find the loopback interface every simulated host's address is on in
/// `resourceconfig.json` ([`layout::NETWORK_INTERFACE`]).
fn script_environment(code: Option<PathBuf>, variables: &mut Vec<(String, String)>) {
    let rendezvous = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(hetgen_env::DEFAULT_RENDEZVOUS_PORT);
    // The caller's and the spec's settings win: they come later.
    let mut ours = vec![(
        hetgen_env::RENDEZVOUS_PORT_VAR.to_owned(),
        rendezvous.to_string(),
    )];
    if let Some(code) = code {
        ours.push((
            hetgen_env::CODE_DIR_VAR.to_owned(),
            code.display().to_string(),
        ));
    }
    ours.append(variables);
    *variables = ours;
}

impl LocalJob {
    /// Runs the hosts to the end, then writes and returns the job record.
    pub fn run(
        &self,
        stop: &StopRequests,
        observer: &mut dyn Observer,
    ) -> Result<JobRecord, LocalError> {
        let mut recorder = joblog::Recorder::create(&self.layout.job_dir, observer)?;
        let outcome = supervise::supervise(&self.commands, self.limits, stop, &mut recorder)?;
        let trainers: Vec<&HostCommand> = self
            .commands
            .iter()
            .filter(|c| c.host.role == Role::Trainer)
            .collect();
        // The first trainer (in host order) that wrote a summary speaks for the job; with several
        // trainer replicas the runtime has only rank 0 write one.
        let paths = |c: &HostCommand| hetgen_env::Paths {
            base: c.base_dir.clone(),
        };
        let summary = trainers
            .iter()
            .find_map(|c| Summary::read(&paths(c).output_data_dir()).ok().flatten());
        let model_dir = trainers
            .iter()
            .map(|c| paths(c).model_dir())
            .find(|dir| std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()));
        if let Some(model) = &model_dir {
            // "The trained model beside the record": a link, so nothing is copied.
            let link = self.layout.job_dir.join("model");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(model, &link).map_err(|source| LocalError::Write {
                path: link.clone(),
                source,
            })?;
        }
        let hosts = self
            .commands
            .iter()
            .zip(&outcome.exits)
            .map(|(c, exit)| HostRecord {
                host: c.host.clone(),
                pid: exit.pid,
                cpus: c.cpus.clone(),
                exit_code: exit.exit_code,
                signal: exit.signal,
                duration_s: round_ms(exit.duration),
                base_dir: c.base_dir.clone(),
                log: c.log_file(),
            })
            .collect();
        let record = JobRecord {
            job_name: self.name.clone(),
            status: outcome.status,
            secondary_status: outcome.secondary_status,
            failure_reason: outcome.failure_reason,
            start: record::rfc3339(outcome.start),
            end: record::rfc3339(outcome.end),
            duration_s: round_ms(
                outcome
                    .end
                    .duration_since(outcome.start)
                    .unwrap_or_default(),
            ),
            job_dir: self.layout.job_dir.clone(),
            launcher: self.launcher.clone(),
            hosts,
            summary,
            model_dir,
        };
        record.write()?;
        Ok(record)
    }
}

fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

pub(crate) fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// A `127.x.y.0` block whose first `hosts` addresses have `port` free, so that runs in
/// parallel (tests, two terminals) do not take each other's data servers. `127.0.0.0/16` is
/// left out: other programs listen on `127.0.0.1`.
pub(crate) fn free_block(rng: &mut fastrand::Rng, hosts: usize, port: u16) -> Ipv4Addr {
    let candidate = |rng: &mut fastrand::Rng| Ipv4Addr::new(127, rng.u8(1..=254), rng.u8(..), 0);
    let mut base = candidate(rng);
    for _ in 0..16 {
        let free = (1..=hosts as u32)
            .all(|k| TcpListener::bind((Ipv4Addr::from(u32::from(base) + k), port)).is_ok());
        if free {
            break;
        }
        base = candidate(rng);
    }
    base
}
