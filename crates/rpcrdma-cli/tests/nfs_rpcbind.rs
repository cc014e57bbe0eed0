//! `rpcrdma nfsd --rpcbind --rpcbind-server ADDR` against a fake rpcbind
//! in this test: NFS v3 is registered for `rdma` and `tcp`, MOUNT v3 for
//! `tcp` (on the MOUNT-only listener), each at its listener's address, and
//! all three are removed at exit.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// procedure, program, version, netid, universal address.
type Seen = (u32, u32, u32, String, String);

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn xdr_string(b: &[u8], at: &mut usize) -> Option<String> {
    let len = be32(b, *at)? as usize;
    let s = b.get(*at + 4..*at + 4 + len)?;
    *at += 4 + len.div_ceil(4) * 4;
    Some(String::from_utf8_lossy(s).into_owned())
}

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

/// Answers `true` to every SET and UNSET and records them.
fn serve(mut stream: TcpStream, seen: &Mutex<Vec<Seen>>) {
    while let Some(call) = read_record(&mut stream) {
        let parsed = (|| {
            let xid = be32(&call, 0)?;
            let procedure = be32(&call, 20)?;
            let mut at = 24;
            for _ in 0..2 {
                let len = be32(&call, at + 4)? as usize;
                at += 8 + len.div_ceil(4) * 4;
            }
            let (prog, vers) = (be32(&call, at)?, be32(&call, at + 4)?);
            at += 8;
            let netid = xdr_string(&call, &mut at)?;
            let uaddr = xdr_string(&call, &mut at)?;
            Some((xid, (procedure, prog, vers, netid, uaddr)))
        })();
        let Some((xid, s)) = parsed else { return };
        seen.lock().unwrap().push(s);
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

fn addr_after(line: &str, word: &str) -> SocketAddr {
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[0] == word)
        .and_then(|w| w[1].trim_end_matches([',', ')']).parse().ok())
        .unwrap_or_else(|| panic!("no {word} address in {line}"))
}

#[test]
fn nfsd_registers_nfs_and_mount_and_removes_them() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let s = s.clone();
            std::thread::spawn(move || serve(stream, &s));
        }
    });
    let export = tempfile::tempdir().unwrap();
    let mut child = Command::new(common::BIN)
        .args(["nfsd", "--export"])
        .arg(export.path())
        .args([
            "--listen",
            "127.0.0.1:0",
            "--tcp-listen",
            "127.0.0.1:0",
            "--mount-listen",
            "127.0.0.1:0",
            "--rpcbind",
            "--rpcbind-server",
            &fake.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.contains("registered with rpcbind: NFS v3 rdma"),
        "{line}"
    );
    let (rdma, tcp, mount) = (
        addr_after(&line, "rdma"),
        addr_after(&line, "tcp"),
        addr_after(&line, "mount"),
    );
    let sets: Vec<Seen> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.0 == 1)
        .cloned()
        .collect();
    let want = vec![
        (1, 100_003, 3, "rdma".to_string(), uaddr(rdma)),
        (1, 100_003, 3, "tcp".to_string(), uaddr(tcp)),
        (1, 100_005, 3, "tcp".to_string(), uaddr(mount)),
    ];
    assert_eq!(sets, want);

    assert!(Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "nfsd did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    let seen = seen.lock().unwrap();
    for (prog, netid) in [(100_003, "rdma"), (100_003, "tcp"), (100_005, "tcp")] {
        assert!(
            seen.iter()
                .rev()
                .any(|s| s.0 == 2 && s.1 == prog && s.3 == netid),
            "no UNSET of {prog} {netid} at exit: {seen:?}"
        );
    }
}
