//! Conformance to draft-cel-nfsv4-rfc5666-implementation-
//! experience-02 §3–§4, RFC 8166 §3.3/§3.5.3/§4.3.3/§4.5 and RFC 8797.

mod common;
use common::{rpc_call, Words};
use rpcrdma_proto::binding::{BindingLookup, DdpItem, ProcedureBinding};
use rpcrdma_proto::marshal::{plan_call, ChunkLimits, OfferedChunks, ReplyShape, Thresholds};
use rpcrdma_proto::reply::{plan_reply, ReplyKind};
use rpcrdma_proto::stream::Item;
use rpcrdma_proto::validate::{check_call, Action, CallVerdict, DiscardReason};
use rpcrdma_proto::wire::{BodyRepr, DecodeLimits, Segment, WriteChunkRepr};

const XID: u32 = 0x0a0b_0c0d;
const GRANT: u32 = 16;

/// A procedure with two DDP-eligible arguments of different sizes, as
/// NFSv3 SYMLINK-like or NFSv4 COMPOUND-like bindings have: `small` (up to
/// 16 bytes) then `big` (up to 1 MiB).
struct TwoArgs;

const TWO_ARGS: &[DdpItem] = &[
    DdpItem {
        name: "small",
        max_len: 16,
    },
    DdpItem {
        name: "big",
        max_len: 1 << 20,
    },
];

impl BindingLookup for TwoArgs {
    fn lookup(&self, _: u32, _: u32, _: u32) -> Option<ProcedureBinding> {
        Some(ProcedureBinding {
            name: "TWO",
            ddp_args: TWO_ARGS,
            ddp_results: &[],
        })
    }
}

/// A TWO call whose `small` argument stays inline as `small` (its length
/// word, bytes and pad) and whose `big` argument (4096 bytes, well under
/// its 1 MiB limit) is reduced to a Read chunk right after its length word.
fn call_reducing_big_only(small: &[u8]) -> Vec<u8> {
    let mut payload = rpc_call(XID, 0x2000_5299, 1, 1);
    payload.extend_from_slice(&(small.len() as u32).to_be_bytes());
    payload.extend_from_slice(small);
    payload.resize(payload.len().next_multiple_of(4), 0);
    payload.extend_from_slice(&4096u32.to_be_bytes());
    let position = payload.len() as u32;
    Words::new()
        .ws(&[XID, 1, 32, 0])
        .ws(&[1, position])
        .hloo(0xaa, 4096, 0x1000)
        .ws(&[0, 0, 0])
        .bytes(&payload)
        .done()
}

/// Checks that `msg` is delivered with the TWO binding, and (control) with
/// every argument allowed 16 MiB.
fn assert_delivered(msg: &[u8]) {
    let ctrl = check_call(msg, &DecodeLimits::default(), &common::AnyBinding, GRANT);
    assert_eq!(ctrl.action(), Action::Deliver, "control");
    let v = check_call(msg, &DecodeLimits::default(), &TwoArgs, GRANT);
    assert_eq!(
        v.action(),
        Action::Deliver,
        "a 4096-byte chunk for `big` (max 1 MiB) is valid"
    );
}

/// RFC 8166 §3.4.5: a Read chunk is reinserted
/// where its Position says, and the draft §3.1 maps one read chunk to one
/// RPC argument. A Requester need not reduce every DDP-eligible argument
/// (ours keeps an empty one inline, `plan_call`'s `n == 0` case; RFC 8166
/// §3.4.2 says "MAY be transferred via DDP"). Here `small` is empty and
/// stays inline; only `big` is reduced. `ReceivedCall::check_payload` must
/// pair each chunk with the argument at its Position, not with `ddp_args`
/// by index (which would check the `big` chunk against `small`'s 16-byte
/// limit and refuse the valid call with ERR_CHUNK).
#[test]
fn read_chunk_is_checked_against_the_argument_at_its_position() {
    // RPC header (40) | small: len 0 (4) | big: len 4096 (4) | chunk at 48
    let msg = call_reducing_big_only(&[]);
    assert_delivered(&msg);
}

