//! A Responder's whole receive-and-answer path on a hostile call: the
//! transport header through `check_call`, a Long Call's Position-Zero data
//! (a separate peer buffer, as pulled by RDMA Read) through
//! `check_payload`, the reassembled call, then a reply planned into the
//! Write chunks and Reply chunk the peer offered (`plan_reply`), and that
//! reply checked as our Requester would check it (`check_reply`,
//! `WriteChunkCursor`). Nothing may panic; the reassembled call keeps every
//! chunk right after its length word; every RDMA Write stays inside an
//! offered segment; a reply we plan for an offer is one we accept.
//!
//! Input layout: byte 0 = reply inline threshold seed; byte 1 = `s`, then
//! `s % 8` reply-item bytes (bit 7: DDP-eligible; length from bits 0..6);
//! the rest is the transport message. For a Long Call (RDMA_NOMSG), the
//! bytes after its transport header stand in for the Position-Zero chunk's
//! data pulled by RDMA Read (zero-filled or cut to the chunk's length).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::binding::rdmatest::RdmatestBinding;
use rpcrdma_proto::reassemble::{CallPiece, DdpResult, WriteChunkCursor};
use rpcrdma_proto::reply::{plan_reply, ReplyKind};
use rpcrdma_proto::stream::{gather, roundup4, Item};
use rpcrdma_proto::validate::{
    check_call, check_reply, check_reply_payload, CallVerdict, ReplyVerdict,
};
use rpcrdma_proto::wire::{BodyRepr, DecodeLimits, WriteChunkRepr};

/// Largest peer-declared length the target materialises.
const MAX_MATERIAL: u64 = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let Some((&[seed, s], rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let n = usize::from(s % 8);
    if rest.len() < n {
        return;
    }
    let (script, msg) = rest.split_at(n);
    let limits = DecodeLimits::default();
    let CallVerdict::Deliver(mut call) = check_call(msg, &limits, &RdmatestBinding, 8) else {
        return;
    };
    let xid = call.header.xid;

    // The reduced stream: inline, or a Long Call's Position-Zero data.
    let reduced: Vec<u8> = match &call.reassembly.position_zero {
        Some(pz) => {
            if pz.len > MAX_MATERIAL {
                return;
            }
            let mut b = msg[call.header.header_len.min(msg.len())..].to_vec();
            b.resize(pz.len as usize, 0);
            if call.check_payload(&b, &RdmatestBinding, 8).is_err() {
                return;
            }
            b
        }
        None => call.header.payload().unwrap_or_default().to_vec(),
    };
    assert_eq!(reduced.len() as u64, call.reassembly.reduced_len);
    assert!(call.rpc.is_some() || call.reassembly.chunks.is_empty());

    // The unreduced call, from chunk contents as long as each chunk says.
    if call.reassembly.chunks.iter().all(|c| c.len <= MAX_MATERIAL) {
        let contents: Vec<Vec<u8>> = call
            .reassembly
            .chunks
            .iter()
            .enumerate()
            .map(|(i, c)| vec![0xC0 | i as u8; c.len as usize])
            .collect();
        let refs: Vec<&[u8]> = contents.iter().map(Vec::as_slice).collect();
        let out = call
            .reassembly
            .to_contiguous(&reduced, &refs)
            .expect("a checked call reassembles");
        assert_eq!(out.len() as u64, call.reassembly.unreduced_len);
        let mut at = 0u64;
        for p in &call.reassembly.pieces {
            match *p {
                CallPiece::Inline { len, .. } => at += len,
                CallPiece::Chunk { len, .. } => {
                    // Each data chunk sits right after its length word.
                    let a = at as usize;
                    assert!(a >= 4);
                    let w = u32::from_be_bytes(out[a - 4..a].try_into().unwrap());
                    assert_eq!(u64::from(w), len);
                    at += roundup4(len);
                }
            }
        }
        assert_eq!(at, call.reassembly.unreduced_len);
    }

    // A reply into the offered chunks: the RPC reply header, then the
    // scripted items.
    let mut items = vec![Item::Xdr(24)];
    for &b in script {
        let n = u32::from(b & 0x7F) * 37;
        items.push(if b & 0x80 != 0 {
            Item::Ddp(n)
        } else {
            Item::Xdr(roundup4(n.into()) as u32)
        });
    }
    let mut bytes: Vec<Vec<u8>> = items
        .iter()
        .map(|it| match *it {
            Item::Xdr(n) | Item::Ddp(n) => vec![0x5A; n as usize],
        })
        .collect();
    bytes[0] = [xid.to_be_bytes(), 1u32.to_be_bytes()].concat();
    bytes[0].resize(24, 0);
    let item_refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    let reply_inline = 1024 + u32::from(seed) * 64;
    let offered = call.offered.clone();
    let Ok(plan) = plan_reply(xid, 8, &items, &offered, reply_inline) else {
        return;
    };

    // Every RDMA Write lies inside one offered segment.
    let segs: Vec<_> = offered
        .write_list
        .iter()
        .chain(offered.reply_chunk.iter())
        .flat_map(|c| c.segments.iter())
        .collect();
    for w in &plan.writes {
        let len = u64::from(w.source.len());
        assert!(
            segs.iter().any(|s| s.handle == w.handle
                && w.remote_offset >= s.offset
                && w.remote_offset - s.offset + len <= u64::from(s.length)),
            "write {w:?} outside every offered segment"
        );
    }

    // Our Requester accepts the reply planned for its offer.
    let mut wire = plan.header.to_vec();
    let payload = match plan.kind {
        ReplyKind::Short => {
            let inline = gather(&plan.inline, &item_refs);
            assert!(wire.len() + inline.len() <= reply_inline as usize);
            wire.extend_from_slice(&inline);
            inline
        }
        ReplyKind::Long => {
            assert!(wire.len() <= reply_inline as usize);
            assert!(offered.reply_chunk.is_some());
            let BodyRepr::NoMsg(ref c) = plan.header.body else {
                panic!("Long reply that is not RDMA_NOMSG");
            };
            let echoed = c.reply_chunk.as_ref().expect("no echoed reply chunk");
            assert!(echoed.total_len() > 0);
            // The reduced reply (written into the Reply chunk) starts with
            // the RPC reply header.
            bytes[0].clone()
        }
    };
    let verdict = check_reply(&wire, &limits, |x| (x == xid).then_some(&offered));
    let ReplyVerdict::Deliver(got) = verdict else {
        panic!("our own reply to the offer is refused: {verdict:?}");
    };
    assert!(check_reply_payload(xid, &payload).is_ok());
    let returned: Vec<WriteChunkRepr> = got
        .chunks()
        .map(|c| c.write_list.chunks().map(|w| w.to_repr()).collect())
        .unwrap_or_default();
    let mut cursor = WriteChunkCursor::new(&got.chunks().unwrap().write_list);
    let mut next = 0usize;
    for it in &items {
        if let Item::Ddp(n) = *it {
            let ci = next;
            next += 1;
            let want = match offered.write_list.get(ci) {
                Some(c) if !c.segments.is_empty() => DdpResult::Chunk { chunk: ci, len: n },
                _ => DdpResult::Inline,
            };
            assert_eq!(cursor.next_result(n), Ok(want), "returned {returned:?}");
        }
    }
});
