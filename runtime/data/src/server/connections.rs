//! Connections before any request is read: how many may be open, how long one may say
//! nothing, and an accept loop that backs off instead of spinning when the process is out of
//! file descriptors.
//!
//! A connection is *quiet* while no byte arrives from its peer. A hetgen trainer is never
//! quiet for long: it heartbeats every second on the connection it streams on, and answers
//! the server's HTTP/2 keep-alive pings. So a connection quiet for the idle timeout is closed,
//! and when the connections are at their cap (or the process at its descriptor limit) the
//! quietest one makes room for a new one, if it has been quiet longer than a trainer's
//! heartbeat ([`EVICTABLE`]); otherwise the newcomer is turned away. Whoever floods the port
//! with connections that say nothing can neither keep them nor lock a trainer out.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Sleep;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::state::lock;
use crate::throttle::LogThrottle;

/// Sets the most connections open at once.
pub const MAX_CONNECTIONS_VAR: &str = "HETGEN_DATA_MAX_CONNECTIONS";
/// Sets the seconds a connection may stay quiet before it is closed.
pub const IDLE_VAR: &str = "HETGEN_DATA_IDLE_S";

/// A connection quiet this long may be closed to make room: longer than the 1 s between a
/// trainer's heartbeats, with room for a slow network.
pub(crate) const EVICTABLE: Duration = Duration::from_secs(3);

/// Longest pause of the accept loop when the process is out of descriptors or memory.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The open connections.
pub(crate) struct Connections {
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    /// Times are kept as milliseconds since this instant, so a connection's is one atomic.
    epoch: Instant,
    max: usize,
    idle: Duration,
    refused: LogThrottle,
    evicted: LogThrottle,
    starved: LogThrottle,
}

struct Conn {
    last_read_ms: AtomicU64,
    close: CancellationToken,
}

impl Connections {
    pub(crate) fn new(max: usize, idle: Duration) -> Arc<Self> {
        Arc::new(Connections {
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
            max: max.max(1),
            idle,
            refused: LogThrottle::default(),
            evicted: LogThrottle::default(),
            starved: LogThrottle::default(),
        })
    }

