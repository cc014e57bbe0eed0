//! The memory a connection holds in calls and unwritten
//! replies is bounded by `ServerConfig::max_bytes_per_connection`, not only
//! by the number of calls. A client sends many large ECHO calls and never
//! reads its replies; the service counts the bytes of calls whose replies
//! have not been written yet (ECHO replies share the call's bytes), and the
//! count must stay within the budget plus one record.
//!
//! Also: a connection whose reading is
//! paused because replies it does not take hold its byte budget or its call
//! slots is idle, and is closed after the idle timeout.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncrpc::Dispatcher;
use oncrpc_tcp::record::Record;
use oncrpc_tcp::{RecordService, ServerConfig, TcpChannel, TcpServer};
use rdmatest::{RdmatestClient, RdmatestServer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

const MIB: usize = 1 << 20;

/// One RDMATEST ECHO call record (a single last fragment) of `n` bytes.
fn echo_call(xid: u32, n: usize) -> Vec<u8> {
    let mut m = Vec::new();
    for w in [xid, 0, 2, rdmatest::PROGRAM, 1, 1, 0, 0, 0, 0, n as u32] {
        m.extend_from_slice(&w.to_be_bytes());
    }
    m.resize(m.len() + n.div_ceil(4) * 4, 0xab);
    let mut r = ((m.len() as u32) | 0x8000_0000).to_be_bytes().to_vec();
    r.extend_from_slice(&m);
    r
}

/// Bytes of calls handed to the service whose replies are not yet written
/// (or dropped), and the most there ever were.
#[derive(Default)]
struct Live {
    now: AtomicUsize,
    peak: AtomicUsize,
}

/// Gives a call's bytes back to [`Live`] when its reply is dropped, which
/// the server does once the reply has been written.
struct Guard {
    live: Arc<Live>,
    n: usize,
    tail: Bytes,
}

impl AsRef<[u8]> for Guard {
    fn as_ref(&self) -> &[u8] {
        &self.tail
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.live.now.fetch_sub(self.n, Ordering::SeqCst);
    }
}

/// The RDMATEST service, counting each call's bytes in [`Live`] until its
/// reply is dropped: the last byte of the reply becomes a piece that owns a
/// [`Guard`] (the reply's content is unchanged).
struct CountingService {
    inner: Dispatcher,
    live: Arc<Live>,
}

impl RecordService for CountingService {
    async fn handle(&self, record: Record, peer: SocketAddr) -> Option<Vec<Bytes>> {
        let n = record.len();
        let now = self.live.now.fetch_add(n, Ordering::SeqCst) + n;
        self.live.peak.fetch_max(now, Ordering::SeqCst);
        let mut guard = Guard {
            live: self.live.clone(),
            n,
            tail: Bytes::new(),
        };
        let mut reply = self.inner.handle(record, peer).await?;
        let i = reply.iter().rposition(|p| !p.is_empty())?;
        let last = &mut reply[i];
        guard.tail = last.split_off(last.len() - 1);
        reply.insert(i + 1, Bytes::from_owner(guard));
        Some(reply)
    }
}

async fn start(config: ServerConfig) -> (SocketAddr, Arc<Live>) {
    let live = Arc::new(Live::default());
    let service = CountingService {
        inner: Dispatcher::builder()
            .service(RdmatestServer::default())
            .build(),
        live: live.clone(),
    };
    let server = TcpServer::bind("127.0.0.1:0", Arc::new(service), config)
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.run());
    (addr, live)
}

/// A NULL call and a small ECHO on a new connection, within 2 s.
async fn served(addr: SocketAddr) -> bool {
    tokio::time::timeout(Duration::from_secs(2), async {
        let Ok(ch) = TcpChannel::connect(addr).await else {
            return false;
        };
        let client = RdmatestClient::new(ch);
        client.null().await.is_ok()
            && client
                .echo(Bytes::from_static(b"hello"))
                .await
                .is_ok_and(|b| &b[..] == b"hello")
    })
    .await
    .unwrap_or(false)
}

/// A connection that does not read what it is sent (small receive buffer),
/// writing `calls` ECHO calls of `size` bytes from a task (the writes stall
/// once the server stops reading).
async fn rude_client(
    addr: SocketAddr,
    calls: u32,
    size: usize,
) -> tokio::task::JoinHandle<Option<TcpStream>> {
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut s: TcpStream = sock.connect(addr).await.unwrap();
    tokio::spawn(async move {
        for i in 0..calls {
            if s.write_all(&echo_call(i, size)).await.is_err() {
                return None;
            }
        }
        Some(s)
    })
}

