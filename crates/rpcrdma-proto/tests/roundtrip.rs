//! Property tests: header encode/decode round trip; decoding (and
//! validating) arbitrary bytes never panics; marshal → reassemble gives back
//! the original stream byte for byte, for calls and for replies, over random
//! streams, thresholds (1 KiB..64 KiB) and segment limits.

mod common;
use std::collections::HashMap;

use common::AnyBinding;
use proptest::prelude::*;
use rpcrdma_proto::marshal::{
    plan_call, CallKind, ChunkLimits, OfferedChunks, PlanError, RegionSource, ReplyShape,
    Thresholds,
};
use rpcrdma_proto::reassemble::{reassemble_reply, CallPiece, ReplyItemShape};
use rpcrdma_proto::reply::{plan_reply, ReplyKind, ReplyPlanError};
use rpcrdma_proto::stream::{gather, roundup4, Item};
use rpcrdma_proto::validate::{
    check_call, check_reply, check_reply_payload, CallVerdict, ReplyVerdict,
};
use rpcrdma_proto::wire::*;

// ---------------------------------------------------------------- headers

fn segment() -> impl Strategy<Value = Segment> {
    (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(handle, length, offset)| Segment {
        handle,
        length,
        offset,
    })
}

fn write_chunk(max: usize) -> impl Strategy<Value = WriteChunkRepr> {
    prop::collection::vec(segment(), 0..=max).prop_map(|segments| WriteChunkRepr { segments })
}

fn read_list() -> impl Strategy<Value = Vec<ReadSegment>> {
    // Up to 8 Read chunks with strictly increasing Positions, 1..16 segments.
    prop::collection::vec(
        (1u32..10_000, prop::collection::vec(segment(), 1..=16)),
        0..=8,
    )
    .prop_map(|chunks| {
        let mut pos = 0u32;
        let mut out = Vec::new();
        for (step, segs) in chunks {
            for s in segs {
                out.push(ReadSegment {
                    position: pos,
                    segment: s,
                });
            }
            pos += step;
        }
        out
    })
}

fn chunk_lists() -> impl Strategy<Value = ChunkListsRepr> {
    (
        read_list(),
        prop::collection::vec(write_chunk(16), 0..=8),
        prop::option::of(write_chunk(16)),
    )
        .prop_map(|(read_list, write_list, reply_chunk)| ChunkListsRepr {
            read_list,
            write_list,
            reply_chunk,
        })
}

