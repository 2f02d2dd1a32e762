//! Every way the data server says no, and the one place each becomes a gRPC status.
//!
//! Call sites name what went wrong ([`Refusal`]); which status code a client sees for it, and
//! the words it reads, are decided here, so one kind of refusal always looks the same.

use tonic::{Code, Status};

use super::config::{MAX_BATCH_SIZE, MAX_SHARD_SAMPLES, MAX_TRAINER_ID, MAX_TRAINERS};
use super::log_id::LogId;
use crate::{MAX_MESSAGE_BYTES, PROTOCOL_VERSION};

/// Why a call was refused or a stream cut short.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("request is not one gRPC frame")]
    NotOneFrame,
    #[error("compressed requests are not accepted by this data server")]
    Compressed,
    #[error("request frame says {said} bytes but carries {carried}")]
    FrameLength { said: usize, carried: usize },
    #[error("request body over {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("request body did not arrive within {seconds} s; a trainer sends its request at once")]
    BodyDeadline { seconds: u64 },
    #[error("request unreadable: {0}")]
    Unreadable(String),
    #[error("malformed request: {0}")]
    Malformed(prost::DecodeError),
    #[error("malformed shard request: {0}")]
    MalformedShard(prost::DecodeError),
    #[error(
        "protocol version {0} is not spoken here: this data server speaks version {PROTOCOL_VERSION}; render and build the job's launcher with one hetgen release"
    )]
    Protocol(u32),
    #[error("trainer id `{}` is {} bytes; at most {MAX_TRAINER_ID}", LogId(.0), .0.len())]
    TrainerIdTooLong(String),
    #[error(
        "trainer id `{}` names no trainer of this job: ids are `<trainer host>/rank-<0..={last_rank}>` or `<trainer host>/launcher`, the trainer hosts {}",
        LogId(id), hosts.join(", ")
    )]
    NotOurTrainer {
        id: String,
        hosts: Vec<String>,
        /// The job's last rank (`MAX_RANK` when its world size is not known).
        last_rank: u32,
    },
    #[error("`{}` is not a trainer host of this job ({})", LogId(host), hosts.join(", "))]
    NotOurHost { host: String, hosts: Vec<String> },
    #[error("this data server is shutting down")]
    ShuttingDown,
    #[error("this data server has streams open for {MAX_TRAINERS} trainers already")]
    TrainerTableFull,
    #[error(
        "trainer `{}` has {open} shard streams open on this server; at most {cap} at once",
        LogId(trainer)
    )]
    TooManyStreams {
        trainer: String,
        open: usize,
        cap: usize,
    },
    #[error(
        "the stream needs {needed_mib} MiB of this data server's memory budget ({budget_mib} MiB, {var}) and {free_mib} MiB are free; that is more than a fair share ({share_mib} MiB, the budget divided among {trainers} streaming trainers), so it is refused now instead of waiting: ask again later, use smaller batches, or raise {var}"
    )]
    OverFairShare {
        needed_mib: u64,
        free_mib: u64,
        share_mib: u64,
        trainers: u64,
        budget_mib: u64,
        var: &'static str,
    },
    #[error(
        "this data server's memory budget for batches in flight ({budget_mib} MiB, {var}) stayed in use by other streams for {waited_s} s; the stream needs {needed_mib} MiB"
    )]
    BudgetBusy {
        needed_mib: u64,
        budget_mib: u64,
        waited_s: u64,
        var: &'static str,
    },
    #[error(
        "this data server's budget of request bodies still arriving ({budget_mib} MiB, all connections together) stayed in use for {waited_s} s; a request body of {size} bytes waits for room"
    )]
    BodyBudgetBusy {
        size: usize,
        budget_mib: u64,
        waited_s: u64,
    },
    #[error("shard request carries no sample ids")]
    NoSamples,
    #[error(
        "the request is for {asked}, but this data server's source is {have}: the trainer and the data hosts run different jobs"
    )]
    SourceMismatch {
        asked: &'static str,
        have: &'static str,
    },
    #[error("a request for a shard of a dataset of shards carries sample ids")]
    StreamWithIds,
    #[error("unknown shard {shard}: the dataset has {shards} shards")]
    UnknownShard { shard: u32, shards: u32 },
    #[error("shard request carries {0} sample ids; at most {MAX_SHARD_SAMPLES} per shard")]
    TooManySamples(usize),
    #[error("batch size {0} is outside 1..={MAX_BATCH_SIZE}")]
    BatchSize(u32),
    #[error(
        "a batch of {batch_size} samples is {bytes} bytes, over the {} MiB gRPC message limit; lower `batch_size`",
        MAX_MESSAGE_BYTES >> 20
    )]
    BatchOverMessage { batch_size: u32, bytes: usize },
    #[error(
        "a batch of {batch_size} samples is {bytes} bytes; a stream may hold 4 batches and this data server's memory budget for batches in flight is {budget_mib} MiB ({var}), so at most {max_batch} samples per batch"
    )]
    BatchOverBudget {
        batch_size: u32,
        bytes: usize,
        max_batch: u64,
        budget_mib: u64,
        var: &'static str,
    },
    #[error("unknown sample {bad}: the source has {samples} samples per epoch")]
    UnknownSample { bad: u64, samples: u64 },
    #[error(
        "shard {shard} of epoch {epoch} was never streamed to trainer `{}` by this server (or was acknowledged already, or forgotten)",
        LogId(trainer)
    )]
    NeverStreamed {
        trainer: String,
        epoch: u32,
        shard: u32,
    },
    #[error("shard {shard} of epoch {epoch}: {error}")]
    ShardFailed {
        epoch: u32,
        shard: u32,
        error: String,
        /// The sample the user's code failed on, when it was one: sent in the status's details.
        sample: Option<crate::failure::SampleFailure>,
    },
    #[error(
        "this data server is stopping: shard {shard} of epoch {epoch} ends after {sent} of {batches} batches"
    )]
    StoppedMidShard {
        epoch: u32,
        shard: u32,
        sent: u32,
        batches: u32,
    },
    #[error(
        "this data server is stopping: shard {shard} of epoch {epoch} ends after its first {sent} batches, before its end"
    )]
    StoppedMidStream { epoch: u32, shard: u32, sent: u32 },
    #[error("{0}")]
    Internal(String),
}

