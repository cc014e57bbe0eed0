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
use crate::values;

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
    #[arg(long, value_name = "N", default_value = "1", value_parser = values::at_least_one, allow_negative_numbers = true)]
    depth: usize,

    /// Connections.
    #[arg(long, value_name = "C", default_value = "1", value_parser = values::at_least_one, allow_negative_numbers = true)]
    connections: usize,

    /// How long to measure, in seconds (above 0, at most 86400).
    #[arg(long, value_name = "S", default_value = "5", value_parser = values::up_to_a_day, allow_negative_numbers = true)]
    seconds: Duration,

    /// Stop after N calls in all (or after --seconds, whichever comes
    /// first): bounds the traffic of a run whatever the machine's speed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
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
    /// A SIGINT (Ctrl-C) arrived during the run (which ends it early).
    pub interrupted: bool,
}

impl Outcome {
    /// Nothing measured: connecting or the first NULL failed with `error`.
    pub fn failed_setup(error: String) -> Self {
        Outcome {
            calls: 0,
            errors: 1,
            first_error: Some(error),
            bytes: 0,
            elapsed: Duration::ZERO,
            cpu: Duration::ZERO,
            latency: new_histogram(),
            interrupted: false,
        }
    }

    /// `x` per second of the measurement (0 when nothing was measured).
    fn per_sec(&self, x: u64) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            x as f64 / secs
        } else {
            0.0
        }
    }

    /// Completed calls per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.per_sec(self.calls)
    }

    /// Payload bytes per second.
    pub fn bytes_per_sec(&self) -> f64 {
        self.per_sec(self.bytes)
    }

    /// Whether any call succeeded (else there is no latency to report).
    pub fn has_latency(&self) -> bool {
        !self.latency.is_empty()
    }

    /// Latency percentile `q` (0..100) in microseconds; `None` when no call
    /// succeeded.
    pub fn percentile_us(&self, q: f64) -> Option<u64> {
        self.has_latency()
            .then(|| self.latency.value_at_percentile(q))
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

/// 1 µs .. 10 min, 3 significant digits.
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).expect("3 significant digits are valid"))
}

/// Bound on each connection's setup and on the first NULL of every
/// connection before the measurement (all of them together).
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Timeout of each measured call (a call still unanswered at the end of the
/// measurement is given up earlier: see [`grace`]).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `rpcrdma bench`.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let spec = Spec {
        procedure: args.procedure,
        size: if args.procedure == Proc::Null {
            0
        } else {
            args.size
        },
        depth: args.depth,
        duration: args.seconds,
        max_calls: args.calls,
    };
    if let Target::Tcp { .. } = args.url {
        args.rdma.warn_if_given("for tcp:// URLs");
    }
    // SIGINT (Ctrl-C) ends the measurement early: the calls in flight
    // complete and the summary or JSON of what was measured is printed.
    let stop = Arc::new(AtomicBool::new(false));
    let interrupted = Arc::new(AtomicBool::new(false));
    let on_sigint = {
        let stop = stop.clone();
        let interrupted = interrupted.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupted.store(true, Relaxed);
                stop.store(true, Relaxed);
                eprintln!("rpcrdma: SIGINT: ending the measurement early");
            }
        })
    };
    let (channels, device) = match setup(&args).await {
        Ok(ok) => ok,
        Err(e) => {
            // Still exactly one JSON object on stdout: nothing measured,
            // one error.
            if args.json {
                let outcome = Outcome::failed_setup(crate::report::error_chain(&e));
                println!("{}", to_json(&outcome, spec, &args.url, args.connections));
            }
            return Err(e);
        }
    };

    let progress = progress_bar(spec.duration);
    let mut outcome = measure_until(&channels, spec, progress, stop).await;
    on_sigint.abort();
    outcome.interrupted = interrupted.load(Relaxed);
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

/// Connects every connection and makes the first NULL on each, all
/// bounded in time.
async fn setup(args: &BenchArgs) -> anyhow::Result<(Vec<Arc<AnyChannel>>, Option<iwarp::Device>)> {
    let device = match args.url {
        Target::Rdma { .. } => Some(args.rdma.device()?),
        Target::Tcp { .. } => None,
    };
    let options = channel::ConnectOptions {
        timeout: CHECK_TIMEOUT,
        max_fragment: None,
        rdma: args.rdma.config()?,
        device: device.clone(),
    };
    let mut channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        channels.push(Arc::new(channel::connect(&args.url, &options).await?));
    }
    // A first verified call on each connection, outside the measurement:
    // it fails fast and clearly if the server is not an RDMATEST server,
    // and within CHECK_TIMEOUT if it does not answer at all.
    let check = async {
        for ch in &channels {
            RdmatestClient::new(&**ch)
                .with_timeout(CHECK_TIMEOUT)
                .null()
                .await?;
        }
        Ok::<(), ClientError>(())
    };
    match tokio::time::timeout(CHECK_TIMEOUT, check).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            close_all(&channels);
            return Err(anyhow::Error::new(e).context(format!("NULL via {} failed", args.url)));
        }
        Err(_) => {
            close_all(&channels);
            anyhow::bail!(
                "NULL via {} failed: no reply within {} s",
                args.url,
                CHECK_TIMEOUT.as_secs()
            );
        }
    }
    Ok((channels, device))
}

