//! Reaching the data servers of the job this process runs in, as every trainer front end does
//! (the built-in trainer and the Python package): the data hosts from `resourceconfig.json`,
//! the port from `HETGEN_DATA_PORT`, the token from `HETGEN_JOB_TOKEN`.

use hetgen_env::Env;
use hetgen_pipeline::BoxError;
use hetgen_spec::model::Job;

use super::{Client, ClientConfig};
use crate::job::{data_hosts, data_port};

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
    let port = data_port()?;
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
    let port = data_port()?;
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
