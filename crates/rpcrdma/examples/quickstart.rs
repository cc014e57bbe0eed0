//! Quick start: serve the RDMATEST program over RPC-over-RDMA on the
//! software iWARP provider, call it with zero-copy placement, and read the
//! transport's counters.
//!
//! Run with `cargo run --release -p rpcrdma --example quickstart`.

use bytes::{Bytes, BytesMut};
use rdmatest::{RdmatestClient, RdmatestServer};
use rpcrdma::{Bindings, RdmaClient, RdmaConfig, RdmaServer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The provider: a software iWARP RNIC (MPA/DDP/RDMAP over TCP).
    let device = iwarp::Device::default();

    // Server: any oncrpc::Service behind a Dispatcher; the Upper-Layer
    // Binding says which arguments and results are DDP-eligible.
    let dispatcher = oncrpc::Dispatcher::builder()
        .service(RdmatestServer::default())
        .build();
    let server = RdmaServer::bind(
        device.clone(),
        "127.0.0.1:0".parse()?,
        dispatcher,
        RdmaConfig::default(),
        Bindings::rdmatest(),
    )
    .await?;

    // Client: an oncrpc::Channel, so the same typed client runs over TCP too.
    let channel = RdmaClient::connect(
        device,
        server.local_addr(),
        RdmaConfig::default(),
        Bindings::rdmatest(),
    )
    .await?;
    let client = RdmatestClient::new(channel.clone());

    // PUT: the 1 MiB argument travels as a Read chunk the server pulls.
    let data = Bytes::from(vec![0x5a; 1 << 20]);
    let put = client.put(data).await?;
    println!(
        "PUT  {} bytes, server CRC-32C {:#010x}",
        put.length, put.crc32c
    );

    // GET: the server RDMA-Writes the result straight into our buffer.
    let got = client
        .get_into(1 << 20, 7, BytesMut::with_capacity(1 << 20))
        .await?;
    println!("GET  {} bytes placed directly, pattern verified", got.len());

    println!("client: {}", channel.stats().counters);
    server.shutdown().await;
    Ok(())
}
