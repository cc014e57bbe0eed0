//! Receive rules for calls (a Responder's view), RFC 8166 §4.5 and friends.
//! Each test names the section it checks.

mod common;
use common::{rpc_call, AnyBinding, Words};
use rpcrdma_proto::binding::rdmatest::{procs, RdmatestBinding, PROGRAM, VERSION};
use rpcrdma_proto::binding::NoBindings;
use rpcrdma_proto::validate::{check_call, Action, CallVerdict, DiscardReason};
use rpcrdma_proto::wire::{BodyRepr, DecodeLimits, ErrorBody, Header, HeaderRepr};

const XID: u32 = 0x0102_0304;
const GRANT: u32 = 16;

fn limits() -> DecodeLimits {
    DecodeLimits::default()
}

/// The RDMA_ERROR header a verdict asks us to send.
fn error_reply(v: &CallVerdict<'_>) -> HeaderRepr {
    match v {
        CallVerdict::ReplyError(h) => h.clone(),
        other => panic!("expected an RDMA_ERROR reply, got {:?}", other.action()),
    }
}

fn expect_err_chunk(msg: &[u8], b: &dyn rpcrdma_proto::binding::BindingLookup) {
    let v = check_call(msg, &limits(), b, GRANT);
    assert_eq!(v.action(), Action::ReplyErrChunk);
    let h = error_reply(&v);
    assert_eq!(h.xid, XID);
    assert_eq!(h.vers, 1);
    assert_eq!(h.credit, GRANT);
    assert_eq!(h.body, BodyRepr::Error(ErrorBody::Chunk));
}

/// RDMA_MSG, no chunks, carrying `payload`.
fn short_call(payload: &[u8]) -> Vec<u8> {
    Words::new()
        .ws(&[XID, 1, 32, 0, 0, 0, 0])
        .bytes(payload)
        .done()
}

/// RDMA_MSG PUT with one Read chunk at `pos` of `len` bytes; the inline
/// payload is the RPC header and the data's length word `word`.
fn put_call(pos: u32, len: u32, word: u32) -> Vec<u8> {
    let mut payload = rpc_call(XID, PROGRAM, VERSION, procs::PUT);
    payload.extend_from_slice(&word.to_be_bytes());
    Words::new()
        .ws(&[XID, 1, 32, 0])
        .ws(&[1, pos])
        .hloo(0xaa, len, 0x1000)
        .ws(&[0, 0, 0])
        .bytes(&payload)
        .done()
}

#[test]
fn rfc8166_s4_5_shorter_than_28_bytes_is_discarded() {
    for n in [0, 4, 16, 20, 27] {
        let mut m = short_call(&[]);
        m.truncate(n);
        let v = check_call(&m, &limits(), &NoBindings, GRANT);
        assert_eq!(v.action(), Action::Discard, "len {n}");
    }
    // Even with a wrong version, which would otherwise earn ERR_VERS.
    let m = Words::new().ws(&[XID, 2, 32, 0, 0, 0]).done();
    assert!(matches!(
        check_call(&m, &limits(), &NoBindings, GRANT),
        CallVerdict::Discard(DiscardReason::TooShort)
    ));
}

#[test]
fn rfc8166_s4_5_1_unsupported_version_gets_err_vers_echoing_version() {
    let m = Words::new().ws(&[XID, 7, 32, 0, 0, 0, 0]).done();
    let v = check_call(&m, &limits(), &NoBindings, GRANT);
    assert_eq!(v.action(), Action::ReplyErrVers);
    let h = error_reply(&v);
    assert_eq!(h.xid, XID, "§4.5: rdma_xid copied");
    assert_eq!(h.vers, 7, "§4.5: rdma_vers copied from the failing request");
    assert_eq!(h.body, BodyRepr::Error(ErrorBody::Vers { low: 1, high: 1 }));
    assert_eq!(
        h.to_vec(),
        Words::new().ws(&[XID, 7, GRANT, 4, 1, 1, 1]).done()
    );
}

#[test]
fn rfc8166_s4_5_2_unknown_proc_gets_err_chunk() {
    let m = Words::new().ws(&[XID, 1, 32, 5, 0, 0, 0]).done();
    expect_err_chunk(&m, &NoBindings);
    let m = Words::new().ws(&[XID, 1, 32, 0xffff_ffff, 0, 0, 0]).done();
    expect_err_chunk(&m, &NoBindings);
}

