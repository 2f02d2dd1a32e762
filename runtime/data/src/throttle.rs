//! Log lines a peer can cause at will (one per Handshake, per Shutdown, per failed shard) are
//! rate-limited: at most [`BURST`] of a kind per [`WINDOW`], and the next line let through says
//! how many were left out. A client calling in a loop then costs the log a few lines a second,
//! not one line per call.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines of one kind let through per window.
pub const BURST: u32 = 10;
/// The window.
pub const WINDOW: Duration = Duration::from_secs(1);

/// The budget of one kind of line.
#[derive(Debug, Default)]
pub struct LogThrottle(Mutex<State>);

#[derive(Debug, Default)]
struct State {
    window: Option<Instant>,
    lines: u32,
    suppressed: u64,
}

impl LogThrottle {
    /// `Some(n)` when this line may be logged, `n` being how many were left out since the last
    /// one that was; `None` when it is to be left out (and counted).
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    fn allow_at(&self, now: Instant) -> Option<u64> {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if s.window
            .is_none_or(|start| now.duration_since(start) >= WINDOW)
        {
            s.window = Some(now);
            s.lines = 0;
        }
        if s.lines >= BURST {
            s.suppressed += 1;
            return None;
        }
        s.lines += 1;
        Some(std::mem::take(&mut s.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_the_rest_is_counted_and_told_with_the_next_window() {
        let throttle = LogThrottle::default();
        let start = Instant::now();
        for _ in 0..BURST {
            assert_eq!(throttle.allow_at(start), Some(0));
        }
        for _ in 0..25 {
            assert_eq!(throttle.allow_at(start + Duration::from_millis(500)), None);
        }
        assert_eq!(throttle.allow_at(start + WINDOW), Some(25));
        assert_eq!(throttle.allow_at(start + WINDOW), Some(0));
    }
}
