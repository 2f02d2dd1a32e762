//! The trainer's side of the data service.
//!
//! [`Client::connect`] reaches every data host (resolving names and connecting with backoff, as
//! hosts of a SageMaker job start in any order) and handshakes with each. [`Client::stream`]
//! starts the [`scheduler`] for one trainer rank and returns a [`RemoteStream`], the
//! [`BatchStream`](hetgen_pipeline::BatchStream) the trainer consumes. [`Client::shutdown`]
//! ends the job's data servers.
//!
//! Hybrid input: [`Client::with_local`] adds this host's own pipeline as one more source beside
//! the servers (see [`source`]); [`Client::batches_by_source`] says who made what.

mod config;
mod connect;
mod copy;
mod counts;
mod deal;
mod error;
mod heartbeat;
mod hedge;
mod plan;
mod scheduler;
mod shutdown;
mod source;
mod stream;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hetgen_env::{Env, InputReport};
use hetgen_pipeline::{Batches, BoxError, InputConfig, Position};
use hetgen_spec::model::Job;

use crate::job::{data_hosts, data_port};
use crate::proto::ShutdownRequest;
pub use config::ClientConfig;
pub use connect::{Server, ServiceClient};
use counts::SourceCounts;
pub use error::ClientError;
use scheduler::Scheduler;
use shutdown::shutdown_each;
pub use shutdown::{tell_finished, tell_job_finished};
pub use source::LOCAL_SOURCE;
use source::Source;
pub use stream::RemoteStream;

/// Connections to all data servers of a job.
pub struct Client {
    runtime: Arc<tokio::runtime::Runtime>,
    servers: Vec<Server>,
    local: Option<Arc<dyn Batches>>,
    config: ClientConfig,
    counts: Arc<SourceCounts>,
}

impl Client {
    /// Connect to `hosts` (name, port), expecting samples of `shape` (`[h, w, c]`).
    pub fn connect(
        hosts: &[(String, u16)],
        shape: [u32; 3],
        config: ClientConfig,
    ) -> Result<Client, ClientError> {
        if hosts.is_empty() {
            return Err(ClientError::NoHosts);
        }
        let runtime = Arc::new(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("hetgen-client")
                .enable_all()
                .build()?,
        );
        let servers = runtime.block_on(connect::connect_all(hosts, shape, &config))?;
        let counts = Arc::new(SourceCounts::new(
            servers.iter().map(|s| s.host.clone()).collect(),
        ));
        Ok(Client {
            runtime,
            servers,
            local: None,
            config,
            counts,
        })
    }

    /// Hybrid input: `engine` (this host's pipeline, on its share of the host's cores) takes
    /// shards beside the servers, by the same credits, so each side gets work in proportion to
    /// its speed. It must be the job's pipeline over the same samples: the batches are the
    /// same whichever side makes them. Its threads run at a lower priority than the caller's
    /// ([`Batches::run_in_background`]).
    pub fn with_local(mut self, engine: Arc<dyn Batches>) -> Result<Client, ClientError> {
        let mine = (engine.samples_per_epoch(), engine.shards());
        if mine != (self.samples_per_epoch(), self.shards()) {
            return Err(ClientError::Local {
                message: format!(
                    "this host's source is {}, the data servers' {}",
                    size(mine),
                    size((self.samples_per_epoch(), self.shards()))
                ),
                sample: None,
            });
        }
        // The host's spare cycles only: training threads come first on a shared core.
        if let Err(e) = engine.run_in_background() {
            tracing::warn!(error = %e, "cannot lower the local pipeline's priority; it competes with training as an equal");
        }
        let mut names: Vec<String> = self.servers.iter().map(|s| s.host.clone()).collect();
        names.push(LOCAL_SOURCE.to_owned());
        self.counts = Arc::new(SourceCounts::new(names));
        self.local = Some(engine);
        Ok(self)
    }