#[test]
fn rfc8166_s4_6_1_msgp_gets_err_chunk() {
    let m = Words::new()
        .ws(&[XID, 1, 32, 2, 4096, 1024, 0, 0, 0])
        .bytes(&rpc_call(XID, 1, 1, 0))
        .done();
    assert!(matches!(
        Header::parse(&m, &limits()).unwrap().body,
        rpcrdma_proto::Body::Msgp {
            align: 4096,
            thresh: 1024,
            ..
        }
    ));
    expect_err_chunk(&m, &NoBindings);
}

#[test]
fn rfc8166_s4_6_2_done_is_discarded() {
    let m = Words::new().ws(&[XID, 1, 32, 3, 0, 0, 0]).done();
    assert!(matches!(
        check_call(&m, &limits(), &NoBindings, GRANT),
        CallVerdict::Discard(DiscardReason::Done)
    ));
}

#[test]
fn rfc8166_s4_2_4_rdma_error_at_responder_is_discarded() {
    for body in [&[2u32][..], &[1, 1, 1][..], &[9, 0, 0][..]] {
        let m = Words::new().ws(&[XID, 1, 32, 4]).ws(body).done();
        assert!(
            matches!(
                check_call(&m, &limits(), &NoBindings, GRANT),
                CallVerdict::Discard(DiscardReason::ErrorAtResponder)
            ),
            "{body:?}"
        );
    }
}

#[test]
fn rfc8166_s4_5_2_truncated_lists_get_err_chunk() {
    // Read list entry cut short.
    let m = Words::new().ws(&[XID, 1, 32, 0, 1, 8, 0xaa, 16]).done();
    expect_err_chunk(&m, &NoBindings);
    // Read list never terminated.
    let m = Words::new().ws(&[XID, 1, 32, 0, 1, 8]).hloo(1, 2, 3).done();
    expect_err_chunk(&m, &NoBindings);
    // Write chunk count runs past the buffer.
    let m = Words::new()
        .ws(&[XID, 1, 32, 0, 0, 1, 3])
        .hloo(1, 2, 3)
        .ws(&[0, 0])
        .done();
    expect_err_chunk(&m, &NoBindings);
    // Reply chunk count runs past the buffer (and a huge count).
    let m = Words::new()
        .ws(&[XID, 1, 32, 1, 0, 0, 1, 2])
        .hloo(1, 2, 3)
        .done();
    expect_err_chunk(&m, &NoBindings);
    let m = Words::new()
        .ws(&[XID, 1, 32, 1, 0, 0, 1, 0xffff_ffff])
        .done();
    expect_err_chunk(&m, &NoBindings);
    // Optional-data discriminator that is neither 0 nor 1.
    let m = Words::new().ws(&[XID, 1, 32, 0, 2, 0, 0]).done();
    expect_err_chunk(&m, &NoBindings);
}

#[test]
fn rfc8267_s4_segment_count_limit_gets_err_chunk() {
    let write_chunk = |n: u32| {
        let mut w = Words::new().ws(&[XID, 1, 32, 0, 0, 1, n]);
        for i in 0..n {
            w = w.hloo(i, 4096, i as u64 * 4096);
        }
        w.ws(&[0, 0]).bytes(&rpc_call(XID, 1, 1, 0)).done()
    };
    assert_eq!(
        check_call(&write_chunk(16), &limits(), &NoBindings, GRANT).action(),
        Action::Deliver
    );
    expect_err_chunk(&write_chunk(17), &NoBindings);
    // The same limit applies per Read chunk.
    let read_chunk = |n: u32| {
        let mut w = Words::new().ws(&[XID, 1, 32, 1]);
        for i in 0..n {
            w = w.ws(&[1, 0]).hloo(i, 4, 0);
        }
        w.ws(&[0, 0, 0]).done()
    };
    assert!(Header::parse(&read_chunk(16), &limits()).is_ok());
    expect_err_chunk(&read_chunk(17), &NoBindings);
    // Too many Read chunks (distinct Positions).
    let mut w = Words::new().ws(&[XID, 1, 32, 0]);
    for i in 0..9 {
        w = w.ws(&[1, 40 + 8 * i]).hloo(i, 4, 0);
    }
    expect_err_chunk(&w.ws(&[0, 0, 0]).done(), &AnyBinding);
    // Too many Write chunks.
    let mut w = Words::new().ws(&[XID, 1, 32, 0, 0]);
    for _ in 0..9 {
        w = w.ws(&[1, 0]);
    }
    expect_err_chunk(&w.ws(&[0, 0]).done(), &NoBindings);
}

