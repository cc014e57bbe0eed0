//! Receive rules for replies (a Requester's view), RFC 8166 §4.3, §4.5,
//! §4.6. Each test names the section it checks.

mod common;
use common::{rpc_reply, Words};
use rpcrdma_proto::marshal::OfferedChunks;
use rpcrdma_proto::validate::{check_reply, check_reply_payload, DiscardReason, ReplyVerdict};
use rpcrdma_proto::wire::{DecodeLimits, ErrorBody, Segment, WriteChunkRepr};

const XID: u32 = 0x0a0b_0c0d;

fn seg(h: u32, l: u32, o: u64) -> Segment {
    Segment {
        handle: h,
        length: l,
        offset: o,
    }
}

/// One Write chunk of two segments and a Reply chunk of one.
fn offered() -> OfferedChunks {
    OfferedChunks {
        write_list: vec![WriteChunkRepr {
            segments: vec![seg(10, 4096, 0x1000), seg(11, 4096, 0x9000)],
        }],
        reply_chunk: Some(WriteChunkRepr {
            segments: vec![seg(20, 8192, 0x20000)],
        }),
    }
}

fn check(m: &[u8]) -> ReplyVerdict<'_> {
    let o = offered();
    // Leak one OfferedChunks per call to satisfy the lifetime simply.
    let o: &'static OfferedChunks = Box::leak(Box::new(o));
    check_reply(m, &DecodeLimits::default(), |x| (x == XID).then_some(o))
}

fn discard(m: &[u8]) -> DiscardReason {
    match check(m) {
        ReplyVerdict::Discard(r) => r,
        v => panic!("expected discard, got {:?}", v.action()),
    }
}

/// A reply header: write chunk segments (len a, len b), reply chunk len r.
fn reply(proc_: u32, a: u32, b: u32, r: u32, payload: &[u8]) -> Vec<u8> {
    Words::new()
        .ws(&[XID, 1, 64, proc_, 0])
        .ws(&[1, 2])
        .hloo(10, a, 0x1000)
        .hloo(11, b, 0x9000)
        .ws(&[0, 1, 1])
        .hloo(20, r, 0x20000)
        .bytes(payload)
        .done()
}

#[test]
fn rfc8166_s3_4_6_valid_short_reply_with_write_chunk_is_delivered() {
    let m = reply(0, 4096, 100, 0, &rpc_reply(XID));
    let ReplyVerdict::Deliver(h) = check(&m) else {
        panic!("expected delivery")
    };
    assert_eq!(h.credit, 64);
}

#[test]
fn rfc8166_s4_3_3_msg_reply_copying_reply_chunk_with_zero_lengths_is_correct() {
    let m = reply(0, 0, 0, 0, &rpc_reply(XID));
    assert!(matches!(check(&m), ReplyVerdict::Deliver(_)));
}

#[test]
fn rfc8166_s4_3_3_msg_reply_with_nonzero_reply_chunk_is_discarded() {
    let m = reply(0, 0, 0, 64, &rpc_reply(XID));
    assert_eq!(discard(&m), DiscardReason::ReplyChunkUsedInMsg);
}

#[test]
fn rfc8166_s3_5_3_long_reply_is_delivered_and_payload_checked() {
    let m = reply(1, 0, 0, 64, &[]);
    assert!(matches!(check(&m), ReplyVerdict::Deliver(_)));
    assert_eq!(check_reply_payload(XID, &rpc_reply(XID)), Ok(()));
    assert_eq!(
        check_reply_payload(XID, &rpc_reply(XID + 1)),
        Err(DiscardReason::XidMismatch)
    );
    // NOMSG whose Reply chunk holds nothing, or has none.
    assert_eq!(discard(&reply(1, 0, 0, 0, &[])), DiscardReason::NoPayload);
    let m = Words::new().ws(&[XID, 1, 64, 1, 0, 0, 0]).done();
    assert_eq!(discard(&m), DiscardReason::NoPayload);
}

#[test]
fn rfc8166_s4_3_1_reply_with_read_list_is_discarded() {
    let m = Words::new()
        .ws(&[XID, 1, 64, 0, 1, 0])
        .hloo(1, 4, 0)
        .ws(&[0, 0, 0])
        .bytes(&rpc_reply(XID))
        .done();
    assert_eq!(discard(&m), DiscardReason::ReadListInReply);
}

