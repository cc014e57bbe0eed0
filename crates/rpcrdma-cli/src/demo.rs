//! `rpcrdma demo`: a guided tour. Starts an RDMATEST server on both
//! transports and a client in this process (software iWARP over real TCP on
//! 127.0.0.1, ports chosen by the OS), makes one call of every
//! RPC-over-RDMA message kind and prints what went on the wire, then
//! compares RPC-over-RDMA with ONC RPC over TCP in a short benchmark.
//!
//! Exits 0 only if every call verified and went on the wire as expected.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use oncrpc::{Channel, Dispatcher, Payload, Request};
use oncrpc_tcp::{ServerConfig, TcpServer};
use rdmatest::{ClientError, GetArgs, PutResult, RdmatestClient, RdmatestServer};
use rpcrdma::{Bindings, CallKind, CallReport, RdmaServer, ReplyMode};
use xdr::XdrRead;

use crate::bench::{self, Outcome, Proc, Spec};
use crate::channel::{self, AnyChannel, Recorder};
use crate::rdma_opts::RdmaArgs;
use crate::report::rdma_error_kind;
use crate::report::{call_kind, describe, reply_mode};
use crate::size::{bytes_word, format_size};
use crate::target::Target;

/// Largest ECHO/PUT/GET data of the demo server (a GET for more shows the
/// unused Write chunk).
const MAX_DATA: u32 = 4 << 20;

/// Benchmark rounds per transport and measurement (interleaved).
const ROUNDS: u32 = 2;

/// Arguments of `rpcrdma demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Seconds per benchmark measurement (6 measurements: NULL, GET, PUT on
    /// each transport; each split into 2 interleaved rounds, best kept);
    /// above 0, at most 60.
    #[arg(long, value_name = "S", default_value = "0.5", value_parser = crate::values::demo_seconds, allow_negative_numbers = true)]
    bench_seconds: Duration,

    /// At most N calls per benchmark round (a round ends at whichever of
    /// its time and N comes first): bounds the benchmark's traffic.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    bench_calls: Option<u64>,

    /// Skip the RDMA vs TCP benchmark.
    #[arg(long)]
    no_bench: bool,

    #[command(flatten)]
    rdma: RdmaArgs,
}

/// What a step expects on the wire.
struct Expect {
    call: CallKind,
    reply: ReplyMode,
    /// Bytes written into each Write chunk, when the step offers any.
    write_chunks: Option<Vec<u64>>,
    /// Bytes in (non-zero-position) Read chunks.
    read_chunk_bytes: Option<u64>,
}

