//! torchrun's workers on this host: the processes of the user's script, each of which torchrun
//! starts in a session (and so a process group) of its own and signals as a group
//! (`torch/distributed/elastic/multiprocessing/subprocess_handler/subprocess_handler.py`,
//! torch 2.13: `Popen(..., start_new_session=True)`, `os.killpg(pid, sig)`).

use hetgen_env::process::Signal;

/// One of torchrun's workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Worker {
    /// Its process id as this process sees it (and the script, `os.getpid()`).
    pub pid: u32,
    /// Its folder in `/proc`, which differs from `pid` where this host runs in a PID namespace
    /// of its own that `/proc` is not mounted for (`deploy --local`'s hosts on AWS's image).
    proc: u32,
    /// Its global rank (`RANK` in its environment), when that could be read.
    pub rank: Option<u32>,
}

impl Worker {
    /// A worker seen as `pid` with `rank`, for tests of what is said about it.
    #[cfg(test)]
    pub fn seen(pid: u32, rank: Option<u32>) -> Worker {
        Worker {
            pid,
            proc: pid,
            rank,
        }
    }

    /// Sends `signal` to the worker's process group, as torchrun itself does. One that is gone
    /// already is not an error.
    pub fn signal(&self, signal: Signal) {
        let _ = hetgen_env::process::signal_group(self.pid, signal);
    }

    /// Whether it still runs (a zombie does not: it only awaits torchrun's reaping).
    pub fn alive(&self) -> bool {
        Status::of(self.proc).is_some_and(|s| s.pid == self.pid && s.running)
    }

    /// `rank 1 (pid 4242)`.
    pub fn describe(&self) -> String {
        match self.rank {
            Some(rank) => format!("rank {rank} (pid {})", self.pid),
            None => format!("pid {}", self.pid),
        }
    }
}

/// The live workers of the torchrun whose process id is `torchrun` (this process's child),
/// lowest rank first.
pub(super) fn workers(torchrun: u32) -> Vec<Worker> {
    // This process as `/proc` numbers it.
    let Some(me) = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str()?.parse::<u32>().ok())
    else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let all: Vec<(u32, Status)> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|proc| Some((proc, Status::of(proc)?)))
        .collect();
    let Some(&(torchrun, _)) = all
        .iter()
        .find(|(_, s)| s.parent == me && s.pid == torchrun)
    else {
        return Vec::new();
    };
    let mut found: Vec<Worker> = all
        .iter()
        .filter(|(_, s)| s.parent == torchrun && s.running)
        .map(|&(proc, s)| Worker {
            pid: s.pid,
            proc,
            rank: rank(proc),
        })
        .collect();
    found.sort_by_key(|w| (w.rank, w.pid));
    found
}

/// What `/proc/<n>/status` says of a process.
#[derive(Debug, Clone, Copy)]
struct Status {
    /// Its parent, as `/proc` numbers it.
    parent: u32,
    /// Its id in its own (innermost) PID namespace: `NSpid`'s last number, else `/proc`'s.
    pid: u32,
    /// Not a zombie (which runs nothing and only awaits its parent's reaping).
    running: bool,
}

impl Status {
    fn of(proc: u32) -> Option<Status> {
        let text = std::fs::read_to_string(format!("/proc/{proc}/status")).ok()?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let state = field("State")?;
        Some(Status {
            parent: field("PPid")?.parse().ok()?,
            pid: field("NSpid")
                .and_then(|ids| ids.split_whitespace().last()?.parse().ok())
                .unwrap_or(proc),
            running: !(state.starts_with('Z') || state.starts_with('X')),
        })
    }
}

/// `RANK` from the process's environment, which torchrun set when it started it.
fn rank(proc: u32) -> Option<u32> {
    let environ = std::fs::read(format!("/proc/{proc}/environ")).ok()?;
    environ
        .split(|&b| b == 0)
        .find_map(|var| var.strip_prefix(b"RANK="))
        .and_then(|value| std::str::from_utf8(value).ok()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn the_children_of_this_process_s_child_are_its_workers_with_their_rank() {
        // `sh` stands for torchrun, and the `sleep` it starts in a session of its own, with
        // RANK=3, for its worker.
        let mut torchrun = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 30 & wait"])
            .env("RANK", "3")
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        let worker = loop {
            if let [worker] = workers(torchrun.id())[..] {
                break worker;
            }
            assert!(Instant::now() < until, "torchrun's worker never showed");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(worker.rank, Some(3));
        assert!(worker.alive());
        assert_eq!(worker.describe(), format!("rank 3 (pid {})", worker.pid));
        // Signalled as torchrun signals it, its group: torchrun then ends, and so does it.
        worker.signal(Signal::KILL);
        torchrun.wait().unwrap();
        assert!(!worker.alive());
        assert_eq!(workers(torchrun.id()), []);
    }
}