impl Refusal {
    /// The status code a client sees: what it tells the client to do (retry elsewhere, fix the
    /// request, give up on this server).
    fn code(&self) -> Code {
        use Refusal::*;
        match self {
            Compressed => Code::Unimplemented,
            BodyTooLarge { .. }
            | TrainerTableFull
            | TooManyStreams { .. }
            | BudgetBusy { .. }
            | OverFairShare { .. }
            | BodyBudgetBusy { .. } => Code::ResourceExhausted,
            BodyDeadline { .. } => Code::DeadlineExceeded,
            NotOneFrame
            | FrameLength { .. }
            | Unreadable(_)
            | Malformed(_)
            | MalformedShard(_)
            | TrainerIdTooLong(_)
            | NoSamples
            | SourceMismatch { .. }
            | StreamWithIds
            | TooManySamples(_)
            | BatchSize(_)
            | BatchOverMessage { .. }
            | BatchOverBudget { .. } => Code::InvalidArgument,
            Protocol(_) => Code::FailedPrecondition,
            NotOurTrainer { .. } | NotOurHost { .. } => Code::PermissionDenied,
            ShuttingDown | StoppedMidShard { .. } | StoppedMidStream { .. } => Code::Unavailable,
            UnknownSample { .. } | UnknownShard { .. } => Code::OutOfRange,
            NeverStreamed { .. } => Code::NotFound,
            ShardFailed { .. } => Code::DataLoss,
            Internal(_) => Code::Internal,
        }
    }
}

impl From<Refusal> for Status {
    fn from(refusal: Refusal) -> Status {
        let (code, message) = (refusal.code(), refusal.to_string());
        match refusal {
            Refusal::ShardFailed {
                sample: Some(failure),
                ..
            } => Status::with_details(code, message, failure.to_details()),
            _ => Status::new(code, message),
        }
    }
}
