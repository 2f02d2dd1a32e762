//! A stop (SageMaker's StopTrainingJob, a Kubernetes pod's deletion, Ctrl-C): the launcher's
//! SIGTERM or SIGINT goes to the training script's processes, and the script's own status
//! becomes the host's.
//!
//! StopTrainingJob sends SIGTERM and, 120 s later, SIGKILL (the StopTrainingJob API
//! reference). The signal goes to torchrun's workers themselves, as torchrun would pass it on
//! (each worker's process group), not to torchrun: torchrun, signalled, raises the signal as
//! its own failure once its workers are down (`SignalException`, exit 1, whatever they
//! returned: `torch/distributed/elastic/agent/server/api.py`, `SimpleElasticAgent.run`) and
//! by default kills them 30 s after it passed the signal on, not 120 s. Left alone, it sees its
//! workers end as they choose and exits as they did: 0 when the script's SIGTERM handler saved
//! its state and returned. Only while torchrun has no worker (not yet: a stop during the
//! rendezvous; or no more: waiting for the other hosts' torchrun) is the signal torchrun's.
//!
//! torchrun is also told the platform's grace, for when it does pass a signal on itself:
//! `TORCH_ELASTIC_SHUTDOWN_TIMEOUT`, the variable behind its `--shutdown-timeout`
//! (`torch/distributed/launcher/api.py`, `LaunchConfig.__post_init__`, and
//! `torch/distributed/run.py` in torch 2.13; added by pytorch/pytorch#172596 in 2026). Not the
//! flag: an older torchrun, such as AWS's 2.4 to 2.8 images have, would refuse it, and ignores
//! the variable.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use hetgen_env::process::Signal;
use signal_hook::iterator::Signals;

use super::workers::workers;

/// Seconds between SageMaker's SIGTERM on a stop and its SIGKILL.
pub(super) const PLATFORM_GRACE_S: u32 = 120;
/// torchrun's variable for the seconds it gives workers between its SIGTERM and its SIGKILL.
pub(super) const TORCHRUN_GRACE_VAR: &str = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT";

/// Signals to the launcher, passed on while torchrun runs.
pub(super) struct Stop {
    handle: signal_hook::iterator::Handle,
    thread: JoinHandle<()>,
    /// The first signal, once one came.
    first: Arc<OnceLock<i32>>,
}

impl Stop {
    /// Passes the signals `signals` catches to the workers of the torchrun whose process id is
    /// `torchrun` (the leader of its own process group) until [`Stop::close`].
    ///
    /// The first SIGTERM or SIGINT goes to every worker. Later ones are the same stop said
    /// again (the container's start on AWS's image repeats SIGTERM every second until its
    /// processes are gone): they reach only workers that started since, never one twice,
    /// which would cut short the script's handler.
    pub fn pass_on(mut signals: Signals, torchrun: u32) -> Stop {
        let handle = signals.handle();
        let first = Arc::new(OnceLock::new());
        let seen = first.clone();
        let thread = std::thread::spawn(move || {
            let mut told = BTreeSet::new();
            for raw in signals.forever() {
                let Some(signal) = Signal::from_named_raw(raw) else {
                    continue;
                };
                let first = seen.set(raw).is_ok();
                let now = workers(torchrun);
                let new: Vec<_> = now.iter().filter(|w| told.insert(w.pid)).collect();
                if !new.is_empty() {
                    let names: Vec<String> = new.iter().map(|w| w.describe()).collect();
                    tracing::info!(signal = raw, workers = %names.join(", "), "passing the signal to the training script");
                    for worker in new {
                        worker.signal(signal);
                    }
                } else if first && now.is_empty() {
                    // No worker yet: torchrun stops its rendezvous and exits.
                    tracing::info!(
                        signal = raw,
                        "passing the signal to torchrun (no training script runs yet)"
                    );
                    let _ = hetgen_env::process::signal_group(torchrun, signal);
                }
            }
        });
        Stop {
            handle,
            thread,
            first,
        }
    }

    /// Stops passing signals on (torchrun has ended): the name of the first signal that came,
    /// if one did.
    pub fn close(self) -> Option<&'static str> {
        self.handle.close();
        let _ = self.thread.join();
        self.first
            .get()
            .map(|&raw| hetgen_env::process::signal_name(raw))
    }
}

/// How a host's end reads after the job's stop reached it as `stopped` (`SIGTERM`): ` after the
/// job was stopped (SIGTERM)`, or nothing when none did.
pub(super) fn after_stop(stopped: Option<&str>) -> String {
    stopped
        .map(|signal| format!(" after the job was stopped ({signal})"))
        .unwrap_or_default()
}
