//! NFSv3 NULL probes of a kernel NFS server (RFC 1813 §3.3.0) over
//! RPC-over-RDMA (RFC 8166) and over TCP.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use oncrpc::{Channel, Payload, Request};
use rpcrdma::{Bindings, RdmaClient, RdmaConfig};

/// The NFS program and the version the scenarios speak (RFC 1813).
const NFS_PROGRAM: u32 = 100_003;
const NFS_V3: u32 = 3;
/// NULL: procedure 0, void arguments and results.
const NULLPROC: u32 = 0;

fn null_request(timeout: Duration) -> Request {
    Request::new(NFS_PROGRAM, NFS_V3, NULLPROC, Payload::new()).with_timeout(timeout)
}

async fn connect(addr: SocketAddr, cfg: RdmaConfig) -> anyhow::Result<RdmaClient<iwarp::Device>> {
    RdmaClient::connect(iwarp::Device::default(), addr, cfg, Bindings::new())
        .await
        .with_context(|| format!("RPC-over-RDMA connection to {addr}"))
}

/// `count` NULL calls over one connection; prints one line per call and a
/// verdict line. Exit status 0 when every call succeeded.
pub async fn null(
    rdma: Option<SocketAddr>,
    tcp: Option<SocketAddr>,
    count: u32,
) -> anyhow::Result<u8> {
    match (rdma, tcp) {
        (Some(addr), None) => {
            let c = connect(addr, RdmaConfig::default()).await?;
            let th = c.thresholds().context("not connected")?;
            println!(
                "connected to {addr}: inline thresholds call {} / reply {}, both R bits {:?}, ours {:?}",
                th.call_inline,
                th.reply_inline,
                c.remote_invalidation(),
                c.accepts_remote_invalidation()
            );
            for i in 0..count {
                let t0 = Instant::now();
                let (res, report) = c
                    .call_with_report(null_request(Duration::from_secs(10)))
                    .await
                    .with_context(|| format!("NULL {i}"))?;
                if !res.is_empty() {
                    bail!("NULL {i}: {} bytes of results, want none", res.xdr_len());
                }
                println!(
                    "NULL {i}: {:?} in {:?}; Reply chunk offered: {}; reply {:?} {:?}",
                    report.call_kind,
                    t0.elapsed(),
                    report.reply_chunk_offered,
                    report.reply_mode,
                    report.reply_message
                );
                if report.reply_chunk_offered {
                    bail!("NULL {i} offered a Reply chunk");
                }
            }
            let s = c.stats();
            println!(
                "rdma NULL: {count} calls answered, {} zero-length RDMA Writes",
                s.first_reply_nudges.load(Relaxed)
            );
            c.close();
        }
        (None, Some(addr)) => {
            let c = oncrpc_tcp::TcpChannel::connect(addr)
                .await
                .with_context(|| format!("TCP connection to {addr}"))?;
            for i in 0..count {
                let t0 = Instant::now();
                let res = c
                    .call(null_request(Duration::from_secs(10)))
                    .await
                    .with_context(|| format!("NULL {i}"))?;
                if !res.is_empty() {
                    bail!("NULL {i}: {} bytes of results, want none", res.xdr_len());
                }
                println!("NULL {i} over TCP in {:?}", t0.elapsed());
            }
            println!("tcp NULL: {count} calls answered");
        }
        _ => bail!("give one of --rdma ADDR and --tcp ADDR"),
    }
    Ok(0)
}

/// `connections` fresh connections one after the other, each with a NULL
/// sent the moment it is connected; every one must be answered within
/// `within`. Exit status 1 when one was not.
pub async fn first_call(
    addr: SocketAddr,
    connections: u32,
    within: Duration,
    no_nudge: bool,
) -> anyhow::Result<u8> {
    let cfg = RdmaConfig {
        first_reply_nudge: if no_nudge {
            None
        } else {
            RdmaConfig::default().first_reply_nudge
        },
        call_timeout: within,
        ..Default::default()
    };
    let (mut late, mut nudged, mut slowest) = (0u32, 0u32, Duration::ZERO);
    for i in 0..connections {
        let c = connect(addr, cfg.clone()).await?;
        let t0 = Instant::now();
        let r = tokio::time::timeout(within, c.call_with_report(null_request(within))).await;
        let took = t0.elapsed();
        let n = c.stats().first_reply_nudges.load(Relaxed);
        match r {
            Ok(Ok(_)) => {
                slowest = slowest.max(took);
                if n > 0 {
                    nudged += 1;
                    println!(
                        "connection {i}: answered in {took:?} after {n} zero-length RDMA Write(s)"
                    );
                }
            }
            Ok(Err(e)) => {
                late += 1;
                println!("connection {i}: failed after {took:?}: {e}");
            }
            Err(_) => {
                late += 1;
                println!("connection {i}: not answered within {within:?}");
            }
        }
        c.close();
    }
    println!(
        "first-call: {} of {connections} answered within {within:?} (slowest {slowest:?}); {nudged} needed a zero-length RDMA Write",
        connections - late
    );
    Ok(u8::from(late > 0))
}
