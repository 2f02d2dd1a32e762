//! The sources the scheduler deals shards to. A source is a data server or, in a hybrid job,
//! the pipeline on the trainer's own host ([`Source::Local`]): the same engine on a blocking
//! thread, with credits like a server's. It takes shards from the same queue by the same rule,
//! so each side gets work in proportion to its speed, and dedup, order and resume are one code
//! path. Sources are numbered in the order the client lists them; that number is a source's
//! index everywhere in the client.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hetgen_pipeline::Batches;

use super::connect::Server;

/// The name the trainer's summary counts the local pipeline's batches under (hybrid input).
pub const LOCAL_SOURCE: &str = "local";

/// Where a shard can be made.
#[derive(Clone)]
pub(super) enum Source {
    /// A data server (boxed: a handful per client, cloned once per shard).
    Remote(Box<Server>),
    /// The pipeline on this host (hybrid input).
    Local(Arc<dyn Batches>),
}

/// A source as the scheduler keeps it.
pub(super) struct SourceState {
    pub(super) source: Source,
    pub(super) alive: bool,
    pub(super) inflight: u32,
    /// Since when a shard of it was overdue: it gets no new shards until it answers a
    /// heartbeat or delivers a batch after that (the hedging rule).
    pub(super) behind: Option<Instant>,
    /// Until when it gets no new shards, having refused one for now ([`SourceState::rest`]),
    /// and how many refusals in a row led there.
    pub(super) resting: Option<(Instant, u32)>,
}

/// The first rest of a source that refused a stream for now; each refusal in a row doubles
/// it, up to [`MAX_REST`].
const FIRST_REST: Duration = Duration::from_millis(250);
/// The longest rest.
const MAX_REST: Duration = Duration::from_secs(8);
/// Refusals in a row (about five minutes at [`MAX_REST`]) after which a source that keeps
/// refusing counts as lost: its limits will not let this trainer in.
const MAX_REFUSALS: u32 = 40;

impl SourceState {
    pub(super) fn new(source: Source) -> Self {
        SourceState {
            source,
            alive: true,
            inflight: 0,
            behind: None,
            resting: None,
        }
    }

    /// It refused a stream for now at `now`: it rests, longer after each refusal in a row;
    /// `false` once it has refused too often to count on.
    pub(super) fn rest(&mut self, now: Instant) -> bool {
        let refusals = self.resting.map_or(0, |(_, n)| n) + 1;
        if refusals > MAX_REFUSALS {
            return false;
        }
        let rest = FIRST_REST
            .saturating_mul(1 << (refusals - 1).min(10))
            .min(MAX_REST);
        self.resting = Some((now + rest, refusals));
        true
    }

    /// Whether it may be given a shard at `now`: not resting after a refusal.
    pub(super) fn rested(&self, now: Instant) -> bool {
        self.resting.is_none_or(|(until, _)| now >= until)
    }

    pub(super) fn name(&self) -> &str {
        match &self.source {
            Source::Remote(server) => &server.host,
            Source::Local(_) => LOCAL_SOURCE,
        }
    }

    /// Shards it may have in flight: what a server says in its handshake; for the local
    /// engine what a server of its size would say.
    pub(super) fn credits(&self) -> u32 {
        match &self.source {
            Source::Remote(server) => server.info.max_inflight_shards.max(1),
            Source::Local(engine) => crate::max_inflight_shards(engine.as_ref()),
        }
    }
}
