//! Two connection engines on a virtual wire: credits and grants, timeouts
//! and lost replies, reconnect with retransmission, and RFC 8167
//! reverse-direction operation, each driven step by step.

mod support;

use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use rpcrdma_engine::{CallError, CallState, Direction, EngineError, Phase, Side, SubmitError};
use rpcrdma_proto::binding::rdmatest::procs;
use rpcrdma_proto::marshal::ReplyShape;
use rpcrdma_proto::wire::{BodyRepr, ChunkListsRepr, HeaderRepr, RPCRDMA_VERSION};
use support::{config, rpc_reply_header, words, Dir, Pair, Service, Wire, REPLY_HEADER};

fn pair(a_credits: u32, b_credits: u32, a_service: Service, b_service: Service) -> Pair {
    Pair::new(
        config(Side::Active, a_credits, 2),
        config(Side::Passive, b_credits, 2),
        a_service,
        b_service,
    )
}

/// A Short reply (RDMA_MSG, no chunks) to `xid` granting `credit`, with an
/// empty result: what a Responder would send, built by hand.
fn short_reply(xid: u32, credit: u32) -> Bytes {
    let mut b = HeaderRepr {
        xid,
        vers: RPCRDMA_VERSION,
        credit,
        body: BodyRepr::Msg(ChunkListsRepr::default()),
    }
    .to_vec();
    b.extend_from_slice(&rpc_reply_header(xid));
    Bytes::from(b)
}

fn xid_of(w: &Wire) -> u32 {
    u32::from_be_bytes([w.bytes[0], w.bytes[1], w.bytes[2], w.bytes[3]])
}

fn ok_payload(p: &Pair, id: rpcrdma_engine::CallId) -> Vec<u8> {
    match p.a.result(id) {
        Some(Ok(c)) => c.payload.clone(),
        other => panic!("call {id:?}: {other:?}"),
    }
}

// ---- 1. Credits and grants ---------------------------------------------------

/// RFC 8166 §3.3.1, §3.3.3: one call until the first grant; then never more
/// outstanding than granted; at full credit further calls wait in the queue
/// and go out one per returning reply.
#[test]
fn credits_gate_calls_and_queued_calls_follow_replies() {
    let mut p = pair(8, 4, Service::Echo, Service::Hold);
    let now = p.now;
    let ids: Vec<_> = (0..10u32)
        .map(|i| p.a.call(now, procs::ECHO, &words(&[i])))
        .collect();
    p.run();
    assert_eq!(p.b.incoming.len(), 1, "one call before the first grant");
    assert_eq!(p.a.conn.requester_credits().limit, 1);
    p.b.answer_next();
    p.run();
    assert_eq!(
        p.a.conn.requester_credits().limit,
        4,
        "min(requested 8, granted 4)"
    );
    assert_eq!(p.b.incoming.len(), 4, "the grant opened four calls");
    assert_eq!(p.a.done.len(), 1);
    assert_eq!(
        p.a.conn.stats().credit_waits,
        2,
        "calls 2 and 6 found no credit"
    );
    // Each reply lets exactly one queued call out.
    for k in 0..5 {
        p.b.answer_next();
        p.run();
        assert_eq!(p.a.done.len(), 2 + k);
        assert_eq!(p.b.incoming.len(), 4, "full credit again");
        assert_eq!(p.a.conn.requester_credits().in_use, 4);
    }
    while p.b.answer_next().is_some() {
        p.run();
    }
    assert_eq!(p.a.done.len(), 10);
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            ok_payload(&p, *id)[REPLY_HEADER..],
            words(&[i as u32])[..],
            "each reply reaches its own call"
        );
    }
    assert_eq!(
        p.a.conn.stats().credit_waits,
        6,
        "calls 2, 6, 7, 8, 9 and 10 waited"
    );
    assert_eq!(p.a.peak_requester, 4);
    assert!(p.b.peak_responder <= 4);
    assert_eq!(p.b.conn.stats().credit_overruns, 0);
    assert_eq!(p.a.calls_sent_checked, 10);
}

