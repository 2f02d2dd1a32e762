//! The heartbeats that tell the data servers a trainer is alive (their watchdogs count them)
//! and tell the scheduler which servers answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::connect::Server;
use crate::proto::HeartbeatRequest;

/// Heartbeat every server (source, server) each `every`, each server on a beat of its own: one
/// that does not answer (frozen, or its network gone) holds up its own beat for the timeout,
/// never another's. A server's answer is written, as ms since `started`, into `answered` at
/// its source. The beats end when this future is dropped (its task aborted).
pub(super) async fn heartbeats(
    servers: Vec<(usize, Server)>,
    trainer_id: String,
    every: Duration,
    answered: Arc<Vec<AtomicU64>>,
    started: Instant,
) {
    // A JoinSet aborts its tasks when dropped, so none outlives the scheduler's stream.
    let mut beats = tokio::task::JoinSet::new();
    for (source, server) in servers {
        let (trainer_id, answered) = (trainer_id.clone(), answered.clone());
        beats.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if heartbeat(&server, &trainer_id, every).await {
                    answered[source].store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
            }
        });
    }
    while beats.join_next().await.is_some() {}
}

/// One heartbeat to `server`, waiting at most `every` (and at least a second) for its answer;
/// whether it answered.
async fn heartbeat(server: &Server, trainer_id: &str, every: Duration) -> bool {
    let request = HeartbeatRequest {
        trainer_id: trainer_id.to_owned(),
    };
    let mut client = server.client.clone();
    match tokio::time::timeout(every.max(Duration::from_secs(1)), client.heartbeat(request)).await {
        Ok(Ok(response)) => {
            if let Some(s) = response.into_inner().stats {
                tracing::debug!(host = %server.host, samples_per_s = s.samples_per_s, queue_depth = s.queue_depth, busy_threads = s.busy_threads, "data server stats");
            }
            true
        }
        _ => {
            tracing::debug!(host = %server.host, "heartbeat not answered");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::net::SocketAddr;

    use hetgen_pipeline::StageRegistry;
    use tonic::transport::Endpoint;

    use super::*;
    use crate::auth::AttachToken;
    use crate::proto::data_service_client::DataServiceClient;
    use crate::server::{ServerConfig, serve};

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn server(host: &str, address: SocketAddr) -> Server {
        let channel = Endpoint::from_shared(format!("http://{address}"))
            .unwrap()
            .connect_lazy();
        Server {
            host: host.to_owned(),
            address,
            info: Default::default(),
            client: DataServiceClient::with_interceptor(channel, AttachToken::new(TOKEN).unwrap()),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_never_answers_delays_no_other_servers_heartbeats() {
        // Accepts connections (the kernel does) and never says a word, as a frozen process: every
        // heartbeat to it waits out its timeout, a second.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live = listener.local_addr().unwrap();
        let job = hetgen_fixtures::spec("data-test").job();
        let engine = hetgen_pipeline::Engine::new(
            &job,
            &StageRegistry::builtin(),
            &BTreeMap::new(),
            Some(1),
        );
        let engine = Arc::new(engine.unwrap());
        let config = ServerConfig::new("algo-2".into(), TOKEN.into(), &*engine);
        tokio::spawn(serve(engine, config, listener, std::future::pending()));

        let answered = Arc::new(vec![AtomicU64::new(0), AtomicU64::new(0)]);
        let started = Instant::now();
        let beats = tokio::spawn(heartbeats(
            vec![
                (0, server("algo-1", silent.local_addr().unwrap())),
                (1, server("algo-2", live)),
            ],
            "algo-3/rank-0".into(),
            Duration::from_millis(50),
            answered.clone(),
            started,
        ));
        // The live server's answers over 2.5 s: one every 50 ms or so on a beat of its own, but
        // no more than three if each of its heartbeats waited for the silent one's timeout.
        let mut answers = BTreeSet::new();
        while started.elapsed() < Duration::from_millis(2500) {
            answers.insert(answered[1].load(Ordering::Relaxed));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        beats.abort();
        answers.remove(&0);
        assert!(
            answers.len() >= 10,
            "the live server answered {} heartbeats in 2.5 s",
            answers.len()
        );
        assert_eq!(
            answered[0].load(Ordering::Relaxed),
            0,
            "the silent one never answers"
        );
    }
}