#[test]
fn rfc8166_s3_4_5_position_not_multiple_of_4_gets_err_chunk() {
    let m = put_call(46, 100, 100);
    expect_err_chunk(&m, &RdmatestBinding);
}

#[test]
fn rfc8166_s3_4_5_read_chunk_past_payload_gets_err_chunk() {
    // Inline payload is 44 bytes; a chunk at 48 would leave a hole.
    let m = put_call(48, 100, 100);
    expect_err_chunk(&m, &RdmatestBinding);
    // At 44 (the end of the inline bytes) it is fine.
    let m = put_call(44, 100, 100);
    assert_eq!(
        check_call(&m, &limits(), &RdmatestBinding, GRANT).action(),
        Action::Deliver
    );
}

#[test]
fn rfc8166_s3_4_5_overlapping_read_chunks_get_err_chunk() {
    // Two chunks: at 8 (len 100, occupying up to 108) and at 100.
    let m = Words::new()
        .ws(&[XID, 1, 32, 0])
        .ws(&[1, 8])
        .hloo(1, 100, 0)
        .ws(&[1, 100])
        .hloo(2, 8, 0)
        .ws(&[0, 0, 0])
        .bytes(&rpc_call(XID, 1, 1, 0))
        .done();
    expect_err_chunk(&m, &AnyBinding);
    // Out of order (decreasing Position) also overlaps.
    let m = Words::new()
        .ws(&[XID, 1, 32, 0])
        .ws(&[1, 40])
        .hloo(1, 4, 0)
        .ws(&[1, 32])
        .hloo(2, 4, 0)
        .ws(&[0, 0, 0])
        .bytes(&rpc_call(XID, 1, 1, 0))
        .done();
    expect_err_chunk(&m, &AnyBinding);
}

#[test]
fn rfc8166_s4_2_4_nomsg_without_any_chunk_gets_err_chunk() {
    let m = Words::new().ws(&[XID, 1, 32, 1, 0, 0, 0]).done();
    expect_err_chunk(&m, &NoBindings);
    // A NOMSG call whose chunks cannot hold its Payload stream (no
    // Position-Zero Read chunk) is just as unusable.
    let m = Words::new()
        .ws(&[XID, 1, 32, 1, 0, 0, 1, 1])
        .hloo(1, 4096, 0)
        .done();
    expect_err_chunk(&m, &NoBindings);
    // Nor can a Write list alone.
    let m = Words::new()
        .ws(&[XID, 1, 32, 1, 0, 1, 1])
        .hloo(1, 4096, 0)
        .ws(&[0, 0])
        .done();
    expect_err_chunk(&m, &NoBindings);
}

#[test]
fn draft_cel_s3_4_msg_with_position_zero_read_chunk_gets_err_chunk() {
    let m = Words::new()
        .ws(&[XID, 1, 32, 0, 1, 0])
        .hloo(1, 4096, 0)
        .ws(&[0, 0, 0])
        .bytes(&rpc_call(XID, 1, 1, 0))
        .done();
    expect_err_chunk(&m, &AnyBinding);
}

#[test]
fn rfc8166_s4_5_2_rpc_xid_must_match_rdma_xid() {
    let m = short_call(&rpc_call(XID + 1, 1, 1, 0));
    expect_err_chunk(&m, &NoBindings);
    // No RPC message at all.
    expect_err_chunk(&short_call(&[]), &NoBindings);
    let m = short_call(&rpc_call(XID, 1, 1, 0));
    assert_eq!(
        check_call(&m, &limits(), &NoBindings, GRANT).action(),
        Action::Deliver
    );
}

#[test]
fn rfc8166_s6_1_read_chunk_for_non_eligible_argument_is_not_processed() {
    // ECHO declares nothing DDP-eligible.
    let mut payload = rpc_call(XID, PROGRAM, VERSION, procs::ECHO);
    payload.extend_from_slice(&100u32.to_be_bytes());
    let m = Words::new()
        .ws(&[XID, 1, 32, 0, 1, 44])
        .hloo(1, 100, 0)
        .ws(&[0, 0, 0])
        .bytes(&payload)
        .done();
    expect_err_chunk(&m, &RdmatestBinding);
    // Unknown program: nothing is DDP-eligible.
    expect_err_chunk(&put_call(44, 100, 100), &NoBindings);
    // PUT declares one: two chunks exceed it.
    let mut payload = rpc_call(XID, PROGRAM, VERSION, procs::PUT);
    payload.extend_from_slice(&8u32.to_be_bytes());
    payload.extend_from_slice(&8u32.to_be_bytes());
    let m = Words::new()
        .ws(&[XID, 1, 32, 0, 1, 44])
        .hloo(1, 8, 0)
        .ws(&[1, 56])
        .hloo(2, 8, 0)
        .ws(&[0, 0, 0])
        .bytes(&payload)
        .done();
    expect_err_chunk(&m, &RdmatestBinding);
    // Larger than the binding's maximum (16 MiB).
    expect_err_chunk(&put_call(44, (16 << 20) + 8, 100), &RdmatestBinding);
}