/// RFC 8166 §3.3.1: every reply's rdma_credit updates the limit: a larger
/// grant opens more calls, a grant of 0 counts as 1 (Version One), and a
/// lowered grant stops new calls until the outstanding ones drop below it.
#[test]
fn grants_from_each_reply_raise_lower_and_zero() {
    let mut p = pair(8, 8, Service::Echo, Service::Hold);
    let now = p.now;
    for i in 0..12u32 {
        p.a.call(now, procs::ECHO, &words(&[i]));
    }
    p.step();
    assert_eq!(p.a_to_b.len(), 1);
    // First reply grants 2.
    let w = p.a_to_b.pop_front().unwrap();
    p.a.conn
        .handle_recv(now, 1, short_reply(xid_of(&w), 2), None);
    p.step();
    assert_eq!(p.a_to_b.len(), 2, "grant 2: two outstanding");
    // A larger grant (6) opens four more.
    let w = p.a_to_b.pop_front().unwrap();
    p.a.conn
        .handle_recv(now, 1, short_reply(xid_of(&w), 6), None);
    p.step();
    assert_eq!(
        p.a.conn.requester_credits(),
        rpcrdma_engine::CreditUse {
            in_use: 6,
            limit: 6
        }
    );
    assert_eq!(p.a_to_b.len(), 6);
    // A grant of 0 counts as 1: five stay outstanding, none more is sent.
    let w = p.a_to_b.pop_front().unwrap();
    p.a.conn
        .handle_recv(now, 1, short_reply(xid_of(&w), 0), None);
    p.step();
    assert_eq!(
        p.a.conn.requester_credits(),
        rpcrdma_engine::CreditUse {
            in_use: 5,
            limit: 1
        }
    );
    assert_eq!(p.a_to_b.len(), 5, "no new call under a lowered grant");
    // Replies granting 0 drain them; the next call goes only when none is
    // outstanding.
    for left in (1..5).rev() {
        let w = p.a_to_b.pop_front().unwrap();
        p.a.conn
            .handle_recv(now, 1, short_reply(xid_of(&w), 0), None);
        p.step();
        assert_eq!(p.a.conn.requester_credits().in_use, left);
        assert_eq!(p.a_to_b.len(), left as usize);
    }
    let w = p.a_to_b.pop_front().unwrap();
    p.a.conn
        .handle_recv(now, 1, short_reply(xid_of(&w), 0), None);
    p.step();
    assert_eq!(p.a.conn.requester_credits().in_use, 1);
    assert_eq!(p.a_to_b.len(), 1, "one call at a time under grant 0");
    assert_eq!(p.a.done.len(), 8);
    assert!(p.a.done.iter().all(|d| d.2.is_ok()));
}

// ---- 2. Timeouts and lost replies ----------------------------------------------

/// A dropped reply times its call out at exactly the virtual deadline and
/// disturbs no other call; a reply that arrives after its call timed out
/// is dropped (its credit returns, the call does not complete twice).
#[test]
fn lost_reply_times_out_at_deadline_and_late_reply_is_discarded() {
    let mut p = pair(4, 4, Service::Echo, Service::Hold);
    let t0 = p.now;
    let warm = p.a.call(t0, procs::ECHO, &words(&[0]));
    p.run();
    p.b.answer_next();
    p.run();
    assert!(p.a.result(warm).is_some_and(|r| r.is_ok()));

    let timeout = Duration::from_secs(3);
    let shape = ReplyShape {
        max_reduced_len: 28,
        ..Default::default()
    };
    let [lost, late, fine] = [1, 2, 3].map(|w| {
        p.a.call_with(
            t0,
            procs::ECHO,
            &words(&[w]),
            None,
            shape.clone(),
            Some(timeout),
        )
        .unwrap()
    });
    p.run();
    assert_eq!(p.b.incoming.len(), 3);
    for _ in 0..3 {
        p.b.answer_next();
    }
    p.step();
    assert_eq!(p.b_to_a.len(), 3);
    p.drop_next(Dir::BtoA); // `lost`'s reply
    let held = p.drop_next(Dir::BtoA).unwrap(); // `late`'s reply, delayed
    p.run();
    assert!(
        p.a.result(fine).is_some_and(|r| r.is_ok()),
        "others undisturbed"
    );
    assert_eq!(p.a.conn.poll_timeout(), Some(t0 + timeout));

    p.advance(timeout - Duration::from_millis(1));
    assert!(p.a.result(lost).is_none(), "not before the deadline");
    p.advance(Duration::from_millis(1));
    assert_eq!(p.a.result(lost), Some(&Err(CallError::Timeout)));
    assert_eq!(p.a.result(late), Some(&Err(CallError::Timeout)));
    assert!(matches!(
        p.a.conn.call_state(late),
        Some(CallState::Abandoned {
            offered: Some(_),
            ..
        })
    ));
    assert_eq!(
        p.a.conn.requester_credits().in_use,
        2,
        "abandoned calls keep their credit"
    );
    assert_eq!(p.a.conn.stats().timeouts, 2);

    // The late reply: matched, credit back, retired, no second completion.
    p.b_to_a.push_back(held);
    p.run();
    assert_eq!(p.a.conn.stats().late_replies, 1);
    assert_eq!(p.a.retired, vec![late]);
    assert_eq!(p.a.conn.requester_credits().in_use, 1);
    assert_eq!(p.a.done.iter().filter(|d| d.0 == late).count(), 1);
    // A duplicate of a reply already taken: unknown XID, discarded.
    let again = p.a.call(p.now, procs::ECHO, &words(&[4]));
    p.run();
    p.b.answer_next();
    p.step();
    p.duplicate_next(Dir::BtoA);
    p.run();
    assert!(p.a.result(again).is_some_and(|r| r.is_ok()));
    assert!(p.a.conn.stats().bad_replies >= 1);
    assert_eq!(p.a.done.iter().filter(|d| d.0 == again).count(), 1);
}

