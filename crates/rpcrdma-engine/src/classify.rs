//! Direction of a received message, decided before any XID lookup.
//!
//! RPC-over-RDMA Version One headers carry no direction: `rdma_xid`,
//! `rdma_credit` and the chunk lists mean different things in a Call and in
//! a Reply, and the forward and reverse XID spaces are independent, so a
//! forward-direction Call and a reverse-direction Call may carry the same
//! XID at the same time (RFC 8167 §2.3). A receiver therefore looks at the
//! RPC message's `msg_type` (RFC 5531 §9) before it looks the XID up.
//!
//! Reverse-direction messages travel as RDMA_MSG with three empty chunk
//! lists (RFC 8167 §5.3 lets an implementation without reverse-direction
//! chunks send only those, as Linux does), so only that shape is ever
//! classified as the reverse direction: a message of any other shape
//! belongs to the forward direction of the receiving side (a Reply on the
//! active side, a Call on the passive side). Linux's `rpcrdma_is_bcall`
//! and svcrdma's reverse-direction reply check decide the same way.

/// RPC `msg_type` (RFC 5531 §9): CALL = 0, REPLY = 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MsgType {
    /// An RPC Call.
    Call,
    /// An RPC Reply.
    Reply,
}

/// Length of RDMA_MSG's fixed words plus three empty chunk lists.
const SIMPLE_HEADER_LEN: usize = 28;

fn word(b: &[u8], i: usize) -> Option<u32> {
    let w = b.get(i * 4..i * 4 + 4)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// The RPC direction of a received message when it has the reverse-capable
/// shape: RPC-over-RDMA Version One RDMA_MSG (RFC 8166 §4.2.4) with an empty
/// Read list, Write list and Reply chunk, followed by an RPC message whose
/// XID equals `rdma_xid` (RFC 8166 §4.2.1) and whose `msg_type` is CALL or
/// REPLY. `None` for every other message: it is then handled by the
/// receiving side's forward-direction half, which validates it fully.
///
/// Never panics; reads at most the first 36 bytes.
pub fn classify(msg: &[u8]) -> Option<MsgType> {
    let xid = word(msg, 0)?;
    if word(msg, 1)? != rpcrdma_proto::wire::RPCRDMA_VERSION
        || word(msg, 3)? != rpcrdma_proto::Proc::Msg.as_u32()
        || word(msg, 4)? != 0
        || word(msg, 5)? != 0
        || word(msg, 6)? != 0
    {
        return None;
    }
    let rpc = &msg[SIMPLE_HEADER_LEN..];
    if word(rpc, 0)? != xid {
        return None;
    }
    match word(rpc, 1)? {
        0 => Some(MsgType::Call),
        1 => Some(MsgType::Reply),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(xid: u32, proc_: u32, lists: [u32; 3], rpc: &[u32]) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [xid, 1, 32, proc_] {
            v.extend_from_slice(&w.to_be_bytes());
        }
        for w in lists.iter().chain(rpc) {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v
    }

    #[test]
    fn rfc8167_s2_3_call_and_reply_by_msg_type() {
        assert_eq!(
            classify(&msg(7, 0, [0; 3], &[7, 0, 2])),
            Some(MsgType::Call)
        );
        assert_eq!(
            classify(&msg(7, 0, [0; 3], &[7, 1, 0])),
            Some(MsgType::Reply)
        );
    }

    #[test]
    fn other_shapes_are_not_classified() {
        // RDMA_NOMSG, chunks present, XID mismatch, bad msg_type, short.
        assert_eq!(classify(&msg(7, 1, [0; 3], &[7, 0])), None);
        assert_eq!(classify(&msg(7, 0, [1, 0, 0], &[7, 0])), None);
        assert_eq!(classify(&msg(7, 0, [0, 0, 1], &[7, 0])), None);
        assert_eq!(classify(&msg(7, 0, [0; 3], &[8, 0])), None);
        assert_eq!(classify(&msg(7, 0, [0; 3], &[7, 2])), None);
        assert_eq!(classify(&msg(7, 0, [0; 3], &[7])), None);
        assert_eq!(classify(&[]), None);
        let mut v2 = msg(7, 0, [0; 3], &[7, 0]);
        v2[7] = 2; // rdma_vers 2
        assert_eq!(classify(&v2), None);
    }
}
