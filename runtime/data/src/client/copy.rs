//! One copy of a shard, as the scheduler starts it: streamed from a data server
//! ([`ShardTask`]) or made by this host's own pipeline ([`LocalShard`]), its batches checked
//! and reported as [`Event`]s; and the heartbeats that tell the scheduler a server answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hetgen_pipeline::{Batch, Batches, ShardWork};
use hetgen_spec::model::Pipeline;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Server;
use super::scheduler::Event;
use crate::checksum::batch_checksum;
use crate::proto::{HeartbeatRequest, ShardRequest};

pub(super) struct ShardTask {
    pub(super) server: usize,
    pub(super) shard: usize,
    pub(super) client: Server,
    pub(super) epoch: u32,
    pub(super) shard_id: u32,
    pub(super) ids: Arc<Vec<u64>>,
    pub(super) from: u32,
    pub(super) batch_size: u32,
    pub(super) trainer_id: String,
    pub(super) stall: Duration,
    pub(super) events: mpsc::Sender<Event>,
}

impl ShardTask {
    /// Stream until the shard ends, fails, or `cancel` (the shard arrived whole from another
    /// source): dropping the stream resets it, and the server stops making the shard.
    pub(super) async fn run(self, cancel: CancellationToken) {
        let mut held_up = Duration::ZERO;
        let result = tokio::select! {
            result = self.stream(&mut held_up) => result,
            _ = cancel.cancelled() => Ok(()),
        };
        let event = match result {
            Ok(()) => Event::Ended {
                server: self.server,
                shard: self.shard,
            },
            Err((error, fatal)) => Event::Failed {
                server: self.server,
                shard: self.shard,
                error,
                fatal,
                held_up: held_up >= crate::STREAM_GIVE_WAY,
            },
        };
        let _ = self.events.send(event).await;
    }

    /// Stream the shard from batch `from` on; `Err((why, fatal))` on failure, where fatal
    /// means another server would fail the same way (bad data, a refused request).
    /// `held_up` is the longest this client's consumer kept the stream waiting for room.
    async fn stream(&self, held_up: &mut Duration) -> Result<(), (String, bool)> {
        let bs = self.batch_size as usize;
        let request = ShardRequest {
            epoch: self.epoch,
            shard: self.shard_id,
            sample_ids: self.ids[self.from as usize * bs..].to_vec(),
            batch_size: self.batch_size,
            trainer_id: self.trainer_id.clone(),
        };
        let mut client = self.client.client.clone();
        let response = tokio::time::timeout(self.stall, client.stream_shard(request))
            .await
            .map_err(|_| {
                (
                    format!("no answer to a shard request within {:?}", self.stall),
                    false,
                )
            })?
            .map_err(status_error)?;
        let mut stream = response.into_inner();
        loop {
            let message = tokio::time::timeout(self.stall, stream.message())
                .await
                .map_err(|_| (format!("stalled: no batch for {:?}", self.stall), false))?
                .map_err(status_error)?;
            let Some(message) = message else {
                return Ok(());
            };
            let index = self.from + message.index;
            let batch = self.check(index, message)?;
            let event = Event::Batch {
                server: self.server,
                shard: self.shard,
                index,
                batch,
            };
            let sending = Instant::now();
            if self.events.send(event).await.is_err() {
                return Ok(());
            }
            *held_up = (*held_up).max(sending.elapsed());
        }
    }