    /// Worker threads of the local pipeline; 0 without hybrid input.
    pub fn local_threads(&self) -> usize {
        self.local.as_ref().map_or(0, |e| e.threads())
    }

    /// Batches yielded so far per source: each data host by name, and [`LOCAL_SOURCE`] with
    /// hybrid input.
    pub fn batches_by_source(&self) -> BTreeMap<String, u64> {
        self.counts.snapshot()
    }

    /// What the input did so far, for the run's summary: batches per source, the local
    /// pipeline's threads, backup copies of overdue shards started ([`hedge`]) and batches
    /// dropped because another copy had delivered them (a hedged shard, or a server given up
    /// on that still sent).
    pub fn report(&self) -> InputReport {
        InputReport {
            batches_by_source: self.batches_by_source(),
            local_threads: self.local_threads() as u32,
            backup_shards: self.counts.backups(),
            duplicate_batches: self.counts.duplicates(),
        }
    }

    /// The connected servers.
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// Samples per epoch of the job's source, as every server reported it (0 for a dataset
    /// of shards).
    pub fn samples_per_epoch(&self) -> u64 {
        self.servers[0].info.samples_per_epoch
    }

    /// A dataset of shards: how many it has, as every server reported it.
    pub fn shards(&self) -> Option<u32> {
        Some(self.servers[0].info.shards).filter(|n| *n > 0)
    }

    /// Start streaming for one trainer rank, after `start` when resuming.
    pub fn stream(&self, input: InputConfig, start: Option<Position>) -> RemoteStream {
        let mut sources: Vec<Source> = self
            .servers
            .iter()
            .map(|s| Source::Remote(Box::new(s.clone())))
            .collect();
        sources.extend(self.local.clone().map(Source::Local));
        let (tx, rx) = tokio::sync::mpsc::channel(2 * sources.len() + 2);
        let scheduler = Scheduler::new(
            sources,
            self.config.clone(),
            input,
            start.clone().unwrap_or_default(),
            tx,
            self.counts.clone(),
        );
        let task = self.runtime.spawn(scheduler.run());
        RemoteStream::new(rx, start.unwrap_or_default(), task, self.runtime.clone())
    }

    /// Tell every server the job is over; returns the hosts that could not be told, with why.
    pub fn shutdown(&self, reason: &str) -> Vec<(String, String)> {
        self.send_shutdown(ShutdownRequest {
            reason: reason.to_owned(),
            ..ShutdownRequest::default()
        })
    }

    /// Tell every server that trainer host `host` finished (`failed`: its training failed). A
    /// server stops once every trainer host of the job has finished, or at once on a failure;
    /// returns the hosts that could not be told, with why.
    pub fn finished(&self, host: &str, failed: bool, reason: &str) -> Vec<(String, String)> {
        self.send_shutdown(ShutdownRequest {
            reason: reason.to_owned(),
            trainer_host: host.to_owned(),
            failed,
        })
    }

    fn send_shutdown(&self, request: ShutdownRequest) -> Vec<(String, String)> {
        let servers = self
            .servers
            .iter()
            .map(|s| (s.host.clone(), s.client.clone()))
            .collect();
        self.runtime
            .block_on(shutdown_each(servers, request, Duration::from_secs(2)))
    }
}

/// Connect to every data host of `job` as `trainer_id`, with `token` or else the job's token
/// from the environment; `configure` may adjust the client's timeouts before it connects.
///
/// This is how every trainer front end (the built-in trainer and the Python package) reaches
/// the data servers of the job its process runs in: the data hosts from `resourceconfig.json`,
/// the port from `HETGEN_DATA_PORT`, the token from `HETGEN_JOB_TOKEN`.
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

/// A source's size as a message says it.
fn size((samples, shards): (u64, Option<u32>)) -> String {
    match shards {
        Some(shards) => format!("a dataset of {shards} shards"),
        None => format!("{samples} samples per epoch"),
    }
}
