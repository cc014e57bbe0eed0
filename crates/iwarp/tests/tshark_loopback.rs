//! Wire oracle: real loopback traffic between two software iWARP endpoints,
//! captured on `lo` by `dumpcap` (and, independently, by the provider's own
//! capture option), decoded by `tshark`. Every FPDU must decode as iWARP
//! with a good CRC32, no expert warnings or errors, MSN/MO in sequence per
//! queue and direction, and every Read Response matching a Read Request.
//!
//! Needs `dumpcap` (allowed to capture on `lo`) and `tshark`; if either is
//! missing the test fails when `CI` is set and is skipped (with a message)
//! otherwise.

use bytes::{Bytes, BytesMut};
use iwarp::{Config, Device};
use rdma_verbs::{
    Access, CompletionQueue, ConnParam, ConnectRequest, Device as _, Listener as _, MemoryRegion,
    ProtectionDomain, QpInit, QueuePair, RecvWr, RemoteAddr, SendWr, Sge, WcStatus,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn have(bin: &str) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

struct End {
    pd: iwarp::Pd,
    cq: iwarp::Cq,
    qp: iwarp::Qp,
}

fn end(dev: &Device) -> End {
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(1024).unwrap();
    let qp = dev.create_qp(&pd, QpInit::with_cq(cq.clone())).unwrap();
    End { pd, cq, qp }
}

async fn ok(cq: &iwarp::Cq) -> rdma_verbs::WorkCompletion {
    let wc = tokio::time::timeout(Duration::from_secs(10), cq.next())
        .await
        .unwrap();
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    wc
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7) as u8).collect()
}

/// One connection exercising Send (SGLs), RDMA Write (segmented), RDMA
/// Read (4 outstanding and zero-length), Send with Invalidate, disconnect.
async fn traffic(da: &Device, db: &Device, l: iwarp::Listener) {
    let a = end(da);
    let b = end(db);
    let addr = l.local_addr();
    let recv_a =
        a.pd.register(BytesMut::zeroed(4096).into(), Access::LOCAL_WRITE)
            .unwrap();
    let recv_b =
        b.pd.register(BytesMut::zeroed(4096).into(), Access::LOCAL_WRITE)
            .unwrap();
    for i in 0..4u64 {
        a.qp.post_recv(RecvWr::new(
            i,
            vec![Sge::new(recv_a.lkey(), i * 1024, 1024)],
        ))
        .unwrap();
        b.qp.post_recv(RecvWr::new(
            i,
            vec![
                Sge::new(recv_b.lkey(), i * 1024, 256),
                Sge::new(recv_b.lkey(), i * 1024 + 256, 768),
            ],
        ))
        .unwrap();
    }
    let bqp = b.qp.clone();
    let srv = tokio::spawn(async move {
        let r = l.next_request().await.unwrap();
        r.accept(&bqp, ConnParam::new(&b"srv"[..], 4, 4))
            .await
            .unwrap()
    });
    da.connect(&a.qp, addr, ConnParam::new(&b"cli"[..], 4, 4))
        .await
        .unwrap();
    srv.await.unwrap();

    let src =
        a.pd.register(Bytes::from(pattern(20_000)).into(), Access::NONE)
            .unwrap();
    let bsrc =
        b.pd.register(Bytes::from(pattern(20_000)).into(), Access::REMOTE_READ)
            .unwrap();
    let target =
        b.pd.register(
            BytesMut::zeroed(20_000).into(),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
    let sink =
        a.pd.register(BytesMut::zeroed(20_000).into(), Access::LOCAL_WRITE)
            .unwrap();
    let inv =
        a.pd.register(
            BytesMut::zeroed(64).into(),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
    // Sends both ways.
    a.qp.post_send(SendWr::send(
        1,
        vec![Sge::new(src.lkey(), 0, 60), Sge::new(src.lkey(), 100, 40)],
    ))
    .unwrap();
    ok(&a.cq).await;
    assert_eq!(ok(&b.cq).await.byte_len, 100);
    // Segmented RDMA Write from a 3-entry gather list.
    a.qp.post_send(SendWr::write(
        2,
        vec![
            Sge::new(src.lkey(), 0, 3000),
            Sge::new(src.lkey(), 3000, 3000),
            Sge::new(src.lkey(), 6000, 4000),
        ],
        RemoteAddr {
            rkey: target.rkey(),
            offset: 5000,
        },
    ))
    .unwrap();
    ok(&a.cq).await;
    // Four Reads outstanding, then a zero-length Read.
    for i in 0..4u64 {
        a.qp.post_send(SendWr::read(
            10 + i,
            vec![Sge::new(sink.lkey(), i * 5000, 5000)],
            RemoteAddr {
                rkey: bsrc.rkey(),
                offset: i * 5000,
            },
        ))
        .unwrap();
    }
    for _ in 0..4 {
        ok(&a.cq).await;
    }
    a.qp.post_send(SendWr::read(
        20,
        vec![],
        RemoteAddr {
            rkey: bsrc.rkey(),
            offset: 0,
        },
    ))
    .unwrap();
    ok(&a.cq).await;
    // Send with Invalidate back to a.
    b.qp.post_send(SendWr::send_with_invalidate(
        3,
        vec![Sge::new(bsrc.lkey(), 0, 500)],
        inv.rkey(),
    ))
    .unwrap();
    ok(&b.cq).await;
    let wc = ok(&a.cq).await;
    assert_eq!(wc.invalidated_rkey, Some(inv.rkey()));
    // Finally a Write through the invalidated STag: a answers with a
    // Terminate (DDP tagged buffer error, invalid STag).
    b.qp.post_send(SendWr::write(
        4,
        vec![Sge::new(bsrc.lkey(), 0, 8)],
        RemoteAddr {
            rkey: inv.rkey(),
            offset: 0,
        },
    ))
    .unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(5), a.qp.next_event()).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), b.qp.next_event()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
}

