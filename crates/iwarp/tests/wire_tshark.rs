//! Cross-check of our MPA/DDP/RDMAP encodings and pcap capture against an
//! independent decoder: Wireshark's `tshark`.
//!
//! A capture holding an MPA Request/Reply, a Send, a tagged RDMA Write split
//! over several FPDUs, an RDMA Read Request and its Response, and a
//! Terminate must decode with a good CRC32 on every FPDU, the right opcodes
//! and fields, and no expert warnings.
//!
//! tshark is needed: the test fails if it is missing and `CI` is set, and is
//! skipped with a message otherwise.
//!
//! tshark's MPA dissector is a TCP heuristic (no port is registered) that
//! needs to see the MPA Request and Reply of the connection; tshark 4.0.17
//! decodes our captures even with default preferences, and the test adds
//! `-o tcp.try_heuristic_first:TRUE` so no port-based dissector can claim
//! the stream first. `-2` (two-pass) lets it use the handshake state for
//! later frames. A bad CRC shows only as "Bad CRC32" text, so the test
//! counts "Good CRC32" and "Bad CRC32" besides checking the expert summary.
//!
//! Set `IWARP_KEEP_PCAP=1` to keep the captures (in the temp dir).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use iwarp::capture::Capture;
use iwarp::wire::ddp::{segments, MessageTemplate};
use iwarp::wire::fpdu::{mulpdu, FpduBuilder};
use iwarp::wire::mpa::{FrameKind, IrdOrd, MpaRepr};
use iwarp::wire::rdmap::{Opcode, RdmapRepr, ReadRequestRepr};
use iwarp::wire::sgl::sgl_range;
use iwarp::wire::terminate::{TerminateCause, TerminateRepr};

fn tshark() -> Option<PathBuf> {
    let out = Command::new("tshark").arg("--version").output().ok()?;
    out.status.success().then(|| PathBuf::from("tshark"))
}

