//! The oracle on a real capture (a checked-in 31-frame excerpt of the
//! rpcrdma loopback test: MPA exchange, inline RPCs, two RPC calls whose
//! arguments travel in Read chunks) and on copies of it with one defect
//! injected: it must pass the good capture and fail each broken one at the
//! broken frame.
//!
//! Needs tshark; without it the tests are skipped (with a message) unless
//! `CI` is set.

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use std::path::{Path, PathBuf};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/rpcrdma-read-chunks.pcap"
);
/// Ethernet + IPv4 + TCP (with timestamps) headers of the fixture's frames.
const TCP_PAYLOAD: usize = 14 + 20 + 32;

fn have_tshark() -> bool {
    let ok = std::process::Command::new(wire_check::tshark::program())
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "tshark is required when CI is set"
        );
        eprintln!("SKIPPED: tshark not installed");
    }
    ok
}

fn frames() -> (
    pcap_file::pcap::PcapHeader,
    Vec<(std::time::Duration, u32, Vec<u8>)>,
) {
    let mut r = PcapReader::new(std::fs::File::open(FIXTURE).unwrap()).unwrap();
    let h = r.header();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        v.push((p.timestamp, p.orig_len, p.data.into_owned()));
    }
    (h, v)
}

/// Writes the fixture with frame `n` (1-based) changed by `edit`.
fn mutated(name: &str, n: usize, edit: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let (h, mut v) = frames();
    edit(&mut v[n - 1].2);
    let path = std::env::temp_dir().join(format!("wire-check-{}-{name}.pcap", std::process::id()));
    let mut w = PcapWriter::with_header(std::fs::File::create(&path).unwrap(), h).unwrap();
    for (ts, orig, data) in &v {
        w.write_packet(&PcapPacket::new(*ts, *orig, data)).unwrap();
    }
    path
}

/// Recomputes the MPA CRC of a frame holding exactly one FPDU (CRC32c,
/// little-endian on the wire, over everything before it).
fn fix_crc(frame: &mut [u8]) {
    let end = frame.len() - 4;
    let crc = crc32c::crc32c(&frame[TCP_PAYLOAD..end]);
    frame[end..].copy_from_slice(&crc.to_le_bytes());
}

fn check(path: &Path) -> wire_check::Verdict {
    let v = wire_check::check_file(path).unwrap();
    eprintln!("{}", wire_check::report::summary(&v));
    v
}

fn failed_at(v: &wire_check::Verdict, frame: u64, what: &str) -> bool {
    v.failures()
        .any(|(_, f)| f.frame == frame && f.what.contains(what))
}

#[test]
fn good_capture_passes() {
    if !have_tshark() {
        return;
    }
    let v = check(Path::new(FIXTURE));
    assert!(v.passed());
    assert_eq!(v.connections.len(), 1);
    let c = &v.connections[0];
    assert!(c.crc);
    assert_eq!(c.fpdus, 25);
    assert_eq!(c.rpcordma.get("RDMA_MSG"), Some(&20));
    assert_eq!(c.reassembled, 2, "both Read-chunk calls reassembled");
}

#[test]
fn corrupted_crc_fails() {
    if !have_tshark() {
        return;
    }
    // Frame 27: one FPDU (an RDMA_MSG reply); flip a CRC bit.
    let p = mutated("crc", 27, |f| {
        let n = f.len();
        f[n - 1] ^= 0x01;
    });
    let v = check(&p);
    let _ = std::fs::remove_file(&p);
    assert!(!v.passed());
    assert!(failed_at(&v, 27, "Bad CRC32"), "{v:?}");
}

#[test]
fn broken_rpcordma_header_fails() {
    if !have_tshark() {
        return;
    }
    // Frame 27's RPC-over-RDMA header starts after ULPDU_Length (2) and
    // the untagged DDP/RDMAP header (18); set its version to 2 and keep
    // the CRC good: the Send no longer decodes as rpcordma.
    let p = mutated("vers", 27, |f| {
        let vers = TCP_PAYLOAD + 2 + 18 + 4;
        f[vers + 3] = 2;
        fix_crc(f);
    });
    let v = check(&p);
    let _ = std::fs::remove_file(&p);
    assert!(failed_at(&v, 27, "not decoded as rpcordma"), "{v:?}");
    assert!(!failed_at(&v, 27, "CRC"), "the CRC was recomputed");
}

#[test]
fn msn_out_of_sequence_fails() {
    if !have_tshark() {
        return;
    }
    // Frame 27's MSN (untagged header: control, RSVDULP[5], QN, MSN, MO).
    let p = mutated("msn", 27, |f| {
        let msn = TCP_PAYLOAD + 2 + 1 + 5 + 4;
        f[msn + 3] ^= 0x40;
        fix_crc(f);
    });
    let v = check(&p);
    let _ = std::fs::remove_file(&p);
    assert!(failed_at(&v, 27, "MSN/MO"), "{v:?}");
}

#[test]
fn read_response_to_wrong_stag_fails() {
    if !have_tshark() {
        return;
    }
    // Frame 26: the Read Response (tagged header: control, RSVDULP, STag,
    // TO); change its STag.
    let p = mutated("stag", 26, |f| {
        let stag = TCP_PAYLOAD + 2 + 2;
        f[stag] ^= 0x80;
        fix_crc(f);
    });
    let v = check(&p);
    let _ = std::fs::remove_file(&p);
    assert!(failed_at(&v, 26, "Read Response to STag"), "{v:?}");
}
