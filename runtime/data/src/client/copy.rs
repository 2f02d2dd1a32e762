//! One copy of a shard, as the scheduler starts it: streamed from a data server
//! ([`ShardTask`]) or made by this host's own pipeline ([`LocalShard`]), its batches checked
//! and reported as [`Event`]s; and the heartbeats that tell the scheduler a server answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hetgen_pipeline::{Batch, Engine, ShardWork};
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
        let result = tokio::select! {
            result = self.stream() => result,
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
            },
        };
        let _ = self.events.send(event).await;
    }

    /// Stream the shard from batch `from` on; `Err((why, fatal))` on failure, where fatal
    /// means another server would fail the same way (bad data, a refused request).
    async fn stream(&self) -> Result<(), (String, bool)> {
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
            if self.events.send(event).await.is_err() {
                return Ok(());
            }
        }
    }

    /// Batch `index` as the server sent it, if it is the batch the plan says, whole: its
    /// samples, its payload's size and its checksum; a server that sends anything else has
    /// failed (not fatally: another server may send it right).
    fn check(&self, index: u32, message: crate::proto::Batch) -> Result<Batch, (String, bool)> {
        let bs = self.batch_size as usize;
        let shape = &self.client.info.tensors[0].shape;
        let sample_bytes: usize = shape.iter().map(|d| *d as usize).product();
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
        if message.labels.len() != expected.len()
            || message.images.len() != expected.len() * sample_bytes
        {
            return wrong("a wrong payload size");
        }
        if batch_checksum(&message.images, &message.sample_ids, &message.labels) != message.checksum
        {
            return wrong("a bad checksum");
        }
        Ok(Batch {
            epoch: self.epoch,
            shard: self.shard_id,
            index,
            sample_ids: message.sample_ids,
            labels: message.labels,
            images: message.images,
            shape: [shape[0], shape[1], shape[2]],
        })
    }
}

/// A shard made by the local engine on a blocking thread, reported as a server's stream is.
pub(super) struct LocalShard {
    pub(super) server: usize,
    pub(super) shard: usize,
    pub(super) engine: Arc<Engine>,
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
            },
            // A panic (a custom stage's, say) loses this source, not the epoch.
            Err(join) => Event::Failed {
                server,
                shard,
                error: format!("the local pipeline stopped: {join}"),
                fatal: false,
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

/// Heartbeat every server (slot, server) each `every`; a server's answer is written, as ms
/// since `started`, into its slot of `answered`.
pub(super) async fn heartbeats(
    servers: Vec<(usize, Server)>,
    trainer_id: String,
    every: Duration,
    answered: Arc<Vec<AtomicU64>>,
    started: Instant,
) {
    loop {
        tokio::time::sleep(every).await;
        for (slot, server) in &servers {
            let mut client = server.client.clone();
            let request = HeartbeatRequest {
                trainer_id: trainer_id.clone(),
            };
            match tokio::time::timeout(every.max(Duration::from_secs(1)), client.heartbeat(request))
                .await
            {
                Ok(Ok(response)) => {
                    answered[*slot].store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                    if let Some(s) = response.into_inner().stats {
                        tracing::debug!(host = %server.host, samples_per_s = s.samples_per_s, queue_depth = s.queue_depth, busy_threads = s.busy_threads, "data server stats");
                    }
                }
                _ => tracing::debug!(host = %server.host, "heartbeat not answered"),
            }
        }
    }
}
