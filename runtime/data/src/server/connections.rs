//! Connections before any request is read: how many may be open, how long one may say
//! nothing, how long one may go without the job's token, and an accept loop that backs off
//! instead of spinning when the process is out of file descriptors.
//!
//! A connection is a *guest* until one of its requests carries the job's token ([`Peer::vouch`]).
//! A trainer's first request, its Handshake, follows the connection at once, so a guest has
//! [`GUEST_DEADLINE`] to make one, whatever else it sends (pings and partial frames do not
//! extend it); guests have a cap of their own, an eighth of the connection cap, where a new guest
//! takes the place of the oldest; and when the connections are at their cap a guest always
//! gives way first. A flood of connections that answer every ping but hold no token can then
//! neither stay nor keep the job's trainer out.
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Sleep;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::lock::lock;
use crate::throttle::LogThrottle;

/// Sets the most connections open at once.
pub const MAX_CONNECTIONS_VAR: &str = "HETGEN_DATA_MAX_CONNECTIONS";
/// Sets the seconds a connection may stay quiet before it is closed.
pub const IDLE_VAR: &str = "HETGEN_DATA_IDLE_S";

/// A connection quiet this long may be closed to make room: longer than the 1 s between a
/// trainer's heartbeats, with room for a slow network.
pub(crate) const EVICTABLE: Duration = Duration::from_secs(3);

/// A guest that has made no authenticated request within this is closed: a trainer makes its
/// Handshake as soon as it connects, so this is a slow network's margin many times over.
pub(crate) const GUEST_DEADLINE: Duration = Duration::from_secs(5);

/// Longest pause of the accept loop when the process is out of descriptors or memory.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The open connections.
pub(crate) struct Connections {
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    /// Times are kept as milliseconds since this instant, so a connection's is one atomic.
    epoch: Instant,
    max: usize,
    /// Most guests at once.
    max_guests: usize,
    idle: Duration,
    refused: LogThrottle,
    evicted: LogThrottle,
    guests: LogThrottle,
    starved: LogThrottle,
}

struct Conn {
    last_read_ms: AtomicU64,
    /// One of its requests carried the job's token: no longer a guest.
    vouched: AtomicBool,
    close: CancellationToken,
}

impl Conn {
    /// Still open (not told to close) and a guest.
    fn is_guest(&self) -> bool {
        !self.close.is_cancelled() && !self.vouched.load(Ordering::Relaxed)
    }
}

/// The connection a request came on, as tonic hands it to the service in the request's
/// extensions: the authentication check vouches for it, and a stream that stalls closes it.
#[derive(Clone)]
pub(crate) struct Peer {
    conn: Arc<Conn>,
}

impl Peer {
    /// The connection made a request with the job's token: it is no guest any more.
    pub(crate) fn vouch(&self) {
        self.conn.vouched.store(true, Ordering::Relaxed);
    }

    /// Close the connection, and with it every stream on it.
    pub(crate) fn close(&self) {
        self.conn.close.cancel();
    }
}

