//! Connecting a loader to the data servers: the job's (from its environment) or the `hosts`
//! given, with the `token`, trainer id and timeouts the caller passed.

use std::time::Duration;

use hetgen_data::client::{Client, ClientConfig, connect_to_job};
use hetgen_data::job::trainer_id;
use hetgen_env::Env;
use hetgen_pipeline::BoxError;
use hetgen_spec::model::Job;
use pyo3::prelude::*;

use crate::errors::{self, ConfigurationError};
use crate::wait;

/// Outside a job the data servers are the caller's to name.
pub(crate) const NEEDS_HOSTS: &str =
    "mode `remote` outside a job needs `hosts` (\"host:port\" of every data server)";

/// The data servers as the caller asked for them.
pub(crate) struct Servers {
    /// `host:port` of every data server; `None`: the job's.
    pub hosts: Option<Vec<String>>,
    /// The job's token; `None`: from the environment.
    pub token: Option<String>,
    /// Who this trainer is to the servers; `None`: derived from the job and rank.
    pub trainer_id: Option<String>,
    connect_timeout: Option<Duration>,
    stall_timeout: Option<Duration>,
}

impl Servers {
    /// Checks the timeouts (positive, finite seconds).
    pub fn new(
        hosts: Option<Vec<String>>,
        token: Option<String>,
        trainer_id: Option<String>,
        connect_timeout: Option<f64>,
        stall_timeout: Option<f64>,
    ) -> PyResult<Self> {
        Ok(Self {
            connect_timeout: seconds("connect_timeout", connect_timeout)?,
            stall_timeout: seconds("stall_timeout", stall_timeout)?,
            hosts,
            token,
            trainer_id,
        })
    }
}

/// A positive, finite number of seconds.
fn seconds(name: &str, value: Option<f64>) -> PyResult<Option<Duration>> {
    match value {
        None => Ok(None),
        Some(s) if s > 0.0 && s.is_finite() && s < 1e9 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(ConfigurationError::new_err(format!(
            "{name} must be a positive number of seconds below 1e9, not {s}"
        ))),
    }
}

/// Connect to the data servers: the job's (from its environment) or the `hosts` given.
pub(crate) fn connect(
    py: Python<'_>,
    job: &Job,
    env: Option<&Env>,
    servers: Servers,
    rank: u32,
) -> PyResult<Client> {
    let Servers {
        hosts,
        token,
        trainer_id: id,
        connect_timeout,
        stall_timeout,
    } = servers;
    let tune = move |config: &mut ClientConfig| {
        if let Some(t) = connect_timeout {
            config.connect_timeout = t;
        }
        if let Some(t) = stall_timeout {
            config.stall_timeout = t;
        }
    };
    let job = job.clone();
    if let Some(token) = &token {
        hetgen_data::auth::check_token(token).map_err(|e| errors::to_py(&e))?;
    }
    let result = match (hosts, env) {
        (None, Some(env)) => {
            let env = env.clone();
            let id = id.unwrap_or_else(|| trainer_id(&env, rank));
            wait::run(py, "hetgen-connect", move || {
                connect_to_job(&job, &env, id, token, tune)
            })?
        }
        (None, None) => return Err(ConfigurationError::new_err(NEEDS_HOSTS)),
        (Some(hosts), env) => {
            let targets = hosts
                .iter()
                .map(|h| parse_host(h))
                .collect::<PyResult<Vec<_>>>()?;
            let token = match token {
                Some(token) => token,
                None => hetgen_data::auth::token_from_env().map_err(|e| errors::to_py(&e))?,
            };
            // Inside a job its servers take only ids of its trainer hosts; outside, any.
            let id = id.unwrap_or_else(|| match env {
                Some(env) => trainer_id(env, rank),
                None => format!("python-{}/rank-{rank}", std::process::id()),
            });
            let mut config = ClientConfig::new(id, token);
            tune(&mut config);
            let shape = job.pipeline.output_shape;
            wait::run(py, "hetgen-connect", move || {
                Client::connect(&targets, shape, config).map_err(BoxError::from)
            })?
        }
    };
    result.map_err(errors::boxed)
}

/// `host:port` (IPv6 as `[addr]:port`).
fn parse_host(text: &str) -> PyResult<(String, u16)> {
    let bad = || {
        ConfigurationError::new_err(format!(
            "data host `{text}` is not `host:port` (e.g. `algo-1:16000` or `127.0.0.1:16000`)"
        ))
    };
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok((host.to_owned(), port))
}