fn run_tshark(bin: &Path, file: &Path, extra: &[&str]) -> String {
    let out = Command::new(bin)
        .args([
            "-2",
            "-o",
            "tcp.try_heuristic_first:TRUE",
            "-o",
            "iwarp_ddp_rdmap.reassemble_iwarp_rdma_send:FALSE",
            "-r",
        ])
        .arg(file)
        .args(extra)
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Frame one message (header + payload SGL) into FPDUs of at most `mul`
/// bytes of ULPDU and return the wire bytes of each FPDU.
fn message_fpdus(
    b: &FpduBuilder,
    tmpl: MessageTemplate,
    payload: &[&[u8]],
    inline_body: &[u8],
    mul: usize,
) -> Vec<Vec<u8>> {
    let len: usize = payload.iter().map(|p| p.len()).sum();
    let mut out = Vec::new();
    for seg in segments(tmpl, len, mul).unwrap() {
        let (h, hl) = seg.header.to_bytes();
        let mut hdr = h[..hl].to_vec();
        hdr.extend_from_slice(inline_body);
        let pieces = sgl_range(payload, seg.range.clone());
        let f = b.frame(&hdr, pieces.clone()).unwrap();
        let mut v = Vec::new();
        f.write_to(pieces, &mut v);
        out.push(v);
    }
    out
}

struct Scenario {
    fpdus: usize,
}

/// Write the scenario capture. `max_segment` splits TCP segments so that
/// FPDUs straddle segment boundaries when small.
fn write_capture(path: &Path, crc: bool, enhanced: bool, max_segment: usize) -> Scenario {
    let cap = Capture::create(path).unwrap().with_max_segment(max_segment);
    let client: SocketAddr = "192.0.2.1:40001".parse().unwrap();
    let server: SocketAddr = "192.0.2.2:20049".parse().unwrap();
    // Record from the client's point of view.
    let conn = cap.connection(client, server, true, true).unwrap();

    let pd = [0xf6u8, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x1f, 0x1f];
    let ird_ord = enhanced.then_some(IrdOrd {
        ird: 0,
        ord: 16,
        peer_to_peer: false,
        rtr_send: false,
        rtr_write: false,
        rtr_read: false,
    });
    let req = MpaRepr {
        kind: FrameKind::Request,
        markers: false,
        crc,
        reject: false,
        revision: if enhanced { 2 } else { 1 },
        ird_ord,
        private_data: &pd,
    };
    conn.sent(&req.to_vec().unwrap()).unwrap();
    let rep = MpaRepr {
        kind: FrameKind::Reply,
        ..req
    };
    conn.received(&rep.to_vec().unwrap()).unwrap();

    let b = FpduBuilder::new(crc);
    let mut n = 0;
    // Send (client -> server), 100 bytes in 3 SGL pieces.
    let body: Vec<u8> = (0..100u8).collect();
    let send = RdmapRepr::Send {
        solicited: false,
        invalidate: None,
        msn: 1,
        mo: 0,
        last: true,
    };
    let ddp = send.to_ddp();
    let tmpl = match ddp {
        iwarp::wire::ddp::DdpRepr::Untagged(u) => MessageTemplate::Untagged {
            rsvd_ulp: u.rsvd_ulp,
            qn: u.qn,
            msn: u.msn,
        },
        _ => unreachable!(),
    };
    for f in message_fpdus(
        &b,
        tmpl,
        &[&body[..10], &body[10..55], &body[55..]],
        &[],
        1454,
    ) {
        conn.sent(&f).unwrap();
        n += 1;
    }
    // Send with Invalidate (server -> client), 21 bytes (needs pad).
    let si = RdmapRepr::Send {
        solicited: true,
        invalidate: Some(0x0000_1234),
        msn: 1,
        mo: 0,
        last: true,
    };
    let (h, hl) = si.to_ddp().to_bytes();
    let mut v = Vec::new();
    let p21 = [0x5au8; 21];
    b.frame(&h[..hl], [&p21[..]])
        .unwrap()
        .write_to([&p21[..]], &mut v);
    conn.received(&v).unwrap();
    n += 1;
    // Tagged RDMA Write (server -> client), 5000 bytes over MSS-1460 FPDUs.
    let wdata: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    let w = MessageTemplate::Tagged {
        rsvd_ulp: Opcode::RdmaWrite.control_byte(),
        stag: 0x0001_0203,
        to: 0x7f00_0000_1000,
    };
    for f in message_fpdus(&b, w, &[&wdata], &[], mulpdu(1460, false)) {
        conn.received(&f).unwrap();
        n += 1;
    }
    // RDMA Read Request (server -> client) and Response (client -> server).
    let rr = ReadRequestRepr {
        sink_stag: 0x0000_0a00,
        sink_to: 0x10_0000,
        size: 3000,
        src_stag: 0x0000_0b00,
        src_to: 0x20_0000,
    };
    let rreq_hdr = RdmapRepr::RdmaReadRequest {
        msn: 1,
        mo: 0,
        last: true,
    }
    .to_ddp();
    let (h, hl) = rreq_hdr.to_bytes();
    let mut hdr = h[..hl].to_vec();
    hdr.extend_from_slice(&rr.to_bytes());
    let mut v = Vec::new();
    b.frame(&hdr, []).unwrap().write_to([], &mut v);
    conn.received(&v).unwrap();
    n += 1;
    let rdata = vec![0xA5u8; 3000];
    let resp = MessageTemplate::Tagged {
        rsvd_ulp: Opcode::RdmaReadResponse.control_byte(),
        stag: rr.sink_stag,
        to: rr.sink_to,
    };
    for f in message_fpdus(&b, resp, &[&rdata], &[], mulpdu(1460, false)) {
        conn.sent(&f).unwrap();
        n += 1;
    }
    // Terminate (client -> server) about a bad Send header.
    let mut offending = vec![0u8, 118];
    let mut sh = [0u8; 18];
    RdmapRepr::Send {
        solicited: false,
        invalidate: None,
        msn: 7,
        mo: 0,
        last: true,
    }
    .emit(&mut sh)
    .unwrap();
    offending.extend_from_slice(&sh);
    let t = TerminateRepr::for_cause(TerminateCause::DdpNoBuffer, &offending);
    let (u, un) = t.to_ulpdu();
    let mut v = Vec::new();
    b.frame(&u[..un], []).unwrap().write_to([], &mut v);
    conn.sent(&v).unwrap();
    n += 1;
    conn.local_closed().unwrap();
    conn.remote_closed().unwrap();
    cap.flush().unwrap();
    Scenario { fpdus: n }
}

fn check(bin: &Path, crc: bool, enhanced: bool, max_segment: usize) {
    let dir = std::env::temp_dir();
    let path = dir.join(format!(
        "iwarp-wire-tshark-{}-{crc}-{enhanced}-{max_segment}.pcap",
        std::process::id()
    ));
    let sc = write_capture(&path, crc, enhanced, max_segment);
    let v = run_tshark(bin, &path, &["-V"]);
    let count = |s: &str| v.matches(s).count();

    assert_eq!(count("Request frame header"), 1, "no MPA Request:\n{v}");
    assert_eq!(count("Reply frame header"), 1, "no MPA Reply:\n{v}");
    assert_eq!(
        count("Revision: "),
        2,
        "MPA revision not shown for both frames"
    );
    assert!(v.contains(&format!("Revision: {}", if enhanced { 2 } else { 1 })));
    assert_eq!(count("Bad CRC32"), 0, "bad CRC:\n{v}");
    if crc {
        assert_eq!(
            count("Good CRC32"),
            sc.fpdus,
            "every FPDU must have a good CRC:\n{v}"
        );
    }
    for s in [
        "Send with SE and Invalidate",
        "Invalidate STag: 4660",
        "Read Request",
        "RDMA Read Message Size: 3000 bytes",
        "Read Response",
        "Data Sink STag: 0x00000a00",
        "Data Source Tagged Offset: 0x0000000000200000",
        "(Data Sink) Steering Tag: 0x00010203",
        "(Data Sink) Tagged offset: 0x00007f0000001000",
        "OpCode: Terminate (0x7)",
        "Layer: DDP (0x1)",
        "Untagged Buffer Error (0x2)",
        "Invalid MSN - no buffer available (0x02)",
        "M bit: Set",
        "D bit: Set",
        "R bit: Not set",
        "DDP Segment Length: 0064",
        "Terminated DDP Header: 414300000000000000000000000700000000",
    ] {
        assert!(v.contains(s), "missing {s:?} in decode:\n{v}");
    }
    // 5000-byte Write over MULPDU(1460) = 1454: 4 FPDUs; 3000-byte Read
    // Response: 3 FPDUs.
    assert_eq!(count("OpCode: Write (0x0)"), 4, "{v}");
    assert_eq!(count("OpCode: Read Response (0x2)"), 3, "{v}");
    assert_eq!(count("OpCode: Send (0x3)"), 1, "{v}");
    assert_eq!(count("Malformed"), 0, "{v}");
    // The expert summary must list no warnings or errors (only TCP
    // notes/chats about the synthetic SYN and FIN).
    let e = run_tshark(bin, &path, &["-q", "-z", "expert"]);
    assert!(e.contains("Chats"), "no expert summary:\n{e}");
    let bad: Vec<&str> = e
        .lines()
        .filter(|l| l.starts_with("Errors") || l.starts_with("Warns"))
        .collect();
    assert!(bad.is_empty(), "expert warnings/errors:\n{e}");
    if std::env::var_os("IWARP_KEEP_PCAP").is_none() {
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn tshark_decodes_our_capture() {
    let Some(bin) = tshark() else {
        if std::env::var_os("CI").is_some() {
            panic!("tshark is required when CI is set (apt-get install -y tshark)");
        }
        eprintln!("SKIPPED: tshark not installed");
        return;
    };
    // CRC on, RFC 5044 revision 1, big segments.
    check(&bin, true, false, 65495);
    // CRC on, FPDUs split across small TCP segments (tshark reassembles).
    check(&bin, true, false, 536);
    // CRC off.
    check(&bin, false, false, 65495);
}

#[test]
fn tshark_decodes_enhanced_handshake() {
    let Some(bin) = tshark() else {
        if std::env::var_os("CI").is_some() {
            panic!("tshark is required when CI is set (apt-get install -y tshark)");
        }
        eprintln!("SKIPPED: tshark not installed");
        return;
    };
    check(&bin, true, true, 65495);
}
