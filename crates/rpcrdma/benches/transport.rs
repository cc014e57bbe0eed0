//! End-to-end transport benchmark, all baselines measured in the same run:
//!
//! - GET and PUT of 1 MiB (RDMATEST) over RPC-over-RDMA (software iWARP on
//!   127.0.0.1) vs ONC RPC over TCP (crate `oncrpc-tcp`) vs a plain TCP
//!   stream of 1 MiB writes;
//! - NULL latency at depth 1;
//! - NULL calls/s at depth 32.
//!
//! Run: `cargo bench -p rpcrdma --bench transport` (env `BENCH_SECS`, default
//! 1 s per measurement; `BENCH_ROUNDS`, default 3, interleaved, medians
//! reported; `BENCH_ONLY=rdma,rdma-nocrc,tcp,plain,memfabric` and `BENCH_OPS=get,put,null`
//! (`null1`/`null32`: only the depth-1 latency / depth-32 rate) select (`memfabric`: the in-process provider, no sockets — the engine's own
//! cost); `BENCH_DEPTHS=4`: the bulk measurements at that depth only (default
//! 1,4); `BENCH_THREADS`, default 2 runtime workers).
//!
//! Besides the rates, the process CPU time (user + system, from
//! `/proc/self/stat`) spent per operation is reported for every measurement:
//! on a shared machine a transport's rate depends on how much CPU it gets,
//! its CPU per operation does much less.

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
        .unwrap_or(1.0);
    Duration::from_secs_f64(s)
}

fn dispatcher() -> Dispatcher {
    Dispatcher::builder()
        .service(RdmatestServer::default())
        .build()
}

/// Result buffers handed back after a call (the caller reuses its
/// buffers, as a zero-copy API intends; RPC/TCP ignores them).
static POOL: std::sync::Mutex<Vec<BytesMut>> = std::sync::Mutex::new(Vec::new());

fn reclaim(p: Payload) {
    let ddp: Vec<Bytes> = p
        .into_pieces()
        .into_iter()
        .filter_map(|x| match x {
            oncrpc::Piece::Ddp(b) => Some(b),
            _ => None,
        })
        .collect();
    for b in ddp {
        if let Ok(m) = b.try_into_mut() {
            POOL.lock().unwrap().push(m);
        }
    }
}

fn no_reclaim(_: Payload) {}

