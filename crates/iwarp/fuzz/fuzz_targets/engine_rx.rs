//! The iWARP receive engine on hostile bytes: an established QP's receive
//! half (`engine::rx::Rx`) is fed an arbitrary byte stream in arbitrary
//! read sizes, then the transmit half drains whatever the receive half
//! queued (Read Responses, Terminate). Nothing may panic, loop forever or
//! allocate on the stream's say-so.
//!
//! Input layout: byte 0 bit 0 = CRC negotiated, bit 1 = register one
//! 4 KiB region with every right and post one receive into it (so tagged
//! placement, Send placement and Read Responses are reached), bits 2..7 =
//! read-chunk size seed; byte 1 = second read-size seed; the rest is the TCP
//! stream after the MPA exchange. STags are random, so every occurrence of
//! the word `A5A5A5A5` in the stream is replaced by the region's STag.
//!
//! With the region, an RDMA Read into its upper 60 KiB is outstanding too,
//! and if the first stream byte is odd, the stream starts with a
//! synthesized Read Response for it (segment size from the next byte, one
//! byte flipped at a position given by the two after, by the fifth): so the
//! read-ahead of response segments (several segments of at least 4 KiB per
//! read, which random inputs of a few KiB rarely reach) is fuzzed with
//! corruptions anywhere in it.
#![no_main]

use iwarp::cq::Cq;
use iwarp::engine::rx::Rx;
use iwarp::engine::tx::Tx;
use iwarp::engine::{Limits, QpShared, SqItem};
use iwarp::mem::StagTable;
use iwarp::rdma_verbs::{Access, RecvWr, RemoteAddr, SendWr, Sge};
use libfuzzer_sys::fuzz_target;
use std::io;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let crc = data[0] & 1 == 1;
    let table = Arc::new(StagTable::default());
    let region = (data[0] & 2 != 0).then(|| {
        table.insert(
            1,
            REGION,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            Some(vec![0u8; REGION].into()),
        )
    });
    let stag = region.as_ref().map(|r| r.stag_for(r.lock().key));
    let cq = Cq::new(1024);
    let sh = Arc::new(QpShared::new(
        1,
        1,
        table.clone(),
        cq.clone(),
        cq,
        Limits {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 4,
            max_recv_sge: 4,
        },
    ));
    sh.establish(4, 4, true, None, None);
    let mut tx = Tx::new(sh.clone(), crc, 1454, None);
    let mut out = Vec::new();
    if let Some(stag) = stag {
        let mut g = sh.lock();
        g.rq.push_back(RecvWr::new(1, vec![Sge::new(stag, 0, 4096)]));
        g.sq_outstanding += 1;
        g.sq.push_back(SqItem::Wr(SendWr::read(
            2,
            vec![Sge::new(stag, SINK_TO, SINK_LEN as u32)],
            RemoteAddr {
                rkey: 0x0102_0304,
                offset: 0,
            },
        )));
        drop(g);
        // Produces the Read Request: the Read is outstanding.
        tx.poll_transmit(&mut out, usize::MAX);
        out.clear();
    }
    let mut rx = Rx::new(sh.clone(), crc);
    rx.set_read_ahead(true);
    let seeds = [(data[0] >> 2) as usize + 1, data[1] as usize + 1];
    let mut rest = &data[2..];
    let mut owned = Vec::new();
    if let (Some(stag), [mode, size, at_hi, at_lo, flip, ..]) = (stag, rest) {
        if mode & 1 == 1 {
            owned = read_response(stag, crc, 4096 + usize::from(*size) * 97);
            let at = usize::from(u16::from_be_bytes([*at_hi, *at_lo])) * 5;
            if let Some(b) = owned.get_mut(at) {
                *b ^= *flip;
            }
            rest = &rest[5..];
        }
    }
    let synthesized = owned.len();
    owned.extend_from_slice(rest);
    if let Some(stag) = stag {
        for w in owned[synthesized..].chunks_exact_mut(4) {
            if w == [0xA5; 4] {
                w.copy_from_slice(&stag.to_be_bytes());
            }
        }
    }
    let stream = &owned[..];
    let mut pos = 0;
    let mut turn = 0usize;
    // Each call reads until the source is exhausted (WouldBlock) or the
    // budget runs out; bound the number of calls so a bug that never makes
    // progress shows up as a timeout rather than hiding.
    for _ in 0..10_000 {
        let r = rx.recv(|bufs| {
            if pos >= stream.len() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            // Vary the read size to cut FPDUs at arbitrary points.
            let limit = seeds[turn % 2] * (1 + turn % 7);
            turn += 1;
            let mut n = 0;
            for b in bufs.iter_mut() {
                let take = b.len().min(stream.len() - pos).min(limit - n);
                b[..take].copy_from_slice(&stream[pos..pos + take]);
                pos += take;
                n += take;
                if n == limit || pos == stream.len() {
                    break;
                }
            }
            Ok(n)
        });
        match r {
            Ok(iwarp::engine::rx::RxStatus::Budget) => continue,
            _ => break,
        }
    }
    for _ in 0..64 {
        if tx.poll_transmit(&mut out, usize::MAX) == 0 {
            break;
        }
    }
});

/// The region's size, and the outstanding RDMA Read's sink in it.
const REGION: usize = 64 * 1024;
const SINK_TO: u64 = 4096;
const SINK_LEN: usize = REGION - 4096;

/// A complete Read Response for the outstanding Read, in segments of
/// `seg` payload bytes, with valid CRCs if `crc`.
fn read_response(stag: u32, crc: bool, seg: usize) -> Vec<u8> {
    let mut v = Vec::new();
    let mut off = 0;
    while off < SINK_LEN {
        let n = seg.min(SINK_LEN - off);
        let last = off + n == SINK_LEN;
        let start = v.len();
        v.extend_from_slice(&((14 + n) as u16).to_be_bytes());
        // DDP tagged (T, L, DV 1); RDMAP version 1, Read Response.
        v.push(0x81 | if last { 0x40 } else { 0 });
        v.push(0x41);
        v.extend_from_slice(&stag.to_be_bytes());
        v.extend_from_slice(&(SINK_TO + off as u64).to_be_bytes());
        v.extend((0..n).map(|i| (i as u8).wrapping_mul(7)));
        v.resize(v.len() + (4 - (14 + n + 2) % 4) % 4, 0);
        let c = if crc { iwarp::crc::crc32c(&v[start..]) } else { 0 };
        v.extend_from_slice(&iwarp::crc::to_wire(c));
        off += n;
    }
    v
}
