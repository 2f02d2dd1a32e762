//! Peers that misbehave on purpose, for the process tests and the soak: connections that keep
//! busy without the job's token, and shard streams that never take a byte. Raw HTTP/2 (the h2
//! crate), as no gRPC client can be made to behave this way.

// Each user (a test binary, the soak) takes what it needs.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hetgen_data::proto::ShardRequest;
use tokio::task::JoinHandle;

/// A peer without the token that keeps its connection busy for as long as `flooding`: an
/// HTTP/2 client that pings every 300 ms (h2 answers the server's pings too), and connects
/// again a second after the server closes it. Returns how many connections the server closed.
pub async fn pinging_guest(address: SocketAddr, flooding: Arc<AtomicBool>) -> usize {
    let mut closed = 0;
    while flooding.load(Ordering::Relaxed) {
        if let Ok(socket) = tokio::net::TcpStream::connect(address).await
            && let Ok((_send, mut connection)) = h2::client::handshake(socket).await
        {
            let mut ping_pong = connection.ping_pong().expect("a fresh connection");
            let driver = tokio::spawn(connection);
            while flooding.load(Ordering::Relaxed) {
                if ping_pong.ping(h2::Ping::opaque()).await.is_err() {
                    closed += 1;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            driver.abort();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    closed
}

/// Shard streams of `trainer`'s ranks `ranks` that never take a byte: opened 8 to a raw HTTP/2
/// connection whose receive window is 0, so the server can send no batch. Each returned task
/// ends when the server closes its connection.
pub async fn stalled_streams(
    address: SocketAddr,
    token: &str,
    trainer: &str,
    ranks: std::ops::Range<u32>,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    let ranks: Vec<u32> = ranks.collect();
    let mut connections = Vec::new();
    for chunk in ranks.chunks(8) {
        let tcp = tokio::net::TcpStream::connect(address).await?;
        let (mut h2, connection) = h2::client::Builder::new()
            .initial_window_size(0)
            .handshake::<_, bytes::Bytes>(tcp)
            .await
            .map_err(std::io::Error::other)?;
        let driver = tokio::spawn(connection);
        let mut responses = Vec::new();
        for (shard, rank) in chunk.iter().enumerate() {
            let request = ShardRequest {
                epoch: 0,
                shard: shard as u32,
                sample_ids: (0..64).collect(),
                batch_size: 1,
                trainer_id: format!("{trainer}/rank-{rank}"),
                ..Default::default()
            };
            let message = prost::Message::encode_to_vec(&request);
            let mut frame = vec![0u8];
            frame.extend((message.len() as u32).to_be_bytes());
            frame.extend(message);
            h2 = h2.ready().await.map_err(std::io::Error::other)?;
            let head = http::Request::post(format!(
                "http://{address}/hetgen.data.v1.DataService/StreamShard"
            ))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("authorization", format!("Bearer {token}"))
            .body(())
            .expect("a valid request head");
            let (response, mut body) = h2
                .send_request(head, false)
                .map_err(std::io::Error::other)?;
            body.send_data(frame.into(), true)
                .map_err(std::io::Error::other)?;
            responses.push(response);
        }
        connections.push(tokio::spawn(async move {
            let _held = (h2, responses);
            let _ = driver.await;
        }));
    }
    Ok(connections)
}

/// Keep `ranks`' stalled streams open on `address` for as long as `flooding`: open them, wait
/// for the server to close their connections, open them again. Returns how many connections
/// the server closed.
pub async fn keep_streams_stalled(
    address: SocketAddr,
    token: String,
    trainer: String,
    ranks: std::ops::Range<u32>,
    flooding: Arc<AtomicBool>,
) -> usize {
    let mut closed = 0;
    while flooding.load(Ordering::Relaxed) {
        match stalled_streams(address, &token, &trainer, ranks.clone()).await {
            Ok(mut connections) => {
                while flooding.load(Ordering::Relaxed) && !connections.is_empty() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let before = connections.len();
                    connections.retain(|c| !c.is_finished());
                    closed += before - connections.len();
                }
                connections.iter().for_each(|c| c.abort());
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    closed
}