fn tshark(file: &Path, extra: &[&str]) -> String {
    let out = Command::new("tshark")
        .args([
            "-2",
            "-o",
            "iwarp_ddp_rdmap.reassemble_iwarp_rdma_send:FALSE",
            "-o",
            "tcp.try_heuristic_first:TRUE",
        ])
        .args(extra)
        .arg("-r")
        .arg(file)
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[derive(Default, Debug)]
struct Fpdu {
    port: String,
    tagged: bool,
    last: bool,
    qn: Option<u32>,
    msn: Option<u32>,
    mo: Option<u64>,
    stag: Option<String>,
    opcode: String,
    sink_stag: Option<String>,
    size: Option<u64>,
    len: u64,
}

/// Value after "`key`: " anywhere on the line, up to the first space.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!("{key}: "))?;
    let rest = &line[at + key.len() + 2..];
    Some(rest.split(' ').next().unwrap_or(rest))
}

fn fpdus(v: &str) -> Vec<Fpdu> {
    let mut out = Vec::new();
    let mut port = String::new();
    let mut cur: Option<Fpdu> = None;
    for line in v.lines() {
        if line.starts_with("Frame ") {
            out.extend(cur.take());
        }
        if let Some(p) = field(line, "Source Port") {
            port = p.to_string();
        }
        if line.starts_with("iWARP Direct Data Placement") {
            out.extend(cur.take());
            cur = Some(Fpdu {
                port: port.clone(),
                ..Fpdu::default()
            });
            continue;
        }
        let Some(f) = cur.as_mut() else { continue };
        if line.contains("Tagged flag: True") {
            f.tagged = true;
        }
        if line.contains("Last flag: True") {
            f.last = true;
        }
        if let Some(x) = field(line, "Queue number") {
            f.qn = x.parse().ok();
        }
        if let Some(x) = field(line, "Message sequence number") {
            f.msn = x.parse().ok();
        }
        if let Some(x) = field(line, "Message offset") {
            f.mo = x.parse().ok();
        }
        if let Some(x) = field(line, "(Data Sink) Steering Tag") {
            f.stag = Some(x.to_string());
        }
        if let Some(at) = line.find("OpCode: ") {
            f.opcode = line[at + 8..].to_string();
        }
        if let Some(x) = field(line, "Data Sink STag") {
            f.sink_stag = Some(x.to_string());
        }
        if let Some(x) = field(line, "RDMA Read Message Size") {
            f.size = x.parse().ok();
        }
        if let Some(x) = line.strip_prefix("Data (") {
            f.len = x.split(' ').next().unwrap().parse().unwrap();
        }
    }
    out.extend(cur);
    out
}

