//! Hosts that start once others are Ready: JobSet's `dependsOn: Ready`, with the readiness
//! the kubelet's `grpc` probe would give each data pod.
//!
//! On Kubernetes the trainer pods are created only once every data pod is Ready, and a data
//! pod is Ready once its data port's `grpc.health.v1.Health` answers SERVING (the server says
//! NOT_SERVING while its dataset builds). The twin asks the same question, the way the kubelet
//! does (`Check` with no service name, one second to answer), and starts a waiting host once
//! every address it waits for has answered SERVING. As for JobSet, readiness is a moment, not
//! a condition kept: a pod that was Ready once has let its dependants start.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::HostCommand;
use super::host::Event;

/// How often a waiting host's addresses are asked: more often than the rendered probe's
/// period, so a run does not wait out a period the cluster might not.
const PERIOD: Duration = Duration::from_millis(250);
/// The kubelet's default `timeoutSeconds` for a probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The thread that asks; it ends when dropped, or once every waiting host may start.
pub(super) struct Probes {
    done: Arc<AtomicBool>,
}

impl Probes {
    /// Asks, on a thread of its own, until each host of `commands` that waits may start, and
    /// then sends [`Event::Ready`] for it.
    pub(super) fn start(commands: &[HostCommand], tx: Sender<Event>) -> Probes {
        let done = Arc::new(AtomicBool::new(false));
        let waiting: Vec<(usize, Vec<SocketAddr>)> = commands
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.waits_for.is_empty())
            .map(|(i, c)| (i, c.waits_for.clone()))
            .collect();
        if !waiting.is_empty() {
            let done = done.clone();
            std::thread::spawn(move || ask(waiting, &tx, &done));
        }
        Probes { done }
    }
}

impl Drop for Probes {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
    }
}

/// The probing loop: every [`PERIOD`], the addresses not yet seen SERVING are asked again.
fn ask(mut waiting: Vec<(usize, Vec<SocketAddr>)>, tx: &Sender<Event>, done: &AtomicBool) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        // Without a runtime nothing can be asked: the waiting hosts never start, and the run
        // ends when the others have (`Run::watch` says which never started).
        return;
    };
    let mut ready = BTreeSet::new();
    while !done.load(Ordering::SeqCst) {
        for (_, addresses) in &waiting {
            for address in addresses {
                if !ready.contains(address) && runtime.block_on(serving(*address)) {
                    ready.insert(*address);
                }
            }
        }
        let (open, still): (Vec<_>, Vec<_>) = waiting
            .into_iter()
            .partition(|(_, addresses)| addresses.iter().all(|a| ready.contains(a)));
        for (i, _) in open {
            if tx.send(Event::Ready(i)).is_err() {
                return;
            }
        }
        waiting = still;
        if waiting.is_empty() {
            return;
        }
        std::thread::sleep(PERIOD);
    }
}

/// Whether the health service at `address` answers SERVING within [`PROBE_TIMEOUT`].
async fn serving(address: SocketAddr) -> bool {
    let Ok(endpoint) = tonic::transport::Endpoint::from_shared(format!("http://{address}")) else {
        return false;
    };
    let endpoint = endpoint
        .connect_timeout(PROBE_TIMEOUT)
        .timeout(PROBE_TIMEOUT);
    let Ok(channel) = endpoint.connect().await else {
        return false;
    };
    let request = HealthCheckRequest {
        service: String::new(),
    };
    match HealthClient::new(channel).check(request).await {
        Ok(answer) => answer.get_ref().status == ServingStatus::Serving as i32,
        Err(_) => false,
    }
}
