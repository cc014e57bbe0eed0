//! `rpcrdma call` against `rpcrdma serve`, both the real binary, over TCP.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{call_ok, rpcrdma, Server};

#[test]
fn every_procedure_verifies() {
    let server = Server::start(&[]);
    let url = server.url();
    let cases: &[&[&str]] = &[
        &["null"],
        &["echo", "0"],
        &["echo", "1"],
        &["echo", "4k"],
        &["echo", "16MiB"],
        &["put", "0"],
        &["put", "5"],
        &["put", "1M"],
        &["put", "16MiB"],
        &["get", "0"],
        &["get", "3"],
        &["get", "64KiB"],
        &["get", "16MiB"],
        &["get2", "1000", "3k"],
        &["get2", "0", "16k"],
        &["sleep", "10"],
        &["--seed", "77", "get", "1000"],
        &["get", "100", "--seed", "255"],
    ];
    std::thread::scope(|s| {
        for args in cases {
            let url = &url;
            s.spawn(move || {
                let out = call_ok(url, args);
                // The procedure is named in the report.
                let name = args
                    .iter()
                    .find(|a| a.chars().all(|c| c.is_ascii_lowercase() || c == '2'))
                    .unwrap()
                    .to_ascii_uppercase();
                assert!(out.contains(&name), "{out}");
            });
        }
    });
    assert_eq!(server.stop("TERM").code(), Some(0));
}

#[test]
fn reports_sizes_and_latency() {
    let server = Server::start(&[]);
    let out = call_ok(&server.url(), &["get", "16MiB"]);
    assert!(out.contains("GET 16 MiB"), "{out}");
    assert!(out.contains("16777216 bytes"), "{out}");
    assert!(out.contains("latency"), "{out}");
    let out = call_ok(&server.url(), &["put", "4k"]);
    assert!(out.contains("CRC-32C"), "{out}");
}

#[test]
fn get_above_the_maximum_answers_status_1() {
    let mut server = Server::start(&["--max-data", "1MiB"]);
    call_ok(&server.url(), &["get", "1MiB"]);
    let out = rpcrdma(&["call", &server.url(), "get", "1025k"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("status 1"), "stderr: {stderr}");
    // Not a whole number of MiB: the exact byte count is shown too.
    assert!(
        stderr.contains("GET 1.00 MiB (1049600 B) via tcp://"),
        "{stderr}"
    );
    // The server is unharmed.
    assert!(server.is_running());
    call_ok(&server.url(), &["null"]);
    // ECHO and PUT above the maximum are refused as GARBAGE_ARGS.
    let out = rpcrdma(&["call", &server.url(), "echo", "2M"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("GARBAGE_ARGS"), "stderr: {stderr}");
    // ... with a hint at the cause.
    assert!(stderr.contains("--max-data"), "stderr: {stderr}");
}

#[test]
fn multi_fragment_records_both_ways() {
    let server = Server::start(&["--max-fragment", "3000"]);
    for args in [
        &["--max-fragment", "1k", "echo", "1M"][..],
        &["--max-fragment", "1", "put", "10k"][..],
        &["get2", "100k", "50k", "--max-fragment", "4k"][..],
    ] {
        call_ok(&server.url(), args);
    }
}

#[test]
fn ipv6_loopback() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("NOTE: no IPv6 loopback on this machine; ipv6_loopback checks nothing");
        return;
    }
    let server = Server::start_on("[::1]:0", &[]);
    assert!(server.addr.is_ipv6());
    let out = call_ok(&server.url(), &["get2", "1k", "2k"]);
    assert!(out.contains("tcp://[::1]:"), "{out}");
}

#[test]
fn sigint_and_sigterm_exit_cleanly() {
    for signal in ["INT", "TERM"] {
        let server = Server::start(&[]);
        call_ok(&server.url(), &["null"]);
        let status = server.stop(signal);
        assert_eq!(status.code(), Some(0), "after SIG{signal}: {status}");
    }
}

#[test]
fn sigterm_waits_for_calls_in_progress() {
    let server = Server::start(&[]);
    let url = server.url();
    let slow = std::thread::spawn(move || call_ok(&url, &["sleep", "500"]));
    std::thread::sleep(std::time::Duration::from_millis(150));
    assert_eq!(server.stop("TERM").code(), Some(0));
    let out = slow.join().unwrap();
    assert!(out.contains("SLEEP 500 ms"), "{out}");
}

