//! Fault: the TCP connections under the iWARP transport are cut (by a
//! proxy between client and server) while calls are in flight. Every call
//! either completes with verified data (after reconnecting and
//! retransmitting) or fails with a typed error; none completes twice.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdmatest::ClientError;
use rpcrdma::{RdmaConfig, TransportError};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A TCP proxy whose connections can be cut at will.
struct Proxy {
    addr: SocketAddr,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accepted: Arc<AtomicU32>,
    _accept: JoinHandle<()>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accepted = Arc::new(AtomicU32::new(0));
        let (c2, a2) = (conns.clone(), accepted.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = l.accept().await {
                a2.fetch_add(1, Relaxed);
                let h = tokio::spawn(async move {
                    if let Ok(mut out) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                c2.lock().unwrap().push(h);
            }
        });
        Proxy {
            addr,
            conns,
            accepted,
            _accept: accept,
        }
    }

    /// Cuts every connection (both sockets are dropped).
    fn cut(&self) {
        for h in self.conns.lock().unwrap().drain(..) {
            h.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_connections_under_load() {
    let srv = common::server(iwarp::Device::default(), RdmaConfig::default()).await;
    let proxy = Proxy::start(srv.local_addr()).await;
    let cfg = RdmaConfig {
        call_timeout: Duration::from_secs(20),
        ..Default::default()
    };
    let mut clients = Vec::new();
    for _ in 0..4 {
        let c = common::client(iwarp::Device::default(), proxy.addr, cfg.clone()).await;
        clients.push(c);
    }
    const N: usize = 600;
    let completions: Arc<Vec<AtomicU32>> = Arc::new((0..N).map(|_| AtomicU32::new(0)).collect());
    let mut tasks = Vec::new();
    for i in 0..N {
        let t = common::typed(&clients[i % 4]);
        let done = completions.clone();
        tasks.push(tokio::spawn(async move {
            // Stagger the calls so that some are in flight at each cut.
            tokio::time::sleep(Duration::from_micros((i as u64 % 150) * 1000)).await;
            let x = (i as u32).wrapping_mul(2_654_435_761);
            let size = 1 + (x >> 10) % 300_000;
            let r = match i % 4 {
                0 => t.get(size, x).await.map(|_| ()),
                1 => t
                    .put(rdmatest::pattern::pattern(x, size as usize))
                    .await
                    .map(|_| ()),
                2 => t.get2(size / 2, 100, x).await.map(|_| ()),
                _ => t
                    .echo(rdmatest::pattern::pattern(x, (size % 20_000) as usize))
                    .await
                    .map(|_| ()),
            };
            done[i].fetch_add(1, Relaxed);
            r
        }));
    }
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(40)).await;
        proxy.cut();
    }
    let (mut ok, mut failed) = (0, 0);
    for (i, h) in tasks.into_iter().enumerate() {
        match tokio::time::timeout(Duration::from_secs(60), h)
            .await
            .expect("call hung")
            .unwrap()
        {
            Ok(()) => ok += 1,
            Err(ClientError::Rpc(e)) => {
                // Only typed transport failures are acceptable.
                assert!(
                    TransportError::from_rpc(&e).is_some()
                        || matches!(e, oncrpc::RpcError::Timeout),
                    "call {i}: untyped failure {e}"
                );
                failed += 1;
            }
            Err(e) => panic!("call {i} returned wrong data: {e}"),
        }
    }
    for (i, c) in completions.iter().enumerate() {
        assert_eq!(
            c.load(Relaxed),
            1,
            "call {i} completed {} times",
            c.load(Relaxed)
        );
    }
    let retrans: u64 = clients
        .iter()
        .map(|c| c.stats().retransmits.load(Relaxed))
        .sum();
    let reconnects: u64 = clients
        .iter()
        .map(|c| c.stats().reconnects.load(Relaxed))
        .sum();
    eprintln!("ok {ok}, failed {failed}, retransmits {retrans}, reconnects {reconnects}, proxied connections {}", proxy.accepted.load(Relaxed));
    assert!(reconnects >= 4, "every client reconnected at least once");
    assert!(
        ok > N / 2,
        "most calls complete after reconnecting ({ok}/{N})"
    );
    // After the storm, every client works again.
    for c in &clients {
        common::typed(c).get(100_000, 1).await.unwrap();
    }
    srv.shutdown().await;
}