/// Waits until `live.now` has not changed for `quiet`, at most `max`.
async fn settle(live: &Live, quiet: Duration, max: Duration) {
    let started = Instant::now();
    let mut last = live.now.load(Ordering::SeqCst);
    let mut since = Instant::now();
    while started.elapsed() < max && since.elapsed() < quiet {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = live.now.load(Ordering::SeqCst);
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_replies_hold_at_most_the_byte_budget() {
    let budget = 8 * MIB;
    let (addr, live) = start(ServerConfig {
        max_bytes_per_connection: budget,
        idle_timeout: None,
        ..ServerConfig::default()
    })
    .await;
    assert!(served(addr).await, "served before");
    // 40 MiB of ECHO calls, far under max_calls_per_connection (128).
    let record = echo_call(0, MIB).len() - 4;
    let rude = rude_client(addr, 40, MIB).await;
    settle(&live, Duration::from_millis(1500), Duration::from_secs(20)).await;
    let peak = live.peak.load(Ordering::SeqCst);
    assert!(
        peak <= budget + record,
        "the connection held {peak} bytes of calls and replies (budget {budget})"
    );
    assert!(
        peak >= budget / 2,
        "the budget was not filled ({peak} bytes): the test proves nothing"
    );
    // Other clients are served meanwhile, and after the rude one goes.
    assert!(served(addr).await, "served while a connection is stalled");
    rude.abort();
    let _ = rude.await;
    let started = Instant::now();
    while live.now.load(Ordering::SeqCst) != 0 && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        live.now.load(Ordering::SeqCst),
        0,
        "the replies of a closed connection were not released"
    );
    assert!(served(addr).await, "served after");
}

/// A record larger than the whole budget (the record limit allows it) is
/// served, alone: it waits until the connection holds nothing else, and
/// nothing else is read while it is held. Neither refused nor deadlocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_larger_than_the_budget_is_served_alone() {
    let budget = MIB;
    let (addr, live) = start(ServerConfig {
        max_bytes_per_connection: budget,
        idle_timeout: None,
        ..ServerConfig::default()
    })
    .await;
    let record = echo_call(0, 3 * MIB).len() - 4;
    let rude = rude_client(addr, 4, 3 * MIB).await;
    settle(&live, Duration::from_millis(1500), Duration::from_secs(20)).await;
    let peak = live.peak.load(Ordering::SeqCst);
    assert!(peak >= record, "the large record was never served ({peak})");
    assert!(
        peak <= record,
        "{peak} bytes held: a record over the budget ({budget}) was not served alone"
    );
    rude.abort();
    // A client that reads its replies gets every large echo back.
    let ch = TcpChannel::connect(addr).await.unwrap();
    let client = RdmatestClient::new(ch);
    let data = Bytes::from(vec![0x5a; 3 * MIB]);
    let (a, b, c) = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(
            client.echo(data.clone()),
            client.echo(data.clone()),
            client.echo(data.clone())
        )
    })
    .await
    .expect("large echoes over the budget were not all answered");
    for r in [a, b, c] {
        assert_eq!(r.unwrap(), data);
    }
}

/// Whether another client is served within `limit` (tried every 100 ms).
async fn served_within(addr: SocketAddr, limit: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if served(addr).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// The only connection slot is taken by a client whose unread replies fill
/// the byte budget; waiting for room is idle, so the connection is closed
/// after the idle timeout (then the grace for its replies) and others are
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_the_byte_budget_is_idle() {
    let budget = 2 * MIB;
    let (addr, live) = start(ServerConfig {
        max_bytes_per_connection: budget,
        idle_timeout: Some(Duration::from_millis(300)),
        shutdown_grace: Duration::from_millis(300),
        max_connections: 1,
        ..ServerConfig::default()
    })
    .await;
    assert!(served(addr).await, "served before");
    let rude = rude_client(addr, 12, MIB).await;
    let record = echo_call(0, MIB).len() - 4;
    let ok = served_within(addr, Duration::from_secs(10)).await;
    let peak = live.peak.load(Ordering::SeqCst);
    assert!(
        peak <= budget + record,
        "the connection held {peak} bytes of calls and replies (budget {budget})"
    );
    assert!(
        ok,
        "a client not reading its replies kept the only slot for 10 s"
    );
    rude.abort();
}

/// The same with the call slots: `max_calls_per_connection` replies not
/// taken, no call running; waiting for a slot is idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_call_slot_is_idle() {
    let (addr, _live) = start(ServerConfig {
        max_calls_per_connection: 2,
        idle_timeout: Some(Duration::from_millis(300)),
        shutdown_grace: Duration::from_millis(300),
        max_connections: 1,
        ..ServerConfig::default()
    })
    .await;
    assert!(served(addr).await, "served before");
    let rude = rude_client(addr, 12, MIB).await;
    let ok = served_within(addr, Duration::from_secs(10)).await;
    assert!(
        ok,
        "a client not reading its replies kept the only slot for 10 s"
    );
    rude.abort();
}

