//! What both sides of the data service read from the job: which hosts serve data and which
//! train (from `resourceconfig.json`), the data port (`HETGEN_DATA_PORT`), this host's share of
//! pipeline threads, the name a trainer process gives the servers, and how a host name becomes
//! an address.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hetgen_env::{DATA_PORT_VAR, DEFAULT_DATA_PORT, Env, HostsFile, VariableError};
use hetgen_spec::model::{Job, Role};

/// The port of the data service, from `HETGEN_DATA_PORT` or the default.
pub fn data_port() -> Result<u16, VariableError> {
    hetgen_env::port_from_env(DATA_PORT_VAR, DEFAULT_DATA_PORT)
}

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

/// Resolve `host`: the hosts file of a local cluster first, then DNS (SageMaker's hosts).
pub async fn resolve(hosts: &HostsFile, host: &str, port: u16) -> std::io::Result<SocketAddr> {
    if let Some(ip) = hosts.lookup(host) {
        return Ok(SocketAddr::new(ip, port));
    }
    tokio::net::lookup_host((host, port))
        .await?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("{host} has no address")))
}

/// [`resolve`] from synchronous code, retrying until `timeout`: SageMaker's host names resolve
/// only once every instance of the job is up.
pub fn resolve_blocking(host: &str, port: u16, timeout: Duration) -> std::io::Result<SocketAddr> {
    let table = HostsFile::from_env().map_err(std::io::Error::other)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let started = Instant::now();
        let mut delay = Duration::from_millis(50);
        loop {
            match resolve(&table, host, port).await {
                Ok(address) => return Ok(address),
                Err(e) if started.elapsed() >= timeout => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("cannot resolve {host} within {timeout:?}: {e}"),
                    ));
                }
                Err(_) => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
            }
        }
    })
}