/// When abandoned calls hold every credit no reply can free one: the
/// active side gives the connection up, as after a major timeout.
#[test]
fn abandoned_calls_holding_every_credit_break_the_connection() {
    let mut p = pair(4, 4, Service::Echo, Service::Hold);
    let now = p.now;
    let id = p.a.call(now, procs::ECHO, &words(&[1]));
    p.run();
    p.b.incoming.clear(); // the server never answers
    p.advance(Duration::from_secs(10));
    assert_eq!(p.a.result(id), Some(&Err(CallError::Timeout)));
    assert_eq!(p.a.lost, vec![rpcrdma_engine::LostReason::Stuck]);
    assert_eq!(p.a.retired, vec![id]);
    assert_eq!(p.a.conn.phase(), Phase::Disconnected);
}

// ---- 3. Reconnect with retransmission --------------------------------------------

/// Calls in flight when the connection is lost go out again, same XID, on
/// the new connection; credits start over at one; each call completes
/// exactly once even when a reply from the old connection arrives late.
#[test]
fn reconnect_retransmits_calls_in_flight_exactly_once() {
    let mut p = pair(4, 4, Service::Echo, Service::Hold);
    let now = p.now;
    let warm = p.a.call(now, procs::ECHO, &words(&[0]));
    p.run();
    p.b.answer_next();
    p.run();
    assert!(p.a.result(warm).is_some());
    let ids: Vec<_> = (1..=4u32)
        .map(|i| p.a.call(now, procs::ECHO, &words(&[i])))
        .collect();
    p.run();
    assert_eq!(p.b.incoming.len(), 4);
    let first_xids: Vec<u32> = p.b.incoming.iter().map(|r| r.xid).collect();
    // The server answers one before the break; its reply is still on the
    // wire of the old connection.
    p.b.answer_next();
    p.step();
    assert_eq!(p.b_to_a.len(), 1);
    p.disconnect(true);
    assert_eq!(p.a.conn.phase(), Phase::Disconnected);
    assert!(ids
        .iter()
        .all(|id| p.a.conn.call_state(*id) == Some(&CallState::Queued)));
    assert_eq!(p.a.conn.stats().retransmits, 4);
    // Nothing goes out while disconnected; a call submitted now waits too.
    let later = p.a.call(p.now, procs::ECHO, &words(&[9]));
    p.step();
    assert!(p.a_to_b.is_empty());

    p.b.service = Service::Echo;
    p.reconnect();
    assert_eq!(p.a.conn.generation(), 2);
    assert_eq!(p.a.conn.requester_credits().limit, 1, "credits start over");
    // The old connection's reply arrives late: from generation 1, dropped.
    p.deliver(Dir::BtoA);
    assert_eq!(p.a.conn.stats().stale_receives, 1);
    assert_eq!(p.a.done.len(), 1);
    p.run();
    assert_eq!(p.a.done.len(), 6);
    let again: Vec<u32> = p.b.received.iter().map(|r| r.xid).take(4).collect();
    assert_eq!(
        again, first_xids,
        "retransmitted with the same XIDs, in XID order"
    );
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(p.a.done.iter().filter(|d| d.0 == *id).count(), 1);
        assert_eq!(
            ok_payload(&p, *id)[REPLY_HEADER..],
            words(&[i as u32 + 1])[..]
        );
    }
    assert!(p.a.result(later).is_some_and(|r| r.is_ok()));
    assert_eq!(p.a.conn.stats().calls_sent, 1 + 4 + 4 + 1);
}

