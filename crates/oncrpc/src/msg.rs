//! RPC message headers (RFC 5531 §9): `rpc_msg`, `call_body`, `reply_body`.
//!
//! Each header is a `Repr`-style struct with `decode` (from any
//! [`XdrRead`], e.g. a [`PayloadDecoder`](crate::PayloadDecoder) or an
//! [`xdr::Decoder`]) and an [`XdrEncode`] impl. The procedure arguments or
//! results that follow a header are not part of it.

use xdr::{Encoder, XdrEncode, XdrRead};

use crate::auth::{AuthStat, OpaqueAuth};

/// The only RPC protocol version (RFC 5531 §9: `rpcvers` MUST be 2).
pub const RPC_VERSION: u32 = 2;

/// `enum msg_type` (RFC 5531 §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum MsgType {
    /// CALL (0).
    Call = 0,
    /// REPLY (1).
    Reply = 1,
}

impl MsgType {
    /// Map a wire value.
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(MsgType::Call),
            1 => Some(MsgType::Reply),
            _ => None,
        }
    }
}

/// Read the xid and raw `msg_type` words (the first 8 bytes) of a message,
/// as transports do to route it; `None` if shorter than 8 bytes.
pub fn peek_xid_and_type(msg: &[u8]) -> Option<(u32, u32)> {
    let xid = u32::from_be_bytes(msg.get(0..4)?.try_into().ok()?);
    let mtype = u32::from_be_bytes(msg.get(4..8)?.try_into().ok()?);
    Some((xid, mtype))
}

/// Header of a CALL message: `xid`, `msg_type` = CALL and `call_body` up to
/// and including the verifier (RFC 5531 §9). The procedure arguments follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallHeader {
    /// Transaction id.
    pub xid: u32,
    /// RPC version; MUST be [`RPC_VERSION`].
    pub rpcvers: u32,
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub procedure: u32,
    /// Credential.
    pub cred: OpaqueAuth,
    /// Verifier.
    pub verf: OpaqueAuth,
}

impl CallHeader {
    /// Decode a call header, starting at the xid. A REPLY, an unknown
    /// `msg_type`, a body over 400 bytes or truncation are errors (the
    /// [`Dispatcher`](crate::Dispatcher) decodes step by step instead, to
    /// answer the RFC's errors).
    pub fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        let xid = r.u32()?;
        let mtype = r.u32()?;
        if mtype != MsgType::Call as u32 {
            return Err(xdr::Error::InvalidDiscriminant {
                what: "msg_type (expected CALL)",
                value: mtype,
            });
        }
        Ok(CallHeader {
            xid,
            rpcvers: r.u32()?,
            prog: r.u32()?,
            vers: r.u32()?,
            procedure: r.u32()?,
            cred: OpaqueAuth::decode(r)?,
            verf: OpaqueAuth::decode(r)?,
        })
    }
}

impl XdrEncode for CallHeader {
    fn encoded_len(&self) -> usize {
        24 + self.cred.encoded_len() + self.verf.encoded_len()
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        e.u32(self.xid);
        e.u32(MsgType::Call as u32);
        e.u32(self.rpcvers);
        e.u32(self.prog);
        e.u32(self.vers);
        e.u32(self.procedure);
        e.item(&self.cred);
        e.item(&self.verf);
    }
}

/// `accepted_reply.reply_data` (RFC 5531 §9): `accept_stat` and its arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AcceptStat {
    /// SUCCESS (0): results follow the header.
    Success,
    /// PROG_UNAVAIL (1): program not exported.
    ProgUnavail,
    /// PROG_MISMATCH (2): versions `low..=high` are supported.
    ProgMismatch {
        /// Lowest supported version.
        low: u32,
        /// Highest supported version.
        high: u32,
    },
    /// PROC_UNAVAIL (3): procedure not supported.
    ProcUnavail,
    /// GARBAGE_ARGS (4): arguments could not be decoded.
    GarbageArgs,
    /// SYSTEM_ERR (5): e.g. memory allocation failure.
    SystemErr,
}

impl AcceptStat {
    /// The `accept_stat` wire value.
    pub fn code(&self) -> u32 {
        match self {
            AcceptStat::Success => 0,
            AcceptStat::ProgUnavail => 1,
            AcceptStat::ProgMismatch { .. } => 2,
            AcceptStat::ProcUnavail => 3,
            AcceptStat::GarbageArgs => 4,
            AcceptStat::SystemErr => 5,
        }
    }
}

/// `rejected_reply` (RFC 5531 §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectStat {
    /// RPC_MISMATCH (0): RPC versions `low..=high` are supported.
    RpcMismatch {
        /// Lowest supported RPC version.
        low: u32,
        /// Highest supported RPC version.
        high: u32,
    },
    /// AUTH_ERROR (1).
    AuthError(AuthStat),
}

/// `reply_body` (RFC 5531 §9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyBody {
    /// MSG_ACCEPTED (0).
    Accepted {
        /// The server's verifier.
        verf: OpaqueAuth,
        /// Status and its data.
        stat: AcceptStat,
    },
    /// MSG_DENIED (1).
    Denied(RejectStat),
}

/// Header of a REPLY message: `xid`, `msg_type` = REPLY and `reply_body`
/// (RFC 5531 §9). For SUCCESS, the results follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyHeader {
    /// Transaction id of the call answered.
    pub xid: u32,
    /// The body.
    pub body: ReplyBody,
}

impl ReplyHeader {
    /// An accepted reply with an AUTH_NONE verifier.
    pub fn accepted(xid: u32, stat: AcceptStat) -> Self {
        ReplyHeader {
            xid,
            body: ReplyBody::Accepted {
                verf: OpaqueAuth::none(),
                stat,
            },
        }
    }