fn close_all(channels: &[Arc<AnyChannel>]) {
    for ch in channels {
        ch.close();
    }
}

/// How long calls still in flight at the end of the measurement may take
/// before they are given up and counted as errors: 2 s, or 4 times the
/// slowest call so far if that is longer, at most 10 s.
pub fn grace(slowest: Duration) -> Duration {
    (slowest * 4).clamp(Duration::from_secs(2), Duration::from_secs(10))
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
    measure_until(channels, spec, progress, Arc::new(AtomicBool::new(false))).await
}

/// [`measure`], ending early (no new calls; those in flight complete) once
/// `stop` is set.
pub async fn measure_until(
    channels: &[Arc<AnyChannel>],
    spec: Spec,
    progress: Option<indicatif::ProgressBar>,
    stop: Arc<AtomicBool>,
) -> Outcome {
    let data = match spec.procedure {
        Proc::Echo | Proc::Put => rdmatest::pattern::pattern(7, spec.size as usize),
        _ => Bytes::new(),
    };
    let expected_put = PutResult {
        length: spec.size,
        crc32c: crc32c::crc32c(&data),
    };
    let mut loads = Vec::new();
    for ch in channels {
        for _ in 0..spec.depth {
            loads.push(RdmatestLoad {
                client: RdmatestClient::new(ch.clone()).with_timeout(CALL_TIMEOUT),
                spec,
                data: data.clone(),
                expected_put,
                spare: None,
            });
        }
    }
    measure_loads(loads, spec.duration, spec.max_calls, progress, stop).await
}

/// One task of a measurement: makes its calls one after the other.
pub trait Load: Send + 'static {
    /// Makes call number `seq` of this task (0, 1, ...), verified; returns
    /// the payload bytes it moved, or what went wrong.
    fn call(&mut self, seq: u64) -> impl std::future::Future<Output = Result<u64, String>> + Send;
}

/// One RDMATEST task of `rpcrdma bench`.
struct RdmatestLoad {
    client: RdmatestClient<Arc<AnyChannel>>,
    spec: Spec,
    data: Bytes,
    expected_put: PutResult,
    /// GET: the result buffer of the previous call, reused when nothing
    /// else holds it any more (saves a large allocation and its page
    /// faults per call).
    spare: Option<BytesMut>,
}

impl Load for RdmatestLoad {
    async fn call(&mut self, seq: u64) -> Result<u64, String> {
        // A different GET seed per call, so stale data in a reused buffer
        // can never pass verification.
        one_call(
            &self.client,
            self.spec,
            &self.data,
            self.expected_put,
            seq as u32,
            &mut self.spare,
        )
        .await
        .map_err(|e| e.to_string())
    }
}