// ---- Chunks through fake registered memory -------------------------------------

/// A PUT whose data moves in a Read chunk, echoed back in a Reply chunk
/// (RDMA Writes into the requester's memory), and a GET whose result
/// lands in a Write chunk.
#[test]
fn read_write_and_reply_chunks_move_through_registered_memory() {
    let mut p = pair(4, 4, Service::Echo, Service::Echo);
    let now = p.now;
    let data: Vec<u8> = (0..8000u32).map(|i| (i % 251) as u8).collect();
    let put =
        p.a.call_with(
            now,
            procs::PUT,
            &words(&[8000]),
            Some(&data),
            ReplyShape {
                max_reduced_len: (REPLY_HEADER + 4 + 8000) as u64,
                ..Default::default()
            },
            None,
        )
        .unwrap();
    let get =
        p.a.call_with(
            now,
            procs::GET,
            &words(&[5000, 7]),
            None,
            ReplyShape {
                write_chunks: vec![5000],
                max_reduced_len: (REPLY_HEADER + 4) as u64,
                ..Default::default()
            },
            None,
        )
        .unwrap();
    p.run();
    let put_reply = ok_payload(&p, put);
    assert_eq!(
        put_reply[REPLY_HEADER..REPLY_HEADER + 4],
        words(&[8000])[..]
    );
    assert_eq!(put_reply[REPLY_HEADER + 4..], data[..]);
    match p.a.result(get) {
        Some(Ok(c)) => {
            assert_eq!(c.writes, vec![vec![7u8; 5000]]);
            assert_eq!(
                c.payload,
                [rpc_reply_header(c_xid(&p, get)), words(&[5000])].concat()
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(p.a.mem.len(), 0, "every registration released");
}

/// A Long Call (RDMA_NOMSG, RFC 8166 §3.5.3): the whole call in a
/// Position-Zero Read chunk, checked once pulled, its echo returned in a
/// Reply chunk.
#[test]
fn long_call_is_pulled_from_position_zero_and_answered_in_the_reply_chunk() {
    let mut p = pair(4, 4, Service::Echo, Service::Echo);
    let now = p.now;
    let args: Vec<u8> = (0..1500u32).map(|i| (i * 7) as u8).collect();
    let id =
        p.a.call_with(
            now,
            procs::ECHO,
            &args,
            None,
            ReplyShape {
                max_reduced_len: (REPLY_HEADER + args.len()) as u64,
                ..Default::default()
            },
            None,
        )
        .unwrap();
    p.run();
    assert_eq!(p.b.reads, vec![rpcrdma_engine::ChunkRef::PositionZero]);
    assert_eq!(ok_payload(&p, id)[REPLY_HEADER..], args[..]);
}

/// RFC 8166 §4.2.1, §4.5.2, §6.1: a Long Call whose Position-Zero chunk
/// holds an RPC message with another XID is answered ERR_CHUNK once that
/// chunk is pulled; its data chunk is never pulled, and its credit returns.
#[test]
fn long_call_with_a_foreign_xid_in_position_zero_gets_err_chunk() {
    let mut ca = config(Side::Active, 4, 2);
    ca.chunk_limits.long_call_item_chunks = true;
    let mut p = Pair::new(
        ca,
        config(Side::Passive, 4, 2),
        Service::Echo,
        Service::Echo,
    );
    let now = p.now;
    let shape = ReplyShape {
        max_reduced_len: 28,
        ..Default::default()
    };
    let mut args = vec![0u8; 1100];
    args.extend(words(&[3000]));
    let id =
        p.a.call_with(now, procs::PUT, &args, Some(&[1u8; 3000]), shape, None)
            .unwrap();
    p.step();
    // The Position-Zero region is registered first.
    let h = p.a.mem.handles()[0];
    p.a.mem.region_mut(h).unwrap()[0] ^= 0xff; // the RPC XID
    p.run();
    assert_eq!(
        p.a.result(id),
        Some(&Err(CallError::RdmaError(
            rpcrdma_proto::wire::ErrorBody::Chunk
        )))
    );
    assert_eq!(p.b.reads, vec![rpcrdma_engine::ChunkRef::PositionZero]);
    assert!(p.b.received.is_empty());
    assert_eq!(p.b.conn.responder_credits().in_use, 0);
}

/// A Long Call whose DDP item keeps a Read chunk of its own beside
/// Position Zero: the data chunk is pulled only after the Position-Zero
/// chunk passed its checks.
#[test]
fn long_call_data_chunks_are_pulled_after_position_zero() {
    let mut ca = config(Side::Active, 4, 2);
    ca.chunk_limits.long_call_item_chunks = true;
    let mut p = Pair::new(
        ca,
        config(Side::Passive, 4, 2),
        Service::Echo,
        Service::Echo,
    );
    let now = p.now;
    let mut args = vec![0u8; 1100];
    args.extend(words(&[3000]));
    let data = vec![0x5a; 3000];
    let id =
        p.a.call_with(
            now,
            procs::PUT,
            &args,
            Some(&data),
            ReplyShape {
                max_reduced_len: (REPLY_HEADER + args.len() + data.len()) as u64,
                ..Default::default()
            },
            None,
        )
        .unwrap();
    p.run();
    use rpcrdma_engine::ChunkRef;
    assert_eq!(p.b.reads, vec![ChunkRef::PositionZero, ChunkRef::Data(0)]);
    let got = ok_payload(&p, id);
    assert_eq!(got[REPLY_HEADER..REPLY_HEADER + args.len()], args[..]);
    assert_eq!(got[REPLY_HEADER + args.len()..], data[..]);
}

fn c_xid(p: &Pair, id: rpcrdma_engine::CallId) -> u32 {
    p.a.done.iter().find(|d| d.0 == id).map(|d| d.1).unwrap()
}

// ---- 4. Reverse calls ---------------------------------------------------------

fn bidi(a_credits: u32, backward: u32) -> Pair {
    let mut p = Pair::new(
        config(Side::Active, a_credits, backward),
        config(Side::Passive, a_credits, backward),
        Service::Hold,
        Service::Hold,
    );
    p.a.conn.enable_reverse();
    p.b.conn.enable_reverse();
    p.b_reverse = true;
    p
}

/// Forward and reverse calls interleave on one connection, each direction
/// at full credit; backward credits are never exceeded, counted by the
/// passive side's Requester and by the active side's Responder; forward
/// and backward credits are counted apart (RFC 8167 §4.1).
#[test]
fn reverse_calls_interleave_with_forward_calls_at_full_credit() {
    let mut p = bidi(4, 2);
    let now = p.now;
    let fwd: Vec<_> = (0..9u32)
        .map(|i| p.a.call(now, procs::ECHO, &words(&[100 + i])))
        .collect();
    let rev: Vec<_> = (0..7u32)
        .map(|i| p.b.call(now, procs::ECHO, &words(&[200 + i])))
        .collect();
    assert_eq!(
        p.a.conn.recv_target(),
        4 + 2 + 4,
        "forward + backward + margin"
    );
    assert_eq!(p.b.conn.recv_target(), 4 + 2 + 4);
    let mut rounds = 0;
    while p.a.done.len() < fwd.len() || p.b.done.len() < rev.len() {
        p.run();
        // Answer one held call on each side per round, so both directions
        // run at full credit most of the time.
        p.b.answer_next();
        p.a.answer_next();
        rounds += 1;
        assert!(rounds < 100);
    }
    assert_eq!(p.a.peak_requester, 4, "forward at full credit");
    assert_eq!(p.b.peak_requester, 2, "reverse at full credit");
    assert_eq!(
        p.a.peak_responder, 2,
        "active side never had more than 2 reverse calls"
    );
    assert_eq!(p.b.peak_responder, 4);
    assert_eq!(p.a.conn.stats().credit_overruns, 0);
    assert_eq!(p.b.conn.stats().credit_overruns, 0);
    assert_eq!(p.b.conn.stats().reverse_calls_sent, 7);
    assert_eq!(p.a.conn.stats().reverse_calls_received, 7);
    for (i, id) in fwd.iter().enumerate() {
        assert_eq!(
            ok_payload(&p, *id)[REPLY_HEADER..],
            words(&[100 + i as u32])[..]
        );
    }
    for (i, id) in rev.iter().enumerate() {
        match p.b.result(*id) {
            Some(Ok(c)) => assert_eq!(c.payload[REPLY_HEADER..], words(&[200 + i as u32])[..]),
            other => panic!("{other:?}"),
        }
    }
    assert!(p
        .a
        .received
        .iter()
        .all(|r| r.direction == Direction::Reverse));
    assert!(p
        .b
        .received
        .iter()
        .all(|r| r.direction == Direction::Forward));
}

/// RFC 8167 §2.4.1: the two XID spaces are independent. A reverse call with
/// the XID of an outstanding forward call is dispatched as a call, and the
/// forward call still completes with its own reply.
#[test]
fn reverse_call_with_the_xid_of_a_forward_call_is_a_separate_transaction() {
    let mut p = bidi(4, 2);
    let now = p.now;
    let f = p.a.call(now, procs::ECHO, &words(&[0xF0F0]));
    p.run();
    assert_eq!(p.b.incoming.len(), 1);
    let r = p.b.call(now, procs::ECHO, &words(&[0xBEEF]));
    let xid = p.a.conn.xid(f).unwrap();
    assert_eq!(p.b.conn.xid(r), Some(xid), "same XID in both directions");
    p.run();
    assert_eq!(p.a.incoming.len(), 1, "dispatched as a call");
    assert_eq!(p.a.incoming[0].xid, xid);
    assert_eq!(p.a.incoming[0].direction, Direction::Reverse);
    assert!(matches!(
        p.a.conn.call_state(f),
        Some(CallState::Sent { .. })
    ));
    assert_eq!(p.a.conn.stats().bad_replies, 0);
    // The reverse reply completes the reverse call, not the forward one.
    p.a.answer_next();
    p.run();
    assert!(matches!(
        p.a.conn.call_state(f),
        Some(CallState::Sent { .. })
    ));
    match p.b.result(r) {
        Some(Ok(c)) => assert_eq!(c.payload[REPLY_HEADER..], words(&[0xBEEF])[..]),
        other => panic!("{other:?}"),
    }
    p.b.answer_next();
    p.run();
    assert_eq!(ok_payload(&p, f)[REPLY_HEADER..], words(&[0xF0F0])[..]);
    assert_eq!(
        p.a.conn.stats().bad_replies + p.b.conn.stats().bad_replies,
        0
    );

    // The other order: a reverse call outstanding, then a forward call
    // with its XID reaches the passive side.
    let r2 = p.b.call(p.now, procs::ECHO, &words(&[2]));
    p.run();
    assert_eq!(p.a.incoming.len(), 1);
    let f2 = p.a.call(p.now, procs::ECHO, &words(&[1]));
    assert_eq!(p.a.conn.xid(f2), p.b.conn.xid(r2));
    p.run();
    assert_eq!(
        p.b.incoming.len(),
        1,
        "the forward call is a call at the server"
    );
    assert!(matches!(
        p.b.conn.call_state(r2),
        Some(CallState::Sent { .. })
    ));
    p.b.answer_next();
    p.run();
    assert_eq!(ok_payload(&p, f2)[REPLY_HEADER..], words(&[1])[..]);
    assert!(matches!(
        p.b.conn.call_state(r2),
        Some(CallState::Sent { .. })
    ));
    p.a.answer_next();
    p.run();
    match p.b.result(r2) {
        Some(Ok(c)) => assert_eq!(c.payload[REPLY_HEADER..], words(&[2])[..]),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        p.a.conn.stats().bad_replies + p.b.conn.stats().bad_replies,
        0
    );
}

/// RFC 8167 §5.3: without reverse-direction chunks, a reverse call and its
/// reply must fit inline, and no DDP item may be reduced.
#[test]
fn reverse_calls_are_inline_only() {
    let mut p = bidi(4, 2);
    let now = p.now;
    let big = vec![0u8; 1024];
    assert!(matches!(
        p.b.call_with(now, procs::ECHO, &big, None, ReplyShape::default(), None),
        Err(SubmitError::TooLarge { .. })
    ));
    assert_eq!(
        p.b.call_with(
            now,
            procs::PUT,
            &words(&[4]),
            Some(&[1, 2, 3, 4]),
            ReplyShape::default(),
            None
        ),
        Err(SubmitError::ChunksNotSupported)
    );
}

// ---- 5. Reverse operation off ---------------------------------------------------

fn forward_workload(b_enables: bool) -> (Vec<Bytes>, Vec<Bytes>, u32) {
    let mut p = pair(4, 4, Service::Echo, Service::Echo);
    if b_enables {
        p.b.conn.enable_reverse();
    }
    let now = p.now;
    for i in 0..6u32 {
        p.a.call(now, procs::ECHO, &words(&[i, i * 3]));
    }
    let data = vec![5u8; 3000];
    p.a.call_with(
        now,
        procs::PUT,
        &words(&[3000]),
        Some(&data),
        ReplyShape {
            max_reduced_len: 4000,
            ..Default::default()
        },
        None,
    )
    .unwrap();
    p.run();
    assert_eq!(p.a.done.len(), 7);
    (p.a.sent.clone(), p.b.sent.clone(), p.a.conn.recv_target())
}

/// A peer that never enables reverse operation sees no change on the
/// wire: the forward traffic of both sides is byte for byte the same
/// whether or not the other side enabled it.
#[test]
fn reverse_operation_off_changes_nothing_on_the_wire() {
    let off = forward_workload(false);
    let on = forward_workload(true);
    assert!(!off.0.is_empty() && !off.1.is_empty());
    assert_eq!(off, on);
}

/// RFC 8167 §6: a peer MUST NOT send reverse-direction messages before
/// support was indicated. A reverse call received by an active side that
/// did not enable reverse operation is dropped, unanswered and uncounted
/// against any credit; forward calls go on; the sender's call times out.
/// A reverse-shaped reply at a passive side that did not enable it is
/// dropped likewise.
#[test]
fn reverse_call_to_a_side_that_did_not_enable_it_is_dropped() {
    let mut p = pair(4, 4, Service::Echo, Service::Echo);
    p.b.conn.enable_reverse(); // the server's upper layer misbehaves
    let now = p.now;
    let r = p.b.call(now, procs::ECHO, &words(&[1]));
    p.run();
    assert_eq!(p.a.conn.stats().reverse_refused, 1);
    assert!(p.a.received.is_empty());
    assert!(p.a.sent.is_empty(), "nothing answered");
    let f = p.a.call(p.now, procs::ECHO, &words(&[2]));
    p.run();
    assert!(p.a.result(f).is_some_and(|r| r.is_ok()));
    p.advance(Duration::from_secs(10));
    assert_eq!(p.b.result(r), Some(&Err(CallError::Timeout)));

    // A reverse-shaped REPLY at a passive side that did not enable it.
    let mut q = pair(4, 4, Service::Echo, Service::Echo);
    let before = q.b.conn.responder_credits();
    q.b.conn.handle_recv(q.now, 1, short_reply(77, 2), None);
    assert_eq!(q.b.conn.stats().reverse_refused, 1);
    assert_eq!(q.b.conn.responder_credits(), before);
    q.step();
    assert!(q.b.sent.is_empty());
    // And the passive side cannot send a reverse call before enabling it.
    assert_eq!(
        q.b.call_with(q.now, procs::ECHO, &[], None, ReplyShape::default(), None),
        Err(SubmitError::ReverseDisabled)
    );
}

// ---- 6. Connection loss in the reverse direction ----------------------------------

/// RFC 8167 §5.4: a lost connection fails the reverse calls in flight (the
/// server cannot reconnect to retransmit them); the passive side refuses
/// to reconnect; forward calls are retransmitted by the active side on a
/// new connection.
#[test]
fn connection_loss_fails_reverse_calls_and_the_passive_side_stays_closed() {
    let mut p = bidi(4, 2);
    let now = p.now;
    let rev: Vec<_> = (0..3u32)
        .map(|i| p.b.call(now, procs::ECHO, &words(&[i])))
        .collect();
    let fwd = p.a.call(now, procs::ECHO, &words(&[42]));
    p.run();
    assert_eq!(
        p.a.incoming.len(),
        1,
        "one reverse call before the first grant"
    );
    assert_eq!(p.b.incoming.len(), 1);
    let held = p.a.incoming[0].clone();
    p.disconnect(false);
    for id in &rev {
        assert_eq!(p.b.result(*id), Some(&Err(CallError::ConnectionLost)));
    }
    assert_eq!(p.b.conn.phase(), Phase::Closed);
    assert_eq!(
        p.b.conn.handle_reconnected(p.now, Default::default()),
        Err(EngineError::PassiveCannotReconnect)
    );
    assert!(matches!(
        p.b.call_with(p.now, procs::ECHO, &[], None, ReplyShape::default(), None),
        Err(SubmitError::Closed)
    ));
    // The active side's answer to a reverse call of the lost connection
    // has nowhere to go.
    assert_eq!(p.a.conn.reply(held.id, &[]), Err(EngineError::UnknownCall));
    // The forward call goes out again on the new connection.
    p.b.service = Service::Echo;
    p.reconnect();
    p.run();
    assert_eq!(ok_payload(&p, fwd)[REPLY_HEADER..], words(&[42])[..]);
    assert_eq!(p.old_b[0].done.len(), 3);
}

// ---- Random interleavings -----------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Submit,
    SubmitReverse,
    AnswerReverse,
    Deliver(bool),
    Drop(bool),
    DuplicateReply,
    Swap(bool),
    Answer,
    Advance(u16),
    Reconnect,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Submit),
        2 => Just(Op::SubmitReverse),
        2 => Just(Op::AnswerReverse),
        6 => any::<bool>().prop_map(Op::Deliver),
        1 => any::<bool>().prop_map(Op::Drop),
        1 => Just(Op::DuplicateReply),
        1 => any::<bool>().prop_map(Op::Swap),
        4 => Just(Op::Answer),
        2 => (1u16..4000).prop_map(Op::Advance),
        1 => Just(Op::Reconnect),
    ]
}