fn header() -> impl Strategy<Value = HeaderRepr> {
    let body = prop_oneof![
        chunk_lists().prop_map(BodyRepr::Msg),
        chunk_lists().prop_map(BodyRepr::NoMsg),
        (any::<u32>(), any::<u32>())
            .prop_map(|(low, high)| BodyRepr::Error(ErrorBody::Vers { low, high })),
        Just(BodyRepr::Error(ErrorBody::Chunk)),
    ];
    (any::<u32>(), any::<u32>(), body).prop_map(|(xid, credit, body)| HeaderRepr {
        xid,
        vers: 1,
        credit,
        body,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn header_round_trip(h in header(), tail in prop::collection::vec(any::<u8>(), 0..16)) {
        let mut buf = vec![0u8; h.buffer_len()];
        prop_assert_eq!(h.emit(&mut buf), Ok(h.buffer_len()));
        buf.extend_from_slice(&tail);
        let d = Header::parse(&buf, &DecodeLimits::default()).unwrap();
        prop_assert_eq!(d.header_len, h.buffer_len());
        prop_assert_eq!(d.to_repr(), Some(h.clone()));
        if let BodyRepr::Msg(_) = h.body {
            prop_assert_eq!(d.payload(), Some(&tail[..]));
        }
        // Too small a buffer is an error, not a panic.
        let mut small = vec![0u8; h.buffer_len() - 1];
        prop_assert!(h.emit(&mut small).is_err());
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..700)) {
        exercise(&bytes);
    }

    #[test]
    fn decoding_mutated_headers_never_panics(
        h in header(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut b = h.to_vec();
        for (i, v) in flips {
            let i = i.index(b.len());
            b[i] = v;
        }
        exercise(&b);
        let c = cut.index(b.len() + 1);
        exercise(&b[..c]);
    }
}

/// Runs every receive path on `bytes`; they must not panic.
fn exercise(bytes: &[u8]) {
    if let Ok(h) = Header::parse(bytes, &DecodeLimits::default()) {
        if let Some(c) = h.chunks() {
            let _ = c.read_list.chunks().map(|c| c.total_len()).sum::<u64>();
            let _ = c.write_list.chunks().filter(|c| c.is_unused()).count();
        }
        let _ = h.to_repr();
    }
    let v = check_call(bytes, &DecodeLimits::default(), &AnyBinding, 8);
    if let CallVerdict::Deliver(mut c) = v {
        let _ = c.check_payload(bytes, &AnyBinding, 8);
    }
    let offered = OfferedChunks {
        write_list: vec![WriteChunkRepr {
            segments: vec![Segment::default(); 2],
        }],
        reply_chunk: Some(WriteChunkRepr {
            segments: vec![Segment::default()],
        }),
    };
    let _ = check_reply(bytes, &DecodeLimits::default(), |_| Some(&offered));
}

// ---------------------------------------------------------------- streams

/// A random stream part: plain XDR words, or a DDP-eligible opaque.
#[derive(Clone, Debug)]
enum Part {
    Xdr(Vec<u8>),
    Opaque(Vec<u8>),
}

fn part() -> impl Strategy<Value = Part> {
    prop_oneof![
        (0usize..600)
            .prop_flat_map(|n| prop::collection::vec(any::<u8>(), n * 4))
            .prop_map(Part::Xdr),
        prop_oneof![
            3 => 0usize..3000,
            1 => 3000usize..40_000,
        ]
        .prop_map(|n| Part::Opaque((0..n).map(|i| (i * 7 + n) as u8).collect())),
    ]
}

/// Items and their bytes; `header` starts the stream. The length word of
/// each opaque ends the preceding XDR item.
fn build(header: Vec<u8>, parts: &[Part]) -> (Vec<Item>, Vec<Vec<u8>>, Vec<ReplyItemShape>) {
    let mut items = Vec::new();
    let mut bytes = Vec::new();
    let mut shape = Vec::new();
    let mut cur = header;
    for p in parts {
        match p {
            Part::Xdr(b) => cur.extend_from_slice(b),
            Part::Opaque(d) => {
                cur.extend_from_slice(&(d.len() as u32).to_be_bytes());
                items.push(Item::Xdr(cur.len() as u32));
                shape.push(ReplyItemShape::Xdr(cur.len() as u32));
                bytes.push(std::mem::take(&mut cur));
                items.push(Item::Ddp(d.len() as u32));
                shape.push(ReplyItemShape::Ddp);
                bytes.push(d.clone());
            }
        }
    }
    if !cur.is_empty() {
        items.push(Item::Xdr(cur.len() as u32));
        shape.push(ReplyItemShape::Xdr(cur.len() as u32));
        bytes.push(cur);
    }
    (items, bytes, shape)
}

/// The unreduced stream, pads as zeros.
fn unreduced(items: &[Item], bytes: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for (it, b) in items.iter().zip(bytes) {
        out.extend_from_slice(b);
        if let Item::Ddp(n) = it {
            out.resize(out.len() + (roundup4(*n as u64) - *n as u64) as usize, 0);
        }
    }
    out
}

/// An inline threshold in 1 KiB..64 KiB, biased to the small end where
/// chunks are needed.
fn threshold() -> impl Strategy<Value = u32> {
    prop_oneof![2 => 1024u32..4096, 1 => 4096u32..=65536]
}

fn thresholds() -> impl Strategy<Value = Thresholds> {
    (threshold(), threshold()).prop_map(|(c, r)| Thresholds {
        call_inline: c,
        reply_inline: r,
    })
}

fn limits() -> impl Strategy<Value = ChunkLimits> {
    (
        1u32..=16,
        prop::sample::select(vec![512u32, 1000, 4096, 8192, 65536, 1 << 20]),
        any::<bool>(),
    )
        .prop_map(|(s, b, items)| ChunkLimits {
            max_segments_per_chunk: s,
            max_segment_bytes: b,
            long_call_item_chunks: items,
        })
}

const XID: u32 = 0x5eed_0001;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn call_marshal_reassemble_round_trip(
        parts in prop::collection::vec(part(), 0..12),
        th in thresholds(),
        lim in limits(),
    ) {
        // At most 6 opaques: with a Position-Zero chunk that is 7 Read
        // chunks, within the decoder's default limit of 8.
        let opaques = parts.iter().filter(|p| matches!(p, Part::Opaque(_))).count();
        prop_assume!(opaques <= 6);
        let (items, bytes, _) = build(common::rpc_call(XID, 0x2000_5244, 1, 2), &parts);
        let full = unreduced(&items, &bytes);
        let reply = ReplyShape { write_chunks: vec![], max_reduced_len: 64, ..Default::default() };
        let mut plan = match plan_call(XID, 32, &items, &reply, &th, &lim) {
            Ok(p) => p,
            Err(PlanError::TooManySegments { len, max }) => {
                prop_assert!(len > max as u64 * lim.max_segment_bytes as u64);
                return Ok(());
            }
            Err(PlanError::HeaderTooLarge(n)) => {
                prop_assert!(n > th.call_inline as usize);
                return Ok(());
            }
            Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
        };
        prop_assert!(plan.send_len() <= th.call_inline as u64, "Send fits the threshold");
        // Register: region i gets handle 0x100+i at base (i+1) << 32.
        let refs: Vec<&[u8]> = bytes.iter().map(|b| &b[..]).collect();
        let payload = gather(&plan.payload, &refs);
        let mut mem: HashMap<u32, (u64, Vec<u8>)> = HashMap::new();
        for i in 0..plan.regions.len() {
            let base = (i as u64 + 1) << 32;
            let data = match plan.regions[i].source {
                RegionSource::CallItem { item } => bytes[item].clone(),
                RegionSource::CallPayload => payload.clone(),
                _ => continue,
            };
            prop_assert_eq!(data.len() as u64, plan.regions[i].len);
            mem.insert(0x100 + i as u32, (base, data));
            plan.set_region(i, 0x100 + i as u32, base);
        }
        let mut msg = plan.header.to_vec();
        msg.extend_from_slice(&gather(plan.inline(), &refs));
        prop_assert_eq!(msg.len() as u64, plan.send_len());

        // The Responder.
        let v = check_call(&msg, &DecodeLimits::default(), &AnyBinding, 8);
        let CallVerdict::Deliver(mut call) = v else {
            return Err(TestCaseError::fail(format!("not delivered: {:?}", v.action())));
        };
        let h = Header::parse(&msg, &DecodeLimits::default()).unwrap();
        let rl = &h.chunks().unwrap().read_list;
        let rdma_read = |r: &std::ops::Range<usize>| -> Vec<u8> {
            let mut out = Vec::new();
            for i in r.clone() {
                let s = rl.get(i).unwrap().segment;
                let (base, data) = &mem[&s.handle];
                let off = (s.offset - base) as usize;
                out.extend_from_slice(&data[off..off + s.length as usize]);
            }
            out
        };
        let reduced = match &call.reassembly.position_zero {
            Some(p0) => {
                prop_assert_eq!(plan.kind, CallKind::Long);
                let d = rdma_read(&p0.segments);
                call.check_payload(&d, &AnyBinding, 8).map_err(|v| {
                    TestCaseError::fail(format!("payload refused: {:?}", v.action()))
                })?;
                d
            }
            None => h.payload().unwrap().to_vec(),
        };
        let chunk_data: Vec<Vec<u8>> =
            call.reassembly.chunks.iter().map(|c| rdma_read(&c.segments)).collect();
        let cd: Vec<&[u8]> = chunk_data.iter().map(|c| &c[..]).collect();
        let out = call.reassembly.to_contiguous(&reduced, &cd).unwrap();
        prop_assert_eq!(out.len(), full.len());
        prop_assert!(out == full, "reassembled call differs");
        prop_assert_eq!(call.reassembly.unreduced_len, full.len() as u64);
        // Chunk pieces carry exactly the DDP items' contents.
        let reduced_items: Vec<u64> = call.reassembly.pieces.iter()
            .filter_map(|p| match p { CallPiece::Chunk { len, .. } => Some(*len), _ => None })
            .collect();
        prop_assert_eq!(reduced_items.len(), call.reassembly.chunks.len());
    }

    #[test]
    fn reply_plan_reassemble_round_trip(
        parts in prop::collection::vec(part(), 0..10),
        reply_inline in threshold(),
        // Per DDP result: 0 = empty chunk, 1 = chunk with room; extra room.
        choices in prop::collection::vec((0u8..4, 0u32..5000, 1u32..=16), 0..8),
        extra_chunks in 0usize..3,
        reply_chunk in prop::option::of((0u32..200_000, 1u32..=16)),
    ) {
        let (items, bytes, shape) = build(common::rpc_reply(XID), &parts);
        let full = unreduced(&items, &bytes);
        let ddp_lens: Vec<u32> = items.iter().filter_map(|i| match i {
            Item::Ddp(n) => Some(*n), _ => None }).collect();
        // Offer Write chunks.
        let mut offered = OfferedChunks::default();
        let mut handle = 1000u32;
        let mut mk_chunk = |cap: u64, nsegs: u32, base: u64| {
            let per = cap.div_ceil(nsegs as u64).max(1);
            let mut segs = Vec::new();
            let mut left = cap;
            let mut off = base;
            while left > 0 {
                let l = left.min(per);
                segs.push(Segment { handle, length: l as u32, offset: off });
                handle += 1;
                off += l + 64; // a gap: segments need not be adjacent
                left -= l;
            }
            if segs.is_empty() {
                segs.push(Segment { handle, length: 0, offset: base });
                handle += 1;
            }
            WriteChunkRepr { segments: segs }
        };
        let n_chunks = choices.len().min(ddp_lens.len() + extra_chunks);
        for (i, (kind, room, nsegs)) in choices.iter().take(n_chunks).enumerate() {
            let need = ddp_lens.get(i).copied().unwrap_or(0) as u64;
            let c = if *kind == 0 {
                WriteChunkRepr::default()
            } else {
                mk_chunk(need + *room as u64, *nsegs, (i as u64 + 1) << 40)
            };
            offered.write_list.push(c);
        }
        if let Some((cap, nsegs)) = reply_chunk {
            offered.reply_chunk = Some(mk_chunk(cap as u64 + 4, nsegs, 0xff << 40));
        }

        let plan = match plan_reply(XID, 8, &items, &offered, reply_inline) {
            Ok(p) => p,
            Err(ReplyPlanError::NoReplyChunk { len }) => {
                prop_assert!(offered.reply_chunk.is_none() && len > reply_inline as u64);
                return Ok(());
            }
            Err(ReplyPlanError::HeaderTooLarge(len)) => {
                prop_assert!(len > reply_inline as u64);
                return Ok(());
            }
            Err(ReplyPlanError::ReplyChunkTooSmall { len, cap }) => {
                prop_assert!(len > cap);
                return Ok(());
            }
            Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
        };
        // Requester memory: one buffer per offered segment.
        let mut mem: HashMap<u32, (u64, Vec<u8>)> = HashMap::new();
        for s in offered.write_list.iter().chain(offered.reply_chunk.iter())
            .flat_map(|c| c.segments.iter())
        {
            mem.insert(s.handle, (s.offset, vec![0xee; s.length as usize]));
        }
        let refs: Vec<&[u8]> = bytes.iter().map(|b| &b[..]).collect();
        for w in &plan.writes {
            let src = gather(&[w.source], &refs);
            let (base, buf) = mem.get_mut(&w.handle).expect("write to an offered segment");
            prop_assert!(w.remote_offset >= *base);
            let off = (w.remote_offset - *base) as usize;
            prop_assert!(off + src.len() <= buf.len(), "RDMA Write overruns its segment");
            buf[off..off + src.len()].copy_from_slice(&src);
        }
        let mut msg = plan.header.to_vec();
        msg.extend_from_slice(&gather(&plan.inline, &refs));
        prop_assert!(plan.kind == ReplyKind::Long || msg.len() as u64 <= reply_inline as u64);

        // The Requester.
        let v = check_reply(&msg, &DecodeLimits::default(), |x| (x == XID).then_some(&offered));
        let ReplyVerdict::Deliver(h) = v else {
            return Err(TestCaseError::fail(format!("reply not delivered: {v:?}")));
        };
        let chunks = h.chunks().unwrap();
        let collect = |c: &rpcrdma_proto::wire::WriteChunk<'_>| -> Vec<u8> {
            let mut out = Vec::new();
            for s in c.segments() {
                let (_, buf) = &mem[&s.handle];
                out.extend_from_slice(&buf[..s.length as usize]);
            }
            out
        };
        let payload = match plan.kind {
            ReplyKind::Short => h.payload().unwrap().to_vec(),
            ReplyKind::Long => {
                let p = collect(&chunks.reply_chunk.unwrap());
                prop_assert_eq!(check_reply_payload(XID, &p), Ok(()));
                p
            }
        };
        let write_data: Vec<Vec<u8>> = chunks.write_list.chunks().map(|c| collect(&c)).collect();
        let wd: Vec<&[u8]> = write_data.iter().map(|d| &d[..]).collect();
        let wl = h.to_repr().unwrap().chunks().unwrap().write_list.clone();
        let out = reassemble_reply(&shape, &payload, &wl, &wd)
            .map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(out.len(), full.len());
        prop_assert!(out == full, "reassembled reply differs");
    }
}
