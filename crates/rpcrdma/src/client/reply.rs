//! A call's reply received: the registrations end (invalidated by the
//! reply's Send with Invalidate, or deregistered here) before the caller
//! sees anything, and the result is put together from the Payload stream
//! and the Write chunks (RFC 8166 §3.4.6, §4.3.3).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;
use oncrpc::{decode_reply, Payload, RpcError};
use rdma_verbs::{Device, MemoryRegion, MrBuffer};
use rpcrdma_proto::marshal::RegionSource;
use rpcrdma_proto::reassemble::{place_results, ResultPiece};
use rpcrdma_proto::validate::check_reply_payload;
use rpcrdma_proto::wire::{ChunkListsRepr, ErrorBody};

use super::{join, CallResult, Sent, Shared, Slot};
use crate::error::TransportError;
use crate::report::{CallReport, MessageKind, ReplyMode};

/// What the reply said, extracted from the receive buffer.
pub(super) enum Outcome {
    Reply {
        msg: Bytes,
        header_len: usize,
        nomsg: bool,
        returned: ChunkListsRepr,
    },
    Error(ErrorBody),
}

impl<D: Device> Shared<D> {
    /// Invalidates the call's registrations, then completes it.
    pub(super) fn finish(
        self: &Arc<Self>,
        slot: Slot<D>,
        outcome: Outcome,
        inv: Option<u32>,
        recv_len: u64,
    ) {
        let Some(sent) = slot.sent else {
            return;
        };
        let Sent {
            regions,
            mut report,
            ..
        } = sent;
        let mut to_invalidate = 0;
        for r in &regions {
            if inv == Some(r.rkey) {
                report.remote_invalidated = true;
            } else if r.mr.is_valid() {
                to_invalidate += 1;
            }
        }
        if report.remote_invalidated {
            self.stats.remote_invalidations.fetch_add(1, Relaxed);
        }
        report.local_invalidations = to_invalidate;
        report.reply_recv_bytes = recv_len;
        self.stats
            .local_invalidations
            .fetch_add(to_invalidate as u64, Relaxed);
        let Some(tx) = slot.tx else {
            // Abandoned: nobody waits for the result; release the regions.
            for r in regions {
                drop(r.mr.deregister());
            }
            return;
        };
        // Every registration still valid is invalidated here, before the
        // caller sees anything, by deregistering it: regions are not reused
        // (see `take_mr`), and deregistration invalidates atomically with
        // respect to placement (a late RDMA operation on the STag is
        // refused), so a LocalInvalidate work request would only add a trip
        // through the send queue and a completion.
        let (prog, vers, proc_) = (slot.req.prog, slot.req.vers, slot.req.procedure);
        let mut write_bufs: Vec<Option<MrBuffer>> = Vec::new();
        let mut reply_buf = None;
        for r in regions {
            let buf = r.mr.deregister();
            // A chunk registered segment by segment comes back piece by
            // piece, in order.
            match r.source {
                RegionSource::ReplyWriteChunk { chunk } => {
                    if write_bufs.len() <= chunk {
                        write_bufs.resize_with(chunk + 1, || None);
                    }
                    write_bufs[chunk] = join(write_bufs[chunk].take(), buf);
                }
                RegionSource::ReplyChunk => reply_buf = join(reply_buf.take(), buf),
                _ => {}
            }
        }
        let res = self.build_result(prog, vers, proc_, report, outcome, write_bufs, reply_buf);
        self.stats.completed.fetch_add(1, Relaxed);
        let _ = tx.send(res);
    }

    #[allow(clippy::too_many_arguments)]
    fn build_result(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        mut report: CallReport,
        outcome: Outcome,
        mut write_bufs: Vec<Option<MrBuffer>>,
        reply_buf: Option<MrBuffer>,
    ) -> CallResult {
        let bad = |s: String| TransportError::BadReply(s).into_rpc();
        let (msg, header_len, nomsg, returned) = match outcome {
            Outcome::Error(e) => {
                report.reply_mode = ReplyMode::Error;
                report.reply_message = MessageKind::Error;
                tracing::debug!(xid = report.xid, ?e, "call failed with RDMA_ERROR");
                return Err(match e {
                    ErrorBody::Vers { low, high } => TransportError::ErrVers { low, high },
                    ErrorBody::Chunk => TransportError::ErrChunk,
                }
                .into_rpc());
            }
            Outcome::Reply {
                msg,
                header_len,
                nomsg,
                returned,
            } => (msg, header_len, nomsg, returned),
        };
        report.write_chunk_bytes = returned.write_list.iter().map(|c| c.total_len()).collect();
        let payload = if nomsg {
            let len = returned.reply_chunk.as_ref().map_or(0, |c| c.total_len()) as usize;
            report.reply_mode = ReplyMode::Long;
            report.reply_message = MessageKind::NoMsg;
            report.reply_chunk_bytes = len as u64;
            let b = reply_buf
                .ok_or_else(|| bad("RDMA_NOMSG reply without a reply chunk".into()))?
                .into_bytes();
            if len > b.len() {
                return Err(bad("reply chunk overrun".into()));
            }
            b.slice(..len)
        } else {
            report.reply_mode = ReplyMode::Short;
            report.reply_message = MessageKind::Msg;
            msg.slice(header_len.min(msg.len())..)
        };
        let (rxid, res) =
            decode_reply(&Payload::from_xdr(payload.clone())).map_err(RpcError::BadReply)?;
        // RFC 8166 §4.2.1: the RPC XID is `rdma_xid`. `check_reply` saw it
        // in a Short reply; a Long reply's comes out of its Reply chunk.
        if check_reply_payload(report.xid, &payload).is_err() {
            return Err(bad(format!(
                "RPC xid {rxid:#x} in reply to {:#x}",
                report.xid
            )));
        }
        let results = res?.flatten();
        let layout = self.bindings.layout(prog, vers);
        let buffer_len = |c: usize| {
            write_bufs
                .get(c)
                .and_then(Option::as_ref)
                .map(MrBuffer::len)
        };
        let pieces = place_results(layout, proc_, &results, &returned.write_list, buffer_len)
            .map_err(|e| bad(e.to_string()))?;
        let mut out = Payload::new();
        for p in pieces {
            match p {
                ResultPiece::Inline(r) => out.push_xdr(results.slice(r)),
                ResultPiece::Chunk { chunk, len } => {
                    // `place_results` checked the buffer is there and long
                    // enough.
                    let data = write_bufs.get_mut(chunk).and_then(Option::take);
                    let data = data.map(MrBuffer::into_bytes).unwrap_or_default();
                    out.push_ddp(data.slice(..len.min(data.len())));
                }
            }
        }
        Ok((out, report))
    }
}
