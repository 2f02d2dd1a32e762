//! Which host's script raised first, read from a job's log lines as they are followed.
//!
//! SageMaker's `FailureReason` is the failure file of one host, often the first to end, which
//! is not always the one at fault: when one rank raises, its peers fail a moment later with
//! "connection closed by peer", and one of them may end first. A Python traceback is the
//! script's own account, and the one that caused the others is written before its process ends,
//! so before theirs begin: the earliest in the hosts' CloudWatch times is the cause (as
//! `deploy --local` decides from its hosts' output).

use std::collections::BTreeMap;

use hetgen_local::traceback::{script_line, starts_traceback};

/// Tracebacks seen so far, per host.
#[derive(Debug, Default)]
pub struct FirstRaise {
    hosts: BTreeMap<String, Raised>,
}

/// One host's first traceback: when it began and, once seen, its exception line.
#[derive(Debug)]
struct Raised {
    at_ms: i64,
    exception: Option<String>,
}

impl FirstRaise {
    /// One line of `host`'s log, written at `time_ms`.
    pub fn line(&mut self, time_ms: i64, host: &str, message: &str) {
        let text = script_line(message);
        match self.hosts.get_mut(host) {
            None if starts_traceback(message) => {
                self.hosts.insert(
                    host.to_owned(),
                    Raised {
                        at_ms: time_ms,
                        exception: None,
                    },
                );
            }
            // The frames are indented; the exception line, which ends the traceback, is not.
            Some(raised)
                if raised.exception.is_none()
                    && !text.is_empty()
                    && !text.starts_with(char::is_whitespace) =>
            {
                raised.exception = Some(text.trim_end().to_owned());
            }
            _ => {}
        }
    }

    /// The host whose script raised first and its exception line, once it was seen.
    pub fn first(&self) -> Option<(&str, &str)> {
        self.hosts
            .iter()
            .filter_map(|(host, r)| Some((r.at_ms, host.as_str(), r.exception.as_deref()?)))
            .min()
            .map(|(_, host, exception)| (host, exception))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_traceback_wins_whoever_ends_first() {
        let mut seen = FirstRaise::default();
        seen.line(10, "algo-4", "[rank1]:Traceback (most recent call last):");
        seen.line(
            11,
            "algo-4",
            "[rank1]:  File \"train.py\", line 6, in <module>",
        );
        seen.line(12, "algo-1", "Traceback (most recent call last):");
        seen.line(13, "algo-1", "  File \"c10d.py\", line 5356, in barrier");
        seen.line(14, "algo-1", "RuntimeError: Connection closed by peer");
        assert_eq!(
            seen.first(),
            Some(("algo-1", "RuntimeError: Connection closed by peer"))
        );
        // algo-4's exception line comes later in the logs, but it raised first.
        seen.line(
            15,
            "algo-4",
            "[rank1]:RuntimeError: rank 1 gives up on purpose",
        );
        seen.line(16, "algo-4", "Traceback (most recent call last):");
        assert_eq!(
            seen.first(),
            Some(("algo-4", "RuntimeError: rank 1 gives up on purpose"))
        );
    }

    #[test]
    fn no_traceback_no_cause() {
        let mut seen = FirstRaise::default();
        seen.line(1, "algo-1", "RuntimeError: printed, not raised");
        assert_eq!(seen.first(), None);
    }
}
