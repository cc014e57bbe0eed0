//! The human-readable summary.

use crate::judge::{Class, Verdict};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Renders the summary of `v`.
pub fn summary(v: &Verdict) -> String {
    let mut s = String::new();
    let healthy = v
        .connections
        .iter()
        .filter(|c| c.class == Class::Healthy)
        .count();
    let terminated: Vec<_> = v
        .connections
        .iter()
        .filter(|c| matches!(c.class, Class::Terminated { .. }))
        .collect();
    let incomplete = v
        .connections
        .iter()
        .filter(|c| c.class == Class::MpaIncomplete)
        .count();
    let sum = |f: fn(&crate::judge::Connection) -> u64| v.connections.iter().map(f).sum::<u64>();
    let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
    for c in &v.connections {
        for (k, n) in &c.rpcordma {
            *kinds.entry(k).or_default() += n;
        }
    }
    let _ = writeln!(s, "wire-check: {} frames with iWARP/RPC layers", v.frames);
    let _ = writeln!(
        s,
        "connections: {} iWARP ({} healthy, {} ended by a Terminate, {} MPA exchange incomplete/rejected); {} other TCP streams ignored",
        v.connections.len(),
        healthy,
        terminated.len(),
        incomplete,
        v.other_tcp_streams
    );
    let _ = writeln!(
        s,
        "FPDUs: {} (CRC in use on {} connections)",
        sum(|c| c.fpdus),
        v.connections.iter().filter(|c| c.crc).count()
    );
    let _ = writeln!(
        s,
        "RPC-over-RDMA messages: {kinds:?}; RPC messages decoded: {}",
        sum(|c| c.rpcs)
    );
    let _ = writeln!(
        s,
        "capture re-segmented one MPA frame end per TCP segment: {} frames -> {} ({} segments split, {} MPA directions)",
        v.resegment.frames_in, v.resegment.frames_out, v.resegment.segments_split, v.resegment.mpa_directions
    );
    let _ = writeln!(
        s,
        "RPC messages reassembled by tshark from chunks (Read/Reply chunks, multi-FPDU Sends): {}",
        sum(|c| c.reassembled)
    );
    let _ = writeln!(
        s,
        "replies with Write chunks: {} (reduced RPC reply decoded and RDMA Writes checked; tshark 4.0 re-inserts Write-chunk data only for programs it knows, e.g. NFS)",
        sum(|c| c.write_chunk_replies)
    );
    let _ = writeln!(
        s,
        "chunks whose handle an earlier, answered call on the connection offered (tshark 4.0 cannot reassemble them; judged by their Read Responses / RDMA Writes): {}",
        sum(|c| c.reused_handle_chunks)
    );
    let _ = writeln!(
        s,
        "calls whose RPC message did not decode, answered by RDMA_ERROR (excused): {}",
        sum(|c| c.error_answered_calls)
    );
    let _ = writeln!(
        s,
        "operations cut by a FIN/RST (Read Requests unanswered, chunks not reassembled; excused, listed): {} on {} connections; TCP resets: {}",
        sum(|c| c.closed_with_outstanding),
        v.connections.iter().filter(|c| c.closed_with_outstanding > 0).count(),
        sum(|c| c.resets)
    );
    let _ = writeln!(
        s,
        "RDMA Sends shorter than 16 bytes on non-RPC connections that tshark 4.0 calls malformed RPCoRDMA (its heuristic reads before checking the length): {}",
        sum(|c| c.short_sends)
    );
    let _ = writeln!(
        s,
        "NFS READ/READLINK replies with data of a length not a multiple of 4 in a Write chunk without XDR roundup padding (RFC 8166 §3.4.6) that tshark 4.0 calls malformed NFS (excused, listed): {}",
        sum(|c| c.unpadded_read_replies)
    );
    let _ = writeln!(
        s,
        "TCP flow-control warnings (not failures): {}; TCP reordering warnings (every MPA byte stream verified complete, so not loss): {}",
        sum(|c| c.flow_control_warnings),
        sum(|c| c.reordering_warnings)
    );
    if !v.resegment.incomplete_directions.is_empty() {
        let _ = writeln!(
            s,
            "FAIL: the capture lost bytes of {} MPA directions (the judgement of their connections is void):",
            v.resegment.incomplete_directions.len()
        );
        for d in v.resegment.incomplete_directions.iter().take(20) {
            let _ = writeln!(s, "  {d}");
        }
    }
    if !terminated.is_empty() {
        let _ = writeln!(
            s,
            "connections ended by an RDMAP Terminate (judged up to it):"
        );
        for c in &terminated {
            if let Class::Terminated { frame, by_port } = c.class {
                let _ = writeln!(
                    s,
                    "  stream {} ({} -> {}): Terminate in frame {frame} from port {by_port}; {} FPDUs before it; {} excused fault(s){}",
                    c.stream,
                    c.initiator,
                    c.responder,
                    c.fpdus,
                    c.excused.len(),
                    c.excused
                        .first()
                        .map(|e| format!(" (first: frame {}: {})", e.frame, e.what))
                        .unwrap_or_default()
                );
            }
        }
    }
    let failures: Vec<_> = v.failures().collect();
    if failures.is_empty() {
        let _ = writeln!(s, "PASS");
    } else {
        let _ = writeln!(s, "FAIL: {} failed checks; by kind:", failures.len());
        let mut kinds: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
        for (c, f) in &failures {
            let e = kinds.entry(kind(&f.what)).or_insert((0, c.stream, f.frame));
            e.0 += 1;
        }
        let mut kinds: Vec<_> = kinds.into_iter().collect();
        kinds.sort_by_key(|k| std::cmp::Reverse(k.1 .0));
        for (k, (n, stream, frame)) in kinds {
            let _ = writeln!(s, "  {n:>7} × {k}   (first: stream {stream} frame {frame})");
        }
        let _ = writeln!(s, "first failures:");
        for (c, f) in failures.iter().take(200) {
            let _ = writeln!(s, "  stream {} frame {}: {}", c.stream, f.frame, f.what);
        }
        if failures.len() > 200 {
            let _ = writeln!(s, "  … {} more", failures.len() - 200);
        }
    }
    s
}