/// Runs the demo.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let config = args.rdma.config()?;
    let inline = config.inline_send;

    println!("rpcrdma demo: RPC-over-RDMA Version One (RFC 8166) on a software iWARP RNIC");
    println!("=============================================================================");
    println!(
        "The RDMATEST program ({:#x} v1) is served over",
        rdmatest::PROGRAM
    );
    println!("  - RPC-over-RDMA: iWARP (MPA/DDP/RDMAP, implemented in userspace) over TCP,");
    println!("  - ONC RPC over TCP with record marking (RFC 5531), the usual baseline,");
    println!("and a client in this same process calls it over 127.0.0.1. Every result is");
    println!("verified (ECHO bytes, PUT length + CRC-32C, GET pattern bytes).");
    println!();

    // --- servers ---------------------------------------------------------
    let service = RdmatestServer::new(rdmatest::ServerConfig {
        max_get_len: MAX_DATA,
        max_echo_len: MAX_DATA,
        max_put_len: MAX_DATA,
        ..Default::default()
    });
    let dispatcher = Dispatcher::builder().service(service).build();
    let server_dev = iwarp::Device::default();
    let rdma_server = RdmaServer::bind(
        server_dev,
        "127.0.0.1:0".parse()?,
        dispatcher.clone(),
        config.clone(),
        Bindings::rdmatest(),
    )
    .await
    .context("cannot start the RPC-over-RDMA server")?;
    let tcp_server = TcpServer::bind("127.0.0.1:0", Arc::new(dispatcher), ServerConfig::default())
        .await
        .context("cannot start the TCP server")?;
    let tcp_addr = tcp_server.local_addr()?;
    let tcp_stop = tcp_server.shutdown_handle();
    let tcp_task = tokio::spawn(tcp_server.run());
    let rdma_url = Target::Rdma {
        addr: rdma_server.local_addr().to_string(),
    };
    let tcp_url = Target::Tcp {
        addr: tcp_addr.to_string(),
    };
    println!("Servers: {rdma_url} (RPC-over-RDMA) and {tcp_url} (RPC over TCP)");

    // --- client ----------------------------------------------------------
    let client_dev = args.rdma.device()?;
    let options = channel::ConnectOptions {
        timeout: Duration::from_secs(10),
        max_fragment: None,
        rdma: config.clone(),
        device: Some(client_dev.clone()),
    };
    let rdma = channel::connect(&rdma_url, &options).await?;
    if let AnyChannel::Rdma(c) = &rdma {
        let th = c.thresholds().unwrap_or_default();
        println!(
            "Connected; RFC 8797 private data negotiated inline thresholds {} B (calls) / {} B (replies), remote invalidation {}.",
            th.call_inline,
            th.reply_inline,
            if c.remote_invalidation() == Some(true) { "on" } else { "off" }
        );
    }
    println!();
    println!("1. Every RPC-over-RDMA message kind");
    println!("-----------------------------------");

    let mut failures = Vec::new();
    // Steps left out because the options given rule them out.
    let mut skipped: Vec<&'static str> = Vec::new();
    let recorder = Recorder::new(&rdma);
    let typed = RdmatestClient::new(&recorder).with_timeout(Duration::from_secs(30));
    // Well above the inline threshold (so Long messages are needed), and
    // below the server maximum.
    let big = (16 * inline as usize).min(1 << 20);

    // Short Call / Short Reply.
    let r = typed.null().await.map(|()| "void reply".to_string());
    step(
        &mut failures,
        &recorder,
        "NULL",
        "Short Call + Short Reply: the whole RPC message fits in one Send each way",
        r,
        Expect::short(),
    );
    let r = typed
        .echo(rdmatest::pattern::pattern(1, 100))
        .await
        .map(|d| format!("{} echoed identically", bytes_word(d.len() as u64)));
    step(
        &mut failures,
        &recorder,
        "ECHO 100 B",
        "Short Call + Short Reply with data: small enough to stay inline",
        r,
        Expect::short(),
    );

    // Chunked Call: PUT's data is DDP-eligible and moves in a Read chunk.
    let size = 1u32 << 20;
    let r = typed
        .put(rdmatest::pattern::pattern(2, size as usize))
        .await
        .map(|p| {
            format!(
                "server saw {} bytes, CRC-32C {:#010x} matches",
                p.length, p.crc32c
            )
        });
    step(
        &mut failures,
        &recorder,
        "PUT 1 MiB",
        "Chunked Call: the data is registered and the SERVER pulls it with RDMA Read (Read chunk)",
        r,
        Expect {
            call: CallKind::Chunked,
            reply: ReplyMode::Short,
            write_chunks: None,
            read_chunk_bytes: Some(size.into()),
        },
    );

    // Write chunk: GET's result is DDP-eligible and is RDMA-written.
    let r = typed
        .get(size, 3)
        .await
        .map(|d| format!("{} of pattern verified", bytes_word(d.len() as u64)));
    step(
        &mut failures,
        &recorder,
        "GET 1 MiB",
        "Write chunk: the client offers a buffer, the SERVER pushes the data with RDMA Write",
        r,
        Expect::write(vec![size.into()]),
    );

    // Two Write chunks.
    let (a, b) = (64u32 << 10, 12_345u32);
    let r = typed.get2(a, b, 5).await.map(|g| {
        format!(
            "a: {} bytes, marker 0xfeedface, b: {} bytes, all verified",
            g.a.len(),
            g.b.len()
        )
    });
    step(
        &mut failures,
        &recorder,
        "GET2 64 KiB + 12345 B",
        "Two Write chunks: each DDP-eligible result lands in its own buffer",
        r,
        Expect::write(vec![a.into(), b.into()]),
    );

    // Unused Write chunk: GET above the server's maximum answers status 1.
    let over = MAX_DATA + 1;
    // The client must be able to offer a chunk that large (1 MiB segments).
    if u64::from(config.max_segments) << 20 >= u64::from(over) {
        let r = match typed.get(over, 1).await {
            Err(ClientError::GetStatus(1)) => Ok(format!(
                "server refused with status 1 (above its {} maximum), as expected",
                format_size(MAX_DATA.into())
            )),
            Ok(_) => Err("the server returned data above its maximum".to_string()),
            Err(e) => Err(e.to_string()),
        };
        step_str(
            &mut failures,
            &recorder,
            &format!("GET {} + 1 B", format_size(MAX_DATA.into())),
            "Unused Write chunk: the client offered a buffer, the reply needed none (0 bytes written)",
            r,
            Expect::write(vec![0]),
        );
    } else {
        skipped.push("unused Write chunk");
        println!(
            "* GET {} + 1 B: skipped (unused Write chunk): with --max-segments {} the client cannot offer a chunk that large",
            format_size(MAX_DATA.into()),
            config.max_segments
        );
    }

    // Long Call: a PUT whose data is NOT marked DDP-eligible travels in the
    // Position-Zero Read chunk (RDMA_NOMSG).
    let data = rdmatest::pattern::pattern(4, big);
    let mut p = Payload::builder();
    p.opaque_bytes(data.clone());
    let r = put_checked(
        &recorder,
        Request::new(
            rdmatest::PROGRAM,
            rdmatest::VERSION,
            rdmatest::proto::PROC_PUT,
            p.finish(),
        ),
        &data,
    )
    .await;
    step_str(
        &mut failures,
        &recorder,
        &format!("PUT {} as plain XDR", format_size(big as u64)),
        "Long Call: too big for a Send and nothing DDP-eligible, so the WHOLE call is RDMA-Read (position zero)",
        r,
        Expect {
            call: CallKind::Long,
            reply: ReplyMode::Short,
            write_chunks: None,
            read_chunk_bytes: None,
        },
    );

    // Long Reply: a GET without a Write chunk gets its result in the Reply
    // chunk.
    let len = big as u32;
    let mut p = Payload::builder();
    p.item(&GetArgs {
        length: len,
        seed: 6,
    });
    let req = Request::new(
        rdmatest::PROGRAM,
        rdmatest::VERSION,
        rdmatest::proto::PROC_GET,
        p.finish(),
    )
    .with_max_reply_len(big + 600);
    let r = get_checked(&recorder, req, len, 6).await;
    step_str(
        &mut failures,
        &recorder,
        &format!("GET {} without a Write chunk", format_size(big as u64)),
        "Long Reply: the reply is too big for a Send, so the server RDMA-Writes it all into the Reply chunk",
        r,
        Expect {
            call: CallKind::Short,
            reply: ReplyMode::Long,
            write_chunks: None,
            read_chunk_bytes: None,
        },
    );

    // Long Call and Long Reply at once: a large ECHO.
    let r = typed
        .echo(rdmatest::pattern::pattern(8, big))
        .await
        .map(|d| format!("{} echoed identically", bytes_word(d.len() as u64)));
    step(
        &mut failures,
        &recorder,
        &format!("ECHO {}", format_size(big as u64)),
        "Long Call + Long Reply: both directions move through chunks",
        r,
        Expect {
            call: CallKind::Long,
            reply: ReplyMode::Long,
            write_chunks: None,
            read_chunk_bytes: None,
        },
    );

    // RDMA_ERROR: a second, tightly limited server takes one segment per
    // chunk; a PUT whose Read chunk needs two is answered ERR_CHUNK.
    if !err_chunk_step(&mut failures, &config, &client_dev).await {
        skipped.push("RDMA_ERROR (ERR_CHUNK)");
    }

    let c = rdma_server.stats().counters.snapshot();
    let stats = rdma_server.stats();
    println!(
        "Server side: calls {} Short / {} Chunked / {} Long; replies {} Short / {} Long;",
        c.calls_short, c.calls_chunked, c.calls_long, c.replies_short, c.replies_long
    );
    println!(
        "  chunks: {} Read, {} Position-Zero, {} Write, {} Reply; {} moved by {} RDMA Reads and {} RDMA Writes;",
        c.read_chunks,
        c.position_zero_chunks,
        c.write_chunks,
        c.reply_chunks,
        format_size(c.chunk_bytes),
        stats.rdma_reads.load(std::sync::atomic::Ordering::Relaxed),
        stats.rdma_writes.load(std::sync::atomic::Ordering::Relaxed)
    );
    println!(
        "  {} replies by Send with Invalidate; protocol errors {}.",
        stats
            .send_with_invalidate
            .load(std::sync::atomic::Ordering::Relaxed),
        c.err_vers + c.err_chunk + c.garbage_args + c.discarded + c.closed
    );
    println!();

    // --- bench -----------------------------------------------------------
    let mut bench_errors = 0;
    if !args.no_bench {
        let tcp = channel::connect(&tcp_url, &options).await?;
        let rdma = Arc::new(rdma);
        let tcp = Arc::new(tcp);
        let secs = args.bench_seconds;
        let cap = args
            .bench_calls
            .map(|n| format!(", at most {n} calls per round"))
            .unwrap_or_default();
        let heading = format!(
            "2. RPC-over-RDMA vs RPC over TCP ({:.1} s per measurement in {ROUNDS} interleaved rounds{cap}, best kept)",
            args.bench_seconds.as_secs_f64()
        );
        println!("{heading}");
        println!("{}", "-".repeat(heading.chars().count()));
        let cases = [
            (
                "NULL, depth 1",
                Spec {
                    procedure: Proc::Null,
                    size: 0,
                    depth: 1,
                    duration: secs,
                    max_calls: args.bench_calls,
                },
            ),
            (
                "GET 1 MiB, depth 4",
                Spec {
                    procedure: Proc::Get,
                    size: 1 << 20,
                    depth: 4,
                    duration: secs,
                    max_calls: args.bench_calls,
                },
            ),
            (
                "PUT 1 MiB, depth 4",
                Spec {
                    procedure: Proc::Put,
                    size: 1 << 20,
                    depth: 4,
                    duration: secs,
                    max_calls: args.bench_calls,
                },
            ),
        ];
        let mut rows = Vec::new();
        for (name, spec) in cases {
            // Interleaved rounds (RDMA, TCP, RDMA, TCP), best round of
            // each kept: other load on the machine then biases neither.
            let round = Spec {
                duration: spec.duration / ROUNDS,
                ..spec
            };
            let (mut r, mut t): (Option<Outcome>, Option<Outcome>) = (None, None);
            for _ in 0..ROUNDS {
                for (which, ch, best) in [("rdma", &rdma, &mut r), ("tcp", &tcp, &mut t)] {
                    let o = bench::measure(std::slice::from_ref(ch), round, None).await;
                    bench_errors += o.errors;
                    if let Some(e) = &o.first_error {
                        println!("  {which} {name}: {} errors, first: {e}", o.errors);
                    }
                    if best
                        .as_ref()
                        .is_none_or(|b| o.ops_per_sec() > b.ops_per_sec())
                    {
                        *best = Some(o);
                    }
                }
            }
            let (r, t) = (r.expect("ROUNDS > 0"), t.expect("ROUNDS > 0"));
            rows.push((name, spec, r, t));
        }
        print_table(&rows);
        if let Ok(rdma) = Arc::try_unwrap(rdma) {
            rdma.close();
        }
        drop(tcp);
    } else {
        rdma.close();
    }

    rdma_server.shutdown().await;
    tcp_stop.shutdown();
    let _ = tcp_task.await;
    client_dev
        .flush_capture()
        .context("cannot write the capture file")?;

    println!();
    if failures.is_empty() && bench_errors == 0 {
        if skipped.is_empty() {
            println!(
                "All calls verified; every message kind went on the wire as expected ({:.1} s).",
                started.elapsed().as_secs_f64()
            );
        } else {
            println!(
                "All calls verified; every other message kind went on the wire as expected ({:.1} s). Skipped with these options: {}.",
                started.elapsed().as_secs_f64(),
                skipped.join(", ")
            );
        }
        println!();
        println!("Next: run a server and poke at it from another terminal:");
        println!("  rpcrdma serve --listen 127.0.0.1:20049 --tcp-listen 127.0.0.1:20050");
        println!("  rpcrdma call rdma://127.0.0.1:20049 get 16MiB");
        println!("  rpcrdma bench rdma://127.0.0.1:20049 --proc put --size 1MiB --depth 4");
        println!("  rpcrdma demo --inline 1k --capture demo.pcap && tshark -r demo.pcap");
        Ok(())
    } else {
        for f in &failures {
            println!("FAILED: {f}");
        }
        anyhow::bail!(
            "{} step(s) failed, {} benchmark call(s) failed",
            failures.len(),
            bench_errors
        )
    }
}

