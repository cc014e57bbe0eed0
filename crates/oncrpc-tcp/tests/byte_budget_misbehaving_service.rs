//! The byte budget with panicking calls, calls without replies,
//! replies larger than the budget, and records larger than the budget.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use oncrpc::Dispatcher;
use oncrpc_tcp::record::Record;
use oncrpc_tcp::{RecordService, ServerConfig, TcpChannel, TcpServer};
use rdmatest::{RdmatestClient, RdmatestServer};

/// RDMATEST, but every third call panics and every third (offset 1) has no reply.
struct Flaky {
    inner: Dispatcher,
    n: AtomicU32,
}

impl RecordService for Flaky {
    async fn handle(&self, record: Record, peer: SocketAddr) -> Option<Vec<Bytes>> {
        let i = self.n.fetch_add(1, Ordering::SeqCst);
        if (2..30).contains(&i) && i.is_multiple_of(3) {
            panic!("deliberate: service panics");
        }
        if (2..30).contains(&i) && i % 3 == 1 {
            return None;
        }
        self.inner.handle(record, peer).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_survives_panics_dropped_replies_and_large_replies() {
    let service = Flaky {
        inner: Dispatcher::builder()
            .service(RdmatestServer::default())
            .build(),
        n: AtomicU32::new(0),
    };
    let config = ServerConfig {
        max_bytes_per_connection: 1500,
        ..ServerConfig::default()
    };
    let server = TcpServer::bind("127.0.0.1:0", Arc::new(service), config)
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.run());
    let ch = TcpChannel::connect(addr).await.unwrap();
    let client = RdmatestClient::new(ch);
    let r = tokio::time::timeout(Duration::from_secs(20), async {
        let mut ok = 0;
        for i in 0..30u32 {
            // ~1000-byte records: two never fit the budget together, so a
            // leaked guard stalls the connection for good.
            let res = tokio::time::timeout(
                Duration::from_millis(300),
                client.echo(Bytes::from(vec![i as u8; 1000])),
            )
            .await;
            eprintln!(
                "call {i}: {:?}",
                res.as_ref().map(|r| r.as_ref().map(|b| b.len()))
            );
            if matches!(res, Ok(Ok(_))) {
                ok += 1;
            }
        }
        // A reply far larger than the budget, and a record larger than it.
        let big = tokio::time::timeout(Duration::from_secs(3), client.get(4 << 20, 3)).await;
        eprintln!(
            "get: {:?}",
            big.as_ref().map(|r| r.as_ref().map(|b| b.len()))
        );
        let big = big.unwrap().map(|b| b.len());
        let echo = client
            .echo(Bytes::from(vec![1u8; 100_000]))
            .await
            .map(|b| b.len());
        (ok, big.ok(), echo.ok())
    })
    .await;
    eprintln!("{r:?}");
    let (ok, big, echo) = r.expect("stalled");
    assert!(ok >= 8, "{ok} calls answered");
    assert_eq!(big, Some(4 << 20));
    assert_eq!(echo, Some(100_000));
}