/// The verdict in one line (`wire oracle: PASS|FAIL: …`), for the test
/// script's summary.
pub fn one_line(v: &Verdict) -> String {
    let sum = |f: fn(&crate::judge::Connection) -> u64| v.connections.iter().map(f).sum::<u64>();
    let failures = v.failures().count() + v.resegment.incomplete_directions.len();
    let excused: usize = v.connections.iter().map(|c| c.excused.len()).sum();
    format!(
        "wire oracle: {}: {} iWARP connections, {} FPDUs, {} RPC messages decoded, {} reassembled from chunks, {} replies with Write chunks, {} excused faults (in {} NFS READ/READLINK replies with unpadded Write chunks), {} reused chunk handles judged without tshark, {} failures",
        if v.passed() { "PASS" } else { "FAIL" },
        v.connections.len(),
        sum(|c| c.fpdus),
        sum(|c| c.rpcs),
        sum(|c| c.reassembled),
        sum(|c| c.write_chunk_replies),
        excused,
        sum(|c| c.unpadded_read_replies),
        sum(|c| c.reused_handle_chunks),
        failures
    )
}

/// A failure message with its numbers blanked, to group failures by kind.
pub fn kind(what: &str) -> String {
    let mut out = String::with_capacity(what.len());
    let mut chars = what.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '0' && chars.peek() == Some(&'x') {
            chars.next();
            while chars.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                chars.next();
            }
            out.push('#');
        } else if c.is_ascii_digit() {
            while chars.peek().is_some_and(|c| c.is_ascii_digit()) {
                chars.next();
            }
            out.push('#');
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn kinds_blank_numbers() {
        assert_eq!(
            super::kind("QN 0 from port 54068: MSN/MO 1248/0, XID 0x1f2e"),
            "QN # from port #: MSN/MO #/#, XID #"
        );
    }
}
