//! `soak stragglers`: the cost of one frozen data server to the trainers, with the soak's own
//! processes (BENCHMARKS.md, "Stragglers").

use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::{Cluster, Totals, check_round, flag, reported};

/// `soak stragglers`: what one frozen data server costs the trainers. Rounds alternate a run
/// as is and a run with one of the 3 servers frozen (SIGSTOP) for `--freeze-s` seconds from
/// `--at-s` on, then resumed; 2 trainer ranks each take `--step-ms` per batch. Each run is
/// checked for exactly-once; the report gives both times per round and the time lost as a share
/// of the freeze.
pub(crate) fn stragglers(args: &[String]) -> ExitCode {
    let rounds: u32 = flag(args, "--rounds", 3);
    let freeze = Duration::from_secs_f64(flag(args, "--freeze-s", 10.0));
    let at = Duration::from_secs_f64(flag(args, "--at-s", 2.0));
    let epochs: u32 = flag(args, "--epochs", 8);
    let step_ms: u64 = flag(args, "--step-ms", 20);
    let (servers, trainers) = (3, 2);
    let cluster = Cluster::set_up(servers, 33_000);
    let mut totals = Totals::default();
    println!(
        "| round | as is, s | one server frozen {:.0} s, s | lost, s | lost, % of the freeze | backups (as is / frozen) |",
        freeze.as_secs_f64()
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for round in 1..=rounds {
        let mut times = [Duration::ZERO; 2];
        let mut backups = [0u64; 2];
        for (i, frozen) in [false, true].into_iter().enumerate() {
            let id = round * 2 + i as u32;
            let mut procs = cluster.start_servers();
            let mut ranks = cluster.start_trainers(id, trainers, epochs, step_ms);
            let started = Instant::now();
            if frozen {
                std::thread::sleep(at);
                procs[1].signal(libc::SIGSTOP);
                std::thread::sleep(freeze);
                procs[1].signal(libc::SIGCONT);
            }
            for r in ranks.iter_mut() {
                let status = r.child.wait().expect("wait on a trainer");
                let mut out = String::new();
                if let Some(mut stdout) = r.child.stdout.take() {
                    let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
                }
                if !status.success() {
                    totals.failed_rounds += 1;
                }
                backups[i] += reported(&out, "backup_shards").unwrap_or(0);
            }
            times[i] = started.elapsed();
            for p in procs.iter_mut() {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
            check_round(cluster.dir.path(), id, trainers, epochs, &mut totals);
            if frozen && times[0] < at + freeze {
                eprintln!(
                    "stragglers: a run as is ({:.1} s) ends before the freeze does: use more --epochs",
                    times[0].as_secs_f64()
                );
            }
        }
        let lost = times[1].as_secs_f64() - times[0].as_secs_f64();
        println!(
            "| {round} | {:.2} | {:.2} | {lost:.2} | {:.0} % | {} / {} |",
            times[0].as_secs_f64(),
            times[1].as_secs_f64(),
            100.0 * lost / freeze.as_secs_f64(),
            backups[0],
            backups[1]
        );
    }
    totals.checked()
}
