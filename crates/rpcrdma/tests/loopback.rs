//! End-to-end tests over the software iWARP provider on 127.0.0.1 (real TCP).

mod common;

fn dev() -> iwarp::Device {
    iwarp::Device::default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_kinds_inline_4096() {
    common::message_kinds(dev(), dev(), 4096).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_kinds_inline_1024() {
    common::message_kinds(dev(), dev(), 1024).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_invalidation_on_and_off() {
    common::remote_invalidation(dev(), dev()).await;
}

/// Prints the reports of a few calls (run with --nocapture to see them) and
/// checks the connection really crosses TCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_over_tcp() {
    let srv = common::server(dev(), rpcrdma::RdmaConfig::default()).await;
    let c = common::client(dev(), srv.local_addr(), rpcrdma::RdmaConfig::default()).await;
    let t0 = std::time::Instant::now();
    let (res, r) = c
        .call_with_report(common::get_req(16 << 20, 1, Some(16 << 20)))
        .await
        .unwrap();
    common::check_get(&res, 16 << 20, 1);
    eprintln!("{r} [{:?}]", t0.elapsed());
    let (_, r) = c
        .call_with_report(common::get_req(200_000, 1, None))
        .await
        .unwrap();
    eprintln!("{r}");
    let s = std::net::TcpStream::connect(srv.local_addr());
    assert!(s.is_ok(), "the server listens on a real TCP port");
    c.close();
    srv.shutdown().await;
}
