//! `rpcrdma call` against `rpcrdma serve`, both the real binary, over TCP.

mod common;

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
    assert!(stderr.contains("GET 1.00 MiB via tcp://"), "{stderr}");
    // The server is unharmed.
    assert!(server.is_running());
    call_ok(&server.url(), &["null"]);
    // ECHO and PUT above the maximum are refused as GARBAGE_ARGS.
    let out = rpcrdma(&["call", &server.url(), "echo", "2M"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("GARBAGE_ARGS"), "stderr: {stderr}");
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
