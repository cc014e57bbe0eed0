//! `rpcrdma bench URL`: verified RDMATEST calls for a fixed time; ops/s,
//! payload throughput, latency percentiles and the client's CPU cost.
//!
//! C connections each carry N calls in flight (N tasks per connection, each
//! issuing its next call when the previous one completed). Every call is
//! verified (ECHO bytes compared, PUT length and CRC-32C checked, GET data
//! checked against the pattern); a failed or wrong call counts as an error.
//!
//! What is measured:
//! - ops/s: completed calls (successful or not) / measured wall time;
//! - payload bytes: per successful call, PUT and GET count SIZE, ECHO counts
//!   2 x SIZE (it moves SIZE each way), NULL counts 0; MB = 10^6 bytes;
//! - latency: from issuing a call to its verified result, in microseconds
//!   (hdrhistogram, 3 significant digits), successful calls only;
//! - client CPU: `CLOCK_PROCESS_CPUTIME_ID` of this process (all threads,
//!   user + system) over the measured interval, i.e. the requester's RPC,
//!   transport and iWARP work plus verification — not the server's, which
//!   normally runs in another process (`rpcrdma demo` runs both in one
//!   process and says so).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::{Bytes, BytesMut};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use oncrpc::{Channel, Payload, Request};
use rdmatest::{ClientError, PutResult, RdmatestClient};

use crate::channel::{self, AnyChannel};
use crate::cpu::process_cpu_time;
use crate::rdma_opts::RdmaArgs;
use crate::size::{format_size, parse_size_u32};
use crate::target::{parse_target, Target};

/// Arguments of `rpcrdma bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The server: rdma://HOST:PORT or tcp://HOST:PORT.
    #[arg(value_name = "URL", value_parser = parse_target)]
    url: Target,

    /// The procedure to call.
    #[arg(long = "proc", value_enum, default_value_t = Proc::Null)]
    procedure: Proc,

    /// Data size of ECHO, PUT and GET (bytes, or with a unit: 4k, 1MiB);
    /// ignored by NULL.
    #[arg(long, value_name = "BYTES", default_value = "4KiB", value_parser = parse_size_u32)]
    size: u32,

    /// Calls in flight per connection.
    #[arg(long, value_name = "N", default_value_t = 1)]
    depth: usize,

    /// Connections.
    #[arg(long, value_name = "C", default_value_t = 1)]
    connections: usize,

    /// How long to measure, in seconds.
    #[arg(long, value_name = "S", default_value_t = 5.0)]
    seconds: f64,

    /// Stop after N calls in all (or after --seconds, whichever comes
    /// first): bounds the traffic of a run whatever the machine's speed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    calls: Option<u64>,

    /// Print exactly one JSON object on stdout (and nothing else there).
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    rdma: RdmaArgs,
}

/// A benchmarked procedure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Proc {
    /// NULL: no data; measures the round trip.
    Null,
    /// ECHO: SIZE bytes each way.
    Echo,
    /// PUT: SIZE bytes to the server (Read chunk over RDMA).
    Put,
    /// GET: SIZE bytes from the server (Write chunk over RDMA).
    Get,
}

impl Proc {
    /// "NULL", "ECHO", ...
    pub fn name(self) -> &'static str {
        match self {
            Proc::Null => "NULL",
            Proc::Echo => "ECHO",
            Proc::Put => "PUT",
            Proc::Get => "GET",
        }
    }
}

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Procedure.
    pub procedure: Proc,
    /// Data size (0 for NULL).
    pub size: u32,
    /// Calls in flight per connection.
    pub depth: usize,
    /// How long.
    pub duration: Duration,
    /// At most this many calls in all (the run ends early when they are
    /// done); `None`: as many as `duration` allows.
    pub max_calls: Option<u64>,
}

/// What a run measured.
#[derive(Debug)]
pub struct Outcome {
    /// Completed calls (including failed ones).
    pub calls: u64,
    /// Failed or wrongly answered calls.
    pub errors: u64,
    /// The first error seen, for the report.
    pub first_error: Option<String>,
    /// Payload bytes of successful calls.
    pub bytes: u64,
    /// Measured wall time.
    pub elapsed: Duration,
    /// Process CPU time over the run.
    pub cpu: Duration,
    /// Latencies of successful calls, microseconds.
    pub latency: Histogram<u64>,
}

