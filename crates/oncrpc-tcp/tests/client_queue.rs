//! A server that stops reading cannot make the client's memory
//! grow without bound, and the calls whose callers gave up are not sent
//! when it reads again.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use oncrpc::{Channel, Payload, Request, RpcError};
use oncrpc_tcp::io::RecordReader;
use oncrpc_tcp::record::RecordLimits;
use oncrpc_tcp::{ClientConfig, TcpChannel};

const PROG: u32 = 0x2000_7777;

/// Argument buffers of `queued_call_records_are_bounded_by_bytes` still
/// alive anywhere (the test's own are dropped once their call returns, so
/// what is left is held by the client).
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The same for the other test (the tests may run at once).
static OTHER: AtomicUsize = AtomicUsize::new(0);

struct Tracked(Vec<u8>, &'static AtomicUsize);

impl AsRef<[u8]> for Tracked {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.1.fetch_sub(1, SeqCst);
    }
}

fn argument(fill: u8, live: &'static AtomicUsize) -> Payload {
    live.fetch_add(1, SeqCst);
    let mut args = Payload::builder();
    args.ddp_opaque(Bytes::from_owner(Tracked(vec![fill; 1 << 20], live)));
    args.finish()
}

/// A server that reads nothing until told to, then counts the call records
/// to the end of the stream.
async fn stalled_server() -> (
    std::net::SocketAddr,
    Arc<tokio::sync::Notify>,
    tokio::task::JoinHandle<usize>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let start_reading = Arc::new(tokio::sync::Notify::new());
    let go = start_reading.clone();
    let server = tokio::spawn(async move {
        let (sock, _) = listener.accept().await.unwrap();
        go.notified().await;
        let mut reader = RecordReader::new(sock, RecordLimits::default());
        let mut calls = 0;
        while let Ok(Some(_)) = reader.next_record().await {
            calls += 1;
        }
        calls
    });
    (addr, start_reading, server)
}

/// 64 calls of 1 MiB from 8 tasks, each given up after 20 ms.
async fn abandoned_calls(ch: &Arc<TcpChannel>, live: &'static AtomicUsize) {
    let mut tasks = Vec::new();
    for t in 0..8u8 {
        let ch = ch.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..8 {
                let r = ch
                    .call(
                        Request::new(PROG, 1, 1, argument(t, live))
                            .with_timeout(Duration::from_millis(20)),
                    )
                    .await;
                assert!(matches!(r, Err(RpcError::Timeout)), "{r:?}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_call_records_are_bounded_by_bytes() {
    let (addr, start_reading, server) = stalled_server().await;
    let max = 4 << 20;
    let ch = Arc::new(
        TcpChannel::connect_with(
            addr,
            ClientConfig {
                max_queued_bytes: max,
                ..ClientConfig::default()
            },
        )
        .await
        .unwrap(),
    );
    abandoned_calls(&ch, &LIVE).await;
    assert!(
        ch.queued_bytes() <= max,
        "{} bytes queued",
        ch.queued_bytes()
    );
    // Held by the client: at most the queue's 4 MiB, plus the records being
    // written into the socket (the writer's batch).
    let live = LIVE.load(SeqCst);
    assert!(live <= 9, "{live} argument buffers of 1 MiB still held");
    assert!(!ch.is_closed());
    start_reading.notify_one();
    drop(ch);
    server.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_given_up_before_they_were_written_are_not_sent() {
    let (addr, start_reading, server) = stalled_server().await;
    // Room for all of them: what is not sent is what was given up.
    let ch = Arc::new(TcpChannel::connect(addr).await.unwrap());
    abandoned_calls(&ch, &OTHER).await;
    // The server reads again: it gets only the calls that had reached the
    // socket before their callers gave up, not all 64.
    start_reading.notify_one();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(ch);
    let calls = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server never saw the end of the stream")
        .unwrap();
    assert!(
        calls < 24,
        "{calls} of 64 abandoned 1 MiB calls were sent once the server read again"
    );
}