#[test]
fn rfc8166_s4_3_2_more_write_chunks_than_offered_is_discarded() {
    let m = Words::new()
        .ws(&[XID, 1, 64, 0, 0])
        .ws(&[1, 2])
        .hloo(10, 0, 0x1000)
        .hloo(11, 0, 0x9000)
        .ws(&[1, 0, 0, 0])
        .bytes(&rpc_reply(XID))
        .done();
    assert_eq!(discard(&m), DiscardReason::TooManyWriteChunks);
}

#[test]
fn rfc8166_s3_4_6_write_chunk_differing_beyond_lengths_is_discarded() {
    let variants = [
        // different handle
        Words::new()
            .ws(&[1, 2])
            .hloo(99, 10, 0x1000)
            .hloo(11, 0, 0x9000),
        // different offset
        Words::new()
            .ws(&[1, 2])
            .hloo(10, 10, 0x1004)
            .hloo(11, 0, 0x9000),
        // more segments than offered
        Words::new()
            .ws(&[1, 3])
            .hloo(10, 10, 0x1000)
            .hloo(11, 0, 0x9000)
            .hloo(12, 0, 0xa000),
        // fewer segments, but not the offered ones
        Words::new().ws(&[1, 1]).hloo(11, 10, 0x9000),
        // length larger than offered (4096 is a multiple of 4: no roundup)
        Words::new()
            .ws(&[1, 2])
            .hloo(10, 4097, 0x1000)
            .hloo(11, 0, 0x9000),
        Words::new()
            .ws(&[1, 2])
            .hloo(10, 4100, 0x1000)
            .hloo(11, 0, 0x9000),
        // more than the roundup of a full last segment
        Words::new()
            .ws(&[1, 2])
            .hloo(10, 4096, 0x1000)
            .hloo(11, 4100, 0x9000),
        // not filled in segment order
        Words::new()
            .ws(&[1, 2])
            .hloo(10, 10, 0x1000)
            .hloo(11, 10, 0x9000),
    ];
    for (i, wl) in variants.into_iter().enumerate() {
        let m = Words::new()
            .ws(&[XID, 1, 64, 0, 0])
            .bytes(&wl.done())
            .ws(&[0, 0])
            .bytes(&rpc_reply(XID))
            .done();
        assert_eq!(
            discard(&m),
            DiscardReason::WriteChunkMismatch(0),
            "variant {i}"
        );
    }
}

#[test]
fn rfc8166_s4_3_3_reply_chunk_differing_or_unoffered_is_discarded() {
    let m = Words::new()
        .ws(&[XID, 1, 64, 1, 0, 0, 1, 1])
        .hloo(21, 64, 0x20000)
        .done();
    assert_eq!(discard(&m), DiscardReason::ReplyChunkMismatch);
    // Not offered at all.
    let none: &'static OfferedChunks = Box::leak(Box::default());
    let m = reply(0, 0, 0, 0, &rpc_reply(XID));
    let v = check_reply(&m, &DecodeLimits::default(), |_| Some(none));
    assert!(matches!(
        v,
        ReplyVerdict::Discard(DiscardReason::TooManyWriteChunks)
    ));
    let m = Words::new()
        .ws(&[XID, 1, 64, 0, 0, 0, 1, 1])
        .hloo(20, 0, 0x20000)
        .bytes(&rpc_reply(XID))
        .done();
    let v = check_reply(&m, &DecodeLimits::default(), |_| Some(none));
    assert!(matches!(
        v,
        ReplyVerdict::Discard(DiscardReason::ReplyChunkMismatch)
    ));
}

#[test]
fn rfc8166_s4_5_reply_header_errors_are_discarded_silently() {
    // Version mismatch, unknown proc, truncation, bad discriminator.
    for m in [
        Words::new().ws(&[XID, 2, 64, 0, 0, 0, 0]).done(),
        Words::new().ws(&[XID, 1, 64, 9, 0, 0, 0]).done(),
        Words::new().ws(&[XID, 1, 64, 0, 0, 1, 5]).done(),
        Words::new().ws(&[XID, 1, 64, 0, 3, 0, 0]).done(),
        Words::new().ws(&[XID, 1, 64, 4, 7, 0, 0]).done(),
    ] {
        assert!(matches!(discard(&m), DiscardReason::Undecodable(_)));
    }
    assert_eq!(discard(&[0u8; 12]), DiscardReason::TooShort);
}