/// Runs every load as its own task (each issuing its next call when the
/// previous one completed) for `duration` or until `max_calls` calls in
/// all were issued or `stop` is set, and measures. `progress`, if given,
/// is advanced and finished.
pub async fn measure_loads<L: Load>(
    loads: Vec<L>,
    duration: Duration,
    max_calls: Option<u64>,
    progress: Option<indicatif::ProgressBar>,
    stop: Arc<AtomicBool>,
) -> Outcome {
    let calls = Arc::new(AtomicU64::new(0));
    // Calls started, against `max_calls`.
    let issued = Arc::new(AtomicU64::new(0));
    // The slowest successful call so far, microseconds (sets the grace).
    let slowest = Arc::new(AtomicU64::new(0));
    // Set when calls still in flight after the grace are to be given up.
    let (give_up_tx, give_up_rx) = tokio::sync::watch::channel(false);

    let cpu_before = process_cpu_time();
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for mut load in loads {
        let calls = calls.clone();
        let issued = issued.clone();
        let stop = stop.clone();
        let slowest = slowest.clone();
        let mut give_up = give_up_rx.clone();
        tasks.push(tokio::spawn(async move {
            let mut w = Worker::new();
            while !stop.load(Relaxed) && Instant::now() < deadline {
                if max_calls.is_some_and(|max| issued.fetch_add(1, Relaxed) >= max) {
                    break;
                }
                let t0 = Instant::now();
                let call = load.call(w.calls);
                let r = tokio::select! {
                    r = call => Some(r),
                    _ = give_up.wait_for(|g| *g) => None,
                };
                let Some(r) = r else {
                    // No reply within the grace after the deadline.
                    w.calls += 1;
                    w.errors += 1;
                    w.abandoned += 1;
                    calls.fetch_add(1, Relaxed);
                    break;
                };
                let us = t0.elapsed().as_micros() as u64;
                calls.fetch_add(1, Relaxed);
                w.calls += 1;
                match r {
                    Ok(bytes) => {
                        w.bytes += bytes;
                        w.latency.saturating_record(us.max(1));
                        slowest.fetch_max(us, Relaxed);
                    }
                    Err(e) => {
                        w.errors += 1;
                        w.first_error.get_or_insert(e);
                        // Do not spin on a dead connection.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            w
        }));
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
                    elapsed.as_secs_f64().min(duration.as_secs_f64()),
                    duration.as_secs_f64(),
                    n as f64 / elapsed.as_secs_f64().max(1e-3)
                ));
                // Done at the deadline, or earlier when --calls ran out.
                if elapsed >= duration || stop.load(Relaxed) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            bar.finish_and_clear();
        })
    });

    // Wait for the tasks until the deadline, then for at most the grace
    // (known only then: it depends on the slowest call so far); whatever is
    // still in flight after that is given up.
    let mut results = Vec::with_capacity(tasks.len());
    let mut done = 0;
    let mut limit = deadline;
    let mut grace_started = false;
    let mut gave_up = None;
    while done < tasks.len() {
        match tokio::time::timeout_at(limit.into(), &mut tasks[done]).await {
            Ok(r) => {
                results.push(r);
                done += 1;
            }
            Err(_) if !grace_started => {
                grace_started = true;
                limit = deadline + grace(Duration::from_micros(slowest.load(Relaxed)));
            }
            Err(_) => {
                gave_up = Some(limit - deadline);
                let _ = give_up_tx.send(true);
                break;
            }
        }
    }
    for t in &mut tasks[done..] {
        results.push(t.await);
    }
    let mut elapsed = start.elapsed();
    let cpu = process_cpu_time().saturating_sub(cpu_before);
    stop.store(true, Relaxed);
    if let Some(t) = ticker {
        let _ = t.await;
    }
    let mut total = Worker::new();
    for r in results {
        match r {
            Ok(w) => total.merge(w),
            Err(e) => {
                total.calls += 1;
                total.errors += 1;
                total
                    .first_error
                    .get_or_insert_with(|| format!("task failed: {e}"));
            }
        }
    }
    if let Some(g) = gave_up {
        // Rates over the measured window, not over the wait for replies
        // that never came.
        elapsed = duration;
        if total.abandoned > 0 {
            total.first_error.get_or_insert_with(|| {
                format!(
                    "{} call(s) had no reply {:.1} s after the end of the measurement (counted as errors)",
                    total.abandoned,
                    g.as_secs_f64()
                )
            });
        }
    }
    Outcome {
        calls: total.calls,
        errors: total.errors,
        first_error: total.first_error,
        bytes: total.bytes,
        elapsed,
        cpu,
        latency: total.latency,
        interrupted: false,
    }
}

/// One task's tallies.
struct Worker {
    calls: u64,
    errors: u64,
    /// Calls given up after the grace (also counted in `errors`).
    abandoned: u64,
    bytes: u64,
    first_error: Option<String>,
    latency: Histogram<u64>,
}

impl Worker {
    fn new() -> Self {
        Worker {
            calls: 0,
            errors: 0,
            abandoned: 0,
            bytes: 0,
            first_error: None,
            latency: new_histogram(),
        }
    }