impl Expect {
    fn short() -> Self {
        Expect {
            call: CallKind::Short,
            reply: ReplyMode::Short,
            write_chunks: None,
            read_chunk_bytes: None,
        }
    }

    fn write(bytes: Vec<u64>) -> Self {
        Expect {
            call: CallKind::Short,
            reply: ReplyMode::Short,
            write_chunks: Some(bytes),
            read_chunk_bytes: None,
        }
    }

    /// What differs between the expectation and the report.
    fn check(&self, r: &CallReport) -> Vec<String> {
        let mut bad = Vec::new();
        if r.call_kind != self.call {
            bad.push(format!(
                "expected a {}, got a {}",
                call_kind(self.call),
                call_kind(r.call_kind)
            ));
        }
        if r.reply_mode != self.reply {
            bad.push(format!(
                "expected a {}, got a {}",
                reply_mode(self.reply),
                reply_mode(r.reply_mode)
            ));
        }
        let written = self.write_chunks.clone().unwrap_or_default();
        if r.write_chunk_bytes != written {
            bad.push(format!(
                "expected Write chunk bytes {written:?}, got {:?}",
                r.write_chunk_bytes
            ));
        }
        if let Some(n) = self.read_chunk_bytes {
            if r.read_chunk_bytes != n {
                bad.push(format!(
                    "expected {n} bytes in Read chunks, got {}",
                    r.read_chunk_bytes
                ));
            }
        }
        bad
    }
}

