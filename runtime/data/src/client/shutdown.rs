//! Telling the data servers that the job, or one trainer host's part of it, is over.

use std::time::Duration;

use hetgen_env::Env;
use hetgen_pipeline::BoxError;
use hetgen_spec::model::Job;

use super::connect::{ServiceClient, reach_lazily};
use super::error::ClientError;
use crate::job::{data_hosts, data_port};
use crate::proto::ShutdownRequest;

/// Send `request` to every server at once, each given `patience` to answer; the hosts that did
/// not take it, with why.
pub(super) async fn shutdown_each(
    servers: Vec<(String, ServiceClient)>,
    request: ShutdownRequest,
    patience: Duration,
) -> Vec<(String, String)> {
    let calls = servers.into_iter().map(|(host, mut client)| {
        let request = request.clone();
        async move {
            match tokio::time::timeout(patience, client.shutdown(request)).await {
                Ok(Ok(_)) => None,
                Ok(Err(status)) => Some((host, status.message().to_owned())),
                Err(_) => Some((host, format!("no answer within {patience:?}"))),
            }
        }
    });
    futures_join(calls).await.into_iter().flatten().collect()
}

/// Tell the data servers on `hosts` that trainer host `host` finished (`failed`: its training
/// failed), as the holder of `token`, without a handshake first: each gets the Shutdown at
/// once, and this returns when all have answered or after `patience`, with the hosts that could
/// not be told and why.
///
/// A server that accepts the connection but does not answer (its process frozen) holds the
/// caller up for `patience` at most, not until it answers a handshake. Its Shutdown is not
/// cancelled: the calls run on a thread of their own until they are answered or this process
/// ends, so the request waits in the server's socket and the server acts on it once it runs
/// again, instead of serving nobody until its watchdog. (Cancelling would reset the stream,
/// and the server would drop the request unread.)
pub fn tell_finished(
    hosts: &[(String, u16)],
    token: &str,
    host: &str,
    failed: bool,
    reason: &str,
    patience: Duration,
) -> Result<Vec<(String, String)>, ClientError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ClientError::Runtime)?;
    let (servers, mut untold) = runtime.block_on(reach_lazily(hosts, token))?;
    let request = ShutdownRequest {
        reason: reason.to_owned(),
        trainer_host: host.to_owned(),
        failed,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let mut waiting: Vec<String> = servers.iter().map(|(h, _)| h.clone()).collect();
    std::thread::Builder::new()
        .name("hetgen-finished".to_owned())
        .spawn(move || {
            runtime.block_on(async move {
                let calls = servers.into_iter().map(|(host, mut client)| {
                    let (request, tx) = (request.clone(), tx.clone());
                    async move {
                        let answer = client.shutdown(request).await;
                        let _ =
                            tx.send((host, answer.map(|_| ()).map_err(|s| s.message().to_owned())));
                    }
                });
                futures_join(calls).await;
            })
        })
        .map_err(ClientError::Runtime)?;
    let deadline = std::time::Instant::now() + patience;
    while !waiting.is_empty() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok((host, answer)) = rx.recv_timeout(left) else {
            break;
        };
        waiting.retain(|h| *h != host);
        if let Err(why) = answer {
            untold.push((host, why));
        }
    }
    untold.extend(waiting.into_iter().map(|host| {
        (
            host,
            format!("no answer within {patience:?}; the message stays on its way while this process runs"),
        )
    }));
    Ok(untold)
}

/// Await futures concurrently (a tiny `join_all`, to avoid a dependency for one call).
async fn futures_join<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        // A task only fails by panicking; its host then counts as not told.
        if let Ok(output) = handle.await {
            out.push(output);
        }
    }
    out
}

/// Tell every data host of `job` that this trainer host finished (`failed`: its training
/// failed), giving each `patience` to answer ([`tell_finished`]: no handshake first, so
/// a data host that is frozen holds this host up for `patience` at most). Returns the hosts
/// that could not be told, with why.
pub fn tell_job_finished(
    job: &Job,
    env: &Env,
    failed: bool,
    reason: &str,
    patience: std::time::Duration,
) -> Result<Vec<(String, String)>, BoxError> {
    let port = data_port()?;
    let token = crate::auth::token_from_env()?;
    let targets: Vec<(String, u16)> = data_hosts(job, env)
        .into_iter()
        .map(|host| (host, port))
        .collect();
    Ok(tell_finished(
        &targets,
        &token,
        env.host(),
        failed,
        reason,
        patience,
    )?)
}