impl Outcome {
    /// Completed calls per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }

    /// Payload bytes per second.
    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64()
    }

    /// Latency percentile `q` (0..100) in microseconds.
    pub fn percentile_us(&self, q: f64) -> u64 {
        self.latency.value_at_percentile(q)
    }

    /// CPU seconds per 10^9 payload bytes (`None` without payload).
    pub fn cpu_sec_per_gb(&self) -> Option<f64> {
        (self.bytes > 0).then(|| self.cpu.as_secs_f64() / (self.bytes as f64 / 1e9))
    }

    /// CPU microseconds per call (`None` without calls).
    pub fn cpu_us_per_call(&self) -> Option<f64> {
        (self.calls > 0).then(|| self.cpu.as_secs_f64() * 1e6 / self.calls as f64)
    }
}

/// Runs `rpcrdma bench`.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    if !(args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= 86_400.0) {
        anyhow::bail!(
            "invalid --seconds {}: expected 0 < S <= 86400",
            args.seconds
        );
    }
    if args.depth == 0 || args.connections == 0 {
        anyhow::bail!("--depth and --connections must be at least 1");
    }
    let spec = Spec {
        procedure: args.procedure,
        size: if args.procedure == Proc::Null {
            0
        } else {
            args.size
        },
        depth: args.depth,
        duration: Duration::from_secs_f64(args.seconds),
        max_calls: args.calls,
    };
    let device = match args.url {
        Target::Rdma { .. } => Some(args.rdma.device()?),
        Target::Tcp { .. } => None,
    };
    let options = channel::ConnectOptions {
        timeout: Duration::from_secs(10),
        max_fragment: None,
        rdma: args.rdma.config()?,
        device: device.clone(),
    };
    let mut channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        channels.push(Arc::new(channel::connect(&args.url, &options).await?));
    }
    // A first verified call on each connection, outside the measurement:
    // it fails fast and clearly if the server is not an RDMATEST server.
    for ch in &channels {
        rdmatest::client::null(&**ch)
            .await
            .with_context(|| format!("NULL via {} failed", args.url))?;
    }

    let progress = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(spec.duration.as_millis() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} [{bar:30}] {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar
    });
    let outcome = measure(&channels, spec, progress).await;
    for ch in &channels {
        ch.close();
    }
    if let Some(dev) = &device {
        dev.flush_capture()
            .context("cannot write the capture file")?;
    }

    let what = describe(spec);
    if args.json {
        let json = to_json(&outcome, spec, &args.url, args.connections);
        println!("{json}");
    } else {
        print_summary(&outcome, spec, &args.url, args.connections);
    }
    if outcome.errors > 0 {
        anyhow::bail!(
            "{} of {} calls of {what} failed; first error: {}",
            outcome.errors,
            outcome.calls,
            outcome.first_error.as_deref().unwrap_or("?")
        );
    }
    Ok(())
}

/// "GET 1 MiB" or "NULL".
pub fn describe(spec: Spec) -> String {
    match spec.procedure {
        Proc::Null => "NULL".into(),
        p => format!("{} {}", p.name(), format_size(spec.size.into())),
    }
}

