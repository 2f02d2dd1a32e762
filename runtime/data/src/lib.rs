//! hetgen's data service: CPU instances turn shards of the epoch plan into batches and stream
//! them over gRPC (tonic) to the trainer, which consumes every sample exactly once per epoch even
//! when a server dies.
//!
//! - [`server`]: the data role. Serves `hetgen.data.v1.DataService`, runs shards on the
//!   pipeline engine, checks the job token on every call, stops on Shutdown, on SIGTERM, or when
//!   its watchdog has not heard from any trainer for too long.
//! - [`client`]: the trainer's side. Connects to every data host, owns the epoch plan, hands out
//!   shards under each server's credit window, re-assigns a failed server's unfinished shards,
//!   drops duplicates, verifies checksums and yields [`hetgen_pipeline::Batch`]es through
//!   [`hetgen_pipeline::BatchStream`].
//! - [`job`]: what both sides read from the job: its data and trainer hosts, the data port,
//!   this host's share of pipeline threads, a trainer's name, how a host name is resolved.
//! - [`audit`]: `HETGEN_AUDIT_FILE`, one `epoch sample_id` line per yielded sample.

pub mod audit;
pub mod auth;
pub mod checksum;

/// The allocator tuning every process that moves batches applies (it lives with the engine).
pub use hetgen_pipeline::tune_allocator;
pub mod client;
pub mod failure;
pub mod input;
pub mod job;
pub mod role;
pub mod server;
mod throttle;
pub mod wire;

/// Generated types of `hetgen.data.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("hetgen.data.v1");
}

/// The protocol spoken by this build; a handshake with any other version is refused.
pub const PROTOCOL_VERSION: u32 = 3;

/// A shard stream that has made no progress for this long (its trainer took no batch of it) may
/// be cancelled by its server when what it holds is wanted by a stream that progresses. The
/// client then asks for the shard again, without holding the loss against the server: it was
/// its own consumer that stopped.
pub const STREAM_GIVE_WAY: std::time::Duration = std::time::Duration::from_secs(5);

/// Shards a producer keeps in flight: enough to keep its pool busy while the trainer
/// acknowledges and re-requests. A server offers this many credits, and the trainer's own
/// pipeline (hybrid input) takes as many. A shard of sample ids keeps the whole pool busy, so
/// two suffice for up to 16 threads; a shard of a dataset of shards is read by one worker, so
/// every worker needs one, and one more waits for the first that ends.
pub(crate) fn max_inflight_shards(engine: &dyn hetgen_pipeline::Batches) -> u32 {
    let threads = engine.threads() as u32;
    match engine.shards() {
        Some(_) => threads + 1,
        None => threads.div_ceil(8).max(2),
    }
}

/// Largest gRPC message either side accepts: a batch of 256 ImageNet samples at 224×224×3 as
/// `u8` is 38 MB, far above tonic's 4 MiB default.
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// HTTP/2 flow-control windows. The defaults (64 KiB) throttle a stream of tens-of-MB batches
/// to a fraction of loopback speed; these let a whole batch be in flight.
pub const STREAM_WINDOW: u32 = 64 << 20;
/// Connection-level window, shared by the shards streaming at once.
pub const CONNECTION_WINDOW: u32 = 256 << 20;
/// Largest HTTP/2 frame (the protocol's maximum): fewer frames per batch.
pub const MAX_FRAME: u32 = (1 << 24) - 1;