/// Same root cause, as a foreign Requester would trigger it: it keeps the
/// small DDP-eligible argument inline (8 bytes; reducing is optional) and
/// reduces only `big`, whose chunk at Position 56 was checked against
/// `small`'s limit.
#[test]
fn inline_small_argument_then_reduced_big_argument() {
    // RPC header (40) | small: len 8 + 8 bytes (12) | big: len 4096 (4) | chunk at 56
    let msg = call_reducing_big_only(&[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_delivered(&msg);
}

/// RFC 8166 §4.2.4: "A Responder MUST silently discard RDMA_ERROR
/// procedures"; §4.2: the four fixed fields keep their meaning and position
/// in every version, so rdma_proc 4 is an RDMA_ERROR whatever rdma_vers
/// says. `check_call` must not answer an RDMA_ERROR of another version with
/// ERR_VERS (an error answered with an error).
#[test]
fn rdma_error_of_another_version_is_discarded_not_answered() {
    // RDMA_ERROR / ERR_VERS 1..1, rdma_vers 2 (28 bytes).
    let m = Words::new().ws(&[XID, 2, 32, 4, 1, 1, 1]).done();
    let v = check_call(&m, &DecodeLimits::default(), &TwoArgs, GRANT);
    assert!(
        matches!(v, CallVerdict::Discard(DiscardReason::ErrorAtResponder)),
        "got {:?}",
        v.action()
    );
}

fn offered_reply_chunk_only() -> OfferedChunks {
    OfferedChunks {
        write_list: vec![],
        reply_chunk: Some(WriteChunkRepr {
            segments: vec![Segment {
                handle: 9,
                length: 8192,
                offset: 0x9000,
            }],
        }),
    }
}

/// The draft §3.4.1: responders should not
/// use a Reply chunk in RDMA_MSG replies; Linux's client up to the v4.9
/// reply handler (rpcrdma_reply_handler: "never expect reply chunks (two
/// ways to check)") rejects an RDMA_MSG reply whose Reply chunk
/// discriminator is present at all, and fails the RPC with -EIO. A
/// Responder answering a call that offered a Reply chunk, when the reply
/// fits inline, with RDMA_MSG carrying the Reply chunk echoed with zero
/// lengths would trip it. RFC 8166 §4.3.3 does say the Responder MUST copy
/// the Reply chunk; what satisfies both is the rule: when a Reply chunk is
/// offered, use it (RDMA_NOMSG), which the Responder does. This test accepts
/// either that or a Short reply without a Reply chunk.
#[test]
fn rdma_msg_reply_never_carries_a_reply_chunk() {
    // A small reply (28 bytes) to a call that offered an 8 KiB Reply chunk.
    let p = plan_reply(
        XID,
        GRANT,
        &[Item::Xdr(28)],
        &offered_reply_chunk_only(),
        4096,
    )
    .unwrap();
    if p.kind == ReplyKind::Short {
        let c = match &p.header.body {
            BodyRepr::Msg(c) => c,
            other => panic!("{other:?}"),
        };
        assert!(
            c.reply_chunk.is_none(),
            "RDMA_MSG reply carries the Reply chunk {:?}: Linux <= 4.9 clients \
             fail such a reply with EIO (header bytes {:02x?})",
            c.reply_chunk,
            p.header.to_vec()
        );
    }
}

/// The draft §3.3 (and §3.1: "Other
/// implementations do not support sending or receiving multiple Read chunks
/// with the same Position"): Linux's server up to v5.10
/// (svc_rdma_recvfrom.c xdr_check_read_list: "Implementation limits: This
/// implementation supports only one Read chunk") answers ERR_CHUNK to a Read
/// list with more than one Position. Linux's client never sends one: a call
/// too large for inline after reduction goes entirely into the Position-Zero
/// chunk (rpcrdma_areadch). `plan_call` sends a Position-Zero chunk AND the
/// reduced items' chunks at their own Positions only with
/// `ChunkLimits::long_call_item_chunks`.
#[test]
fn long_call_uses_a_single_read_chunk_position() {
    // RPC header (40) | a: len (4) | a: 100000 bytes DDP | c: 2000 bytes inline
    let items = [Item::Xdr(44), Item::Ddp(100_000), Item::Xdr(4 + 2000)];
    let th = Thresholds {
        call_inline: 1024,
        reply_inline: 1024,
    };
    let p = plan_call(
        XID,
        32,
        &items,
        &ReplyShape::default(),
        &th,
        &ChunkLimits::default(),
    )
    .unwrap();
    let c = p.header.chunks().unwrap();
    let positions: std::collections::BTreeSet<u32> =
        c.read_list.iter().map(|r| r.position).collect();
    assert_eq!(
        positions.len(),
        1,
        "Long Call with Read chunks at Positions {positions:?} ({:?})",
        p.kind
    );
}

/// Draft §4.3 ("Some server implementations regard the Reply chunk as
/// optional"): an RDMA_MSG reply that leaves out an offered Reply chunk is
/// accepted.
#[test]
fn rdma_msg_reply_without_the_offered_reply_chunk_is_delivered() {
    use rpcrdma_proto::validate::{check_reply, ReplyVerdict};
    let offered = offered_reply_chunk_only();
    let m = Words::new()
        .ws(&[XID, 1, 8, 0, 0, 0, 0])
        .bytes(&common::rpc_reply(XID))
        .done();
    let v = check_reply(&m, &DecodeLimits::default(), |x| {
        (x == XID).then_some(&offered)
    });
    assert!(matches!(v, ReplyVerdict::Deliver(_)), "{:?}", v.action());
}
