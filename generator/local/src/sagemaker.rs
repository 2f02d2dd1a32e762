//! The run of a SageMaker job here: its hosts laid out as SageMaker would lay them out, and
//! each host's command (hetgen's launcher, or AWS's training toolkit on AWS's image).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hetgen_spec::Job;

use crate::image;
use crate::layout::{self, Cluster, absolute, data_port, free_block};
use crate::script::{script_code, script_environment};
use crate::{
    HostCommand, Image, JobEnvironment, Layout, LocalError, LocalJob, RunOptions, cpus, framework,
};

/// Lays out the run of `job` on disk and works out each host's command.
#[allow(
    clippy::too_many_lines,
    reason = "the local run's layout in the order a host sees it; one step per host-facing part, in that order"
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
