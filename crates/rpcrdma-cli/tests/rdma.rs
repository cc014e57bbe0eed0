//! The real binary over RPC-over-RDMA (software iWARP on 127.0.0.1):
//! `serve --listen`, `call rdma://`, `bench`, `demo`, signals.

mod common;

use common::{call_ok, rpcrdma, Server};

/// Every procedure, sizes up to 16 MiB, verified; the report names the
/// message kind each call used.
#[test]
fn every_procedure_over_rdma() {
    let server = Server::start_rdma(&[]);
    assert!(
        server.line.contains("listening on rdma 127.0.0.1:"),
        "{}",
        server.line
    );
    let url = server.rdma_url();
    // (arguments, text the wire report must contain)
    let cases: &[(&[&str], &str)] = &[
        (&["null"], "Short Call"),
        (&["echo", "0"], "Short Call"),
        (&["echo", "4k"], "Long Call"),
        (
            &["echo", "16MiB"],
            "Long Reply (RDMA_NOMSG, Reply chunk 16.00 MiB",
        ),
        (&["put", "0"], "Short Call"),
        (&["put", "5"], "Short Call"),
        (&["put", "1M"], "Chunked Call (RDMA_MSG, 1 Read chunk 1 MiB"),
        (&["put", "16MiB"], "1 Read chunk 16 MiB in 16 segments"),
        (&["get", "0"], "Short Reply"),
        (&["get", "3"], "Write chunk 0: 3 B"),
        (&["get", "64KiB"], "Write chunk 0: 64 KiB"),
        (&["get", "16MiB"], "Write chunk 0: 16 MiB"),
        (&["get2", "1000", "3k"], "Write chunk 1: 3 KiB"),
        (&["get2", "0", "16k"], "2 Write chunks offered"),
        (&["sleep", "10"], "Short Reply"),
        (&["--seed", "77", "get", "1000"], "Write chunk 0: 1000 B"),
    ];
    std::thread::scope(|s| {
        for (args, wire) in cases {
            let url = &url;
            s.spawn(move || {
                let out = call_ok(url, args);
                assert!(out.contains("via rdma://"), "{out}");
                assert!(out.contains("on the wire:"), "{out}");
                assert!(out.contains(wire), "{args:?}: expected {wire:?} in\n{out}");
            });
        }
    });
    assert_eq!(server.stop("TERM").code(), Some(0));
}

/// Transport options change what goes on the wire.
#[test]
fn inline_threshold_and_remote_invalidation_options() {
    let server = Server::start_rdma(&["--inline", "1k"]);
    let url = server.rdma_url();
    // 2 KiB ECHO: Short at 4 KiB thresholds would be expected, but the
    // server's 1 KiB receive buffers force a Long Call.
    let out = call_ok(&url, &["echo", "2k"]);
    assert!(out.contains("Long Call"), "{out}");
    assert!(out.contains("inline 1024/"), "{out}");
    let out = call_ok(&url, &["--inline", "1k", "get", "100k"]);
    assert!(out.contains("remote invalidation"), "{out}");
    let out = call_ok(&url, &["--no-remote-invalidate", "get", "100k"]);
    assert!(!out.contains("remote invalidation"), "{out}");
    assert!(out.contains("invalidation: 0 remote, 1 local"), "{out}");
    // --write-pad: an unaligned GET's Write chunk gets a second STag (the
    // pad segment), so the call is invalidated locally; the result is exact.
    let out = call_ok(&url, &["get", "1001", "--write-pad"]);
    assert!(out.contains("written [1001] B"), "{out}");
    assert!(
        out.contains("1 Write chunk offered with an XDR pad segment"),
        "{out}"
    );
    assert!(out.contains("invalidation: 0 remote, 2 local"), "{out}");
    let out = call_ok(&url, &["get", "1000", "--write-pad"]);
    assert!(out.contains("invalidation: 1 remote, 0 local"), "{out}");
}

#[test]
fn both_listeners_in_one_line() {
    let server = Server::serve(&["--listen", "127.0.0.1:0", "--tcp-listen", "127.0.0.1:0"]);
    assert!(server.line.contains(" and "), "{}", server.line);
    let (rdma, tcp) = (server.rdma.unwrap(), server.tcp.unwrap());
    assert_ne!(rdma, tcp);
    let out = call_ok(&format!("rdma://{rdma}"), &["put", "100k"]);
    assert!(out.contains("Chunked Call"), "{out}");
    let out = call_ok(&format!("tcp://{tcp}"), &["put", "100k"]);
    assert!(!out.contains("on the wire"), "{out}");
    assert_eq!(server.stop("INT").code(), Some(0));
}