fn step(
    failures: &mut Vec<String>,
    recorder: &Recorder<'_>,
    what: &str,
    explain: &str,
    result: Result<String, ClientError>,
    expect: Expect,
) {
    step_str(
        failures,
        recorder,
        what,
        explain,
        result.map_err(|e| e.to_string()),
        expect,
    )
}

/// Prints one step: the explanation, what went on the wire, the
/// verification; records failures.
fn step_str(
    failures: &mut Vec<String>,
    recorder: &Recorder<'_>,
    what: &str,
    explain: &str,
    result: Result<String, String>,
    expect: Expect,
) {
    let reports = recorder.take();
    println!("* {what}");
    println!("    {explain}");
    for r in &reports {
        println!("    wire:     {}", describe(r));
    }
    let mut problems = Vec::new();
    match reports.as_slice() {
        [r] => problems.extend(expect.check(r)),
        _ => problems.push(format!("expected one call, saw {}", reports.len())),
    }
    match &result {
        Ok(v) => println!("    verified: {v}"),
        Err(e) => problems.push(format!("call failed: {e}")),
    }
    if problems.is_empty() {
        println!("    OK");
    } else {
        for p in &problems {
            println!("    FAILED:   {p}");
        }
        failures.push(format!("{what}: {}", problems.join("; ")));
    }
}