    /// Batch `index` as the server sent it, if it is the batch the plan says, whole: its
    /// samples, its payload's size and its checksum; a server that sends anything else has
    /// failed (not fatally: another server may send it right).
    fn check(&self, index: u32, message: crate::proto::Batch) -> Result<Batch, (String, bool)> {
        let bs = self.batch_size as usize;
        // A server of built-in images announced their shape; a Python dataset's batches
        // describe their own tensors.
        let shape = self.client.info.tensors.first().map(|t| t.shape.clone());
        let start = (index as usize * bs).min(self.ids.len());
        let expected = &self.ids[start..(start + bs).min(self.ids.len())];
        let wrong = |what: &str| {
            Err((
                format!("sent batch {index} of shard {} with {what}", self.shard_id),
                false,
            ))
        };
        if message.epoch != self.epoch
            || message.shard != self.shard_id
            || message.sample_ids != expected
        {
            return wrong("the wrong samples");
        }
        let (shape, tensors) = match shape.as_deref() {
            Some(&[h, w, c]) => {
                let sample_bytes = [h, w, c].iter().map(|d| *d as usize).product::<usize>();
                if message.labels.len() != expected.len()
                    || message.data.len() != expected.len() * sample_bytes
                    || !message.tensors.is_empty()
                {
                    return wrong("a wrong payload size");
                }
                ([h, w, c], Vec::new())
            }
            _ => {
                let tensors = match crate::wire::tensors_from_wire(message.tensors) {
                    Ok(t) => t,
                    Err(why) => return wrong(&why),
                };
                if !message.labels.is_empty() || tensors.is_empty() {
                    return wrong("a payload that is not a dataset's tensors");
                }
                if let Err(why) = hetgen_pipeline::Tensor::check_all(&tensors, message.data.len()) {
                    return wrong(&why);
                }
                (Pipeline::UNKNOWN_SHAPE, tensors)
            }
        };
        let batch = Batch {
            epoch: self.epoch,
            shard: self.shard_id,
            index,
            sample_ids: message.sample_ids,
            labels: message.labels,
            data: message.data,
            shape,
            tensors,
            structure: message.structure,
        };
        if batch_checksum(&batch) != message.checksum {
            return wrong("a bad checksum");
        }
        Ok(batch)
    }
}

/// A shard made by the local engine on a blocking thread, reported as a server's stream is.
pub(super) struct LocalShard {
    pub(super) server: usize,
    pub(super) shard: usize,
    pub(super) engine: Arc<dyn Batches>,
    pub(super) epoch: u32,
    pub(super) shard_id: u32,
    pub(super) ids: Arc<Vec<u64>>,
    pub(super) from: u32,
    pub(super) batch_size: u32,
    pub(super) events: mpsc::Sender<Event>,
}

impl LocalShard {
    pub(super) async fn run(self, cancel: CancellationToken) {
        let (server, shard) = (self.server, self.shard);
        let events = self.events.clone();
        let work = tokio::task::spawn_blocking(move || self.make(&cancel));
        let event = match work.await {
            Ok(Ok(())) => Event::Ended { server, shard },
            // The same sample fails the same way on every server: a data error.
            Ok(Err(error)) => Event::Failed {
                server,
                shard,
                error,
                fatal: true,
                held_up: false,
            },
            // A panic (a custom stage's, say) loses this source, not the epoch.
            Err(join) => Event::Failed {
                server,
                shard,
                error: format!("the local pipeline stopped: {join}"),
                fatal: false,
                held_up: false,
            },
        };
        let _ = events.send(event).await;
    }

    /// Run the shard from batch `from` on; stops early once the scheduler is gone or the
    /// shard arrived whole from another source.
    fn make(&self, cancel: &CancellationToken) -> Result<(), String> {
        let bs = self.batch_size as usize;
        let ids = &self.ids[(self.from as usize * bs).min(self.ids.len())..];
        self.engine
            .run_shard(
                ShardWork {
                    epoch: self.epoch,
                    shard: self.shard_id,
                    ids,
                    batch_size: self.batch_size,
                },
                &mut |mut batch| {
                    if cancel.is_cancelled() {
                        return false;
                    }
                    batch.index += self.from;
                    let event = Event::Batch {
                        server: self.server,
                        shard: self.shard,
                        index: batch.index,
                        batch,
                    };
                    self.events.blocking_send(event).is_ok()
                },
            )
            .map_err(|e| e.to_string())
    }
}

/// Statuses no other server would answer differently are fatal; the rest (connection lost,
/// server stopping, unknown transport errors) mean this server failed.
fn status_error(status: tonic::Status) -> (String, bool) {
    use tonic::Code::*;
    let fatal = matches!(
        status.code(),
        DataLoss
            | InvalidArgument
            | OutOfRange
            | Unauthenticated
            | PermissionDenied
            | FailedPrecondition
    );
    (format!("{:?}: {}", status.code(), status.message()), fatal)
}