    /// A denied reply.
    pub fn denied(xid: u32, stat: RejectStat) -> Self {
        ReplyHeader {
            xid,
            body: ReplyBody::Denied(stat),
        }
    }

    /// Decode a reply header, starting at the xid. A CALL, unknown
    /// discriminants or truncation are errors.
    pub fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        let xid = r.u32()?;
        let mtype = r.u32()?;
        if mtype != MsgType::Reply as u32 {
            return Err(xdr::Error::InvalidDiscriminant {
                what: "msg_type (expected REPLY)",
                value: mtype,
            });
        }
        let body = match r.u32()? {
            0 => {
                let verf = OpaqueAuth::decode(r)?;
                let stat = match r.u32()? {
                    0 => AcceptStat::Success,
                    1 => AcceptStat::ProgUnavail,
                    2 => AcceptStat::ProgMismatch {
                        low: r.u32()?,
                        high: r.u32()?,
                    },
                    3 => AcceptStat::ProcUnavail,
                    4 => AcceptStat::GarbageArgs,
                    5 => AcceptStat::SystemErr,
                    value => {
                        return Err(xdr::Error::InvalidDiscriminant {
                            what: "accept_stat",
                            value,
                        })
                    }
                };
                ReplyBody::Accepted { verf, stat }
            }
            1 => ReplyBody::Denied(match r.u32()? {
                0 => RejectStat::RpcMismatch {
                    low: r.u32()?,
                    high: r.u32()?,
                },
                1 => {
                    let value = r.u32()?;
                    let stat =
                        AuthStat::from_u32(value).ok_or(xdr::Error::InvalidDiscriminant {
                            what: "auth_stat",
                            value,
                        })?;
                    RejectStat::AuthError(stat)
                }
                value => {
                    return Err(xdr::Error::InvalidDiscriminant {
                        what: "reject_stat",
                        value,
                    })
                }
            }),
            value => {
                return Err(xdr::Error::InvalidDiscriminant {
                    what: "reply_stat",
                    value,
                })
            }
        };
        Ok(ReplyHeader { xid, body })
    }
}

impl XdrEncode for ReplyHeader {
    fn encoded_len(&self) -> usize {
        12 + match &self.body {
            ReplyBody::Accepted { verf, stat } => {
                verf.encoded_len()
                    + 4
                    + match stat {
                        AcceptStat::ProgMismatch { .. } => 8,
                        _ => 0,
                    }
            }
            ReplyBody::Denied(RejectStat::RpcMismatch { .. }) => 12,
            ReplyBody::Denied(RejectStat::AuthError(_)) => 8,
        }
    }

    fn encode(&self, e: &mut Encoder<'_>) {
        e.u32(self.xid);
        e.u32(MsgType::Reply as u32);
        match &self.body {
            ReplyBody::Accepted { verf, stat } => {
                e.u32(0);
                e.item(verf);
                e.u32(stat.code());
                if let AcceptStat::ProgMismatch { low, high } = stat {
                    e.u32(*low);
                    e.u32(*high);
                }
            }
            ReplyBody::Denied(rej) => {
                e.u32(1);
                match rej {
                    RejectStat::RpcMismatch { low, high } => {
                        e.u32(0);
                        e.u32(*low);
                        e.u32(*high);
                    }
                    RejectStat::AuthError(s) => {
                        e.u32(1);
                        e.u32(*s as u32);
                    }
                }
            }
        }
    }
}

/// Any RPC message header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageHeader {
    /// A CALL.
    Call(CallHeader),
    /// A REPLY.
    Reply(ReplyHeader),
}

impl MessageHeader {
    /// Decode a call or reply header.
    pub fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        // Peek the msg_type without a second reader: decode xid and type,
        // then the rest, mirroring CallHeader/ReplyHeader::decode.
        let xid = r.u32()?;
        let mtype = r.u32()?;
        let mut pre = Prefixed {
            words: [xid, mtype],
            used: 0,
            inner: r,
        };
        match mtype {
            0 => CallHeader::decode(&mut pre).map(MessageHeader::Call),
            1 => ReplyHeader::decode(&mut pre).map(MessageHeader::Reply),
            value => Err(xdr::Error::InvalidDiscriminant {
                what: "msg_type",
                value,
            }),
        }
    }

    /// The xid.
    pub fn xid(&self) -> u32 {
        match self {
            MessageHeader::Call(c) => c.xid,
            MessageHeader::Reply(r) => r.xid,
        }
    }
}

/// Replays two already-read words before the inner reader.
struct Prefixed<'r, R: ?Sized> {
    words: [u32; 2],
    used: usize,
    inner: &'r mut R,
}

impl<R: XdrRead + ?Sized> XdrRead for Prefixed<'_, R> {
    fn remaining(&self) -> usize {
        self.inner.remaining() + 4 * (2 - self.used)
    }
    fn position(&self) -> usize {
        self.inner.position() - 4 * (2 - self.used)
    }
    fn u32(&mut self) -> xdr::Result<u32> {
        if self.used < 2 {
            self.used += 1;
            return Ok(self.words[self.used - 1]);
        }
        self.inner.u32()
    }
    fn fixed_opaque_into(&mut self, out: &mut [u8]) -> xdr::Result<()> {
        self.inner.fixed_opaque_into(out)
    }
    fn fixed_opaque_bytes(&mut self, len: usize) -> xdr::Result<bytes::Bytes> {
        self.inner.fixed_opaque_bytes(len)
    }
    fn skip(&mut self, n: usize) -> xdr::Result<()> {
        self.inner.skip(n)
    }
}