impl Connections {
    pub(crate) fn new(max: usize, idle: Duration) -> Arc<Self> {
        Arc::new(Connections {
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
            max: max.max(1),
            max_guests: (max / 8).max(1),
            idle,
            refused: LogThrottle::default(),
            evicted: LogThrottle::default(),
            guests: LogThrottle::default(),
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

    /// Close the oldest guest, if there is one; whether there was.
    fn evict_oldest_guest(&self) -> bool {
        let open = lock(&self.open);
        // Ids count up: the smallest is the oldest.
        match open
            .iter()
            .filter(|(_, c)| c.is_guest())
            .min_by_key(|(id, _)| **id)
            .map(|(_, c)| c)
        {
            Some(guest) => {
                guest.close.cancel();
                true
            }
            None => false,
        }
    }

    /// Make room for one connection: the oldest guest goes, else the quietest connection if
    /// it has been quiet for [`EVICTABLE`]; whether one was closed. One already told to close
    /// is leaving and makes no more room.
    fn evict_quietest(&self) -> bool {
        if self.evict_oldest_guest() {
            return true;
        }
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
        // The newcomer is a guest: at the guests' cap it takes the oldest one's place (a
        // trainer then has the time the whole cap of guests takes to arrive to vouch for
        // itself, where turning newcomers away would leave it to win a race with the flood).
        let guests = lock(&self.open).values().filter(|c| c.is_guest()).count();
        if guests >= self.max_guests
            && self.evict_oldest_guest()
            && let Some(suppressed) = self.guests.allow()
        {
            tracing::warn!(
                max_guests = self.max_guests,
                suppressed,
                "guest connections (no request with the job's token yet) at their cap; closed the oldest"
            );
        }
        // Connections already told to close are leaving: they do not count.
        let at_cap = lock(&self.open)
            .values()
            .filter(|c| !c.close.is_cancelled())
            .count()
            >= self.max;
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
        let now = self.now_ms();
        let conn = Arc::new(Conn {
            last_read_ms: AtomicU64::new(now),
            vouched: AtomicBool::new(false),
            close: CancellationToken::new(),
        });
        lock(&self.open).insert(id, conn.clone());
        Some(Tracked {
            io,
            closed: Box::pin(conn.close.clone().cancelled_owned()),
            idle_at: Box::pin(tokio::time::sleep(self.idle)),
            guest_until: Box::pin(tokio::time::sleep(GUEST_DEADLINE)),
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
            // Ends with the server, not at the next connection: a listener that shares its
            // socket with the next server (see `starting`) must not take one more from it.
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = tx.closed() => return,
            };
            match accepted {
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
    /// The guest deadline; past it, a connection still a guest ends.
    guest_until: Pin<Box<Sleep>>,
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
        if !this.conn.vouched.load(Ordering::Relaxed)
            && this.guest_until.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no request with the job's token within the guest deadline",
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
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Self::ConnectInfo {
        Peer {
            conn: self.conn.clone(),
        }
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
        quiet.conn.vouched.store(true, Ordering::Relaxed);
        quiet.conn.last_read_ms.store(0, Ordering::Relaxed);
        // At the cap: the quiet one is told to close and a trainer takes its place, and
        // vouches for itself with its first request.
        let trainer = connections.admit(socket().await).unwrap();
        trainer.conn.vouched.store(true, Ordering::Relaxed);
        assert!(quiet.conn.close.is_cancelled());
        // The quiet one has not left yet; it cannot make room again, and the trainer is not
        // quiet: a third connection is turned away, not let in over the cap.
        assert!(connections.admit(socket().await).is_none());
        drop(quiet);
    }

    #[tokio::test]
    async fn guests_give_way_first_and_to_each_other_oldest_first() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let socket = || async { TcpStream::connect(address).await.unwrap() };
        // A cap of 16 connections, 2 of them guests.
        let mut connections = Connections::new(16, Duration::from_secs(60));
        Arc::get_mut(&mut connections).unwrap().epoch = Instant::now() - Duration::from_secs(10);
        let mut trainers = Vec::new();
        for _ in 0..14 {
            let trainer = connections.admit(socket().await).unwrap();
            trainer.conn.vouched.store(true, Ordering::Relaxed);
            // Quiet for ten seconds: any of them could give way.
            trainer.conn.last_read_ms.store(0, Ordering::Relaxed);
            trainers.push(trainer);
        }
        let first = connections.admit(socket().await).unwrap();
        let second = connections.admit(socket().await).unwrap();
        // At the guests' cap, a third guest takes the oldest one's place.
        let third = connections.admit(socket().await).unwrap();
        assert!(first.conn.close.is_cancelled());
        assert!(!second.conn.close.is_cancelled());
        drop(first);
        // Vouched, the third is no guest. At the connection cap (14 + 2), the remaining guest
        // gives way before any quiet trainer.
        third.conn.vouched.store(true, Ordering::Relaxed);
        let _fourth = connections.admit(socket().await).unwrap();
        assert!(second.conn.close.is_cancelled());
        assert!(trainers.iter().all(|t| !t.conn.close.is_cancelled()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_guest_that_pings_is_closed_at_the_deadline_and_a_vouched_one_is_not() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let connections = Connections::new(16, Duration::from_secs(60));
        let mut peers = Vec::new();
        let mut tracked = Vec::new();
        for _ in 0..2 {
            let peer = TcpStream::connect(address).await.unwrap();
            let (socket, _) = listener.accept().await.unwrap();
            peers.push(peer);
            tracked.push(connections.admit(socket).unwrap());
        }
        tracked[1].conn.vouched.store(true, Ordering::Relaxed);
        let mut buffer = [0u8; 16];
        // Both peers say something every second, past the guest deadline.
        for _ in 0..(GUEST_DEADLINE.as_secs() + 1) {
            for peer in &mut peers {
                peer.write_all(b"ping").await.unwrap();
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            for t in &mut tracked[1..] {
                assert!(t.read(&mut buffer).await.is_ok());
            }
        }
        let guest = tracked[0].read(&mut buffer).await;
        assert_eq!(guest.unwrap_err().kind(), io::ErrorKind::TimedOut);
        peers[1].write_all(b"ping").await.unwrap();
        assert!(tracked[1].read(&mut buffer).await.is_ok());
    }
}
