//! CPU sets per host: how cores are shared out, and that a host process really runs on its set.

use hetgen_local::cpus::{allot, available};
use hetgen_local::{Cluster, CpuPolicy};

use super::*;

fn hosts() -> Vec<Host> {
    let job = job(TINY);
    let mut rng = fastrand::Rng::with_seed(1);
    Cluster::assign(&job, &mut rng, std::net::Ipv4Addr::new(127, 9, 9, 0))
        .unwrap()
        .hosts
}

#[test]
fn shared_sets_no_affinity() {
    assert_eq!(
        allot(CpuPolicy::Shared, &hosts(), &[0, 1]).unwrap(),
        vec![None, None, None]
    );
}

#[test]
fn per_host_sets_are_disjoint_and_in_order() {
    let sets = allot(CpuPolicy::PerHost(2), &hosts(), &[0, 1, 2, 3, 4, 5, 6]).unwrap();
    assert_eq!(
        sets,
        vec![Some(vec![0, 1]), Some(vec![2, 3]), Some(vec![4, 5])]
    );
}

#[test]
fn too_few_cores_is_a_clear_error() {
    let err = allot(CpuPolicy::PerHost(2), &hosts(), &[0, 1, 2])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("3 hosts need 6 cores") && err.contains("use 3"),
        "{err}"
    );
    let err = allot(CpuPolicy::PerHost(0), &hosts(), &[0, 1, 2])
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least 1"), "{err}");
    let err = allot(CpuPolicy::FromCatalog, &hosts(), &[0, 1])
        .unwrap_err()
        .to_string();
    assert!(err.contains("need a core each"), "{err}");
}

#[test]
fn cores_per_host_too_large_to_add_up_are_refused_not_wrapped() {
    // 3 × 6148914691236517206 wraps to 2 in 64 bits; usize::MAX overflows on the second host.
    for n in [6_148_914_691_236_517_206, usize::MAX] {
        let err = allot(CpuPolicy::PerHost(n), &hosts(), &[0, 1, 2])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("3 hosts need more cores") && err.contains("use 3"),
            "{n}: {err}"
        );
    }
}

#[test]
fn catalog_shares_follow_the_instance_types_vcpus() {
    // Three 4-vCPU instance types over 7 cores: 1 each, then 4 spare shared equally with the
    // remainder to the first by fraction; every core used once.
    let hosts = hosts();
    let cores: Vec<usize> = (10..17).collect();
    let sets: Vec<Vec<usize>> = allot(CpuPolicy::FromCatalog, &hosts, &cores)
        .unwrap()
        .into_iter()
        .map(Option::unwrap)
        .collect();
    let mut all: Vec<usize> = sets.iter().flatten().copied().collect();
    all.sort();
    assert_eq!(all, cores);
    let sizes: Vec<usize> = sets.iter().map(Vec::len).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 7);
    assert!(sizes.iter().all(|n| (2..=3).contains(n)), "{sizes:?}");
}

#[test]
fn a_host_runs_on_its_cpu_set() {
    let (_dir, mut options) = launcher_options("grep Cpus_allowed_list /proc/self/status");
    options.cpus = CpuPolicy::PerHost(1);
    let local = prepare(&homogeneous(), options);
    let first = available()[0];
    assert_eq!(local.commands[0].cpus, Some(vec![first]));
    let seen = run_to_completion(&local);
    let line = seen
        .output
        .iter()
        .map(|(_, _, l)| l)
        .find(|l| l.starts_with("Cpus_allowed_list"))
        .unwrap();
    assert_eq!(
        line.split_whitespace().last().unwrap(),
        first.to_string(),
        "{line}"
    );
}