fn fails_with(args: &[&str], needle: &str) {
    let out = rpcrdma(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "rpcrdma {args:?} succeeded");
    assert!(
        stderr.contains(needle),
        "rpcrdma {args:?}: expected {needle:?} in stderr:\n{stderr}"
    );
}

#[test]
fn clear_errors() {
    // Nothing listens on port 1.
    fails_with(&["call", "rdma://127.0.0.1:1", "null"], "cannot connect");
    fails_with(
        &["call", "udp://127.0.0.1:1", "null"],
        "unsupported URL scheme",
    );
    fails_with(
        &["call", "127.0.0.1:1", "null"],
        "expected rdma://HOST:PORT or tcp://HOST:PORT",
    );
    fails_with(&["call", "tcp://127.0.0.1:1", "echo", "4x"], "unknown unit");
    fails_with(&["call", "tcp://127.0.0.1:1", "get", "5G"], "4 GiB");
    fails_with(&["call", "tcp://127.0.0.1:1", "null"], "cannot connect");
    fails_with(&["serve"], "--tcp-listen");
    fails_with(&["serve"], "--listen");
    fails_with(
        &["serve", "--tcp-listen", "not-an-address"],
        "cannot listen",
    );
}

#[test]
fn two_tcp_listeners() {
    let server = Server::serve(&["--tcp-listen", "127.0.0.1:0", "--tcp-listen", "127.0.0.1:0"]);
    // One line names both listeners.
    let addrs: Vec<&str> = server
        .line
        .split_whitespace()
        .filter(|w| w.parse::<std::net::SocketAddr>().is_ok())
        .collect();
    assert_eq!(addrs.len(), 2, "{}", server.line);
    assert_ne!(addrs[0], addrs[1]);
    for addr in addrs {
        call_ok(&format!("tcp://{addr}"), &["get2", "10", "20"]);
    }
    assert_eq!(server.stop("TERM").code(), Some(0));
}

