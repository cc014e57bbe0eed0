//! A clean server shutdown with large replies in flight,
//! reconnecting off: every call fails promptly with a typed error. A call
//! caught in the middle of being sent when the connection was lost must not
//! be queued again after the (single, failed) reconnect has given up, to
//! wait for its 30 s timeout. The race is narrow: without the rule this
//! test hits it in about one run of four.
mod common;
use rpcrdma::RdmaConfig;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_when_the_server_shuts_down_fail_promptly() {
    let mut failed = Vec::new();
    let mut hung = Vec::new();
    for round in 0..40u64 {
        let srv = common::server(iwarp::Device::default(), RdmaConfig::default()).await;
        let c = common::client(
            iwarp::Device::default(),
            srv.local_addr(),
            RdmaConfig {
                reconnect: common::no_reconnect(),
                ..Default::default()
            },
        )
        .await;
        common::typed(&c).null().await.unwrap();
        let mut calls = Vec::new();
        for i in 0..4u32 {
            let t = common::typed(&c);
            calls.push(tokio::spawn(async move { t.get(4 << 20, i).await }));
        }
        tokio::time::sleep(Duration::from_millis(1 + round % 4)).await;
        srv.shutdown().await;
        let down = Instant::now();
        for h in calls {
            match tokio::time::timeout(Duration::from_secs(5), h).await {
                Ok(r) => {
                    if let Err(e) = r.unwrap() {
                        failed.push((round, e.to_string()));
                    }
                }
                Err(_) => hung.push(round),
            }
        }
        eprintln!(
            "round {round}: calls settled {:?} after shutdown",
            down.elapsed()
        );
    }
    eprintln!("failed calls: {}: {failed:?}", failed.len());
    eprintln!("calls still pending 5 s after the server shut down: {hung:?}");
    assert!(
        hung.is_empty(),
        "calls hung after the server closed: {hung:?}"
    );
}
