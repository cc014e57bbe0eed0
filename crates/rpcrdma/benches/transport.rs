//! End-to-end transport benchmark, all baselines measured in the same run:
//!
//! - GET and PUT of 1 MiB (RDMATEST) over RPC-over-RDMA (software iWARP on
//!   127.0.0.1) vs ONC RPC over TCP (crate `oncrpc-tcp`) vs a plain TCP
//!   stream of 1 MiB writes;
//! - NULL latency at depth 1;
//! - NULL calls/s at depth 32.
//!
//! Run: `cargo bench -p rpcrdma --bench transport` (env `BENCH_SECS`, default
//! 2 s per measurement; `BENCH_THREADS`, default 2 runtime workers).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use oncrpc::{Channel, Dispatcher, Payload, Request};
use rdmatest::proto::{PROC_GET, PROC_NULL, PROC_PUT};
use rdmatest::{GetArgs, RdmatestServer, PROGRAM, VERSION};
use rpcrdma::{Bindings, RdmaClient, RdmaConfig, RdmaServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MIB: usize = 1 << 20;

fn secs() -> Duration {
    let s: f64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(s)
}

fn dispatcher() -> Dispatcher {
    Dispatcher::builder()
        .service(RdmatestServer::default())
        .build()
}

fn get_req() -> Request {
    let mut a = Payload::builder();
    a.item(&GetArgs {
        length: MIB as u32,
        seed: 1,
    });
    Request::new(PROGRAM, VERSION, PROC_GET, a.finish())
        .with_result_buf(BytesMut::with_capacity(MIB))
}

fn put_req(data: &Bytes) -> Request {
    let mut a = Payload::builder();
    a.ddp_opaque(data.clone());
    Request::new(PROGRAM, VERSION, PROC_PUT, a.finish())
}

fn null_req() -> Request {
    Request::new(PROGRAM, VERSION, PROC_NULL, Payload::new())
}

/// Runs `depth` workers issuing `make()` requests on `ch` for `dur`;
/// returns (operations, elapsed, per-op latencies in µs when depth == 1).
async fn drive<C>(
    ch: C,
    depth: usize,
    dur: Duration,
    make: Arc<dyn Fn() -> Request + Send + Sync>,
) -> (u64, Duration, Vec<f64>)
where
    C: Channel + Clone + Send + Sync + 'static,
{
    // Warm-up.
    for _ in 0..8 {
        ch.call(make()).await.expect("warm-up call");
    }
    let ops = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..depth {
        let (ch, ops, stop, make) = (ch.clone(), ops.clone(), stop.clone(), make.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while !stop.load(Relaxed) {
                let t = Instant::now();
                ch.call(make()).await.expect("call");
                if depth == 1 {
                    lat.push(t.elapsed().as_secs_f64() * 1e6);
                }
                ops.fetch_add(1, Relaxed);
            }
            lat
        }));
    }
    tokio::time::sleep(dur).await;
    stop.store(true, Relaxed);
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    (ops.load(Relaxed), start.elapsed(), lat)
}

/// A plain TCP stream of 1 MiB writes to a reader that discards: MB/s.
async fn plain_stream(dur: Duration) -> f64 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let reader = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; MIB];
        let mut n = 0u64;
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k as u64,
            }
        }
        n
    });
    let mut w = tokio::net::TcpStream::connect(addr).await.unwrap();
    w.set_nodelay(true).unwrap();
    let chunk = vec![0x5au8; MIB];
    for _ in 0..8 {
        w.write_all(&chunk).await.unwrap();
    }
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < dur {
        w.write_all(&chunk).await.unwrap();
        sent += MIB as u64;
    }
    let el = start.elapsed();
    drop(w);
    let _ = reader.await;
    sent as f64 / el.as_secs_f64() / 1e6
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p) as usize]
}

struct Row {
    name: String,
    value: f64,
    unit: &'static str,
}