/// The RDMA_ERROR step: PUT 2 MiB (a Read chunk of two 1 MiB segments) to
/// a second server that accepts one segment per chunk; it must answer
/// RDMA_ERROR / ERR_CHUNK, which the client reports as a typed error.
/// Returns false when the step was skipped.
async fn err_chunk_step(
    failures: &mut Vec<String>,
    config: &rpcrdma::RdmaConfig,
    device: &iwarp::Device,
) -> bool {
    let what = "PUT 2 MiB to a server that takes 1 segment per chunk";
    println!("* {what}");
    println!(
        "    RDMA_ERROR: the server cannot take the call's chunks, so it answers RDMA_ERROR (ERR_CHUNK) instead of an RPC reply"
    );
    if config.max_segments < 2 {
        println!(
            "    skipped: with --max-segments {} the client itself sends 1 segment per chunk",
            config.max_segments
        );
        return false;
    }
    let result = async {
        let service = RdmatestServer::new(rdmatest::ServerConfig::default());
        let dispatcher = Dispatcher::builder().service(service).build();
        let server = RdmaServer::bind(
            iwarp::Device::default(),
            "127.0.0.1:0".parse()?,
            dispatcher,
            rpcrdma::RdmaConfig {
                max_segments: 1,
                ..config.clone()
            },
            Bindings::rdmatest(),
        )
        .await
        .context("cannot start the limited RPC-over-RDMA server")?;
        let url = Target::Rdma {
            addr: server.local_addr().to_string(),
        };
        let options = channel::ConnectOptions {
            timeout: Duration::from_secs(10),
            max_fragment: None,
            rdma: config.clone(),
            device: Some(device.clone()),
        };
        let ch = channel::connect(&url, &options).await?;
        let typed = RdmatestClient::new(&ch).with_timeout(Duration::from_secs(10));
        let r = typed.put(rdmatest::pattern::pattern(9, 2 << 20)).await;
        ch.close();
        let err_chunks = server.stats().counters.snapshot().err_chunk;
        server.shutdown().await;
        Ok::<_, anyhow::Error>((r, err_chunks))
    }
    .await;
    let problem = match result {
        Ok((Err(e), n)) if rdma_error_kind(&e) == Some("ERR_CHUNK") => {
            println!(
                "    wire:     Chunked Call (RDMA_MSG, 1 Read chunk 2 MiB in 2 segments) -> RDMA_ERROR (ERR_CHUNK); the server counted {n} ERR_CHUNK"
            );
            println!(
                "    client:   typed error RpcError::Transport(TransportError::ErrChunk): \"{e}\""
            );
            (n != 1).then(|| format!("the server counted {n} ERR_CHUNK, expected 1"))
        }
        Ok((Ok(_), _)) => Some("the limited server accepted the call".to_string()),
        Ok((Err(e), _)) => Some(format!("expected ERR_CHUNK, got: {e}")),
        Err(e) => Some(format!("{e:#}")),
    };
    match problem {
        None => println!("    OK (expected)"),
        Some(p) => {
            println!("    FAILED:   {p}");
            failures.push(format!("{what}: {p}"));
        }
    }
    true
}

