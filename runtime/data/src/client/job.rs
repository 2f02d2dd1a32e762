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
    job.groups
        .iter()
        .filter(|g| g.role == Role::Data)
        .flat_map(|g| env.resources.hosts_of(&g.name))
        .collect()
}

/// The trainer hosts of the job, from resourceconfig.json, in host order: a data server stops
/// once each of them has finished.
pub fn trainer_hosts(job: &Job, env: &Env) -> Vec<String> {
    job.groups
        .iter()
        .filter(|g| g.role == Role::Trainer)
        .flat_map(|g| env.resources.hosts_of(&g.name))
        .collect()
}

/// The name a trainer process gives the servers: `<host>/rank-<rank>`, stable across restarts.
pub fn trainer_id(env: &Env, rank: u32) -> String {
    format!("{}/rank-{rank}", env.host())
}

/// Connect to every data host of `job` as `trainer_id`; `configure` may adjust the client's
/// timeouts before it connects.
pub fn connect_to_job(
    job: &Job,
    env: &Env,
    trainer_id: String,
    configure: impl FnOnce(&mut ClientConfig),
) -> Result<Client, BoxError> {
    let port = crate::role::data_port()?;
    let token = crate::auth::token_from_env()?;
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