fn dir(a_to_b: bool) -> Dir {
    if a_to_b {
        Dir::AtoB
    } else {
        Dir::BtoA
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the order of forward and reverse submissions, deliveries,
    /// drops, duplicated and reordered messages, answers, timeouts and
    /// reconnects: no call in either direction goes out beyond the grant in
    /// force, neither Responder ever has more in process than it granted
    /// (no overrun), and every call completes exactly once (the fixture
    /// panics on a second completion).
    #[test]
    fn random_interleavings_keep_credits_and_complete_each_call_once(
        ops in proptest::collection::vec(op(), 1..120),
        credits in 1u32..6,
        backward in 1u32..4,
    ) {
        let mut p = Pair::new(
            config(Side::Active, 8, backward),
            config(Side::Passive, credits, backward),
            Service::Hold,
            Service::Hold,
        );
        p.a.conn.enable_reverse();
        p.b.conn.enable_reverse();
        p.b_reverse = true;
        let mut submitted = 0usize;
        let mut reverse = 0usize;
        for o in ops {
            match o {
                Op::SubmitReverse => {
                    let t = Some(Duration::from_millis(5000));
                    let shape = ReplyShape { max_reduced_len: 28, ..Default::default() };
                    match p.b.call_with(p.now, procs::ECHO, &words(&[reverse as u32]), None, shape, t) {
                        Ok(_) => reverse += 1,
                        Err(e) => {
                            prop_assert_eq!(e, SubmitError::Closed);
                            prop_assert_eq!(p.b.conn.phase(), Phase::Closed);
                        }
                    }
                }
                Op::AnswerReverse => { p.a.answer_next(); }
                Op::Submit => {
                    let t = Some(Duration::from_millis(5000));
                    let shape = ReplyShape { max_reduced_len: 28, ..Default::default() };
                    p.a.call_with(p.now, procs::ECHO, &words(&[submitted as u32]), None, shape, t).unwrap();
                    submitted += 1;
                }
                Op::Deliver(d) => { p.deliver(dir(d)); }
                Op::Drop(d) => { p.drop_next(dir(d)); }
                Op::DuplicateReply => {
                    // A reliable connection never duplicates a message; a
                    // duplicated reply is what a confused peer could send,
                    // a duplicated call would be a credit overrun.
                    let front_is_call = p.b_to_a.front().is_some_and(|w| {
                        matches!(
                            rpcrdma_proto::classify::classify(&w.bytes),
                            rpcrdma_proto::classify::Direction::Call { .. }
                        )
                    });
                    if !front_is_call {
                        p.duplicate_next(Dir::BtoA);
                    }
                }
                Op::Swap(d) => p.swap_next(dir(d)),
                Op::Answer => { p.b.answer_next(); }
                Op::Advance(ms) => p.advance(Duration::from_millis(ms as u64)),
                Op::Reconnect => {
                    if p.a.conn.phase() == Phase::Connected {
                        p.disconnect(false);
                    }
                    p.reconnect();
                }
            }
            p.step();
        }
        // Let everything finish: answer, deliver, time out, reconnect.
        for _ in 0..4 {
            if p.a.conn.phase() != Phase::Connected {
                p.reconnect();
            }
            p.run();
            while p.b.answer_next().is_some() || p.a.answer_next().is_some() {
                p.run();
            }
            p.advance(Duration::from_secs(6));
        }
        prop_assert_eq!(p.a.done.len(), submitted);
        let reverse_done: usize = p.old_b.iter().chain([&p.b]).map(|b| b.done.len()).sum();
        prop_assert_eq!(reverse_done, reverse);
        prop_assert!(p.a.peak_responder <= backward);
        prop_assert_eq!(p.a.conn.stats().credit_overruns, 0);
        prop_assert_eq!(p.b.conn.stats().credit_overruns, 0);
        for b in &p.old_b {
            prop_assert_eq!(b.conn.stats().credit_overruns, 0);
        }
        prop_assert!(p.a.peak_requester <= credits.max(1));
    }
}
