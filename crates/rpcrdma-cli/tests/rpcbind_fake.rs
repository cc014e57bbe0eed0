//! `serve --rpcbind --rpcbind-server ADDR` against a fake rpcbind in this
//! test (no root, no daemon): which SETs and UNSETs the server sends, and
//! that a hung rpcbind neither keeps the listeners open nor holds the exit
//! up.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Server;

const RPCBPROC_SET: u32 = 1;
const RPCBPROC_UNSET: u32 = 2;

/// One rpcbind call the fake received: procedure, netid, universal address.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    procedure: u32,
    netid: String,
    uaddr: String,
}

/// A fake rpcbind (RPCBPROG version 4 over TCP) answering `true` to every
/// SET and UNSET on its first `answered` connections, and reading but never
/// answering on the later ones (a hung rpcbind). With `close_at`, the
/// connection that receives the call of that index (counted over all
/// connections, from 0) is closed instead of answered. Records every call.
struct FakeRpcbind {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Accepted sockets, shut down at the end so no thread outlives the test.
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl FakeRpcbind {
    fn start(answered: usize) -> FakeRpcbind {
        Self::start_with(answered, None)
    }

    fn start_with(answered: usize, close_at: Option<usize>) -> FakeRpcbind {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let (s, c) = (seen.clone(), conns.clone());
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { return };
                c.lock().unwrap().push(stream.try_clone().unwrap());
                let s = s.clone();
                std::thread::spawn(move || serve_conn(stream, n < answered, close_at, &s));
            }
        });
        FakeRpcbind { addr, seen, conns }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for FakeRpcbind {
    fn drop(&mut self) {
        for c in self.conns.lock().unwrap().iter() {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// An XDR string at `*at`, advancing past its padding.
fn xdr_string(b: &[u8], at: &mut usize) -> Option<String> {
    let len = be32(b, *at)? as usize;
    let s = b.get(*at + 4..*at + 4 + len)?;
    *at += 4 + len.div_ceil(4) * 4;
    Some(String::from_utf8_lossy(s).into_owned())
}

/// Reads one record-marked record (all fragments).
fn read_record(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut record = Vec::new();
    loop {
        let mut mark = [0u8; 4];
        stream.read_exact(&mut mark).ok()?;
        let mark = u32::from_be_bytes(mark);
        let mut frag = vec![0u8; (mark & 0x7fff_ffff) as usize];
        stream.read_exact(&mut frag).ok()?;
        record.extend_from_slice(&frag);
        if mark & 0x8000_0000 != 0 {
            return Some(record);
        }
    }
}

fn serve_conn(
    mut stream: TcpStream,
    answer: bool,
    close_at: Option<usize>,
    seen: &Mutex<Vec<Seen>>,
) {
    while let Some(call) = read_record(&mut stream) {
        // xid, CALL, rpcvers, prog, vers, proc, cred, verf, then the rpcb.
        let parsed = (|| {
            let xid = be32(&call, 0)?;
            let procedure = be32(&call, 20)?;
            let mut at = 24;
            for _ in 0..2 {
                let len = be32(&call, at + 4)? as usize;
                at += 8 + len.div_ceil(4) * 4;
            }
            at += 8; // r_prog, r_vers
            let netid = xdr_string(&call, &mut at)?;
            let uaddr = xdr_string(&call, &mut at)?;
            Some((
                xid,
                Seen {
                    procedure,
                    netid,
                    uaddr,
                },
            ))
        })();
        let Some((xid, s)) = parsed else { return };
        let index = {
            let mut seen = seen.lock().unwrap();
            seen.push(s);
            seen.len() - 1
        };
        if close_at == Some(index) {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        if !answer {
            continue;
        }
        // xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS, TRUE.
        let reply: Vec<u8> = [0x8000_0000u32 | 28, xid, 1, 0, 0, 0, 0, 1]
            .into_iter()
            .flat_map(u32::to_be_bytes)
            .collect();
        if stream.write_all(&reply).is_err() {
            return;
        }
    }
}

fn uaddr(a: SocketAddr) -> String {
    format!("{}.{}.{}", a.ip(), a.port() >> 8, a.port() & 0xff)
}

/// The addresses announced after each `rdma` in the listening line.
fn rdma_addrs(line: &str) -> Vec<SocketAddr> {
    let head = line.split('(').next().unwrap();
    let words: Vec<&str> = head.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "rdma")
        .filter_map(|w| w[1].parse().ok())
        .collect()
}

/// With two RDMA listeners (one netid), only the first is SET, no
/// mapping is UNSET after this process SET it, the ready line says which
/// listener was left out, and the exit UNSETs exactly what was SET.
#[test]
fn two_listeners_of_one_netid_register_the_first_only() {
    let fake = FakeRpcbind::start(usize::MAX);
    let server = Server::serve(&[
        "--listen",
        "127.0.0.1:0",
        "--listen",
        "127.0.0.1:0",
        "--tcp-listen",
        "127.0.0.1:0",
        "--rpcbind",
        "--rpcbind-server",
        &fake.addr.to_string(),
    ]);
    let rdma = rdma_addrs(&server.line);
    assert_eq!(rdma.len(), 2, "{}", server.line);
    let tcp = server.tcp.unwrap();
    let line = server.line.clone();
    assert!(
        line.contains(&format!(
            "first listener of each netid: rdma {}, tcp {tcp}",
            rdma[0]
        )),
        "{line}"
    );
    assert!(
        line.contains(&format!("not registered: rdma {}", rdma[1])),
        "{line}"
    );

    let registration = fake.seen();
    let sets: Vec<(String, String)> = registration
        .iter()
        .filter(|s| s.procedure == RPCBPROC_SET)
        .map(|s| (s.netid.clone(), s.uaddr.clone()))
        .collect();
    assert_eq!(
        sets,
        [
            ("rdma".to_string(), uaddr(rdma[0])),
            ("tcp".to_string(), uaddr(tcp))
        ],
        "{registration:?}"
    );
    // No UNSET of a netid after its SET (that would remove our own mapping).
    for (i, s) in registration.iter().enumerate() {
        if s.procedure == RPCBPROC_UNSET {
            assert!(
                !registration[..i]
                    .iter()
                    .any(|p| p.procedure == RPCBPROC_SET && p.netid == s.netid),
                "UNSET {} after its SET: {registration:?}",
                s.netid
            );
        }
    }

    assert_eq!(server.stop("TERM").code(), Some(0));
    let mut unsets: Vec<(String, String)> = fake.seen()[registration.len()..]
        .iter()
        .map(|s| {
            assert_eq!(s.procedure, RPCBPROC_UNSET, "{s:?}");
            (s.netid.clone(), s.uaddr.clone())
        })
        .collect();
    unsets.sort();
    assert_eq!(unsets, sets, "exit must UNSET exactly what was SET");
}

/// Rpcbind answers the registration, then hangs. SIGTERM must stop
/// the listeners at once (not after the unregistration) and the process
/// must exit after the bounded unregistration (2 s in all), not after 5 s
/// per mapping.
#[test]
fn hung_rpcbind_does_not_hold_up_shutdown() {
    let fake = FakeRpcbind::start(1);
    let mut server = Server::serve(&[
        "--listen",
        "127.0.0.1:0",
        "--tcp-listen",
        "127.0.0.1:0",
        "--rpcbind",
        "--rpcbind-server",
        &fake.addr.to_string(),
    ]);
    let (rdma, tcp) = (server.rdma.unwrap(), server.tcp.unwrap());
    assert!(
        server.line.contains("registered with rpcbind"),
        "{}",
        server.line
    );
    let registered = fake.seen().len();
    TcpStream::connect(tcp).expect("serving before the signal");

    let ok = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let t0 = Instant::now();
    // The listeners close while the unregistration still hangs.
    let closed =
        |a: SocketAddr| TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_err();
    while !(closed(tcp) && closed(rdma)) {
        assert!(
            t0.elapsed() < Duration::from_millis(1500),
            "still accepting {:?} after SIGTERM",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        server.is_running(),
        "exited before the unregistration limit"
    );
    // The UNSETs reached the hung rpcbind concurrently, not one by one.
    let deadline = Instant::now() + Duration::from_secs(1);
    while fake.seen().len() < registered + 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let unsets = fake.seen().len() - registered;
    assert!(
        unsets >= 2,
        "only {unsets} UNSET(s) sent before the first answer"
    );

    // Exit after the 2 s bound (5 s per mapping before the fix: 10 s).
    let status = server
        .wait_exit(Duration::from_secs(4).saturating_sub(t0.elapsed()))
        .unwrap_or_else(|| {
            panic!(
                "no exit {:?} after SIGTERM with a hung rpcbind",
                t0.elapsed()
            )
        });
    assert_eq!(status.code(), Some(0));
}

/// A registration that fails half-way (the connection to rpcbind is lost
/// at the SET of the second netid) must not leave the first netid's
/// mapping behind: the server does not run, so rpcbind must not point at
/// it. Before the fix, the error returned at once and the `rdma` mapping
/// stayed registered.
#[test]
fn failed_registration_removes_what_it_set() {
    // Calls: UNSET rdma, SET rdma, UNSET tcp, SET tcp (index 3: closed).
    let fake = FakeRpcbind::start_with(usize::MAX, Some(3));
    let out = std::process::Command::new(common::BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tcp-listen",
            "127.0.0.1:0",
            "--rpcbind",
            "--rpcbind-server",
            &fake.addr.to_string(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("cannot register with rpcbind"), "{stderr}");
    let seen = fake.seen();
    let procs: Vec<(u32, &str)> = seen
        .iter()
        .map(|s| (s.procedure, s.netid.as_str()))
        .collect();
    assert_eq!(
        &procs[..4],
        [
            (RPCBPROC_UNSET, "rdma"),
            (RPCBPROC_SET, "rdma"),
            (RPCBPROC_UNSET, "tcp"),
            (RPCBPROC_SET, "tcp"),
        ],
        "{seen:?}"
    );
    // Both mappings whose SET went out are removed again: rdma (registered)
    // and tcp (its answer was lost, so it may be registered).
    let mut undone: Vec<(u32, &str)> = procs[4..].to_vec();
    undone.sort();
    assert_eq!(
        undone,
        [(RPCBPROC_UNSET, "rdma"), (RPCBPROC_UNSET, "tcp")],
        "{seen:?}"
    );
}
