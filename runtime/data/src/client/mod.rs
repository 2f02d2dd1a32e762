//! The trainer's side of the data service.
//!
//! [`Client::connect`] reaches every data host (resolving names and connecting with backoff, as
//! hosts of a SageMaker job start in any order) and handshakes with each. [`Client::stream`]
//! starts the [`scheduler`] for one trainer rank and returns a [`RemoteStream`], the
//! [`BatchStream`] the trainer consumes. [`Client::shutdown`] ends the job's data servers.
//!
//! Hybrid input: [`Client::with_local`] adds this host's own pipeline as one more source beside
//! the servers (see [`source`]); [`Client::batches_by_source`] says who made what.

mod connect;
mod copy;
mod deal;
mod heartbeat;
mod hedge;
mod job;
mod plan;
mod scheduler;
mod source;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hetgen_env::InputReport;
use hetgen_pipeline::{Batch, BatchStream, Batches, BoxError, InputConfig, Position};
use tonic::codegen::InterceptedService;
use tonic::transport::Channel;

use crate::auth::AttachToken;
use crate::proto::data_service_client::DataServiceClient;
use crate::proto::{HandshakeResponse, ShutdownRequest};

pub use job::{connect_to_job, tell_job_finished};
pub use source::LOCAL_SOURCE;
use source::Source;

/// The generated client with the job token attached to every call.
pub type ServiceClient = DataServiceClient<InterceptedService<Channel, AttachToken>>;

/// How the client behaves.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// This trainer's stable name, e.g. `algo-2/rank-0`.
    pub trainer_id: String,
    /// The job's token.
    pub token: String,
    /// How long to keep trying to reach a data host that does not answer yet.
    pub connect_timeout: Duration,
    /// A server that sends nothing for this long while it owes batches is treated as failed.
    pub stall_timeout: Duration,
    /// Interval of heartbeats (the servers' watchdogs count them as trainer activity).
    pub heartbeat: Duration,
}

impl ClientConfig {
    /// Defaults: 10 minutes to connect (instances boot at different speeds), 60 s stall
    /// timeout, a heartbeat per second.
    pub fn new(trainer_id: String, token: String) -> Self {
        Self {
            trainer_id,
            token,
            connect_timeout: Duration::from_secs(600),
            stall_timeout: Duration::from_secs(60),
            heartbeat: Duration::from_secs(1),
        }
    }
}

