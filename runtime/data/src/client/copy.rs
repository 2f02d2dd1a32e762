//! One copy of a shard, as the scheduler starts it: streamed from a data server
//! ([`ShardTask`]) or made by this host's own pipeline ([`LocalShard`]), its batches checked
//! and reported as [`Event`]s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hetgen_pipeline::{Batch, Batches, Contents, ShardWork};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::connect::Server;
use crate::checksum::batch_checksum;
use crate::failure::SampleFailure;
use crate::proto::ShardRequest;

/// Why a copy of a shard failed.
pub(super) struct Failure {
    /// What went wrong, for messages.
    pub(super) error: String,
    /// What it means for the source and the job.
    pub(super) kind: Kind,
    /// The sample the user's code failed on, when that is why.
    pub(super) sample: Option<SampleFailure>,
}

/// What a failed copy means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Any other source would fail the same way (bad data, a request none can serve): the
    /// job fails.
    Fatal,
    /// This source failed (connection lost, stopping, stalled, bad batches): it is lost.
    Lost,
    /// This source refused the stream for now (its memory budget or stream limits full, the
    /// stream cancelled to make way for another): the shard goes elsewhere and the source is
    /// asked again after a rest.
    Busy,
}

impl Failure {
    fn lost(error: String) -> Failure {
        Failure {
            error,
            kind: Kind::Lost,
            sample: None,
        }
    }
}

/// What a copy of a shard reports.
pub(super) enum Event {
    Batch {
        source: usize,
        shard: usize,
        index: u32,
        /// The batch; `None` for the end of a stream shard that had no sample left.
        batch: Option<Batch>,
        /// Its shard's last batch (a stream shard learns its length from this).
        last: bool,
    },
    Ended {
        source: usize,
        shard: usize,
    },
    Failed {
        source: usize,
        shard: usize,
        failure: Failure,
        /// This client's consumer held the stream up for [`crate::STREAM_GIVE_WAY`] or
        /// more, long enough for the server to cancel it: not the server's failure.
        held_up: bool,
    },
}

