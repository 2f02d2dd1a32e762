//! The data role as a process: read the instance's environment, build the pipeline, serve until
//! told to stop, and say why it stopped.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use hetgen_env::{Env, HostsFile};
use hetgen_pipeline::{PipelineError, StageRegistry};
use hetgen_spec::model::Job;

use crate::job::{data_hosts, data_port, trainer_hosts};
use crate::server::{
    IDLE_VAR, MAX_CONNECTIONS_VAR, MEMORY_VAR, STALL_VAR, ServeError, ServerConfig, StopReason,
    answer_while_building, serve,
};
use hetgen_env::VariableError;

/// Seconds without a trainer before a data server exits (default 120).
pub use hetgen_env::WATCHDOG_VAR;

/// The shortest watchdog: below a second it would fire between a healthy trainer's calls.
const MIN_WATCHDOG_S: f64 = 1.0;
/// The longest watchdog: SageMaker's longest training job (28 days).
const MAX_WATCHDOG_S: f64 = 28.0 * 86_400.0;

/// Why the data role could not run.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    /// The SageMaker environment is unusable.
    #[error(transparent)]
    Env(#[from] hetgen_env::EnvError),
    /// The pipeline could not be built.
    #[error("pipeline: {0}")]
    Pipeline(#[from] PipelineError),
    /// No usable job token.
    #[error(transparent)]
    Token(#[from] crate::auth::TokenError),
    /// A variable has a value that cannot be used.
    #[error(transparent)]
    Variable(#[from] VariableError),
    /// The port is taken or the address is not this machine's.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// Where.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server failed.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// The async runtime could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// `var` as a number within `range`, if set. `f64::from_str` takes `inf`, `nan` and `1e400`;
/// the range refuses them, and keeps `Duration::from_secs_f64` from panicking on values past
/// `u64::MAX` seconds.
fn bounded(
    var: &'static str,
    range: std::ops::RangeInclusive<f64>,
    expected: &'static str,
) -> Result<Option<f64>, RoleError> {
    match std::env::var(var) {
        Ok(value) => match value.trim().parse::<f64>() {
            Ok(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(VariableError {
                var,
                value,
                expected: expected.into(),
            }
            .into()),
        },
        Err(_) => Ok(None),
    }
}

/// The limits a host's environment may change, over `config`'s defaults.
fn limits_from_env(config: &mut ServerConfig) -> Result<(), RoleError> {
    if let Some(s) = bounded(
        WATCHDOG_VAR,
        MIN_WATCHDOG_S..=MAX_WATCHDOG_S,
        "a number of seconds from 1 to 2419200 (28 days)",
    )? {
        config.watchdog = Duration::from_secs_f64(s);
    }
    if let Some(mib) = bounded(
        MEMORY_VAR,
        16.0..=(1u64 << 30) as f64,
        "a number of MiB from 16 to 1073741824 (the budget for batches in flight, all trainers together)",
    )? {
        config.memory_budget = (mib as u64) << 20;
    }
    if let Some(n) = bounded(
        MAX_CONNECTIONS_VAR,
        1.0..=1_048_576.0,
        "a number of connections from 1 to 1048576",
    )? {
        config.max_connections = n as usize;
    }
    // At least two heartbeats of a trainer, so a live one is never taken for idle.
    if let Some(s) = bounded(
        IDLE_VAR,
        2.0..=MAX_WATCHDOG_S,
        "a number of seconds from 2 to 2419200 (28 days)",
    )? {
        config.idle_timeout = Duration::from_secs_f64(s);
    }
    // Past the grace a stalled stream is given to let go of its thread, and a few of a
    // trainer's heartbeats.
    if let Some(s) = bounded(
        STALL_VAR,
        2.0..=MAX_WATCHDOG_S,
        "a number of seconds from 2 to 2419200 (28 days)",
    )? {
        config.stall_timeout = Duration::from_secs_f64(s);
    }
    Ok(())
}

/// Serve this host's share of the job until Shutdown, SIGTERM/SIGINT or the watchdog.
pub fn run_data_role(
    job: &Job,
    env: &Env,
    registry: &StageRegistry,
) -> Result<StopReason, RoleError> {
    let token = crate::auth::token_from_env()?;
    let port = data_port()?;
    // On a local cluster each host has its own loopback address; on SageMaker, all interfaces.
    let ip = HostsFile::from_env()?
        .lookup(env.host())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let address = SocketAddr::new(ip, port);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("hetgen-server")
        .enable_all()
        .build()
        .map_err(RoleError::Runtime)?;
    let bind = |source| RoleError::Bind { address, source };
    // The port answers from the start, "still building" until the pipeline is built
    // (`server::answer_while_building`), then the server proper takes over its socket.
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(address))
        .and_then(|l| l.into_std())
        .map_err(bind)?;
    let (built, building) = tokio::sync::oneshot::channel::<()>();
    let answering = {
        let listener = listener.try_clone().map_err(bind)?;
        runtime.spawn(async move {
            match tokio::net::TcpListener::from_std(listener) {
                Ok(listener) => {
                    // Built or failed (the sender dropped), the answers end.
                    answer_while_building(listener, async move {
                        let _ = building.await;
                    })
                    .await;
                }
                Err(e) => tracing::warn!(error = %e, "cannot answer while the dataset builds"),
            }
        })
    };
    let engine = hetgen_pipeline::open(
        job,
        registry,
        &env.channel_dirs,
        job.pipeline.threads.map(|t| t as usize),
        &crate::input::python_setup(Some(env)),
    )?;
    let _ = built.send(());
    let _ = runtime.block_on(answering);
    let mut config = ServerConfig::new(env.host().to_owned(), token, &*engine);
    config.trainer_hosts = trainer_hosts(job, env);
    config.watch_from_start = !env.kubernetes;
    config.peers = data_hosts(job, env)
        .into_iter()
        .filter(|h| h != env.host())
        .map(|h| (h, port))
        .collect();
    let ranks_per_host = job
        .trainer
        .script()
        .map_or(1, |s| s.processes_per_host.max(1));
    let ranks = config.trainer_hosts.len() * ranks_per_host as usize;
    // A script's ranks are the job's (the launcher refuses a torchrun whose world differs);
    // a built-in trainer's job leaves the ranks open to `hetgen.Loader`s of any world.
    if job.trainer.script().is_some() {
        config.world_size = u32::try_from(ranks).ok().filter(|n| *n > 0);
    }
    config.budget_for_job(ranks, job.pipeline.batch_size, engine.sample_bytes());
    limits_from_env(&mut config)?;

    runtime.block_on(async move {
        // Handlers first: once the server serves, SIGTERM stops it cleanly. (While the
        // pipeline builds, SIGTERM ends the process at once, as SIGKILL does: the workers
        // and their shared memory go with it, see `hetgen_pipeline::python`.)
        let stop = stop_signal();
        let listener = tokio::net::TcpListener::from_std(listener).map_err(bind)?;
        Ok(serve(engine, config, listener, stop).await?)
    })
}

/// How long a stopped server goes on serving trainers that are still streaming.
///
/// A stop (StopTrainingJob, Ctrl-C on a local run) signals every host at once. A trainer's script
/// learns of it a moment later than this server does (through its launcher and torchrun), and
/// meanwhile its loader would fail with "every data server failed" instead of the script's own
/// SIGTERM handler running (to save a checkpoint, say). So the server keeps serving until every
/// trainer host has said it finished (their launchers always say so, signal or not), and stops
/// on its own after this long: well inside SageMaker's 120 s before SIGKILL and `deploy
/// --local`'s default 10 s grace.
pub const STOP_DRAIN: Duration = Duration::from_secs(5);

/// SIGTERM is how SageMaker stops a job (then SIGKILL after 120 s); SIGINT is Ctrl-C. The
/// future completes [`STOP_DRAIN`] after the first, or at once on a SIGINT after it (Ctrl-C
/// again). A repeated SIGTERM is the same stop said again: the container's start on AWS's image
/// repeats it every second until the host's processes are gone, which must not cut the drain.
///
/// The handlers are installed when this is called (inside the runtime), not when the future is
/// first polled: `serve` polls it on a task of its own, after the port already answers, and a
/// signal in between would take the default action and kill the process mid-start.
pub fn stop_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            // Without signal handlers the default action (exit) still stops the process.
            return std::future::pending().await;
        };
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(
            drain_s = STOP_DRAIN.as_secs(),
            "{name} received; serving the trainers until they finish"
        );
        let drained = tokio::time::sleep(STOP_DRAIN);
        tokio::pin!(drained);
        loop {
            tokio::select! {
                _ = &mut drained => {
                    tracing::info!("trainers still streaming after the drain period; stopping");
                    return;
                }
                Some(()) = term.recv() => {}
                _ = int.recv() => {
                    tracing::info!("SIGINT received again; stopping now");
                    return;
                }
            }
        }
    }
}

/// Structured logs on stderr, `RUST_LOG` to filter (default `info`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only for a terminal: a local run's supervisor and SageMaker's CloudWatch
        // both read these lines through a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        // A line that cannot be written is dropped. By default the subscriber reports that on
        // stderr with `eprintln!`, which panics when stderr is what failed (a reader gone), and
        // a panic on a server thread would leave the server unable to stop.
        .log_internal_errors(false)
        .try_init();
}