#[test]
fn rfc8166_s4_5_2_chunk_length_mismatch_gets_garbage_args() {
    let m = put_call(44, 100, 96);
    let v = check_call(&m, &limits(), &RdmatestBinding, GRANT);
    assert!(
        matches!(&v, CallVerdict::GarbageArgs { xid: XID, chunks } if *chunks == Default::default())
    );
    // Pad included in the chunk is allowed (§3.4.5): 99 bytes, chunk 100.
    let m = put_call(44, 100, 99);
    let v = check_call(&m, &limits(), &RdmatestBinding, GRANT);
    let CallVerdict::Deliver(c) = v else {
        panic!("pad in chunk must be accepted")
    };
    assert_eq!(
        c.reassembly.pieces[1],
        rpcrdma_proto::reassemble::CallPiece::Chunk { chunk: 0, len: 99 }
    );
}

#[test]
fn rfc8166_s3_4_5_valid_put_is_delivered_with_pieces() {
    let m = put_call(44, 100, 100);
    let v = check_call(&m, &limits(), &RdmatestBinding, GRANT);
    let CallVerdict::Deliver(c) = v else {
        panic!("expected delivery")
    };
    use rpcrdma_proto::reassemble::CallPiece;
    assert_eq!(
        c.reassembly.pieces,
        vec![
            CallPiece::Inline { offset: 0, len: 44 },
            CallPiece::Chunk { chunk: 0, len: 100 }
        ]
    );
    assert_eq!(c.reassembly.unreduced_len, 144);
    let rpc = c.rpc.unwrap();
    assert_eq!(
        (rpc.prog, rpc.vers, rpc.proc_),
        (PROGRAM, VERSION, procs::PUT)
    );
}

#[test]
fn rfc8166_s3_5_3_long_call_checks_payload_after_read() {
    // NOMSG with a Position-Zero chunk of 48 bytes.
    let m = Words::new()
        .ws(&[XID, 1, 32, 1, 1, 0])
        .hloo(1, 48, 0)
        .ws(&[0, 0, 0])
        .done();
    let CallVerdict::Deliver(mut c) = check_call(&m, &limits(), &RdmatestBinding, GRANT) else {
        panic!("expected delivery")
    };
    assert!(c.rpc.is_none());
    assert_eq!(c.reassembly.reduced_len, 48);
    let mut p0 = rpc_call(XID + 1, PROGRAM, VERSION, procs::ECHO);
    p0.extend_from_slice(&[0, 0, 0, 4, 1, 2, 3, 4]);
    let err = c.check_payload(&p0, &RdmatestBinding, GRANT).unwrap_err();
    assert_eq!(err.action(), Action::ReplyErrChunk, "§4.5.2 xid mismatch");
    p0[..4].copy_from_slice(&XID.to_be_bytes());
    c.check_payload(&p0, &RdmatestBinding, GRANT).unwrap();
    assert_eq!(c.rpc.unwrap().proc_, procs::ECHO);
}

#[test]
fn rfc8167_reply_message_at_responder_is_discarded() {
    let m = short_call(&common::rpc_reply(XID));
    assert!(matches!(
        check_call(&m, &limits(), &NoBindings, GRANT),
        CallVerdict::Discard(DiscardReason::WrongDirection)
    ));
}

