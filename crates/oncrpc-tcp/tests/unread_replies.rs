//! A client that sends calls and never reads their replies
//! must not keep its connection, and its connection slot, open for good.
//! With replies larger than the socket buffers the server's writer blocks;
//! the connection is closed after the idle timeout plus the grace period,
//! and other clients are served again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oncrpc::Dispatcher;
use oncrpc_tcp::{ServerConfig, TcpChannel, TcpServer};
use rdmatest::{RdmatestClient, RdmatestServer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

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

async fn null_call(addr: SocketAddr) -> bool {
    tokio::time::timeout(Duration::from_secs(2), async {
        let Ok(ch) = TcpChannel::connect(addr).await else {
            return false;
        };
        RdmatestClient::new(ch).null().await.is_ok()
    })
    .await
    .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_never_reads_replies_is_closed() {
    let config = ServerConfig {
        idle_timeout: Some(Duration::from_millis(300)),
        shutdown_grace: Duration::from_millis(300),
        max_connections: 1,
        ..ServerConfig::default()
    };
    let d = Dispatcher::builder()
        .service(RdmatestServer::default())
        .build();
    let server = TcpServer::bind("127.0.0.1:0", Arc::new(d), config)
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.run());
    assert!(null_call(addr).await, "served before");
    // The one connection slot: four 1 MiB ECHO calls, replies never read,
    // through a small receive buffer.
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut s: TcpStream = sock.connect(addr).await.unwrap();
    for i in 0..4 {
        s.write_all(&echo_call(i, 1 << 20)).await.unwrap();
    }
    // Closed after ~0.6 s (idle timeout, then the grace period for its
    // replies); other clients are served again while it stays connected.
    let started = Instant::now();
    let mut served = false;
    while started.elapsed() < Duration::from_secs(10) {
        if null_call(addr).await {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        served,
        "a client not reading its replies kept the only slot for 10 s"
    );
    drop(s);
}