fn check(file: &Path) {
    let v = tshark(file, &["-V"]);
    let count = |s: &str| v.matches(s).count();
    assert_eq!(count("Request frame header"), 1, "no MPA Request:\n{v}");
    assert_eq!(count("Reply frame header"), 1, "no MPA Reply:\n{v}");
    assert_eq!(count("Malformed"), 0, "{v}");
    assert_eq!(count("Bad CRC32"), 0, "{v}");
    let list = fpdus(&v);
    assert!(
        list.len() >= 20,
        "too few FPDUs decoded ({}):\n{v}",
        list.len()
    );
    assert_eq!(
        count("Good CRC32"),
        list.len(),
        "every FPDU needs a good CRC:\n{v}"
    );

    // MSN/MO per (direction, queue); Read Responses in request order.
    let mut next: HashMap<(String, u32), (u32, u64)> = HashMap::new();
    let mut requests: HashMap<String, std::collections::VecDeque<(String, u64)>> = HashMap::new();
    let (mut untagged, mut responses) = (0, 0);
    for f in &list {
        if !f.tagged {
            let key = (f.port.clone(), f.qn.expect("QN"));
            let (msn, mo) = *next.get(&key).unwrap_or(&(1, 0));
            assert_eq!(f.msn, Some(msn), "MSN out of sequence: {f:?}");
            assert_eq!(f.mo, Some(mo), "MO out of sequence: {f:?}");
            let len = if f.opcode.starts_with("Read Request") {
                28
            } else {
                f.len
            };
            next.insert(
                key.clone(),
                if f.last {
                    (msn.wrapping_add(1), 0)
                } else {
                    (msn, mo + len)
                },
            );
            untagged += 1;
        }
        if f.opcode.starts_with("Read Request") {
            requests
                .entry(f.port.clone())
                .or_default()
                .push_back((f.sink_stag.clone().unwrap(), f.size.unwrap()));
        }
        if f.opcode.starts_with("Read Response") {
            // The matching request went the other way, and responses come
            // in request order.
            let q = requests
                .iter_mut()
                .find(|(p, _)| **p != f.port)
                .map(|(_, q)| q)
                .expect("Read Response without any Read Request");
            let (stag, _) = q
                .front()
                .expect("Read Response without a pending Request")
                .clone();
            assert_eq!(
                f.stag.as_ref(),
                Some(&stag),
                "Read Response out of order: {f:?}"
            );
            if f.last {
                q.pop_front();
            }
            responses += 1;
        }
    }
    assert!(untagged >= 4, "{list:?}");
    let terms: Vec<_> = list
        .iter()
        .filter(|f| f.opcode.starts_with("Terminate"))
        .collect();
    assert_eq!(terms.len(), 1, "exactly one Terminate: {list:?}");
    for s in [
        "Layer: DDP (0x1)",
        "Tagged Buffer Error (0x1)",
        "Invalid STag (0x00)",
        "M bit: Set",
        "D bit: Set",
    ] {
        assert!(v.contains(s), "missing {s:?} in the Terminate decode:\n{v}");
    }
    assert!(responses >= 5, "{list:?}");
    assert!(
        requests.values().all(|q| q.is_empty()),
        "unanswered Read Requests: {requests:?}"
    );
    let e = tshark(file, &["-q", "-z", "expert"]);
    let bad: Vec<&str> = e
        .lines()
        .filter(|l| l.starts_with("Errors") || l.starts_with("Warns"))
        .collect();
    assert!(bad.is_empty(), "expert warnings/errors:\n{e}");
}

#[test]
fn tshark_decodes_real_loopback_traffic() {
    if !(have("dumpcap") && have("tshark")) {
        if std::env::var_os("CI").is_some() {
            panic!("dumpcap and tshark are required when CI is set");
        }
        eprintln!("SKIPPED: dumpcap/tshark not installed");
        return;
    }
    let dir = std::env::temp_dir();
    let id = std::process::id();
    let dump: PathBuf = dir.join(format!("iwarp-loopback-{id}.pcapng"));
    let own: PathBuf = dir.join(format!("iwarp-loopback-own-{id}.pcap"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // An Ethernet-like MULPDU so Writes and Read Responses segment.
        let base = Config {
            mulpdu: Some(1454),
            ..Config::default()
        };
        let da = Device::new(Config {
            capture: Some(iwarp::capture::Capture::create(&own).unwrap()),
            ..base.clone()
        });
        let db = Device::new(base);
        let l = db.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let port = l.local_addr().port();
        let mut child = Command::new("dumpcap")
            .args(["-q", "-i", "lo", "-f", &format!("tcp port {port}"), "-w"])
            .arg(&dump)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dumpcap");
        // Wait until dumpcap has written its file header.
        for _ in 0..100 {
            if std::fs::metadata(&dump)
                .map(|m| m.len() > 0)
                .unwrap_or(false)
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        traffic(&da, &db, l).await;
        da.flush_capture().unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let _ = child.wait();
    });
    for f in [&dump, &own] {
        check(f);
        if std::env::var_os("IWARP_KEEP_PCAP").is_none() {
            let _ = std::fs::remove_file(f);
        }
    }
}
