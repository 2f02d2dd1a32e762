//! What a dataset's worker processes use, read from `/proc`: the CPU time they have run, and
//! their memory. `hetgen profile` measures a dataset with it: CPU-seconds per sample (which do
//! not depend on how many cores ran it) and each worker's memory (what a data host of a given
//! size can hold, one worker per vCPU).

use serde::{Deserialize, Serialize};

/// One worker process's memory.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Resident set: every page it maps that is in memory, shared ones too.
    pub rss_bytes: u64,
    /// Proportional set: shared pages divided among the processes that share them (the
    /// interpreter's and torch's libraries), so that the workers' sum is what they take
    /// together.
    pub pss_bytes: u64,
}

/// The workers alive now, together.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// User and system CPU seconds the live workers have run since they started.
    pub cpu_seconds: f64,
    /// Per live worker.
    pub memory: Vec<Memory>,
}

/// [`Usage`] of the processes `pids`; a process that is gone (or unreadable) is left out.
pub fn of(pids: &[u32]) -> Usage {
    let mut usage = Usage::default();
    for &pid in pids {
        let Some(cpu) = cpu_seconds(pid) else {
            continue;
        };
        usage.cpu_seconds += cpu;
        if let Some(memory) = memory(pid) {
            usage.memory.push(memory);
        }
    }
    usage
}

/// User + system time of `pid` (fields 14 and 15 of `/proc/<pid>/stat`, in clock ticks).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so utime (14) and stime (15) are at 11 and 12.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| ticks as f64 / per_second as f64)
}

/// `Rss` and `Pss` of `/proc/<pid>/smaps_rollup` (kB).
fn memory(pid: u32) -> Option<Memory> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    };
    Some(Memory {
        rss_bytes: field("Rss:")?,
        pss_bytes: field("Pss:")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_run_and_holds_memory() {
        // Burn a little CPU so the clock has ticked.
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let usage = of(&[std::process::id()]);
        assert!(usage.cpu_seconds > 0.0, "{usage:?}");
        assert_eq!(usage.memory.len(), 1);
        assert!(usage.memory[0].rss_bytes >= usage.memory[0].pss_bytes);
        assert!(usage.memory[0].pss_bytes > 0);
    }

    #[test]
    fn a_process_that_is_gone_is_left_out() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(of(&[pid]), Usage::default());
    }
}