/// Runs `spec` on every channel (`spec.depth` calls in flight on each)
/// and measures. `progress`, if given, is advanced and finished.
pub async fn measure(
    channels: &[Arc<AnyChannel>],
    spec: Spec,
    progress: Option<indicatif::ProgressBar>,
) -> Outcome {
    let data = match spec.procedure {
        Proc::Echo | Proc::Put => rdmatest::pattern::pattern(7, spec.size as usize),
        _ => Bytes::new(),
    };
    let expected_put = PutResult {
        length: spec.size,
        crc32c: crc32c::crc32c(&data),
    };
    let calls = Arc::new(AtomicU64::new(0));
    // Calls started, against `spec.max_calls`.
    let issued = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));

    let cpu_before = process_cpu_time();
    let start = Instant::now();
    let deadline = start + spec.duration;
    let mut tasks = Vec::new();
    for ch in channels {
        for _ in 0..spec.depth {
            let client = RdmatestClient::new(ch.clone()).with_timeout(Duration::from_secs(30));
            let data = data.clone();
            let calls = calls.clone();
            let issued = issued.clone();
            let stop = stop.clone();
            tasks.push(tokio::spawn(async move {
                let mut w = Worker::new();
                while !stop.load(Relaxed) && Instant::now() < deadline {
                    if spec
                        .max_calls
                        .is_some_and(|max| issued.fetch_add(1, Relaxed) >= max)
                    {
                        break;
                    }
                    let t0 = Instant::now();
                    // A different GET seed per call, so stale data in a reused
                    // buffer can never pass verification.
                    let seed = w.calls as u32;
                    let r = one_call(&client, spec, &data, expected_put, seed, &mut w.spare).await;
                    let us = t0.elapsed().as_micros() as u64;
                    calls.fetch_add(1, Relaxed);
                    w.calls += 1;
                    match r {
                        Ok(bytes) => {
                            w.bytes += bytes;
                            w.latency.saturating_record(us.max(1));
                        }
                        Err(e) => {
                            w.errors += 1;
                            w.first_error.get_or_insert_with(|| e.to_string());
                            // Do not spin on a dead connection.
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
                w
            }));
        }
    }

    let ticker = progress.map(|bar| {
        let calls = calls.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            loop {
                let elapsed = start.elapsed();
                let n = calls.load(Relaxed);
                bar.set_position(elapsed.as_millis() as u64);
                bar.set_message(format!(
                    "{:.1}/{:.1} s, {n} calls, {:.0} calls/s",
                    elapsed.as_secs_f64().min(spec.duration.as_secs_f64()),
                    spec.duration.as_secs_f64(),
                    n as f64 / elapsed.as_secs_f64().max(1e-3)
                ));
                // Done at the deadline, or earlier when --calls ran out.
                if elapsed >= spec.duration || stop.load(Relaxed) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            bar.finish_and_clear();
        })
    });

    let mut total = Worker::new();
    for t in tasks {
        match t.await {
            Ok(w) => total.merge(w),
            Err(e) => {
                total.errors += 1;
                total
                    .first_error
                    .get_or_insert_with(|| format!("task failed: {e}"));
            }
        }
    }
    let elapsed = start.elapsed();
    let cpu = process_cpu_time().saturating_sub(cpu_before);
    stop.store(true, Relaxed);
    if let Some(t) = ticker {
        let _ = t.await;
    }
    Outcome {
        calls: total.calls,
        errors: total.errors,
        first_error: total.first_error,
        bytes: total.bytes,
        elapsed,
        cpu,
        latency: total.latency,
    }
}

/// One task's tallies.
struct Worker {
    calls: u64,
    errors: u64,
    bytes: u64,
    first_error: Option<String>,
    latency: Histogram<u64>,
    /// GET: the result buffer of the previous call, reused when nothing
    /// else holds it any more (saves a large allocation and its page
    /// faults per call).
    spare: Option<BytesMut>,
}

impl Worker {
    fn new() -> Self {
        Worker {
            calls: 0,
            errors: 0,
            bytes: 0,
            first_error: None,
            spare: None,
            // 1 µs .. 10 min, 3 significant digits.
            latency: Histogram::new_with_bounds(1, 600_000_000, 3)
                .unwrap_or_else(|_| Histogram::new(3).expect("3 significant digits are valid")),
        }
    }

    fn merge(&mut self, w: Worker) {
        self.calls += w.calls;
        self.errors += w.errors;
        self.bytes += w.bytes;
        if self.first_error.is_none() {
            self.first_error = w.first_error;
        }
        // Same bounds on both sides: adding cannot fail.
        let _ = self.latency.add(&w.latency);
    }
}

/// One verified call; returns the payload bytes it moved.
async fn one_call<C: Channel>(
    client: &RdmatestClient<C>,
    spec: Spec,
    data: &Bytes,
    expected_put: PutResult,
    seed: u32,
    spare: &mut Option<BytesMut>,
) -> Result<u64, ClientError> {
    let size = u64::from(spec.size);
    match spec.procedure {
        Proc::Null => client.null().await.map(|()| 0),
        Proc::Echo => client.echo(data.clone()).await.map(|_| 2 * size),
        Proc::Get => {
            let len = spec.size as usize;
            let buf = spare
                .take()
                .filter(|b| b.capacity() >= len)
                .unwrap_or_else(|| BytesMut::with_capacity(len));
            // Verified (length and every pattern byte) by `get_into`.
            let got = client.get_into(spec.size, seed, buf).await?;
            if let Ok(mut b) = got.try_into_mut() {
                b.clear();
                *spare = Some(b);
            }
            Ok(size)
        }
        Proc::Put => {
            // Like RdmatestClient::put, with the CRC-32C of the (constant)
            // data computed once rather than per call.
            let mut args = Payload::builder();
            args.ddp_opaque(data.clone());
            let req = Request::new(
                rdmatest::PROGRAM,
                rdmatest::VERSION,
                rdmatest::proto::PROC_PUT,
                args.finish(),
            )
            .with_timeout(Duration::from_secs(30));
            let res = client.channel().call(req).await?;
            rdmatest::client::check_put(&res, expected_put)?;
            Ok(size)
        }
    }
}

/// The `--json` object.
pub fn to_json(o: &Outcome, spec: Spec, url: &Target, connections: usize) -> serde_json::Value {
    let transport = match url {
        Target::Rdma { .. } => "rdma",
        Target::Tcp { .. } => "tcp",
    };
    serde_json::json!({
        "transport": transport,
        "url": url.to_string(),
        "proc": spec.procedure.name(),
        "size": spec.size,
        "depth": spec.depth,
        "connections": connections,
        "seconds": o.elapsed.as_secs_f64(),
        "ops": o.calls,
        "errors": o.errors,
        "first_error": o.first_error,
        "ops_per_sec": o.ops_per_sec(),
        "bytes": o.bytes,
        "bytes_per_sec": o.bytes_per_sec(),
        "mb_per_sec": o.bytes_per_sec() / 1e6,
        "latency_us": {
            "p50": o.percentile_us(50.0),
            "p99": o.percentile_us(99.0),
            "p999": o.percentile_us(99.9),
            "min": o.latency.min(),
            "max": o.latency.max(),
            "mean": o.latency.mean(),
        },
        "cpu_seconds": o.cpu.as_secs_f64(),
        "cpu_sec_per_gb": o.cpu_sec_per_gb(),
        "cpu_us_per_call": o.cpu_us_per_call(),
        "cpu_measured": "this process (client), all threads, user+system, CLOCK_PROCESS_CPUTIME_ID",
    })
}

fn print_summary(o: &Outcome, spec: Spec, url: &Target, connections: usize) {
    println!(
        "rpcrdma bench: {} via {url}, {connections} connection(s) x depth {}, {:.1} s",
        describe(spec),
        spec.depth,
        o.elapsed.as_secs_f64()
    );
    println!(
        "  calls        {} ({} errors), {:.0} calls/s",
        o.calls,
        o.errors,
        o.ops_per_sec()
    );
    if o.bytes > 0 {
        println!(
            "  payload      {:.1} MB/s ({:.1} MiB/s)",
            o.bytes_per_sec() / 1e6,
            o.bytes_per_sec() / (1 << 20) as f64
        );
    }
    println!(
        "  latency      p50 {} µs, p99 {} µs, p99.9 {} µs (min {}, max {})",
        o.percentile_us(50.0),
        o.percentile_us(99.0),
        o.percentile_us(99.9),
        o.latency.min(),
        o.latency.max()
    );
    let mut cpu = format!("  client CPU   {:.2} s", o.cpu.as_secs_f64());
    if let Some(per_gb) = o.cpu_sec_per_gb() {
        cpu.push_str(&format!(", {per_gb:.2} CPU-s per GB"));
    }
    if let Some(per_call) = o.cpu_us_per_call() {
        cpu.push_str(&format!(", {per_call:.1} CPU-µs per call"));
    }
    cpu.push_str(" (this process, all threads, user+system)");
    println!("{cpu}");
    if let Some(e) = &o.first_error {
        println!("  first error  {e}");
    }
}