/// A PUT request whose data the server must echo back as length + CRC.
async fn put_checked(ch: &Recorder<'_>, req: Request, data: &Bytes) -> Result<String, String> {
    let res = ch.call(req).await.map_err(|e| e.to_string())?;
    let mut d = res.decoder();
    let got: PutResult = d.decode().map_err(|e| e.to_string())?;
    d.finish().map_err(|e| e.to_string())?;
    let want = crc32c::crc32c(data);
    if got.length as usize != data.len() || got.crc32c != want {
        return Err(format!(
            "server saw {} bytes with CRC-32C {:#010x}, expected {} bytes with {want:#010x}",
            got.length,
            got.crc32c,
            data.len()
        ));
    }
    Ok(format!(
        "server saw {} bytes, CRC-32C {want:#010x} matches",
        got.length
    ))
}

/// A GET request (status 0 and `len` pattern bytes expected).
async fn get_checked(
    ch: &Recorder<'_>,
    req: Request,
    len: u32,
    seed: u32,
) -> Result<String, String> {
    let res = ch.call(req).await.map_err(|e| e.to_string())?;
    let mut d = res.decoder();
    let status = d.u32().map_err(|e| e.to_string())?;
    if status != 0 {
        return Err(format!("GET status {status}"));
    }
    let data = d.opaque(len).map_err(|e| e.to_string())?;
    d.finish().map_err(|e| e.to_string())?;
    if data.len() != len as usize {
        return Err(format!("{} bytes instead of {len}", data.len()));
    }
    rdmatest::pattern::verify_pattern(seed, &data)
        .map_err(|off| format!("pattern mismatch at offset {off}"))?;
    Ok(format!("{} of pattern verified", bytes_word(len)))
}

fn print_table(rows: &[(&str, Spec, Outcome, Outcome)]) {
    let line = |label: &str, r: String, t: String, ratio: f64| {
        println!("  {label:<28} {r:>16} {t:>16} {ratio:>8.2}x");
    };
    println!(
        "  {:<28} {:>16} {:>16} {:>9}",
        "", "RPC-over-RDMA", "RPC over TCP", "RDMA/TCP"
    );
    for (name, spec, r, t) in rows {
        if spec.procedure == Proc::Null {
            let (rl, tl) = (
                r.percentile_us(50.0).unwrap_or(0),
                t.percentile_us(50.0).unwrap_or(0),
            );
            line(
                &format!("{name}: latency p50"),
                format!("{rl} µs"),
                format!("{tl} µs"),
                ratio(rl as f64, tl as f64),
            );
            line(
                &format!("{name}: rate"),
                format!("{:.0} calls/s", r.ops_per_sec()),
                format!("{:.0} calls/s", t.ops_per_sec()),
                ratio(r.ops_per_sec(), t.ops_per_sec()),
            );
        } else {
            line(
                name,
                format!("{:.0} MB/s", r.bytes_per_sec() / 1e6),
                format!("{:.0} MB/s", t.bytes_per_sec() / 1e6),
                ratio(r.bytes_per_sec(), t.bytes_per_sec()),
            );
            if let (Some(rc), Some(tc)) = (r.cpu_sec_per_gb(), t.cpu_sec_per_gb()) {
                line(
                    "  CPU-seconds per GB",
                    format!("{rc:.2} s/GB"),
                    format!("{tc:.2} s/GB"),
                    ratio(rc, tc),
                );
            }
        }
    }
    println!("  (MB = 10^6 bytes. CPU = this whole process, which runs the client AND the");
    println!("  servers; the software iWARP provider does in the CPU what an RNIC does in");
    println!("  hardware, so these ratios say little about RDMA hardware.)");
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}