/// One RDMATEST GET call record asking for `n` bytes.
fn get_call(xid: u32, n: u32) -> Vec<u8> {
    let mut m = Vec::new();
    for w in [
        xid,
        0,
        2,
        rdmatest::PROGRAM,
        1,
        rdmatest::proto::PROC_GET,
        0,
        0,
        0,
        0,
        n,
        7,
    ] {
        m.extend_from_slice(&w.to_be_bytes());
    }
    let mut r = ((m.len() as u32) | 0x8000_0000).to_be_bytes().to_vec();
    r.extend_from_slice(&m);
    r
}

/// A peer that reads one long reply slowly, but steadily, is not idle: the
/// reply is delivered whole although taking it lasts many idle timeouts
/// (and their grace), and the connection then serves the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_of_a_long_reply_keeps_its_connection() {
    use tokio::io::AsyncReadExt;
    // A small server send buffer (16 KiB asked, 32 KiB in effect on
    // Linux). The idle clock restarts at the writer's last progress, i.e.
    // when the socket last took reply bytes; what the kernel has queued by
    // then (the server's send buffer plus the client's receive window) the
    // slow reader still has to drain, and the server rightly closes the
    // connection if that lasts longer than the idle timeout (200 to 400 ms
    // after the last progress, depending on where the timer stands). With
    // the default send buffer (512 KiB asked, about 1 MiB in effect) that
    // was 1.2 MiB, about 300 ms at this reader's 4 MB/s: the connection
    // was sometimes closed before the next call on a loaded machine. Now it
    // is under 256 KiB, about 60 ms of reading. The reply is still written
    // in steps as the reader takes bytes, over many idle timeouts.
    let (addr, _live) = start(ServerConfig {
        idle_timeout: Some(Duration::from_millis(200)),
        shutdown_grace: Duration::from_millis(200),
        send_buffer: Some(16 * 1024),
        ..ServerConfig::default()
    })
    .await;
    // A receive buffer small enough that the server's writes follow the
    // reading, large enough that they do so in steps well under the idle
    // timeout (the socket takes bytes once a third of its buffer is free).
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(128 * 1024).unwrap();
    let mut s: TcpStream = sock.connect(addr).await.unwrap();
    let n = 12 * MIB as u32;
    s.write_all(&get_call(1, n)).await.unwrap();
    // 12 MiB at ~4 MB/s: about 3 s, fifteen idle timeouts.
    let started = Instant::now();
    let mut mark = [0u8; 4];
    s.read_exact(&mut mark).await.unwrap();
    let mark = u32::from_be_bytes(mark);
    assert_ne!(mark & 0x8000_0000, 0, "one fragment");
    let want = (mark & 0x7fff_ffff) as usize;
    assert!(want > n as usize);
    let mut got = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    while got < want {
        let room = buf.len().min(want - got);
        let k = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf[..room]))
            .await
            .expect("the reply stalled")
            .unwrap();
        assert!(k > 0, "connection closed after {got} of {want} bytes");
        got += k;
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    assert_eq!(got, want);
    assert!(
        started.elapsed() > Duration::from_millis(1000),
        "the reply took only {:?}: not a slow reader",
        started.elapsed()
    );
    // Still served on the same connection.
    s.write_all(&get_call(2, 8)).await.unwrap();
    let mut head = [0u8; 8];
    tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut head))
        .await
        .expect("no reply to the next call")
        .unwrap();
    assert_eq!(&head[4..8], &2u32.to_be_bytes(), "the next call's xid");
}