#[test]
fn sigterm_finishes_calls_in_progress() {
    let server = Server::start_rdma(&[]);
    let url = server.rdma_url();
    let slow = std::thread::spawn(move || call_ok(&url, &["sleep", "500"]));
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(server.stop("TERM").code(), Some(0));
    let out = slow.join().unwrap();
    assert!(out.contains("SLEEP 500 ms"), "{out}");
}

#[test]
fn call_failures_exit_nonzero() {
    let server = Server::start_rdma(&["--max-data", "1MiB"]);
    let out = rpcrdma(&["call", &server.rdma_url(), "get", "2M"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("status 1"), "{stderr}");
    let out = rpcrdma(&["call", &server.rdma_url(), "--inline", "1000", "null"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("multiples of 1024"), "{stderr}");
}

fn bench_json(url: &str, extra: &[&str]) -> serde_json::Value {
    // Short runs: these tests check the report, not the rate. The whole
    // test run's traffic is captured and judged, so it is bounded by a call
    // count, not by time alone (a fast machine would move more).
    let mut args = vec!["bench", url, "--seconds", "5", "--json"];
    if !extra.contains(&"--calls") {
        args.extend_from_slice(&["--calls", "64"]);
    }
    args.extend_from_slice(extra);
    let out = rpcrdma(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stdout}\n{stderr}");
    // Exactly one JSON object on stdout.
    let v: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout:?}"));
    assert!(v.is_object());
    assert_eq!(stdout.trim().lines().count(), 1, "{stdout}");
    for key in [
        "ops_per_sec",
        "bytes_per_sec",
        "errors",
        "latency_us",
        "cpu_us_per_call",
    ] {
        assert!(v.get(key).is_some(), "no {key} in {v}");
    }
    for key in ["p50", "p99", "p999"] {
        assert!(
            v["latency_us"][key].as_u64().is_some(),
            "no latency {key} in {v}"
        );
    }
    assert_eq!(v["errors"], 0, "{v}");
    assert!(v["ops_per_sec"].as_f64().unwrap() > 0.0, "{v}");
    v
}

#[test]
fn bench_json_over_both_transports() {
    let server = Server::serve(&["--listen", "127.0.0.1:0", "--tcp-listen", "127.0.0.1:0"]);
    let v = bench_json(
        &server.rdma_url(),
        &[
            "--proc",
            "get",
            "--size",
            "256k",
            "--depth",
            "2",
            "--connections",
            "2",
        ],
    );
    assert_eq!(v["transport"], "rdma");
    assert_eq!(
        (v["proc"].as_str(), v["size"].as_u64()),
        (Some("GET"), Some(256 << 10))
    );
    assert_eq!(
        (v["depth"].as_u64(), v["connections"].as_u64()),
        (Some(2), Some(2))
    );
    let ops = v["ops"].as_f64().unwrap();
    let bytes = v["bytes_per_sec"].as_f64().unwrap() * v["seconds"].as_f64().unwrap();
    assert!((bytes / ops - 262_144.0).abs() < 1.0, "{v}");
    assert!(v["cpu_sec_per_gb"].as_f64().is_some(), "{v}");
    assert_eq!(v["interrupted"], false, "{v}");

    let v = bench_json(&server.url(), &["--proc", "put", "--size", "64k"]);
    assert_eq!(v["transport"], "tcp");
    let v = bench_json(&server.rdma_url(), &["--proc", "null", "--depth", "4"]);
    assert_eq!(v["bytes_per_sec"], 0.0);
    let v = bench_json(&server.rdma_url(), &["--proc", "echo", "--size", "8k"]);
    assert_eq!(v["proc"], "ECHO");
}

#[test]
fn bench_human_summary() {
    let server = Server::start_rdma(&[]);
    let out = rpcrdma(&[
        "bench",
        &server.rdma_url(),
        "--proc",
        "put",
        "--size",
        "1M",
        "--seconds",
        "5",
        "--calls",
        "32",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for needle in ["calls/s", "MB/s", "p99.9", "CPU-s per GB", "(0 errors)"] {
        assert!(stdout.contains(needle), "no {needle:?} in {stdout}");
    }
}

#[test]
fn bench_counts_failed_calls_as_errors() {
    // GET above the server's maximum fails every call: errors, exit 1,
    // and the JSON still comes out.
    let server = Server::start_rdma(&["--max-data", "4k"]);
    let out = rpcrdma(&[
        "bench",
        &server.rdma_url(),
        "--proc",
        "get",
        "--size",
        "8k",
        "--seconds",
        "0.3",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["errors"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["errors"], v["ops"], "{v}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("status 1"), "{stderr}");
}

#[test]
fn demo_exits_zero() {
    // Bounded by calls: the captured traffic must not grow with the
    // machine's speed.
    let out = rpcrdma(&["demo", "--bench-seconds", "2", "--bench-calls", "16"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for needle in [
        "Short Call",
        "Chunked Call",
        "Write chunk 0: 1 MiB",
        "Write chunk 1:",
        "Write chunk 0 unused",
        "Long Call",
        "Long Reply",
        "RDMA/TCP",
        "RDMA_ERROR (ERR_CHUNK)",
        "TransportError::ErrChunk",
        "All calls verified",
    ] {
        assert!(stdout.contains(needle), "no {needle:?} in\n{stdout}");
    }
    assert!(!stdout.contains("FAILED"), "{stdout}");
    assert!(stdout.contains("at most 16 calls per round"), "{stdout}");
}

#[test]
fn bench_stops_after_calls() {
    let server = Server::start_rdma(&[]);
    for (proc_, depth, connections) in [("get", "3", "2"), ("null", "1", "1")] {
        let v = bench_json(
            &server.rdma_url(),
            &[
                "--proc",
                proc_,
                "--size",
                "4k",
                "--depth",
                depth,
                "--connections",
                connections,
                "--calls",
                "10",
            ],
        );
        assert_eq!(v["ops"], 10, "{v}");
        // Long before the 5 s limit of `bench_json`.
        assert!(v["seconds"].as_f64().unwrap() < 4.0, "{v}");
    }
    let out = rpcrdma(&["bench", &server.rdma_url(), "--calls", "0"]);
    assert!(!out.status.success());
}

#[test]
fn capture_writes_a_pcap_of_the_iwarp_traffic() {
    let server = Server::start_rdma(&[]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("call.pcap");
    let path_str = path.to_str().unwrap();
    call_ok(&server.rdma_url(), &["--capture", path_str, "get", "100k"]);
    let pcap = std::fs::read(&path).unwrap();
    // pcap magic (either byte order, µs or ns) and more than the MPA
    // exchange: the 100 KiB of RDMA Write data is in there.
    let magic = u32::from_le_bytes(pcap[..4].try_into().unwrap());
    assert!(
        [0xa1b2_c3d4, 0xd4c3_b2a1, 0xa1b2_3c4d, 0x4d3c_b2a1].contains(&magic),
        "{magic:#x}"
    );
    assert!(pcap.len() > 100_000, "{} bytes", pcap.len());
}

/// The MPA flags byte (M C R ...) after the frame key in a capture.
fn mpa_flags(pcap: &[u8], key: &[u8; 16]) -> u8 {
    let at = pcap
        .windows(16)
        .position(|w| w == key)
        .unwrap_or_else(|| panic!("no {:?} in the capture", String::from_utf8_lossy(key)));
    pcap[at + 16]
}

/// `--no-mpa-crc` on both ends turns the MPA CRC off (C bit clear in the
/// MPA Request and Reply); if only the server gives it, the client's
/// request wins (RFC 5044 §7.1: CRCs are used when either end asks).
#[test]
fn mpa_crc_can_be_turned_off_by_both_ends() {
    const C: u8 = 0x40;
    let server = Server::start_rdma(&["--no-mpa-crc"]);
    let dir = tempfile::tempdir().unwrap();
    for (client_off, crc) in [(true, false), (false, true)] {
        let path = dir.path().join(format!("crc-{crc}.pcap"));
        let path_str = path.to_str().unwrap();
        let mut args = vec!["--capture", path_str, "put", "200k"];
        if client_off {
            args.insert(0, "--no-mpa-crc");
        }
        let out = call_ok(&server.rdma_url(), &args);
        assert!(out.contains("verified OK"), "{out}");
        let pcap = std::fs::read(&path).unwrap();
        assert_eq!(mpa_flags(&pcap, b"MPA ID Req Frame") & C != 0, !client_off);
        assert_eq!(mpa_flags(&pcap, b"MPA ID Rep Frame") & C != 0, crc);
    }
    assert_eq!(server.stop("TERM").code(), Some(0));
}

/// The RDMA options may follow the procedure and its arguments.
#[test]
fn rdma_options_after_the_procedure() {
    let server = Server::start_rdma(&[]);
    let url = server.rdma_url();
    let out = call_ok(&url, &["get", "100k", "--no-remote-invalidate"]);
    assert!(out.contains("invalidation: 0 remote, 1 local"), "{out}");
    let out = call_ok(&url, &["echo", "2k", "--inline", "1k", "--credits", "4"]);
    assert!(out.contains("Long Call"), "{out}");
    assert!(out.contains("inline 1024/"), "{out}");
    let out = call_ok(
        &url,
        &["get2", "1k", "2k", "--max-segments", "8", "--no-mpa-crc"],
    );
    assert!(out.contains("Write chunk 1: 2 KiB"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("after.pcap");
    call_ok(&url, &["null", "--capture", path.to_str().unwrap()]);
    assert!(std::fs::metadata(&path).unwrap().len() > 0);
}

/// A failed call still shows what went on the wire.
#[test]
fn failed_call_shows_the_wire() {
    let server = Server::start_rdma(&["--max-data", "1MiB"]);
    let out = rpcrdma(&["call", &server.rdma_url(), "get", "2M"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.contains("on the wire:"), "{stdout}");
    assert!(stdout.contains("Write chunk 0 unused"), "{stdout}");
    assert!(stderr.contains("status 1"), "{stderr}");

    // More segments than the server takes: RDMA_ERROR (ERR_CHUNK).
    let server = Server::start_rdma(&["--max-segments", "4"]);
    let out = rpcrdma(&["call", &server.rdma_url(), "put", "5MiB"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.contains("RDMA_ERROR (ERR_CHUNK)"), "{stdout}");
    assert!(stderr.contains("ERR_CHUNK"), "{stderr}");
}

/// `call --timeout` also bounds the MPA handshake, above the
/// provider's 10 s default too: against a listener that accepts and never
/// answers, `--timeout 11` gives up after 11 s, not 10.
#[test]
fn call_timeout_bounds_the_mpa_handshake() {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    let url = format!("rdma://{addr}");
    let start = std::time::Instant::now();
    let out = rpcrdma(&["call", &url, "--timeout", "11", "null"]);
    let took = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("MPA"), "{stderr}");
    assert!(
        took >= std::time::Duration::from_millis(10_700)
            && took < std::time::Duration::from_secs(20),
        "{took:?}"
    );
}

/// --max-data above 16 MiB with an RDMA listener is announced with
/// a warning (the line still says `listening`); TCP alone has none.
#[test]
fn serve_warns_about_max_data_above_16_mib_over_rdma() {
    let server = Server::serve(&[
        "--listen",
        "127.0.0.1:0",
        "--tcp-listen",
        "127.0.0.1:0",
        "--max-data",
        "100MiB",
    ]);
    assert!(server.line.contains("max data 100 MiB"), "{}", server.line);
    assert!(server.line.contains("warning"), "{}", server.line);
    assert!(server.line.contains("only up to 16 MiB"), "{}", server.line);
    call_ok(&server.url(), &["echo", "17MiB"]);
    let server = Server::start(&["--max-data", "100MiB"]);
    assert!(!server.line.contains("warning"), "{}", server.line);
}

/// `demo --max-segments 1` skips the steps the client cannot make with one
/// segment per chunk (they would fail in the client, not show anything)
/// and still exits 0.
#[test]
fn demo_adapts_to_max_segments_1() {
    let out = rpcrdma(&["demo", "--no-bench", "--max-segments", "1"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("skipped"), "{stdout}");
    assert!(!stdout.contains("FAILED"), "{stdout}");
    // The last line does not claim every kind went on the wire.
    assert!(
        stdout.contains("Skipped with these options: unused Write chunk, RDMA_ERROR (ERR_CHUNK)."),
        "{stdout}"
    );
    assert!(
        !stdout.contains("every message kind went on the wire"),
        "{stdout}"
    );
}