#[test]
fn rfc8166_s4_5_2_oversized_position_zero_chunk_gets_err_chunk() {
    // Found by fuzzing: a 3.5 GB Position-Zero chunk must not be pulled.
    let m = Words::new()
        .ws(&[XID, 1, 32, 1, 1, 0])
        .hloo(1, 0xd4b7_ffff, 0)
        .ws(&[0, 0, 0])
        .done();
    expect_err_chunk(&m, &NoBindings);
    let small = DecodeLimits {
        max_long_call: 4096,
        ..limits()
    };
    let m = Words::new()
        .ws(&[XID, 1, 32, 1, 1, 0])
        .hloo(1, 4097, 0)
        .ws(&[0, 0, 0])
        .done();
    assert_eq!(
        check_call(&m, &small, &NoBindings, GRANT).action(),
        Action::ReplyErrChunk
    );
    let m = Words::new()
        .ws(&[XID, 1, 32, 1, 1, 0])
        .hloo(1, 4096, 0)
        .ws(&[0, 0, 0])
        .done();
    assert_eq!(
        check_call(&m, &small, &NoBindings, GRANT).action(),
        Action::Deliver
    );
}

/// A GET call offering one Write chunk and a Reply chunk; `write_off` and
/// `reply_off` are their single segments' offsets.
fn get_call_offering(write_off: u64, reply_off: u64) -> Vec<u8> {
    let mut payload = rpc_call(XID, PROGRAM, VERSION, procs::GET);
    payload.extend_from_slice(&Words::new().ws(&[64, 7]).done());
    Words::new()
        .ws(&[XID, 1, 32, 0])
        .w(0) // no Read list
        .ws(&[1, 1]) // Write list: one chunk of one segment
        .hloo(0xbb, 64, write_off)
        .w(0) // end of Write list
        .ws(&[1, 1]) // Reply chunk of one segment
        .hloo(0xcc, 4096, reply_off)
        .bytes(&payload)
        .done()
}

#[test]
fn rfc8166_s4_5_2_segment_wrapping_the_address_space_gets_err_chunk() {
    // The same call with sane offsets is delivered...
    let ok = get_call_offering(0x1000, 0x2000);
    assert_eq!(
        check_call(&ok, &limits(), &RdmatestBinding, GRANT).action(),
        Action::Deliver
    );
    // ...but a Write or Reply segment whose offset + length overflows u64
    // cannot describe memory (nor may it overflow the reply plan).
    expect_err_chunk(&get_call_offering(u64::MAX - 3, 0x2000), &RdmatestBinding);
    expect_err_chunk(&get_call_offering(0x1000, u64::MAX - 100), &RdmatestBinding);
    // A Read segment likewise.
    let mut payload = rpc_call(XID, PROGRAM, VERSION, procs::PUT);
    payload.extend_from_slice(&8u32.to_be_bytes());
    let m = Words::new()
        .ws(&[XID, 1, 32, 0])
        .ws(&[1, 44])
        .hloo(0xaa, 8, u64::MAX - 3)
        .ws(&[0, 0, 0])
        .bytes(&payload)
        .done();
    expect_err_chunk(&m, &RdmatestBinding);
}

/// The GARBAGE_ARGS reply copies the call's offered Write chunks and Reply
/// chunk, unused (RFC 8166 §3.4.6: the segment count and segments MUST be
/// copied; a reply with empty chunk lists is discarded by a strict
/// Requester).
#[test]
fn rfc8166_s3_4_6_garbage_args_reply_returns_the_offered_chunks_unused() {
    use rpcrdma_proto::wire::{ChunkListsRepr, Segment, WriteChunkRepr};
    let mut payload = rpc_call(XID, PROGRAM, VERSION, procs::PUT);
    payload.extend_from_slice(&96u32.to_be_bytes());
    let m = Words::new()
        .ws(&[XID, 1, 32, 0])
        .ws(&[1, 44])
        .hloo(0xaa, 100, 0x1000)
        .ws(&[0])
        .ws(&[1, 2])
        .hloo(0xbb, 4096, 0x2000)
        .hloo(0xbc, 100, 0x3000)
        .ws(&[0])
        .ws(&[1, 1])
        .hloo(0xcc, 8192, 0x4000)
        .bytes(&payload)
        .done();
    let v = check_call(&m, &limits(), &RdmatestBinding, GRANT);
    let CallVerdict::GarbageArgs { xid, chunks } = v else {
        panic!("expected GARBAGE_ARGS, got {:?}", v.action())
    };
    let seg = |handle, offset| Segment {
        handle,
        length: 0,
        offset,
    };
    assert_eq!(xid, XID);
    assert_eq!(
        chunks,
        ChunkListsRepr {
            read_list: vec![],
            write_list: vec![WriteChunkRepr {
                segments: vec![seg(0xbb, 0x2000), seg(0xbc, 0x3000)]
            }],
            reply_chunk: Some(WriteChunkRepr {
                segments: vec![seg(0xcc, 0x4000)]
            }),
        }
    );
}
