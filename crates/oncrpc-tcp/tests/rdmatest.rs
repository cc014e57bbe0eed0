//! The RDMATEST program over TCP, in process: the verifying typed client
//! over `TcpChannel`s against `TcpServer` serving `RdmatestServer`.

use std::sync::Arc;

use oncrpc::Dispatcher;
use oncrpc_tcp::{ServerConfig, TcpChannel, TcpServer};
use rdmatest::{pattern, ClientError, RdmatestClient, RdmatestServer};

async fn start(
    config: ServerConfig,
) -> (
    std::net::SocketAddr,
    oncrpc_tcp::ShutdownHandle,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let service = RdmatestServer::new(rdmatest::ServerConfig {
        max_get_len: 1 << 20,
        ..Default::default()
    });
    let dispatcher = Dispatcher::builder().service(service).build();
    let server = TcpServer::bind("127.0.0.1:0", Arc::new(dispatcher), config)
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    let stop = server.shutdown_handle();
    (addr, stop, tokio::spawn(server.run()))
}

/// 1,000 concurrent calls of every procedure over 8 connections, each
/// result verified by the client (bytes, CRC, pattern, marker).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_concurrent_calls_over_eight_connections() {
    within(async {
        let (addr, stop, task) = start(ServerConfig::default()).await;
        let mut clients = Vec::new();
        for _ in 0..8 {
            clients.push(Arc::new(RdmatestClient::new(
                TcpChannel::connect(addr).await.unwrap(),
            )));
        }
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..1000u32 {
            let client = clients[i as usize % 8].clone();
            calls.spawn(async move {
                let len = (i * 523) % 70_000;
                match i % 6 {
                    0 => client.null().await.map(|_| 0),
                    1 => client
                        .echo(pattern::pattern(i, len as usize))
                        .await
                        .map(|b| b.len()),
                    2 => client
                        .put(pattern::pattern(i, len as usize))
                        .await
                        .map(|r| r.length as usize),
                    3 => client.get(len, i).await.map(|b| b.len()),
                    4 => client
                        .get2(len / 2, len / 3, i)
                        .await
                        .map(|r| r.a.len() + r.b.len()),
                    _ => client.sleep(i % 5).await.map(|_| 0),
                }
                .map_err(|e| format!("call {i}: {e}"))
            });
        }
        let mut done = 0;
        while let Some(r) = calls.join_next().await {
            r.unwrap().unwrap();
            done += 1;
        }
        assert_eq!(done, 1000);
        for c in &clients {
            assert_eq!(c.channel().outstanding(), 0);
        }
        stop.shutdown();
        task.await.unwrap().unwrap();
    })
    .await
}

#[tokio::test]
async fn large_transfers_and_limits() {
    within(async {
        // Small server fragments: large replies span many fragments.
        let (addr, stop, task) = start(ServerConfig {
            max_fragment_size: 64 << 10,
            ..Default::default()
        })
        .await;
        let client = RdmatestClient::new(TcpChannel::connect(addr).await.unwrap());
        let data = client.get(1 << 20, 3).await.unwrap();
        assert_eq!(data.len(), 1 << 20);
        client.put(pattern::pattern(9, 1 << 20)).await.unwrap();
        client.echo(pattern::pattern(1, 1 << 20)).await.unwrap();
        let r = client.get2(1 << 20, 1 << 20, 4).await.unwrap();
        assert_eq!((r.a.len(), r.b.len()), (1 << 20, 1 << 20));
        // Over the service maximum: GET status 1, the connection stays usable.
        assert!(matches!(
            client.get((1 << 20) + 1, 0).await,
            Err(ClientError::GetStatus(1))
        ));
        client.null().await.unwrap();
        stop.shutdown();
        task.await.unwrap().unwrap();
    })
    .await
}

/// Fails the test instead of hanging when something never completes.
async fn within<F: std::future::Future>(test: F) -> F::Output {
    tokio::time::timeout(std::time::Duration::from_secs(60), test)
        .await
        .expect("test did not finish within 60 s")
}
