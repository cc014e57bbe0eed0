//! `TcpChannel` against a hostile server: calls echoed back as
//! CALLs, replies to unknown xids, junk and empty records, late replies and
//! duplicate replies with other results. No call completes twice or with
//! another call's reply.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use oncrpc::xdr::XdrRead;
use oncrpc::{AcceptStat, Channel, Payload, ReplyHeader, Request, RpcError};
use oncrpc_tcp::io::RecordReader;
use oncrpc_tcp::record::{RecordEncoder, RecordLimits};
use oncrpc_tcp::TcpChannel;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// An accepted SUCCESS reply to `xid` carrying `token`, in 3-byte fragments.
fn reply(xid: u32, token: u32) -> Vec<u8> {
    let mut b = Payload::builder();
    b.item(&ReplyHeader::accepted(xid, AcceptStat::Success));
    b.u32(token);
    RecordEncoder::new(3).encode_to_vec(&[b.finish().flatten()])
}

/// Calls whose token is a multiple of this get their reply late.
const LATE_EVERY: u32 = 13;
/// The client's timeout, and how long the server waits before a late reply
/// (well after the timeout, well before it for the others on a loaded
/// machine).
const TIMEOUT: Duration = Duration::from_millis(400);
const LATE_BY: Duration = Duration::from_millis(600);

/// Every call gets its own reply or a timeout (only the late ones), never
/// a reply meant for another call, a CALL or a junk record; nothing stays
/// outstanding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_server_never_crosses_replies() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let (rd, mut wr) = s.into_split();
        let mut reader = RecordReader::new(rd, RecordLimits::default());
        while let Ok(Some(rec)) = reader.next_record().await {
            let msg = rec.into_contiguous();
            let p = Payload::from(msg.clone());
            let mut d = p.decoder();
            let hdr = oncrpc::CallHeader::decode(&mut d).unwrap();
            let token = d.u32().unwrap();
            let xid = hdr.xid;
            let mut out = Vec::new();
            // A CALL with the same xid.
            out.extend(RecordEncoder::default().encode_to_vec(std::slice::from_ref(&msg)));
            // A reply to an xid that is not outstanding.
            out.extend(reply(xid ^ 0x8000_0000, 0xdead));
            // Garbage records.
            out.extend(RecordEncoder::default().encode_to_vec(&[Bytes::from_static(b"abc")]));
            out.extend(RecordEncoder::default().encode_to_vec(&[]));
            if token % LATE_EVERY == 0 {
                // Late: the caller times out first.
                wr.write_all(&out).await.unwrap();
                tokio::time::sleep(LATE_BY).await;
                wr.write_all(&reply(xid, token)).await.unwrap();
                continue;
            }
            out.extend(reply(xid, token));
            out.extend(reply(xid, token.wrapping_add(1))); // duplicate, different
            wr.write_all(&out).await.unwrap();
        }
    });
    let ch = Arc::new(TcpChannel::connect(addr).await.unwrap());
    for token in 1..40u32 {
        let mut a = Payload::builder();
        a.u32(token);
        let r = ch
            .call(Request::new(1, 1, 1, a.finish()).with_timeout(TIMEOUT))
            .await;
        match r {
            Ok(p) => {
                assert_ne!(token % LATE_EVERY, 0, "late reply accepted");
                assert_eq!(p.decoder().u32().unwrap(), token, "reply of another call");
            }
            Err(RpcError::Timeout) => assert_eq!(token % LATE_EVERY, 0, "token {token} timed out"),
            Err(e) => panic!("token {token}: {e}"),
        }
    }
    assert_eq!(ch.outstanding(), 0);
}
