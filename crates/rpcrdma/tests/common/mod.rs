//! Shared test harness: an RDMATEST server and clients over any provider.
#![allow(dead_code)]

use std::net::SocketAddr;

use oncrpc::Dispatcher;
use rdma_verbs::Device;
use rdmatest::{RdmatestClient, RdmatestServer};
use rpcrdma::{Bindings, RdmaClient, RdmaConfig, RdmaServer};

pub fn dispatcher() -> Dispatcher {
    Dispatcher::builder()
        .service(RdmatestServer::default())
        .build()
}

pub async fn server<D: Device>(dev: D, config: RdmaConfig) -> RdmaServer<D> {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    RdmaServer::bind(dev, addr, dispatcher(), config, Bindings::rdmatest())
        .await
        .expect("bind")
}

pub async fn client<D: Device>(dev: D, addr: SocketAddr, config: RdmaConfig) -> RdmaClient<D> {
    RdmaClient::connect(dev, addr, config, Bindings::rdmatest())
        .await
        .expect("connect")
}

pub fn typed<D: Device>(c: &RdmaClient<D>) -> RdmatestClient<RdmaClient<D>> {
    RdmatestClient::new(c.clone())
}