/// Why the client failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The job token is unusable.
    #[error(transparent)]
    Token(#[from] crate::auth::TokenError),
    /// No data host was given.
    #[error("no data hosts to connect to: the job has no data group hosts in resourceconfig.json")]
    NoHosts,
    /// A host never answered.
    #[error("data host {host} could not be reached within {timeout:?}: {last_error}")]
    Unreachable {
        /// The host.
        host: String,
        /// How long it was tried.
        timeout: Duration,
        /// The last error seen.
        last_error: String,
    },
    /// A host refused the handshake.
    #[error("data host {host} refused the handshake: {status}")]
    Handshake {
        /// The host.
        host: String,
        /// What it said.
        status: String,
    },
    /// Hosts disagree with each other or with the job.
    #[error("data host {host}: {message}")]
    Mismatch {
        /// The host.
        host: String,
        /// What differs.
        message: String,
    },
    /// Every data server failed while the epoch still had shards.
    #[error("every data server failed; last error: {0}")]
    AllServersFailed(String),
    /// The local pipeline (hybrid input) failed on a sample, as any server would.
    #[error("the local pipeline failed: {0}")]
    Local(String),
    /// The async runtime could not start.
    #[error("cannot start the client's runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

/// One connected data server.
#[derive(Clone)]
pub struct Server {
    /// Its host name.
    pub host: String,
    /// The address it was reached at.
    pub address: SocketAddr,
    /// What it said in the handshake.
    pub info: HandshakeResponse,
    pub(crate) client: ServiceClient,
}

/// Connections to all data servers of a job.
pub struct Client {
    runtime: Arc<tokio::runtime::Runtime>,
    servers: Vec<Server>,
    local: Option<Arc<dyn Batches>>,
    config: ClientConfig,
    counts: Arc<SourceCounts>,
}

/// Batches yielded per source since the client was made, over all its streams, and what
/// hedging cost ([`hedge`]).
pub(crate) struct SourceCounts {
    names: Vec<String>,
    counts: Vec<AtomicU64>,
    backups: AtomicU64,
    duplicates: AtomicU64,
}

impl SourceCounts {
    fn new(names: Vec<String>) -> Self {
        let counts = names.iter().map(|_| AtomicU64::new(0)).collect();
        Self {
            names,
            counts,
            backups: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
        }
    }

    /// A backup copy of a shard was started.
    pub(crate) fn backup(&self) {
        self.backups.fetch_add(1, Ordering::Relaxed);
    }

    /// A batch that had arrived already was dropped.
    pub(crate) fn duplicate(&self) {
        self.duplicates.fetch_add(1, Ordering::Relaxed);
    }

    /// One more batch of `source` yielded.
    pub(crate) fn add(&self, source: usize) {
        if let Some(count) = self.counts.get(source) {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn snapshot(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (name, count) in self.names.iter().zip(&self.counts) {
            *out.entry(name.clone()).or_default() += count.load(Ordering::Relaxed);
        }
        out
    }
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
        if engine.samples_per_epoch() != self.samples_per_epoch() {
            return Err(ClientError::Local(format!(
                "this host's source has {} samples per epoch, the data servers' {}",
                engine.samples_per_epoch(),
                self.samples_per_epoch()
            )));
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
            backup_shards: self.counts.backups.load(Ordering::Relaxed),
            duplicate_batches: self.counts.duplicates.load(Ordering::Relaxed),
        }
    }

    /// The connected servers.
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// Samples per epoch of the job's source, as every server reported it.
    pub fn samples_per_epoch(&self) -> u64 {
        self.servers[0].info.samples_per_epoch
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
        let scheduler = scheduler::Scheduler::new(
            sources,
            self.config.clone(),
            input,
            start.clone().unwrap_or_default(),
            tx,
            self.counts.clone(),
        );
        let task = self.runtime.spawn(scheduler.run());
        RemoteStream {
            rx,
            position: start.unwrap_or_default(),
            task,
            _runtime: self.runtime.clone(),
            finished: false,
        }
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

/// Send `request` to every server at once, each given `patience` to answer; the hosts that did
/// not take it, with why.
async fn shutdown_each(
    servers: Vec<(String, ServiceClient)>,
    request: ShutdownRequest,
    patience: Duration,
) -> Vec<(String, String)> {
    let calls = servers.into_iter().map(|(host, mut client)| {
        let request = request.clone();
        async move {
            match tokio::time::timeout(patience, client.shutdown(request)).await {
                Ok(Ok(_)) => None,
                Ok(Err(status)) => Some((host, status.message().to_owned())),
                Err(_) => Some((host, format!("no answer within {patience:?}"))),
            }
        }
    });
    futures_join(calls).await.into_iter().flatten().collect()
}

/// Tell the data servers on `hosts` that trainer host `host` finished (`failed`: its training
/// failed), as the holder of `token`, without a handshake first: each gets the Shutdown at
/// once, and this returns when all have answered or after `patience`, with the hosts that could
/// not be told and why.
///
/// A server that accepts the connection but does not answer (its process frozen) holds the
/// caller up for `patience` at most, not until it answers a handshake. Its Shutdown is not
/// cancelled: the calls run on a thread of their own until they are answered or this process
/// ends, so the request waits in the server's socket and the server acts on it once it runs
/// again, instead of serving nobody until its watchdog. (Cancelling would reset the stream,
/// and the server would drop the request unread.)
pub fn tell_finished(
    hosts: &[(String, u16)],
    token: &str,
    host: &str,
    failed: bool,
    reason: &str,
    patience: Duration,
) -> Result<Vec<(String, String)>, ClientError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ClientError::Runtime)?;
    let (servers, mut untold) = runtime.block_on(connect::reach_lazily(hosts, token))?;
    let request = ShutdownRequest {
        reason: reason.to_owned(),
        trainer_host: host.to_owned(),
        failed,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let mut waiting: Vec<String> = servers.iter().map(|(h, _)| h.clone()).collect();
    std::thread::Builder::new()
        .name("hetgen-finished".to_owned())
        .spawn(move || {
            runtime.block_on(async move {
                let calls = servers.into_iter().map(|(host, mut client)| {
                    let (request, tx) = (request.clone(), tx.clone());
                    async move {
                        let answer = client.shutdown(request).await;
                        let _ =
                            tx.send((host, answer.map(|_| ()).map_err(|s| s.message().to_owned())));
                    }
                });
                futures_join(calls).await;
            })
        })
        .map_err(ClientError::Runtime)?;
    let deadline = std::time::Instant::now() + patience;
    while !waiting.is_empty() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok((host, answer)) = rx.recv_timeout(left) else {
            break;
        };
        waiting.retain(|h| *h != host);
        if let Err(why) = answer {
            untold.push((host, why));
        }
    }
    untold.extend(waiting.into_iter().map(|host| {
        (
            host,
            format!("no answer within {patience:?}; the message stays on its way while this process runs"),
        )
    }));
    Ok(untold)
}

/// Await futures concurrently (a tiny `join_all`, to avoid a dependency for one call).
async fn futures_join<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        // A task only fails by panicking; its host then counts as not told.
        if let Ok(output) = handle.await {
            out.push(output);
        }
    }
    out
}

/// What the scheduler hands the consumer: a batch and how many batches its shard has.
pub(crate) type Delivery = Result<(Batch, u32), ClientError>;

/// The batches of one trainer rank, from the data servers, exactly once per epoch.
pub struct RemoteStream {
    rx: tokio::sync::mpsc::Receiver<Delivery>,
    position: Position,
    task: tokio::task::JoinHandle<()>,
    _runtime: Arc<tokio::runtime::Runtime>,
    finished: bool,
}

impl BatchStream for RemoteStream {
    fn next_batch(&mut self) -> Option<Result<Batch, BoxError>> {
        if self.finished {
            return None;
        }
        match self.rx.blocking_recv() {
            Some(Ok((batch, batches))) => {
                self.position
                    .advance(batch.epoch, batch.shard, batch.index, batches);
                Some(Ok(batch))
            }
            Some(Err(e)) => {
                self.finished = true;
                Some(Err(Box::new(e)))
            }
            // The scheduler ends by dropping the sender: after the last epoch, or after it
            // reported an error (returned above).
            None => {
                self.finished = true;
                None
            }
        }
    }

    fn position(&self) -> Position {
        self.position.clone()
    }
}

impl Drop for RemoteStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}
