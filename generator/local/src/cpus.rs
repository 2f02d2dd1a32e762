//! CPU sets per host, so that runs of a homogeneous and a heterogeneous cluster on one machine
//! compare fairly: each simulated instance gets its own cores, and no host borrows another's.

#[cfg(target_os = "linux")]
use rustix::thread::CpuSet;

use crate::LocalError;
use crate::layout::Host;

/// How to give hosts their CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuPolicy {
    /// Every host may use every core (no affinity is set).
    Shared,
    /// Every host gets this many cores of its own.
    PerHost(usize),
    /// Hosts get the machine's cores in proportion to their instance types' vCPUs.
    FromCatalog,
}

/// The cores this process may run on, in ascending order.
#[cfg(target_os = "linux")]
pub fn available() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..CpuSet::MAX_CPU)
            .filter(|&cpu| set.is_set(cpu))
            .collect(),
        Err(_) => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

/// The cores this process may run on (no affinity control off Linux).
#[cfg(not(target_os = "linux"))]
pub fn available() -> Vec<usize> {
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}

/// The cores of each host (by index into `hosts`), or `None` for each when `policy` is
/// `Shared`. Sets never overlap.
pub fn allot(
    policy: CpuPolicy,
    hosts: &[Host],
    available: &[usize],
) -> Result<Vec<Option<Vec<usize>>>, LocalError> {
    if policy != CpuPolicy::Shared && cfg!(not(target_os = "linux")) {
        return Err(LocalError::Cpus {
            message: "CPU sets per host need Linux (sched_setaffinity)".to_owned(),
        });
    }
    let counts: Vec<usize> = match policy {
        CpuPolicy::Shared => return Ok(vec![None; hosts.len()]),
        CpuPolicy::PerHost(0) => {
            return Err(LocalError::Cpus {
                message: "`--cpus-per-host` must be at least 1".to_owned(),
            });
        }
        CpuPolicy::PerHost(n) => vec![n; hosts.len()],
        CpuPolicy::FromCatalog => scaled(hosts, available.len())?,
    };
    // `--cpus-per-host` is the user's number: a sum that overflows needs more cores than any
    // machine has, and must not wrap around to a small one.
    let needed = counts.iter().try_fold(0usize, |sum, &n| sum.checked_add(n));
    if needed.is_none_or(|needed| needed > available.len()) {
        let needed = needed.map_or_else(|| "more".to_owned(), |n| n.to_string());
        return Err(LocalError::Cpus {
            message: format!(
                "{} hosts need {needed} cores of their own; this machine lets hetgen use {}",
                hosts.len(),
                available.len()
            ),
        });
    }
    let mut next = available.iter().copied();
    Ok(counts
        .into_iter()
        .map(|n| Some(next.by_ref().take(n).collect()))
        .collect())
}

/// Each host's share of `cores`, proportional to its catalog vCPUs, at least one each, the
/// remainder going to the largest fractions (so the total is exactly `cores`).
fn scaled(hosts: &[Host], cores: usize) -> Result<Vec<usize>, LocalError> {
    let vcpus: Vec<u32> = hosts
        .iter()
        .map(|h| {
            h.vcpus.ok_or_else(|| LocalError::Cpus {
                message: format!(
                    "the catalog has no vCPU count for `{}` (group `{}`)",
                    h.instance_type, h.group
                ),
            })
        })
        .collect::<Result<_, _>>()?;
    if hosts.len() > cores {
        return Err(LocalError::Cpus {
            message: format!(
                "{} hosts need a core each; this machine lets hetgen use {cores}",
                hosts.len()
            ),
        });
    }
    let total: f64 = vcpus.iter().map(|&v| f64::from(v)).sum();
    // Everyone gets one; the rest is shared out by vCPUs.
    let spare = (cores - hosts.len()) as f64;
    let exact: Vec<f64> = vcpus
        .iter()
        .map(|&v| spare * f64::from(v) / total)
        .collect();
    let mut counts: Vec<usize> = exact.iter().map(|e| 1 + e.floor() as usize).collect();
    let mut order: Vec<usize> = (0..hosts.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    let mut left = cores - counts.iter().sum::<usize>();
    for i in order {
        if left == 0 {
            break;
        }
        counts[i] += 1;
        left -= 1;
    }
    Ok(counts)
}

/// Restricts the calling thread (a child between fork and exec) to `cpus`.
///
/// Runs in `pre_exec`, so it only makes a system call: no allocation, no locks.
#[cfg(target_os = "linux")]
pub fn pin(cpus: &CpuSet) -> std::io::Result<()> {
    Ok(rustix::thread::sched_setaffinity(None, cpus)?)
}

/// `cpus` as the kernel's bit set, built before fork so that `pin` need not allocate.
#[cfg(target_os = "linux")]
pub fn cpu_set(cpus: &[usize]) -> CpuSet {
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu);
    }
    set
}
