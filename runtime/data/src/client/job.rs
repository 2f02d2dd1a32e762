//! Reaching the data servers of the job this process runs in, as every trainer front end does
//! (the built-in trainer and the Python package): the data hosts from `resourceconfig.json`,
//! the port from `HETGEN_DATA_PORT`, the token from `HETGEN_JOB_TOKEN`.

use hetgen_env::Env;
use hetgen_pipeline::BoxError;
use hetgen_spec::model::{Job, Role};

use super::{Client, ClientConfig};

/// The data hosts of the job, from resourceconfig.json (never assumed from host names), in
/// host order.
pub fn data_hosts(job: &Job, env: &Env) -> Vec<String> {
    hosts_of_role(job, env, Role::Data)
}

/// The trainer hosts of the job, from resourceconfig.json, in host order: a data server stops
/// once each of them has finished.
pub fn trainer_hosts(job: &Job, env: &Env) -> Vec<String> {
    hosts_of_role(job, env, Role::Trainer)
}

/// The hosts of the job's groups of `role`, from resourceconfig.json, in host order.
fn hosts_of_role(job: &Job, env: &Env, role: Role) -> Vec<String> {
    job.groups
        .iter()
        .filter(|g| g.role == role)
        .flat_map(|g| env.resources.hosts_of(&g.name))
        .collect()
}

/// Threads of this host's own pipeline for each of its `local_ranks` trainer processes: the
/// spec's share of the cores this process may use ([`Job::trainer_threads`], the function
/// `hetgen plan` counts with), divided among the ranks (rounded down, so the host is never
/// oversubscribed). With data hosts 0 means no hybrid input; without them it is at least 1.
/// The built-in trainer (one process) and `hetgen.Loader` both size their pipeline with it.
pub fn local_threads(job: &Job, local_ranks: u32) -> u32 {
    let cores = u32::try_from(hetgen_pipeline::available_cores()).unwrap_or(u32::MAX);
    per_rank(job, job.trainer_threads(cores), local_ranks)
}

/// `host_threads` divided among `local_ranks`, as [`local_threads`] does.
fn per_rank(job: &Job, host_threads: u32, local_ranks: u32) -> u32 {
    let part = host_threads / local_ranks.max(1);
    if job.is_homogeneous() {
        part.max(1)
    } else {
        part
    }
}

/// The name a trainer process gives the servers: `<host>/rank-<rank>`, stable across restarts.
pub fn trainer_id(env: &Env, rank: u32) -> String {
    format!("{}/rank-{rank}", env.host())
}

/// Tell every data host of `job` that this trainer host finished (`failed`: its training
/// failed), giving each `patience` to answer ([`super::tell_finished`]: no handshake first, so
/// a data host that is frozen holds this host up for `patience` at most). Returns the hosts
/// that could not be told, with why.
pub fn tell_job_finished(
    job: &Job,
    env: &Env,
    failed: bool,
    reason: &str,
    patience: std::time::Duration,
) -> Result<Vec<(String, String)>, BoxError> {
    let port = crate::role::data_port()?;
    let token = crate::auth::token_from_env()?;
    let targets: Vec<(String, u16)> = data_hosts(job, env)
        .into_iter()
        .map(|host| (host, port))
        .collect();
    Ok(super::tell_finished(
        &targets,
        &token,
        env.host(),
        failed,
        reason,
        patience,
    )?)
}

/// Connect to every data host of `job` as `trainer_id`, with `token` or else the job's token
/// from the environment; `configure` may adjust the client's timeouts before it connects.
pub fn connect_to_job(
    job: &Job,
    env: &Env,
    trainer_id: String,
    token: Option<String>,
    configure: impl FnOnce(&mut ClientConfig),
) -> Result<Client, BoxError> {
    let port = crate::role::data_port()?;
    let token = match token {
        Some(token) => token,
        None => crate::auth::token_from_env()?,
    };
    let targets: Vec<(String, u16)> = data_hosts(job, env)
        .into_iter()
        .map(|host| (host, port))
        .collect();
    tracing::info!(hosts = ?targets, "connecting to the job's data servers");
    let mut config = ClientConfig::new(trainer_id, token);
    configure(&mut config);
    Ok(Client::connect(
        &targets,
        job.pipeline.output_shape,
        config,
    )?)
}