/// Runs `rpcrdma ARGS...`, killed (and the test failed) if it takes longer
/// than `limit`; returns the output and how long it took.
fn run_bounded(args: &[&str], limit: Duration) -> (std::process::Output, Duration) {
    let start = Instant::now();
    let mut child = Command::new(common::BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rpcrdma");
    loop {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            return (out, start.elapsed());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "rpcrdma {args:?} still running after {limit:?}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A TCP listener that accepts connections and reads them. It answers the
/// first `answered` RPC records of each connection with an accepted,
/// successful, empty reply, then never answers again.
fn fake_server(answered: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut seen = 0;
                loop {
                    // One single-fragment record: mark, then the call.
                    let mut mark = [0u8; 4];
                    if conn.read_exact(&mut mark).is_err() {
                        return;
                    }
                    let len = (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize;
                    let mut call = vec![0u8; len];
                    if conn.read_exact(&mut call).is_err() {
                        return;
                    }
                    seen += 1;
                    if seen <= answered {
                        // xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS.
                        let mut reply = vec![0x80, 0, 0, 24];
                        reply.extend_from_slice(&call[..4]);
                        reply.extend_from_slice(&[0, 0, 0, 1]);
                        reply.extend_from_slice(&[0u8; 16]);
                        if conn.write_all(&reply).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.trim().lines().count(), 1, "not one line: {stdout:?}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout:?}"))
}

/// A server that accepts but never answers: the first NULL
/// times out (10 s), the run ends with exit 1 and still one JSON object.
#[test]
fn bench_against_a_silent_server_ends_with_json() {
    let addr = fake_server(0);
    let url = format!("tcp://{addr}");
    let (out, took) = run_bounded(
        &["bench", &url, "--seconds", "1", "--json"],
        Duration::from_secs(40),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(took < Duration::from_secs(25), "{took:?}");
    let v = json_of(&out);
    assert_eq!(v["ops"], 0, "{v}");
    assert!(v["errors"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["first_error"].as_str().unwrap().contains("NULL"), "{v}");
    assert_eq!(v["ops_per_sec"], 0.0, "{v}");
    assert_eq!(v["bytes_per_sec"], 0.0, "{v}");
    for key in ["p50", "p99", "p999", "min", "max", "mean"] {
        assert!(v["latency_us"][key].is_null(), "{key}: {v}");
    }
    assert!(stderr.contains("rpcrdma: error: NULL via"), "{stderr}");
}

/// Nothing listening: one JSON object too.
#[test]
fn bench_json_when_connecting_fails() {
    let (out, _) = run_bounded(
        &["bench", "tcp://127.0.0.1:1", "--seconds", "1", "--json"],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(1));
    let v = json_of(&out);
    assert_eq!(v["ops"], 0, "{v}");
    assert_eq!(v["errors"], 1, "{v}");
    assert!(
        v["first_error"]
            .as_str()
            .unwrap()
            .contains("cannot connect"),
        "{v}"
    );
    assert!(v["latency_us"]["p50"].is_null(), "{v}");
}

/// The server answers the first NULL, then goes silent: the run
/// still ends near --seconds (plus the 2 s grace), the unanswered call is
/// an error, and the rates are over the measured second.
#[test]
fn bench_ends_near_its_seconds_when_the_server_goes_silent() {
    let addr = fake_server(1);
    let url = format!("tcp://{addr}");
    let (out, took) = run_bounded(
        &["bench", &url, "--seconds", "1", "--depth", "2", "--json"],
        Duration::from_secs(40),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    let v = json_of(&out);
    assert_eq!(v["errors"], 2, "{v}");
    assert_eq!(v["ops"], 2, "{v}");
    let secs = v["seconds"].as_f64().unwrap();
    assert!((0.9..1.5).contains(&secs), "{v}");
    assert!(
        v["first_error"].as_str().unwrap().contains("no reply"),
        "{v}"
    );
    assert!(v["latency_us"]["p50"].is_null(), "{v}");
}

/// Out-of-range numbers are usage errors (exit 2), never
/// a panic; negative numbers are reported as invalid values.
#[test]
fn range_errors_are_usage_errors() {
    let cases: &[&[&str]] = &[
        &["call", "tcp://127.0.0.1:1", "--timeout", "1e20", "null"],
        &["call", "tcp://127.0.0.1:1", "--timeout", "NaN", "null"],
        &["call", "tcp://127.0.0.1:1", "--timeout", "-1", "null"],
        &["call", "tcp://127.0.0.1:1", "null", "--timeout", "0"],
        &["bench", "tcp://127.0.0.1:1", "--seconds", "0"],
        &["bench", "tcp://127.0.0.1:1", "--seconds", "-1"],
        &["bench", "tcp://127.0.0.1:1", "--seconds", "1e20"],
        &["bench", "tcp://127.0.0.1:1", "--depth", "0"],
        &["bench", "tcp://127.0.0.1:1", "--depth", "-3"],
        &["bench", "tcp://127.0.0.1:1", "--connections", "0"],
        &["demo", "--bench-seconds", "0"],
        &["call", "tcp://127.0.0.1:1", "--inline", "1000", "null"],
        &["call", "tcp://127.0.0.1:1", "null", "--credits", "0"],
        &["call", "tcp://127.0.0.1:1", "null", "--max-segments", "-1"],
        &["call", "tcp://127.0.0.1:1", "sleep", "-5"],
        &["call", "tcp://127.0.0.1:1", "get", "-1"],
        &[
            "serve",
            "--tcp-listen",
            "127.0.0.1:0",
            "--max-calls-per-connection",
            "0",
        ],
        &[
            "--log",
            "rpcrdma=notalevel",
            "call",
            "tcp://127.0.0.1:1",
            "null",
        ],
    ];
    for args in cases {
        let out = rpcrdma(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("invalid value"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("unexpected argument"),
            "{args:?}: {stderr}"
        );
    }
}

/// No colour codes in logs written to a pipe.
#[test]
fn logs_have_no_colour_codes_in_a_pipe() {
    // ONC RPC over TCP to an RPC-over-RDMA listener: the iWARP side resets
    // the connection and the TCP client logs a WARN line.
    let server = Server::start_rdma(&[]);
    let url = format!("tcp://{}", server.rdma.unwrap());
    let out = rpcrdma(&["call", &url, "--timeout", "10", "null"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("WARN"), "no log line to check: {stderr}");
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
}

/// No successful call: latency null / n/a; the human
/// summary always has the payload rate and the CPU lines.
#[test]
fn bench_without_successful_calls_has_no_latency() {
    let server = Server::start(&["--max-data", "4k"]);
    let args = |json: bool| {
        let mut a = vec![
            "bench".to_string(),
            server.url(),
            "--proc".into(),
            "get".into(),
            "--size".into(),
            "8k".into(),
            "--seconds".into(),
            "0.3".into(),
        ];
        if json {
            a.push("--json".into());
        }
        a
    };
    let a = args(true);
    let out = rpcrdma(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(1));
    let v = json_of(&out);
    assert!(v["errors"].as_u64().unwrap() > 0, "{v}");
    for key in ["p50", "p99", "p999", "min", "max", "mean"] {
        assert!(v["latency_us"][key].is_null(), "{key}: {v}");
    }
    let a = args(false);
    let out = rpcrdma(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout.contains("latency      n/a"), "{stdout}");
    assert!(stdout.contains("MB/s"), "{stdout}");
    assert!(stdout.contains("CPU-s per GB n/a (no payload)"), "{stdout}");
    assert!(stdout.contains("CPU-µs per call"), "{stdout}");

    // A successful NULL run keeps its numbers, and shows payload and
    // CPU per GB too.
    let out = rpcrdma(&["bench", &server.url(), "--seconds", "0.2", "--calls", "50"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("p50 "), "{stdout}");
    assert!(!stdout.contains("latency      n/a"), "{stdout}");
    assert!(stdout.contains("payload      0.0 MB/s"), "{stdout}");
    assert!(stdout.contains("CPU-s per GB n/a (no payload)"), "{stdout}");
    let out = rpcrdma(&[
        "bench",
        &server.url(),
        "--seconds",
        "0.2",
        "--calls",
        "50",
        "--json",
    ]);
    let v = json_of(&out);
    assert!(v["latency_us"]["p50"].as_u64().is_some(), "{v}");
}

/// SLEEP above the server's 60 s gets a hint.
#[test]
fn garbage_args_hint_for_long_sleep() {
    let server = Server::start(&[]);
    let out = rpcrdma(&["call", &server.url(), "sleep", "60001"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("GARBAGE_ARGS"), "{stderr}");
    assert!(stderr.contains("at most 60000 ms"), "{stderr}");
}

/// RDMA-only options with tcp:// warn (the call still runs);
/// Options may follow the procedure and its arguments.
#[test]
fn rdma_options_with_tcp_warn() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("x.pcap");
    let out = rpcrdma(&[
        "call",
        &server.url(),
        "get",
        "1k",
        "--capture",
        pcap.to_str().unwrap(),
        "--inline",
        "1k",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: --inline, --capture are RDMA-only"),
        "{stderr}"
    );
    assert!(!pcap.exists());
    let out = rpcrdma(&[
        "bench",
        &server.url(),
        "--seconds",
        "0.2",
        "--calls",
        "5",
        "--credits",
        "4",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("--credits is RDMA-only"), "{stderr}");
    // serve without --listen warns too (and runs).
    let mut child = Command::new(common::BIN)
        .args([
            "serve",
            "--tcp-listen",
            "127.0.0.1:0",
            "--no-remote-invalidate",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("listening"), "{line}");
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "--no-remote-invalidate is RDMA-only, ignored without an RPC-over-RDMA listener"
        ),
        "{stderr}"
    );
}

/// A second SIGINT while calls in progress drain exits at once
/// (status 1) instead of waiting for them.
#[test]
fn second_sigint_exits_at_once() {
    let server = Server::start(&[]);
    let url = server.url();
    let slow = std::thread::spawn(move || rpcrdma(&["call", &url, "sleep", "8000"]));
    std::thread::sleep(Duration::from_millis(300));
    let pid = server.pid().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let status = server.stop("INT");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(status.code(), Some(1));
    // The call in progress was dropped, not answered.
    let out = slow.join().unwrap();
    assert!(!out.status.success());
}

/// SIGINT during `bench` ends the measurement early and still prints the
/// JSON object of what was measured.
#[test]
fn bench_sigint_prints_what_was_measured() {
    let server = Server::start(&[]);
    let child = Command::new(common::BIN)
        .args(["bench", &server.url(), "--seconds", "30", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let start = Instant::now();
    assert!(Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("ending the measurement early"), "{stderr}");
    let v = json_of(&out);
    assert!(v["ops"].as_u64().unwrap() > 0, "{v}");
    assert!(v["seconds"].as_f64().unwrap() < 29.0, "{v}");
    assert_eq!(v["interrupted"], true, "{v}");
}
