//! `soak misbehaving`: what a misbehaving peer beside the job costs its trainers, with the
//! soak's own processes (BENCHMARKS.md, "A misbehaving peer").

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::peers::{keep_streams_stalled, pinging_guest};
use super::{Cluster, TOKEN, Totals, check_round, flag};

/// `soak misbehaving`: rounds alternate a run as is and a run with a misbehaving peer beside
/// the job: against each of the 3 servers, `--guests` connections that ping without the token
/// (each connecting again when closed) and `--stalled` shard streams, with the token and ids of
/// the job's trainer host, that never take a byte (opened again when cancelled). 2 trainer
/// ranks each take `--step-ms` per batch. Each run is checked for exactly-once; the report
/// gives both times per round and the trainers' throughput with the peer as a share of it
/// without.
pub(crate) fn misbehaving(args: &[String]) -> ExitCode {
    let rounds: u32 = flag(args, "--rounds", 3);
    let epochs: u32 = flag(args, "--epochs", 8);
    let step_ms: u64 = flag(args, "--step-ms", 20);
    let guests: usize = flag(args, "--guests", 64);
    let stalled: u32 = flag(args, "--stalled", 64);
    let (servers, trainers) = (3, 2);
    let cluster = Cluster::set_up(servers, 35_000);
    let trainer_host = format!("algo-{}", servers + 1);
    let runtime = tokio::runtime::Runtime::new().expect("a runtime for the peer");
    let mut totals = Totals::default();
    println!(
        "| round | as is, s | beside the peer, s | throughput beside the peer | connections the servers closed |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for round in 1..=rounds {
        let mut times = [Duration::ZERO; 2];
        let mut closed = 0;
        for (i, peer) in [false, true].into_iter().enumerate() {
            let id = round * 2 + i as u32;
            let mut procs = cluster.start_servers();
            let flooding = Arc::new(AtomicBool::new(true));
            let mut tasks = Vec::new();
            if peer {
                for address in cluster.addresses() {
                    for _ in 0..guests {
                        tasks.push(runtime.spawn(pinging_guest(address, flooding.clone())));
                    }
                    tasks.push(runtime.spawn(keep_streams_stalled(
                        address,
                        TOKEN.to_owned(),
                        trainer_host.clone(),
                        100..100 + stalled,
                        flooding.clone(),
                    )));
                }
                // The peer is in place before the trainers come.
                std::thread::sleep(Duration::from_secs(2));
            }
            let mut ranks = cluster.start_trainers(id, trainers, epochs, step_ms);
            let started = Instant::now();
            for r in ranks.iter_mut() {
                if !r.child.wait().expect("wait on a trainer").success() {
                    totals.failed_rounds += 1;
                }
            }
            times[i] = started.elapsed();
            flooding.store(false, Ordering::Relaxed);
            for task in tasks {
                closed += runtime.block_on(task).unwrap_or(0);
            }
            for p in procs.iter_mut() {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
            check_round(cluster.dir.path(), id, trainers, epochs, &mut totals);
        }
        println!(
            "| {round} | {:.2} | {:.2} | {:.0} % | {closed} |",
            times[0].as_secs_f64(),
            times[1].as_secs_f64(),
            100.0 * times[0].as_secs_f64() / times[1].as_secs_f64(),
        );
    }
    totals.checked()
}