#[test]
fn rfc8166_s4_6_requester_discards_msgp_and_done() {
    let m = Words::new()
        .ws(&[XID, 1, 64, 2, 0, 0, 0, 0, 0])
        .bytes(&rpc_reply(XID))
        .done();
    assert_eq!(discard(&m), DiscardReason::Msgp);
    let m = Words::new().ws(&[XID, 1, 64, 3, 0, 0, 0]).done();
    assert_eq!(discard(&m), DiscardReason::Done);
}

#[test]
fn rfc8166_s4_5_rdma_error_completes_pending_call() {
    let m = Words::new().ws(&[XID, 1, 5, 4, 2]).done();
    assert!(matches!(
        check(&m),
        ReplyVerdict::Error {
            xid: XID,
            err: ErrorBody::Chunk,
            credit: 5
        }
    ));
    let m = Words::new().ws(&[XID, 1, 5, 4, 1, 1, 1]).done();
    assert!(matches!(
        check(&m),
        ReplyVerdict::Error {
            err: ErrorBody::Vers { low: 1, high: 1 },
            ..
        }
    ));
    let m = Words::new().ws(&[XID + 1, 1, 5, 4, 2]).done();
    assert_eq!(discard(&m), DiscardReason::UnknownXid);
}

#[test]
fn rfc8166_s4_2_1_reply_xid_mismatch_is_discarded() {
    let m = reply(0, 0, 0, 0, &rpc_reply(XID + 1));
    assert_eq!(discard(&m), DiscardReason::XidMismatch);
    let m = reply(0, 0, 0, 0, &[]);
    assert_eq!(discard(&m), DiscardReason::XidMismatch);
    let m = Words::new().ws(&[XID + 1, 1, 64, 0, 0, 0, 0]).done();
    assert_eq!(discard(&m), DiscardReason::UnknownXid);
}

/// Forms of a returned Write chunk that Responders following RFC 5666 send
/// (implementation-experience draft §3.6, §3.7), tolerated: the chunk
/// returned with no segments (unused), with only the segments it filled,
/// or with its length rounded up to a multiple of 4.
#[test]
fn rfc5666_returned_write_chunk_forms_are_tolerated() {
    let variants = [
        (Words::new().ws(&[1, 0]), 0),
        (Words::new().ws(&[1, 1]).hloo(10, 10, 0x1000), 10),
        (Words::new().ws(&[1, 1]).hloo(10, 4096, 0x1000), 4096),
    ];
    for (i, (wl, total)) in variants.into_iter().enumerate() {
        let m = Words::new()
            .ws(&[XID, 1, 64, 0, 0])
            .bytes(&wl.done())
            .ws(&[0, 0])
            .bytes(&rpc_reply(XID))
            .done();
        let ReplyVerdict::Deliver(h) = check(&m) else {
            panic!("variant {i} not delivered")
        };
        let got = h.chunks().unwrap().write_list.get(0).unwrap();
        assert_eq!(got.total_len(), total, "variant {i}");
    }
    // Rounded up: 4096 + 5 bytes offered, 4096 + 5 filled, 4096 + 8 returned.
    let odd = OfferedChunks {
        write_list: vec![WriteChunkRepr {
            segments: vec![seg(10, 4096, 0x1000), seg(11, 5, 0x9000)],
        }],
        reply_chunk: None,
    };
    let o: &'static OfferedChunks = Box::leak(Box::new(odd));
    for (last, ok) in [(5, true), (8, true), (6, false), (12, false)] {
        let m = Words::new()
            .ws(&[XID, 1, 64, 0, 0])
            .ws(&[1, 2])
            .hloo(10, 4096, 0x1000)
            .hloo(11, last, 0x9000)
            .ws(&[0, 0])
            .bytes(&rpc_reply(XID))
            .done();
        let v = check_reply(&m, &DecodeLimits::default(), |x| (x == XID).then_some(o));
        assert_eq!(
            matches!(v, ReplyVerdict::Deliver(_)),
            ok,
            "last segment returned as {last} of 5"
        );
    }
}
