//! Transport tests over the in-process provider (no TCP timing).

mod common;

use bytes::Bytes;
use rpcrdma::memfabric::Fabric;
use rpcrdma::RdmaConfig;

#[tokio::test]
async fn basic_calls_over_memfabric() {
    let dev = Fabric::new();
    let srv = common::server(dev.clone(), RdmaConfig::default()).await;
    let c = common::client(dev.clone(), srv.local_addr(), RdmaConfig::default()).await;
    let t = common::typed(&c);
    t.null().await.unwrap();
    t.echo(Bytes::from_static(b"hello")).await.unwrap();
    let d = t.get(100_000, 3).await.unwrap();
    assert_eq!(d.len(), 100_000);
    t.put(d).await.unwrap();
    t.get2(5000, 7, 9).await.unwrap();
    t.echo(Bytes::from(vec![7u8; 300_000])).await.unwrap();
    srv.shutdown().await;
}

#[tokio::test]
async fn message_kinds_inline_4096() {
    let dev = Fabric::new();
    common::message_kinds(dev.clone(), dev, 4096).await;
}

#[tokio::test]
async fn message_kinds_inline_1024() {
    let dev = Fabric::new();
    common::message_kinds(dev.clone(), dev, 1024).await;
}

#[tokio::test]
async fn remote_invalidation_on_and_off() {
    let dev = Fabric::new();
    common::remote_invalidation(dev.clone(), dev).await;
}