async fn suite<C>(label: &str, ch: C, dur: Duration, rows: &mut Vec<Row>)
where
    C: Channel + Clone + Send + Sync + 'static,
{
    let data = Bytes::from(vec![0xa5u8; MIB]);
    let ops = std::env::var("BENCH_OPS").unwrap_or_else(|_| "get,put,null".into());
    for depth in [1usize, 4] {
        if !ops.contains("get") && !ops.contains("put") {
            break;
        }
        if ops.contains("get") {
            let (n, el, _) = drive(ch.clone(), depth, dur, Arc::new(get_req)).await;
            rows.push(Row {
                name: format!("{label} GET 1MiB depth {depth}"),
                value: n as f64 * MIB as f64 / el.as_secs_f64() / 1e6,
                unit: "MB/s",
            });
        }
        if !ops.contains("put") {
            continue;
        }
        let d = data.clone();
        let (n, el, _) = drive(ch.clone(), depth, dur, Arc::new(move || put_req(&d))).await;
        rows.push(Row {
            name: format!("{label} PUT 1MiB depth {depth}"),
            value: n as f64 * MIB as f64 / el.as_secs_f64() / 1e6,
            unit: "MB/s",
        });
    }
    if !ops.contains("null") {
        return;
    }
    let (_, _, mut lat) = drive(ch.clone(), 1, dur, Arc::new(null_req)).await;
    let mean = lat.iter().sum::<f64>() / lat.len().max(1) as f64;
    rows.push(Row {
        name: format!("{label} NULL depth 1 mean latency"),
        value: mean,
        unit: "us",
    });
    rows.push(Row {
        name: format!("{label} NULL depth 1 p50 latency"),
        value: pct(&mut lat, 0.5),
        unit: "us",
    });
    rows.push(Row {
        name: format!("{label} NULL depth 1 p99 latency"),
        value: pct(&mut lat, 0.99),
        unit: "us",
    });
    let (n, el, _) = drive(ch.clone(), 32, dur, Arc::new(null_req)).await;
    rows.push(Row {
        name: format!("{label} NULL depth 32"),
        value: n as f64 / el.as_secs_f64(),
        unit: "calls/s",
    });
}

fn get(rows: &[Row], name: &str) -> f64 {
    rows.iter()
        .find(|r| r.name == name)
        .map_or(f64::NAN, |r| r.value)
}

async fn run() {
    let dur = secs();
    let mut rows = Vec::new();

    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let want = |l: &str| only.is_empty() || only.split(',').any(|o| o == l);
    // RPC-over-RDMA on the software iWARP provider, with MPA CRC32c (the
    // default) and without (MPA lets both peers agree to omit it).
    for (label, crc) in [("rdma", true), ("rdma-nocrc", false)] {
        if !want(label) {
            continue;
        }
        let dev = || {
            let mut c = iwarp::Config::default();
            c.mpa.crc = crc;
            iwarp::Device::new(c)
        };
        let srv = RdmaServer::bind(
            dev(),
            "127.0.0.1:0".parse().unwrap(),
            dispatcher(),
            RdmaConfig::default(),
            Bindings::rdmatest(),
        )
        .await
        .unwrap();
        let rdma = RdmaClient::connect(
            dev(),
            srv.local_addr(),
            RdmaConfig::default(),
            Bindings::rdmatest(),
        )
        .await
        .unwrap();
        suite(label, rdma.clone(), dur, &mut rows).await;
        rdma.close();
        srv.shutdown().await;
    }

    // ONC RPC over TCP.
    if want("tcp") {
        let tsrv = oncrpc_tcp::TcpServer::bind(
            "127.0.0.1:0",
            Arc::new(dispatcher()),
            oncrpc_tcp::ServerConfig::default(),
        )
        .await
        .unwrap();
        let taddr = tsrv.local_addr().unwrap();
        let stop = tsrv.shutdown_handle();
        let th = tokio::spawn(tsrv.run());
        let tcp = Arc::new(oncrpc_tcp::TcpChannel::connect(taddr).await.unwrap());
        suite("tcp", tcp.clone(), dur, &mut rows).await;
        drop(tcp);
        stop.shutdown();
        let _ = th.await;
    }

    // Plain TCP stream.
    let plain = if want("plain") {
        plain_stream(dur).await
    } else {
        f64::NAN
    };
    rows.push(Row {
        name: "plain TCP stream 1MiB writes".into(),
        value: plain,
        unit: "MB/s",
    });

    println!("\n{:<40} {:>14}", "measurement", "value");
    for r in &rows {
        println!("{:<40} {:>12.1} {}", r.name, r.value, r.unit);
    }
    println!("\nratios (target):");
    for op in ["GET", "PUT"] {
        let best = |l: &str| {
            get(&rows, &format!("{l} {op} 1MiB depth 1"))
                .max(get(&rows, &format!("{l} {op} 1MiB depth 4")))
        };
        let (r, t) = (best("rdma"), best("tcp"));
        println!(
            "  {op} 1MiB rdma/plain-stream = {:.2} (>= 0.85), rdma/rpc-tcp = {:.2} (>= 0.9)  [best of depth 1/4]",
            r / plain,
            r / t
        );
    }
    let lr =
        get(&rows, "rdma NULL depth 1 mean latency") / get(&rows, "tcp NULL depth 1 mean latency");
    println!("  NULL depth-1 latency rdma/tcp = {lr:.2} (<= 1.2)");
    let cr = get(&rows, "rdma NULL depth 32") / get(&rows, "tcp NULL depth 32");
    println!("  NULL depth-32 calls/s rdma/tcp = {cr:.2} (>= 0.8)");
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing
    // special: run a very short pass then.
    let quick = !std::env::args().any(|a| a == "--bench");
    if quick {
        std::env::set_var(
            "BENCH_SECS",
            std::env::var("BENCH_SECS").unwrap_or_else(|_| "0.05".into()),
        );
    }
    let threads: usize = std::env::var("BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}
