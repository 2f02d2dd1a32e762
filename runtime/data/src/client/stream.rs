//! The batches of one trainer rank as the trainer takes them: what the scheduler delivers,
//! through [`BatchStream`].

use std::sync::Arc;

use hetgen_pipeline::{Batch, BatchStream, BoxError, Position};

use super::error::ClientError;

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

impl RemoteStream {
    /// The stream of the scheduler `task`, which hands it batches on `rx`, from `start` on;
    /// it keeps `runtime` (the client's) running while it lives.
    pub(super) fn new(
        rx: tokio::sync::mpsc::Receiver<Delivery>,
        start: Position,
        task: tokio::task::JoinHandle<()>,
        runtime: Arc<tokio::runtime::Runtime>,
    ) -> Self {
        RemoteStream {
            rx,
            position: start,
            task,
            _runtime: runtime,
            finished: false,
        }
    }
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