fn get_req_reuse() -> Request {
    let buf = POOL
        .lock()
        .unwrap()
        .pop()
        .filter(|b| b.capacity() >= MIB)
        .unwrap_or_else(|| BytesMut::with_capacity(MIB));
    let mut a = Payload::builder();
    a.item(&GetArgs {
        length: MIB as u32,
        seed: 1,
    });
    Request::new(PROGRAM, VERSION, PROC_GET, a.finish()).with_result_buf(buf)
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
    after: Arc<dyn Fn(Payload) + Send + Sync>,
) -> (u64, Duration, Vec<f64>)
where
    C: Channel + Clone + Send + Sync + 'static,
{
    // Warm-up.
    for _ in 0..8 {
        after(ch.call(make()).await.expect("warm-up call"));
        OPS.fetch_add(1, Relaxed);
    }
    let ops = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..depth {
        let (ch, ops, stop, make, after) = (
            ch.clone(),
            ops.clone(),
            stop.clone(),
            make.clone(),
            after.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while !stop.load(Relaxed) {
                let t = Instant::now();
                let res = ch.call(make()).await.expect("call");
                after(res);
                if depth == 1 {
                    lat.push(t.elapsed().as_secs_f64() * 1e6);
                }
                ops.fetch_add(1, Relaxed);
                OPS.fetch_add(1, Relaxed);
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
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p) as usize]
}

/// One transport under test.
#[derive(Clone)]
enum Chan {
    Rdma(RdmaClient<iwarp::Device>),
    Mem(RdmaClient<rpcrdma::memfabric::Fabric>),
    Tcp(Arc<oncrpc_tcp::TcpChannel>),
}

#[allow(clippy::manual_async_fn)]
impl Channel for Chan {
    fn call(
        &self,
        req: Request,
    ) -> impl std::future::Future<Output = Result<Payload, oncrpc::RpcError>> + Send {
        async move {
            match self {
                Chan::Rdma(c) => c.call(req).await,
                Chan::Mem(c) => c.call(req).await,
                Chan::Tcp(c) => c.call(req).await,
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Metric {
    Get(usize),
    GetReuse(usize),
    Put(usize),
    NullLatency,
    NullRate,
}

impl Metric {
    fn name(&self) -> String {
        match self {
            Metric::Get(d) => format!("GET 1MiB depth {d} (MB/s)"),
            Metric::GetReuse(d) => format!("GET 1MiB reused buf d{d} (MB/s)"),
            Metric::Put(d) => format!("PUT 1MiB depth {d} (MB/s)"),
            Metric::NullLatency => "NULL depth 1 mean/p50 (us)".into(),
            Metric::NullRate => "NULL depth 32 (calls/s)".into(),
        }
    }
}

/// CPU time (user + system) this process has used so far, in seconds
/// (`/proc/self/stat` fields 14 and 15, in clock ticks of 10 ms); `NaN`
/// where that file is unavailable.
fn process_cpu() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // The command name (field 2) may contain spaces: count from its end.
    let Some(rest) = s.rfind(')').map(|i| &s[i + 1..]) else {
        return f64::NAN;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3: utime is field 14, stime field 15.
    match (
        f.get(11).and_then(|v| v.parse::<f64>().ok()),
        f.get(12).and_then(|v| v.parse::<f64>().ok()),
    ) {
        (Some(u), Some(st)) => (u + st) / 100.0,
        _ => f64::NAN,
    }
}

/// Measures one metric on one transport: (value, secondary value, process
/// CPU microseconds per operation).
async fn measure(ch: &Chan, m: Metric, dur: Duration, data: &Bytes) -> (f64, f64, f64) {
    let cpu0 = process_cpu();
    let ops0 = OPS.load(Relaxed);
    let (a, b) = measure_inner(ch, m, dur, data).await;
    let ops = OPS.load(Relaxed) - ops0;
    let cpu = (process_cpu() - cpu0) * 1e6 / ops.max(1) as f64;
    (a, b, cpu)
}

/// Operations completed by [`drive`] (warm-up included), for CPU per op.
static OPS: AtomicU64 = AtomicU64::new(0);

async fn measure_inner(ch: &Chan, m: Metric, dur: Duration, data: &Bytes) -> (f64, f64) {
    match m {
        Metric::Get(d) => {
            let (n, el, _) =
                drive(ch.clone(), d, dur, Arc::new(get_req), Arc::new(no_reclaim)).await;
            (n as f64 * MIB as f64 / el.as_secs_f64() / 1e6, f64::NAN)
        }
        Metric::GetReuse(d) => {
            POOL.lock().unwrap().clear();
            let (n, el, _) = drive(
                ch.clone(),
                d,
                dur,
                Arc::new(get_req_reuse),
                Arc::new(reclaim),
            )
            .await;
            POOL.lock().unwrap().clear();
            (n as f64 * MIB as f64 / el.as_secs_f64() / 1e6, f64::NAN)
        }
        Metric::Put(d) => {
            let data = data.clone();
            let (n, el, _) = drive(
                ch.clone(),
                d,
                dur,
                Arc::new(move || put_req(&data)),
                Arc::new(no_reclaim),
            )
            .await;
            (n as f64 * MIB as f64 / el.as_secs_f64() / 1e6, f64::NAN)
        }
        Metric::NullLatency => {
            let (_, _, mut lat) =
                drive(ch.clone(), 1, dur, Arc::new(null_req), Arc::new(no_reclaim)).await;
            let mean = lat.iter().sum::<f64>() / lat.len().max(1) as f64;
            (mean, pct(&mut lat, 0.5))
        }
        Metric::NullRate => {
            let (n, el, _) = drive(
                ch.clone(),
                32,
                dur,
                Arc::new(null_req),
                Arc::new(no_reclaim),
            )
            .await;
            (n as f64 / el.as_secs_f64(), f64::NAN)
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    pct(v, 0.5)
}

async fn rdma_pair(crc: bool) -> (RdmaServer<iwarp::Device>, Chan) {
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
    let c = RdmaClient::connect(
        dev(),
        srv.local_addr(),
        RdmaConfig::default(),
        Bindings::rdmatest(),
    )
    .await
    .unwrap();
    (srv, Chan::Rdma(c))
}

async fn run() {
    let dur = secs();
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let want = |l: &str| only.is_empty() || only.split(',').any(|o| o == l);
    let ops = std::env::var("BENCH_OPS").unwrap_or_else(|_| "get,put,null".into());
    let mut metrics = Vec::new();
    // BENCH_DEPTHS=4: only that depth of the bulk measurements.
    let depths: Vec<usize> = std::env::var("BENCH_DEPTHS")
        .ok()
        .map(|v| v.split(',').filter_map(|d| d.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 4]);
    for &d in &depths {
        if ops.contains("get") {
            metrics.push(Metric::Get(d));
            metrics.push(Metric::GetReuse(d));
        }
        if ops.contains("put") {
            metrics.push(Metric::Put(d));
        }
    }
    let op = |o: &str| ops.split(',').any(|x| x == o);
    if op("null") || op("null1") {
        metrics.push(Metric::NullLatency);
    }
    if op("null") || op("null32") {
        metrics.push(Metric::NullRate);
    }

    let mut chans: Vec<(&'static str, Chan)> = Vec::new();
    let mut rdma_servers = Vec::new();
    for (label, crc) in [("rdma", true), ("rdma-nocrc", false)] {
        if want(label) {
            let (srv, c) = rdma_pair(crc).await;
            rdma_servers.push(srv);
            chans.push((label, c));
        }
    }
    let mut mem_server = None;
    if want("memfabric") {
        let f = rpcrdma::memfabric::Fabric::new();
        let srv = RdmaServer::bind(
            f.clone(),
            "127.0.0.1:0".parse().unwrap(),
            dispatcher(),
            RdmaConfig::default(),
            Bindings::rdmatest(),
        )
        .await
        .unwrap();
        let c = RdmaClient::connect(
            f,
            srv.local_addr(),
            RdmaConfig::default(),
            Bindings::rdmatest(),
        )
        .await
        .unwrap();
        mem_server = Some(srv);
        chans.push(("memfabric", Chan::Mem(c)));
    }
    let mut tcp_stop = None;
    if want("tcp") {
        let tsrv = oncrpc_tcp::TcpServer::bind(
            "127.0.0.1:0",
            Arc::new(dispatcher()),
            oncrpc_tcp::ServerConfig::default(),
        )
        .await
        .unwrap();
        let taddr = tsrv.local_addr().unwrap();
        tcp_stop = Some((tsrv.shutdown_handle(), tokio::spawn(tsrv.run())));
        let tcp = Arc::new(oncrpc_tcp::TcpChannel::connect(taddr).await.unwrap());
        chans.push(("tcp", Chan::Tcp(tcp)));
    }

    // Interleave transports within each round so that load changes on the
    // machine hit all of them alike; report medians over the rounds.
    let data = Bytes::from(vec![0xa5u8; MIB]);
    #[allow(clippy::type_complexity)]
    let mut vals: std::collections::HashMap<(String, String), (Vec<f64>, Vec<f64>, Vec<f64>)> =
        Default::default();
    let mut plain = Vec::new();
    for _ in 0..rounds {
        for &m in &metrics {
            for (label, ch) in &chans {
                let (a, b, cpu) = measure(ch, m, dur, &data).await;
                let e = vals.entry((label.to_string(), m.name())).or_default();
                e.0.push(a);
                e.1.push(b);
                e.2.push(cpu);
            }
        }
        if want("plain") {
            plain.push(plain_stream(dur).await);
        }
    }
    for (_, c) in &chans {
        match c {
            Chan::Rdma(c) => c.close(),
            Chan::Mem(c) => c.close(),
            Chan::Tcp(_) => {}
        }
    }
    if let Some(s) = mem_server {
        s.shutdown().await;
    }
    chans.clear();
    for s in rdma_servers {
        s.shutdown().await;
    }
    if let Some((stop, h)) = tcp_stop {
        stop.shutdown();
        let _ = h.await;
    }

    let labels = ["rdma", "rdma-nocrc", "tcp", "memfabric"];
    let med = |l: &str, m: Metric| -> (f64, f64) {
        vals.get(&(l.to_string(), m.name()))
            .map(|(a, b, _)| (median(&mut a.clone()), median(&mut b.clone())))
            .unwrap_or((f64::NAN, f64::NAN))
    };
    let cpu_med = |l: &str, m: Metric| -> f64 {
        vals.get(&(l.to_string(), m.name()))
            .map(|(_, _, c)| median(&mut c.clone()))
            .unwrap_or(f64::NAN)
    };
    println!(
        "\nmedians of {rounds} rounds x {:.1} s per measurement (MPA CRC32c backend {})",
        dur.as_secs_f64(),
        iwarp::crc::backend().name()
    );
    println!(
        "{:<32} {:>14} {:>14} {:>14} {:>14}",
        "measurement", labels[0], labels[1], labels[2], labels[3]
    );
    for &m in &metrics {
        let cells: Vec<String> = labels
            .iter()
            .map(|l| {
                let (a, b) = med(l, m);
                if b.is_nan() {
                    format!("{a:.1}")
                } else {
                    format!("{a:.1}/{b:.1}")
                }
            })
            .collect();
        print_row(&m.name(), &cells);
    }
    let plain = median(&mut plain);
    println!("{:<32} {:>14.1}", "plain TCP stream 1MiB (MB/s)", plain);
    println!("\nprocess CPU per operation, both ends (us; medians of {rounds} rounds)");
    for &m in &metrics {
        let cells: Vec<String> = labels
            .iter()
            .map(|l| format!("{:.2}", cpu_med(l, m)))
            .collect();
        print_row(&m.name(), &cells);
    }
    println!("\nratios against targets (rdma = with MPA CRC32c, the default):");
    for l in ["rdma", "rdma-nocrc"] {
        for (op, g) in [
            ("GET", Metric::Get as fn(usize) -> Metric),
            ("PUT", Metric::Put),
        ] {
            let best = |t: &str| med(t, g(1)).0.max(med(t, g(4)).0);
            if op == "GET" {
                let b2 = |t: &str| {
                    med(t, Metric::GetReuse(1))
                        .0
                        .max(med(t, Metric::GetReuse(4)).0)
                };
                let (r, t) = (b2(l), b2("tcp"));
                println!(
                    "  {l:<10} GET 1MiB reused caller buffers: vs plain stream {:.2} (>= 0.85), vs RPC/TCP {:.2} (>= 0.9)",
                    r / plain,
                    r / t
                );
            }
            let (r, t) = (best(l), best("tcp"));
            println!(
                "  {l:<10} {op} 1MiB: vs plain stream {:.2} (>= 0.85), vs RPC/TCP {:.2} (>= 0.9)  [best of depth 1/4]",
                r / plain,
                r / t
            );
        }
        let lr = med(l, Metric::NullLatency).0 / med("tcp", Metric::NullLatency).0;
        let cr = med(l, Metric::NullRate).0 / med("tcp", Metric::NullRate).0;
        println!("  {l:<10} NULL depth-1 mean latency vs RPC/TCP {lr:.2} (<= 1.2); depth-32 calls/s {cr:.2} (>= 0.8)");
    }
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

/// One table row: the measurement's name and one cell per transport.
fn print_row(name: &str, cells: &[String]) {
    print!("{name:<32}");
    for c in cells {
        print!(" {c:>14}");
    }
    println!();
}