    fn merge(&mut self, w: Worker) {
        self.calls += w.calls;
        self.errors += w.errors;
        self.abandoned += w.abandoned;
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
            // Kept as it is, not cleared: RPC-over-RDMA registers a reused
            // buffer without zeroing it again (a cleared one would be zeroed
            // per call, a 1 MiB memset), and the next call's new seed means
            // stale bytes cannot verify.
            if let Ok(b) = got.try_into_mut() {
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

/// What a run was, for its summary and JSON object.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// "rdma" or "tcp".
    pub transport: &'static str,
    /// The URL as given.
    pub url: String,
    /// The procedure's name ("GET", "READ", ...).
    pub proc_name: &'static str,
    /// "GET 1 MiB", "READ 4 KiB random", ...
    pub what: String,
    /// Data size per call.
    pub size: u32,
    /// Calls in flight per connection.
    pub depth: usize,
    /// Connections.
    pub connections: usize,
}

impl RunInfo {
    /// The run of `rpcrdma bench`.
    pub fn rdmatest(spec: Spec, url: &Target, connections: usize) -> Self {
        RunInfo {
            transport: transport_name(url),
            url: url.to_string(),
            proc_name: spec.procedure.name(),
            what: describe(spec),
            size: spec.size,
            depth: spec.depth,
            connections,
        }
    }
}

/// "rdma" or "tcp".
pub fn transport_name(url: &Target) -> &'static str {
    match url {
        Target::Rdma { .. } => "rdma",
        Target::Tcp { .. } => "tcp",
    }
}

/// The progress bar of a measurement of `duration` (shown on a terminal).
pub fn progress_bar(duration: Duration) -> Option<indicatif::ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(duration.as_millis() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} [{bar:30}] {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar
    })
}

/// The `--json` object of `rpcrdma bench`.
pub fn to_json(o: &Outcome, spec: Spec, url: &Target, connections: usize) -> serde_json::Value {
    run_json(o, &RunInfo::rdmatest(spec, url, connections))
}

/// The `--json` object of any measured run.
pub fn run_json(o: &Outcome, run: &RunInfo) -> serde_json::Value {
    serde_json::json!({
        "transport": run.transport,
        "url": run.url,
        "proc": run.proc_name,
        "size": run.size,
        "depth": run.depth,
        "connections": run.connections,
        "seconds": o.elapsed.as_secs_f64(),
        "interrupted": o.interrupted,
        "ops": o.calls,
        "errors": o.errors,
        "first_error": o.first_error,
        "ops_per_sec": o.ops_per_sec(),
        "bytes": o.bytes,
        "bytes_per_sec": o.bytes_per_sec(),
        "mb_per_sec": o.bytes_per_sec() / 1e6,
        // null throughout when no call succeeded.
        "latency_us": {
            "p50": o.percentile_us(50.0),
            "p99": o.percentile_us(99.0),
            "p999": o.percentile_us(99.9),
            "min": o.has_latency().then(|| o.latency.min()),
            "max": o.has_latency().then(|| o.latency.max()),
            "mean": o.has_latency().then(|| o.latency.mean()),
        },
        "cpu_seconds": o.cpu.as_secs_f64(),
        "cpu_sec_per_gb": o.cpu_sec_per_gb(),
        "cpu_us_per_call": o.cpu_us_per_call(),
        "cpu_measured": "this process (client), all threads, user+system, CLOCK_PROCESS_CPUTIME_ID",
    })
}

fn print_summary(o: &Outcome, spec: Spec, url: &Target, connections: usize) {
    print_run_summary(
        o,
        &RunInfo::rdmatest(spec, url, connections),
        "rpcrdma bench",
    );
}

/// The human-readable summary of any measured run; `title` starts it.
pub fn print_run_summary(o: &Outcome, run: &RunInfo, title: &str) {
    println!(
        "{title}: {} via {}, {} connection(s) x depth {}, {:.1} s",
        run.what,
        run.url,
        run.connections,
        run.depth,
        o.elapsed.as_secs_f64()
    );
    println!(
        "  calls        {} ({} errors), {:.0} calls/s",
        o.calls,
        o.errors,
        o.ops_per_sec()
    );
    println!(
        "  payload      {:.1} MB/s ({:.1} MiB/s)",
        o.bytes_per_sec() / 1e6,
        o.bytes_per_sec() / (1 << 20) as f64
    );
    match (
        o.percentile_us(50.0),
        o.percentile_us(99.0),
        o.percentile_us(99.9),
    ) {
        (Some(p50), Some(p99), Some(p999)) => println!(
            "  latency      p50 {p50} µs, p99 {p99} µs, p99.9 {p999} µs (min {}, max {})",
            o.latency.min(),
            o.latency.max()
        ),
        _ => println!("  latency      n/a (no call succeeded)"),
    }
    let per_gb = match o.cpu_sec_per_gb() {
        Some(per_gb) => format!("{per_gb:.2} CPU-s per GB"),
        None => "CPU-s per GB n/a (no payload)".into(),
    };
    let per_call = match o.cpu_us_per_call() {
        Some(per_call) => format!("{per_call:.1} CPU-µs per call"),
        None => "CPU-µs per call n/a (no calls)".into(),
    };
    println!(
        "  client CPU   {:.2} s, {per_gb}, {per_call} (this process, all threads, user+system)",
        o.cpu.as_secs_f64()
    );
    if let Some(e) = &o.first_error {
        println!("  first error  {e}");
    }
}
