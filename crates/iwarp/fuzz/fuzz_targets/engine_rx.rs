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
#![no_main]

use iwarp::cq::Cq;
use iwarp::engine::rx::Rx;
use iwarp::engine::tx::Tx;
use iwarp::engine::{Limits, QpShared};
use iwarp::mem::StagTable;
use iwarp::rdma_verbs::{Access, RecvWr, Sge};
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
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            Some(vec![0u8; 4096].into()),
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
    if let Some(stag) = stag {
        sh.lock()
            .rq
            .push_back(RecvWr::new(1, vec![Sge::new(stag, 0, 4096)]));
    }
    let mut rx = Rx::new(sh.clone(), crc);
    let seeds = [(data[0] >> 2) as usize + 1, data[1] as usize + 1];
    let mut owned = data[2..].to_vec();
    if let Some(stag) = stag {
        for w in owned.chunks_exact_mut(4) {
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
    let mut tx = Tx::new(sh, crc, 1454, None);
    let mut out = Vec::new();
    for _ in 0..64 {
        if tx.poll_transmit(&mut out, usize::MAX) == 0 {
            break;
        }
    }
});