/// Heartbeat every server (slot, server) each `every`, each server on a beat of its own: one
/// that does not answer (frozen, or its network gone) holds up its own beat for the timeout,
/// never another's. A server's answer is written, as ms since `started`, into its slot of
/// `answered`. The beats end when this future is dropped (its task aborted).
pub(super) async fn heartbeats(
    servers: Vec<(usize, Server)>,
    trainer_id: String,
    every: Duration,
    answered: Arc<Vec<AtomicU64>>,
    started: Instant,
) {
    // A JoinSet aborts its tasks when dropped, so none outlives the scheduler's stream.
    let mut beats = tokio::task::JoinSet::new();
    for (slot, server) in servers {
        let (trainer_id, answered) = (trainer_id.clone(), answered.clone());
        beats.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if heartbeat(&server, &trainer_id, every).await {
                    answered[slot].store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
            }
        });
    }
    while beats.join_next().await.is_some() {}
}

/// One heartbeat to `server`, waiting at most `every` (and at least a second) for its answer;
/// whether it answered.
async fn heartbeat(server: &Server, trainer_id: &str, every: Duration) -> bool {
    let request = HeartbeatRequest {
        trainer_id: trainer_id.to_owned(),
    };
    let mut client = server.client.clone();
    match tokio::time::timeout(every.max(Duration::from_secs(1)), client.heartbeat(request)).await {
        Ok(Ok(response)) => {
            if let Some(s) = response.into_inner().stats {
                tracing::debug!(host = %server.host, samples_per_s = s.samples_per_s, queue_depth = s.queue_depth, busy_threads = s.busy_threads, "data server stats");
            }
            true
        }
        _ => {
            tracing::debug!(host = %server.host, "heartbeat not answered");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::net::SocketAddr;

    use hetgen_pipeline::StageRegistry;
    use tonic::transport::Endpoint;

    use super::*;
    use crate::auth::AttachToken;
    use crate::proto::data_service_client::DataServiceClient;
    use crate::server::{ServerConfig, serve};

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn server(host: &str, address: SocketAddr) -> Server {
        let channel = Endpoint::from_shared(format!("http://{address}"))
            .unwrap()
            .connect_lazy();
        Server {
            host: host.to_owned(),
            address,
            info: Default::default(),
            client: DataServiceClient::with_interceptor(channel, AttachToken::new(TOKEN).unwrap()),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_never_answers_delays_no_other_servers_heartbeats() {
        // Accepts connections (the kernel does) and never says a word, as a frozen process: every
        // heartbeat to it waits out its timeout, a second.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live = listener.local_addr().unwrap();
        let job = hetgen_fixtures::spec("data-test").job();
        let engine = hetgen_pipeline::Engine::new(
            &job,
            &StageRegistry::builtin(),
            &BTreeMap::new(),
            Some(1),
        );
        let engine = Arc::new(engine.unwrap());
        let config = ServerConfig::new("algo-2".into(), TOKEN.into(), &*engine);
        tokio::spawn(serve(engine, config, listener, std::future::pending()));

        let answered = Arc::new(vec![AtomicU64::new(0), AtomicU64::new(0)]);
        let started = Instant::now();
        let beats = tokio::spawn(heartbeats(
            vec![
                (0, server("algo-1", silent.local_addr().unwrap())),
                (1, server("algo-2", live)),
            ],
            "algo-3/rank-0".into(),
            Duration::from_millis(50),
            answered.clone(),
            started,
        ));
        // The live server's answers over 2.5 s: one every 50 ms or so on a beat of its own, but
        // no more than three if each of its heartbeats waited for the silent one's timeout.
        let mut answers = BTreeSet::new();
        while started.elapsed() < Duration::from_millis(2500) {
            answers.insert(answered[1].load(Ordering::Relaxed));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        beats.abort();
        answers.remove(&0);
        assert!(
            answers.len() >= 10,
            "the live server answered {} heartbeats in 2.5 s",
            answers.len()
        );
        assert_eq!(
            answered[0].load(Ordering::Relaxed),
            0,
            "the silent one never answers"
        );
    }
}
