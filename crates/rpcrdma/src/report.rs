//! What a call put on the wire: the per-call [`CallReport`].

use std::fmt;

use rpcrdma_proto::marshal::{CallKind, CallPlan, RegionSource, Thresholds};

/// The transport header type of a message (`rdma_proc`, RFC 8166 §4.2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// RDMA_MSG: the Payload stream follows the header.
    Msg,
    /// RDMA_NOMSG: the Payload stream is in a chunk.
    NoMsg,
    /// RDMA_ERROR.
    Error,
}

impl fmt::Display for MessageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MessageKind::Msg => "RDMA_MSG",
            MessageKind::NoMsg => "RDMA_NOMSG",
            MessageKind::Error => "RDMA_ERROR",
        })
    }
}

/// How the reply travelled (RFC 8166 §3.5.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplyMode {
    /// RDMA_MSG with the reduced reply inline.
    Short,
    /// RDMA_NOMSG: the reduced reply was written into the Reply chunk.
    Long,
    /// RDMA_ERROR.
    Error,
}

/// What one call put on the wire, as the requester saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallReport {
    /// The RPC transaction id (also `rdma_xid`).
    pub xid: u32,
    /// Short, Chunked or Long Call.
    pub call_kind: CallKind,
    /// RDMA_MSG or RDMA_NOMSG.
    pub call_message: MessageKind,
    /// Bytes of the call's Send (transport header plus inline payload).
    pub call_send_bytes: u64,
    /// Read chunks with a non-zero Position (reduced arguments).
    pub read_chunks: usize,
    /// Bytes in those Read chunks.
    pub read_chunk_bytes: u64,
    /// Bytes in the Position-Zero Read chunk (Long Call), 0 otherwise.
    pub position_zero_bytes: u64,
    /// Read segments in total.
    pub read_segments: usize,
    /// Write chunks offered.
    pub write_chunks: usize,
    /// XDR pad segments offered after Write chunks
    /// ([`RdmaConfig::write_pad`](crate::RdmaConfig::write_pad)).
    pub write_pad_segments: usize,
    /// Bytes the responder wrote into each Write chunk.
    pub write_chunk_bytes: Vec<u64>,
    /// Whether a Reply chunk was offered.
    pub reply_chunk_offered: bool,
    /// Bytes the responder wrote into the Reply chunk.
    pub reply_chunk_bytes: u64,
    /// How the reply came.
    pub reply_mode: ReplyMode,
    /// RDMA_MSG, RDMA_NOMSG or RDMA_ERROR.
    pub reply_message: MessageKind,
    /// Bytes of the reply's Send.
    pub reply_recv_bytes: u64,
    /// The reply arrived by Send with Invalidate, which invalidated one of
    /// the call's registrations (RFC 8797 §6).
    pub remote_invalidated: bool,
    /// Registrations invalidated locally before completion.
    pub local_invalidations: usize,
    /// Times the call was retransmitted on a new connection.
    pub retransmits: u32,
    /// The connection's inline thresholds.
    pub thresholds: Thresholds,
}

impl CallReport {
    /// The report of a call as sent: its kind and message type, its Send,
    /// the chunks it offered, on a connection with thresholds `th`.
    pub(crate) fn sent(
        xid: u32,
        plan: &CallPlan,
        send: u64,
        th: Thresholds,
        retransmits: u32,
    ) -> CallReport {
        let mut r = CallReport {
            xid,
            call_kind: plan.kind,
            call_message: if plan.kind == CallKind::Long {
                MessageKind::NoMsg
            } else {
                MessageKind::Msg
            },
            call_send_bytes: send,
            read_chunks: 0,
            read_chunk_bytes: 0,
            position_zero_bytes: 0,
            read_segments: 0,
            write_chunks: 0,
            write_pad_segments: plan
                .regions
                .iter()
                .filter(|r| matches!(r.source, RegionSource::WritePad { .. }))
                .count(),
            write_chunk_bytes: Vec::new(),
            reply_chunk_offered: false,
            reply_chunk_bytes: 0,
            reply_mode: ReplyMode::Short,
            reply_message: MessageKind::Msg,
            reply_recv_bytes: 0,
            remote_invalidated: false,
            local_invalidations: 0,
            retransmits,
            thresholds: th,
        };
        if let Some(c) = plan.header.chunks() {
            let mut last = None;
            for s in &c.read_list {
                r.read_segments += 1;
                if s.position == 0 {
                    r.position_zero_bytes += s.segment.length as u64;
                } else {
                    if last != Some(s.position) {
                        r.read_chunks += 1;
                    }
                    r.read_chunk_bytes += s.segment.length as u64;
                }
                last = Some(s.position);
            }
            r.write_chunks = c.write_list.len();
            r.reply_chunk_offered = c.reply_chunk.is_some();
        }
        r
    }
}

impl fmt::Display for CallReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.call_kind {
            CallKind::Short => "Short Call",
            CallKind::Chunked => "Chunked Call",
            CallKind::Long => "Long Call",
        };
        write!(
            f,
            "xid {:#010x}: {} ({}, {} B sent",
            self.xid, kind, self.call_message, self.call_send_bytes
        )?;
        if self.read_chunks > 0 {
            write!(
                f,
                ", {} read chunk(s) {} B",
                self.read_chunks, self.read_chunk_bytes
            )?;
        }
        if self.position_zero_bytes > 0 {
            write!(f, ", position-zero chunk {} B", self.position_zero_bytes)?;
        }
        write!(f, ", {} write chunk(s)", self.write_chunks)?;
        if self.write_pad_segments > 0 {
            write!(f, " + {} pad segment(s)", self.write_pad_segments)?;
        }
        if self.reply_chunk_offered {
            write!(f, ", reply chunk")?;
        }
        let reply = match self.reply_mode {
            ReplyMode::Short => "Short Reply",
            ReplyMode::Long => "Long Reply",
            ReplyMode::Error => "RDMA_ERROR",
        };
        write!(
            f,
            ") -> {} ({}, {} B received",
            reply, self.reply_message, self.reply_recv_bytes
        )?;
        if !self.write_chunk_bytes.is_empty() {
            write!(f, ", written {:?} B", self.write_chunk_bytes)?;
        }
        if self.reply_chunk_bytes > 0 {
            write!(f, ", reply chunk {} B", self.reply_chunk_bytes)?;
        }
        write!(
            f,
            "); invalidation: {} remote, {} local; inline {}/{}",
            self.remote_invalidated as u8,
            self.local_invalidations,
            self.thresholds.call_inline,
            self.thresholds.reply_inline
        )?;
        if self.retransmits > 0 {
            write!(f, "; retransmitted {}x", self.retransmits)?;
        }
        Ok(())
    }
}