    /// Connections open now.
    pub(crate) fn count(&self) -> usize {
        lock(&self.open).len()
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Close the quietest connection, if it has been quiet for [`EVICTABLE`]; whether one was.
    /// One already told to close is leaving and makes no more room.
    fn evict_quietest(&self) -> bool {
        let open = lock(&self.open);
        let now = self.now_ms();
        let quietest = open
            .values()
            .filter(|c| !c.close.is_cancelled())
            .min_by_key(|c| c.last_read_ms.load(Ordering::Relaxed));
        match quietest {
            Some(conn)
                if now.saturating_sub(conn.last_read_ms.load(Ordering::Relaxed))
                    >= EVICTABLE.as_millis() as u64 =>
            {
                // Its reader sees the cancellation and the connection ends; its entry goes
                // when the connection is dropped.
                conn.close.cancel();
                true
            }
            _ => false,
        }
    }

    /// Track a new connection, making room for it if the cap is reached; `None` when there is
    /// no room (the socket is closed on return).
    fn admit(self: &Arc<Self>, io: TcpStream) -> Option<Tracked> {
        let at_cap = {
            let open = lock(&self.open);
            // Connections already told to close are leaving: they do not count.
            open.values().filter(|c| !c.close.is_cancelled()).count() >= self.max
        };
        if at_cap {
            if self.evict_quietest() {
                if let Some(suppressed) = self.evicted.allow() {
                    tracing::warn!(
                        max = self.max,
                        suppressed,
                        "connections at their cap; closed the quietest to admit a new one"
                    );
                }
            } else {
                if let Some(suppressed) = self.refused.allow() {
                    tracing::warn!(
                        max = self.max,
                        suppressed,
                        "connections at their cap and none quiet; turned a new one away"
                    );
                }
                return None;
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            last_read_ms: AtomicU64::new(self.now_ms()),
            close: CancellationToken::new(),
        });
        lock(&self.open).insert(id, conn.clone());
        Some(Tracked {
            io,
            closed: Box::pin(conn.close.clone().cancelled_owned()),
            idle_at: Box::pin(tokio::time::sleep(self.idle)),
            conn,
            id,
            connections: self.clone(),
        })
    }
}

/// Accept connections from `listener` for the server, under `connections`' limits.
pub(crate) fn incoming(
    listener: TcpListener,
    connections: Arc<Connections>,
) -> ReceiverStream<io::Result<Tracked>> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(5);
        loop {
            match listener.accept().await {
                Ok((socket, _)) => {
                    backoff = Duration::from_millis(5);
                    // No Nagle: a batch's last partial segment must not wait for the
                    // previous one's ACK.
                    socket.set_nodelay(true).ok();
                    if let Some(conn) = connections.admit(socket)
                        && tx.send(Ok(conn)).await.is_err()
                    {
                        return; // the server stopped
                    }
                }
                Err(e) if out_of_resources(&e) => {
                    // The failed accept leaves the connection in the backlog, so trying again
                    // at once fails again: free a descriptor if a quiet connection holds one,
                    // and wait a little longer each time until an accept succeeds.
                    let evicted = connections.evict_quietest();
                    if let Some(suppressed) = connections.starved.allow() {
                        tracing::warn!(error = %e, evicted, open = connections.count(), backoff_ms = backoff.as_millis() as u64, suppressed, "cannot accept a connection; backing off");
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                // A connection reset before it was accepted, and the like: only that one.
                Err(_) => {}
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}

/// Errors that say the process (or the system) cannot hold another connection now.
fn out_of_resources(e: &io::Error) -> bool {
    // EMFILE, ENFILE, ENOBUFS, ENOMEM on Linux; the std kinds cover what it maps.
    matches!(e.raw_os_error(), Some(23 | 24 | 105 | 12))
        || matches!(e.kind(), io::ErrorKind::OutOfMemory)
}

/// An accepted connection under the limits: its reads say it is alive, and it ends (reads
/// fail) when quiet for the idle timeout or when closed to make room.
pub(crate) struct Tracked {
    io: TcpStream,
    conn: Arc<Conn>,
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
    idle_at: Pin<Box<Sleep>>,
    id: u64,
    connections: Arc<Connections>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        lock(&self.connections.open).remove(&self.id);
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.closed.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed to make room for a new connection",
            )));
        }
        let idle = this.connections.idle;
        // The timer wakes this reader; a connection that read meanwhile gets a later one.
        while this.idle_at.as_mut().poll(cx).is_ready() {
            let quiet = Duration::from_millis(
                this.connections
                    .now_ms()
                    .saturating_sub(this.conn.last_read_ms.load(Ordering::Relaxed)),
            );
            if quiet >= idle {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection quiet for the idle timeout",
                )));
            }
            let deadline = tokio::time::Instant::now() + (idle - quiet);
            this.idle_at.as_mut().reset(deadline);
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.conn
                .last_read_ms
                .store(this.connections.now_ms(), Ordering::Relaxed);
        }
        read
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Tracked {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_already_told_to_close_makes_no_room_a_second_time() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let socket = || async { TcpStream::connect(address).await.unwrap() };
        let mut connections = Connections::new(1, Duration::from_secs(60));
        // Ten seconds of history, so a connection can have been quiet longer than EVICTABLE.
        Arc::get_mut(&mut connections).unwrap().epoch = Instant::now() - Duration::from_secs(10);
        let quiet = connections.admit(socket().await).unwrap();
        quiet.conn.last_read_ms.store(0, Ordering::Relaxed);
        // At the cap: the quiet one is told to close and a trainer takes its place.
        let _trainer = connections.admit(socket().await).unwrap();
        assert!(quiet.conn.close.is_cancelled());
        // The quiet one has not left yet; it cannot make room again, and the trainer is not
        // quiet: a third connection is turned away, not let in over the cap.
        assert!(connections.admit(socket().await).is_none());
        drop(quiet);
    }
}