pub(super) struct ShardTask {
    pub(super) source: usize,
    pub(super) shard: usize,
    pub(super) server: Server,
    pub(super) epoch: u32,
    pub(super) shard_id: u32,
    pub(super) ids: Arc<Vec<u64>>,
    pub(super) stream: bool,
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
                source: self.source,
                shard: self.shard,
            },
            Err(failure) => Event::Failed {
                source: self.source,
                shard: self.shard,
                failure,
                held_up: held_up >= crate::STREAM_GIVE_WAY,
            },
        };
        let _ = self.events.send(event).await;
    }

    /// Stream the shard from batch `from` on, or why it failed. `held_up` is the longest this client's consumer kept the stream waiting for room.
    async fn stream(&self, held_up: &mut Duration) -> Result<(), Failure> {
        let bs = self.batch_size as usize;
        let request = ShardRequest {
            epoch: self.epoch,
            shard: self.shard_id,
            sample_ids: self.ids[(self.from as usize * bs).min(self.ids.len())..].to_vec(),
            batch_size: self.batch_size,
            trainer_id: self.trainer_id.clone(),
            stream: self.stream,
            first_batch: if self.stream { self.from } else { 0 },
        };
        let mut client = self.server.client.clone();
        let response = tokio::time::timeout(self.stall, client.stream_shard(request))
            .await
            .map_err(|_| {
                Failure::lost(format!(
                    "no answer to a shard request within {:?}",
                    self.stall
                ))
            })?
            .map_err(status_error)?;
        let mut stream = response.into_inner();
        loop {
            let message = tokio::time::timeout(self.stall, stream.message())
                .await
                .map_err(|_| Failure::lost(format!("stalled: no batch for {:?}", self.stall)))?
                .map_err(status_error)?;
            let Some(message) = message else {
                return Ok(());
            };
            // A stream's batches carry the shard's own index; a shard of ids counts from the
            // first batch asked for.
            let index = if self.stream {
                message.index
            } else {
                self.from + message.index
            };
            let last = message.last;
            let batch = self.check(index, message)?;
            let event = Event::Batch {
                source: self.source,
                shard: self.shard,
                index,
                batch,
                last,
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
    fn check(&self, index: u32, message: crate::proto::Batch) -> Result<Option<Batch>, Failure> {
        let bs = self.batch_size as usize;
        // A server of built-in images announced their shape; a Python dataset's batches
        // describe their own tensors.
        let shape = self.server.info.tensors.first().map(|t| t.shape.clone());
        let wrong = |what: &str| {
            Err(Failure::lost(format!(
                "sent batch {index} of shard {} with {what}",
                self.shard_id
            )))
        };
        let expected = if self.stream {
            // The shard's samples from the batch's first position on: a full batch, or a
            // short one that ends the shard.
            let start = u64::from(index) * bs as u64;
            let n = message.sample_ids.len();
            if n > bs || (n < bs && !message.last) || start + n as u64 > u64::from(u32::MAX) {
                return wrong("the wrong number of samples");
            }
            if n == 0 {
                // The end of a shard with no sample left: nothing else may come with it.
                if message.data.is_empty() && message.epoch == self.epoch {
                    return Ok(None);
                }
                return wrong("no samples but data");
            }
            (start..start + n as u64)
                .map(|p| hetgen_pipeline::stream_sample_id(self.shard_id, p as u32))
                .collect::<Vec<u64>>()
        } else {
            let start = (index as usize * bs).min(self.ids.len());
            self.ids[start..(start + bs).min(self.ids.len())].to_vec()
        };
        let expected = &expected[..];
        if message.epoch != self.epoch
            || message.shard != self.shard_id
            || message.sample_ids != expected
        {
            return wrong("the wrong samples");
        }
        let contents = match crate::wire::contents_from_wire(message.contents) {
            Ok(contents) => contents,
            Err(why) => return wrong(&why),
        };
        // The contents must be what the server announced, of the size the samples take.
        match (&contents, shape.as_deref()) {
            (Contents::Images { shape, labels }, Some(announced)) => {
                let sample_bytes = shape.iter().map(|d| *d as usize).product::<usize>();
                if shape[..] != *announced
                    || labels.len() != expected.len()
                    || message.data.len() != expected.len() * sample_bytes
                {
                    return wrong("a wrong payload size");
                }
            }
            (Contents::Tensors { tensors, .. }, None) => {
                if tensors.is_empty() {
                    return wrong("no tensors");
                }
                if let Err(why) = hetgen_pipeline::Tensor::check_all(tensors, message.data.len()) {
                    return wrong(&why);
                }
            }
            (Contents::Images { .. }, None) => {
                return wrong("images where the server announced a dataset's tensors");
            }
            (Contents::Tensors { .. }, Some(_)) => {
                return wrong("a dataset's tensors where the server announced images");
            }
        }
        let batch = Batch {
            epoch: self.epoch,
            shard: self.shard_id,
            index,
            sample_ids: message.sample_ids,
            data: message.data,
            contents,
        };
        if batch_checksum(&batch) != message.checksum {
            return wrong("a bad checksum");
        }
        Ok(Some(batch))
    }
}

/// A shard made by the local engine on a blocking thread, reported as a server's stream is.
pub(super) struct LocalShard {
    pub(super) source: usize,
    pub(super) shard: usize,
    pub(super) engine: Arc<dyn Batches>,
    pub(super) epoch: u32,
    pub(super) shard_id: u32,
    pub(super) ids: Arc<Vec<u64>>,
    pub(super) stream: bool,
    pub(super) from: u32,
    pub(super) batch_size: u32,
    pub(super) events: mpsc::Sender<Event>,
}

impl LocalShard {
    pub(super) async fn run(self, cancel: CancellationToken) {
        let (source, shard) = (self.source, self.shard);
        let events = self.events.clone();
        let work = tokio::task::spawn_blocking(move || self.make(&cancel));
        let event = match work.await {
            Ok(Ok(())) => Event::Ended { source, shard },
            // The same sample fails the same way on every server: a data error.
            Ok(Err(error)) => Event::Failed {
                source,
                shard,
                failure: Failure {
                    error: error.to_string(),
                    kind: Kind::Fatal,
                    sample: SampleFailure::of(&error),
                },
                held_up: false,
            },
            // A panic (a custom stage's, say) loses this source, not the epoch.
            Err(join) => Event::Failed {
                source,
                shard,
                failure: Failure::lost(format!("the local pipeline stopped: {join}")),
                held_up: false,
            },
        };
        let _ = events.send(event).await;
    }

    /// Run the shard from batch `from` on; stops early once the scheduler is gone or the
    /// shard arrived whole from another source.
    fn make(&self, cancel: &CancellationToken) -> Result<(), hetgen_pipeline::PipelineError> {
        if self.stream {
            return self.read(cancel);
        }
        let bs = self.batch_size as usize;
        let ids = &self.ids[(self.from as usize * bs).min(self.ids.len())..];
        self.engine.run_shard(
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
                    source: self.source,
                    shard: self.shard,
                    index: batch.index,
                    last: false,
                    batch: Some(batch),
                };
                self.events.blocking_send(event).is_ok()
            },
        )
    }

    /// A stream shard from batch `from` to its end, as a server streams one.
    fn read(&self, cancel: &CancellationToken) -> Result<(), hetgen_pipeline::PipelineError> {
        let mut sent = 0;
        let work = hetgen_pipeline::StreamWork {
            epoch: self.epoch,
            shard: self.shard_id,
            first_batch: self.from,
            batch_size: self.batch_size,
        };
        let result = self.engine.run_stream(work, &mut |batch, last| {
            if cancel.is_cancelled() {
                return false;
            }
            sent += 1;
            let event = Event::Batch {
                source: self.source,
                shard: self.shard,
                index: batch.index,
                last,
                batch: Some(batch),
            };
            self.events.blocking_send(event).is_ok()
        });
        if result.is_ok() && sent == 0 && !cancel.is_cancelled() {
            // No sample left from `from` on: the shard ends there.
            let event = Event::Batch {
                source: self.source,
                shard: self.shard,
                index: self.from,
                last: true,
                batch: None,
            };
            let _ = self.events.blocking_send(event);
        }
        result
    }
}

/// Statuses no other server would answer differently are fatal; a refusal for now (the
/// server's budgets and limits, a stream it cancelled to make way) is a busy source; the rest
/// (connection lost, server stopping, unknown transport errors) mean this server failed.
fn status_error(status: tonic::Status) -> Failure {
    use tonic::Code::*;
    let kind = match status.code() {
        DataLoss | InvalidArgument | OutOfRange | Unauthenticated | PermissionDenied
        | FailedPrecondition => Kind::Fatal,
        ResourceExhausted | Cancelled => Kind::Busy,
        _ => Kind::Lost,
    };
    let sample = (status.code() == DataLoss)
        .then(|| SampleFailure::from_details(status.details()))
        .flatten();
    Failure {
        error: format!("{:?}: {}", status.code(), status.message()),
        kind,
        sample,
    }
}
