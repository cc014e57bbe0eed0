//! Client side: the sans-IO [`ClientCore`], [`RpcError`], and the
//! transport-neutral [`Request`] / [`Channel`] abstraction.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::auth::{AuthStat, Credential, OpaqueAuth};
use crate::msg::{
    AcceptStat, CallHeader, MsgType, RejectStat, ReplyBody, ReplyHeader, RPC_VERSION,
};
use crate::payload::{Payload, PayloadBuilder, PayloadDecoder};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// PROG_UNAVAIL: the server does not export the program.
    #[error("program unavailable")]
    ProgUnavail,
    /// PROG_MISMATCH: the server supports versions `low..=high`.
    #[error("program version mismatch (server supports {low}..={high})")]
    ProgMismatch {
        /// Lowest supported version.
        low: u32,
        /// Highest supported version.
        high: u32,
    },
    /// PROC_UNAVAIL.
    #[error("procedure unavailable")]
    ProcUnavail,
    /// GARBAGE_ARGS: the server could not decode the arguments.
    #[error("server could not decode the arguments (GARBAGE_ARGS)")]
    GarbageArgs,
    /// SYSTEM_ERR.
    #[error("server system error")]
    SystemErr,
    /// MSG_DENIED RPC_MISMATCH: the server supports RPC versions `low..=high`.
    #[error("RPC version mismatch (server supports {low}..={high})")]
    RpcMismatch {
        /// Lowest supported RPC version.
        low: u32,
        /// Highest supported RPC version.
        high: u32,
    },
    /// MSG_DENIED AUTH_ERROR.
    #[error("authentication error: {0}")]
    AuthError(AuthStat),
    /// No reply before the call's deadline.
    #[error("call timed out")]
    Timeout,
    /// The connection was lost with the call outstanding.
    #[error("connection lost")]
    ConnectionLost,
    /// The reply (header or results) could not be decoded.
    #[error("malformed reply: {0}")]
    BadReply(#[from] xdr::Error),
    /// A transport-specific failure.
    #[error("transport error: {0}")]
    Transport(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl RpcError {
    /// A [`RpcError::Transport`] from any error or message.
    pub fn transport(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        RpcError::Transport(e.into())
    }
}

/// One call to make through a [`Channel`]: the same for every transport.
#[derive(Debug, Default)]
pub struct Request {
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub procedure: u32,
    /// Credential (the verifier sent is always AUTH_NONE).
    pub cred: Credential,
    /// Encoded arguments. DDP-eligible arguments are [`Piece::Ddp`](crate::Piece)s
    /// (RPC-over-RDMA moves them in Read chunks; TCP sends them inline).
    pub args: Payload,
    /// Caller-provided buffers for the DDP-eligible **results**, in the order
    /// they appear in the reply; the capacity of each is the largest result
    /// accepted. RPC-over-RDMA registers them as Write chunks and the data
    /// is placed directly into them; the returned payload's `Ddp` pieces
    /// are then frozen slices of these buffers. A byte-stream transport may
    /// ignore them (returning results inline) or copy into them.
    pub result_bufs: Vec<BytesMut>,
    /// Upper bound on the XDR length of the reply *excluding* DDP-eligible
    /// results (header included), if larger than a transport default. Used by
    /// RPC-over-RDMA to provision a Reply chunk; ignored by TCP.
    pub max_reply_len: Option<usize>,
    /// Deadline for the reply, from the moment the call is sent; `None`
    /// means the transport's default.
    pub timeout: Option<Duration>,
}

impl Request {
    /// A request with AUTH_NONE, no result buffers and default timeout.
    pub fn new(prog: u32, vers: u32, procedure: u32, args: Payload) -> Self {
        Request {
            prog,
            vers,
            procedure,
            args,
            ..Default::default()
        }
    }

    /// Set the credential.
    pub fn with_cred(mut self, cred: Credential) -> Self {
        self.cred = cred;
        self
    }

    /// Add a buffer for the next DDP-eligible result.
    pub fn with_result_buf(mut self, buf: BytesMut) -> Self {
        self.result_bufs.push(buf);
        self
    }

    /// Set the reply size bound (see [`Request::max_reply_len`]).
    pub fn with_max_reply_len(mut self, n: usize) -> Self {
        self.max_reply_len = Some(n);
        self
    }

    /// Set the timeout. [`Duration::MAX`] (or any timeout too long to
    /// represent as a deadline) means the call waits for its reply without
    /// a deadline.
    pub fn with_timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// The call header this request produces with transaction id `xid`.
    pub fn call_header(&self, xid: u32) -> CallHeader {
        CallHeader {
            xid,
            rpcvers: RPC_VERSION,
            prog: self.prog,
            vers: self.vers,
            procedure: self.procedure,
            cred: self.cred.to_opaque_auth(),
            verf: OpaqueAuth::none(),
        }
    }

    /// The complete call message (header `Xdr` piece + argument pieces).
    pub fn encode(&self, xid: u32) -> Payload {
        let hdr = self.call_header(xid);
        let mut b = PayloadBuilder::with_capacity(xdr::XdrEncode::encoded_len(&hdr));
        b.item(&hdr);
        b.payload(self.args.clone());
        b.finish()
    }
}

/// A way to make RPC calls, implemented by every transport (TCP, RDMA, the
/// in-memory [`LocalChannel`](crate::testing::LocalChannel)). Typed clients
/// are generic over it.
///
/// `call` returns the **results** of a successful call (the reply message
/// after its header), or the error.
pub trait Channel: Send + Sync {
    /// Make one call.
    fn call(&self, req: Request) -> impl Future<Output = Result<Payload, RpcError>> + Send;
}

impl<C: Channel + ?Sized> Channel for Arc<C> {
    fn call(&self, req: Request) -> impl Future<Output = Result<Payload, RpcError>> + Send {
        (**self).call(req)
    }
}

impl<C: Channel + ?Sized> Channel for &C {
    fn call(&self, req: Request) -> impl Future<Output = Result<Payload, RpcError>> + Send {
        (**self).call(req)
    }
}

/// The future returned by [`DynChannel::call_dyn`].
pub type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<Payload, RpcError>> + Send + 'a>>;

/// Object-safe form of [`Channel`], implemented for every `Channel`, so a
/// transport chosen at run time can sit behind `Arc<dyn DynChannel>` (which
/// is itself a `Channel`).
///
/// ```
/// use std::sync::Arc;
/// use oncrpc::{Channel, DynChannel, Dispatcher, testing::LocalChannel};
/// let ch: Arc<dyn DynChannel> = Arc::new(LocalChannel::new(Dispatcher::builder().build()));
/// fn typed_client<C: Channel>(_c: C) {}
/// typed_client(ch);
/// ```
pub trait DynChannel: Send + Sync {
    /// [`Channel::call`] with a boxed future.
    fn call_dyn(&self, req: Request) -> CallFuture<'_>;
}

impl<C: Channel> DynChannel for C {
    fn call_dyn(&self, req: Request) -> CallFuture<'_> {
        Box::pin(self.call(req))
    }
}

impl Channel for dyn DynChannel + '_ {
    fn call(&self, req: Request) -> impl Future<Output = Result<Payload, RpcError>> + Send {
        self.call_dyn(req)
    }
}

/// Decode a reply message: its xid, and the results or the error its header
/// reports. `Err` if it is not a decodable REPLY header.
pub fn decode_reply(msg: &Payload) -> Result<(u32, Result<Payload, RpcError>), xdr::Error> {
    let mut d = PayloadDecoder::new(msg);
    let hdr = ReplyHeader::decode(&mut d)?;
    let res = match hdr.body {
        ReplyBody::Accepted { stat, .. } => match stat {
            AcceptStat::Success => Ok(d.rest()),
            AcceptStat::ProgUnavail => Err(RpcError::ProgUnavail),
            AcceptStat::ProgMismatch { low, high } => Err(RpcError::ProgMismatch { low, high }),
            AcceptStat::ProcUnavail => Err(RpcError::ProcUnavail),
            AcceptStat::GarbageArgs => Err(RpcError::GarbageArgs),
            AcceptStat::SystemErr => Err(RpcError::SystemErr),
        },
        ReplyBody::Denied(RejectStat::RpcMismatch { low, high }) => {
            Err(RpcError::RpcMismatch { low, high })
        }
        ReplyBody::Denied(RejectStat::AuthError(s)) => Err(RpcError::AuthError(s)),
    };
    Ok((hdr.xid, res))
}

/// What [`ClientCore::handle_reply`] made of a received message.
#[derive(Debug)]
pub enum ReplyOutcome<T> {
    /// The reply to an outstanding call, which is now complete.
    Completed {
        /// Its xid.
        xid: u32,
        /// The data given to [`ClientCore::start_call`].
        data: T,
        /// Results or error.
        result: Result<Payload, RpcError>,
    },
    /// A reply whose xid matches no outstanding call (late, duplicate or
    /// bogus): drop it.
    UnknownXid(u32),
    /// A CALL (e.g. a backchannel request); the client core does not
    /// handle it.
    NotAReply(u32),
    /// Not a decodable reply header, and not a REPLY to an outstanding call
    /// (one that is completes with [`RpcError::BadReply`]): drop it.
    Malformed(xdr::Error),
}

#[derive(Debug)]
struct Pending<T> {
    deadline: Option<Instant>,
    data: T,
}

/// Sans-IO client state: XID allocation, the table of outstanding calls,
/// reply matching (in any order) and deadlines driven by the caller's clock.
///
/// `T` is per-call data kept until completion (e.g. a oneshot sender).
///
/// ```
/// use std::time::{Duration, Instant};
/// use oncrpc::{ClientCore, Payload, Request, ReplyOutcome};
/// let mut core: ClientCore<&str> = ClientCore::with_first_xid(100);
/// let now = Instant::now();
/// let req = Request::new(0x2000_5244, 1, 0, Payload::new()).with_timeout(Duration::from_secs(1));
/// let (xid, msg) = core.start_call(&req, now, "null");
/// assert_eq!(xid, 100);
/// assert!(msg.xdr_len() >= 40);
/// assert_eq!(core.next_deadline(), Some(now + Duration::from_secs(1)));
/// let expired = core.poll_timeouts(now + Duration::from_secs(2));
/// assert_eq!(expired, vec![(100, "null")]);
/// ```
#[derive(Debug)]
pub struct ClientCore<T = ()> {
    next_xid: u32,
    pending: HashMap<u32, Pending<T>>,
    deadlines: BTreeSet<(Instant, u32)>,
    default_timeout: Option<Duration>,
}

impl<T> Default for ClientCore<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> ClientCore<T> {
    /// A client core whose first xid is random.
    pub fn new() -> Self {
        Self::with_first_xid(rand::random())
    }

    /// A client core whose first xid is `xid` (deterministic tests).
    pub fn with_first_xid(xid: u32) -> Self {
        ClientCore {
            next_xid: xid,
            pending: HashMap::new(),
            deadlines: BTreeSet::new(),
            default_timeout: None,
        }
    }

    /// Timeout for requests whose [`Request::timeout`] is `None`
    /// (`None`: no deadline).
    pub fn set_default_timeout(&mut self, t: Option<Duration>) {
        self.default_timeout = t;
    }

    /// Number of outstanding calls.
    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    /// Whether `xid` is outstanding.
    pub fn is_pending(&self, xid: u32) -> bool {
        self.pending.contains_key(&xid)
    }

    /// Allocate the next free xid (wrapping, skipping outstanding ones).
    pub fn alloc_xid(&mut self) -> u32 {
        loop {
            let x = self.next_xid;
            self.next_xid = self.next_xid.wrapping_add(1);
            if !self.pending.contains_key(&x) {
                return x;
            }
        }
    }

    /// Register a new outstanding call and build its message. Returns the
    /// xid and the complete call message to send; the deadline is `now` plus
    /// the request's (or the default) timeout. A timeout too long for an
    /// [`Instant`] to represent (e.g. [`Duration::MAX`]) means no deadline.
    pub fn start_call(&mut self, req: &Request, now: Instant, data: T) -> (u32, Payload) {
        let xid = self.alloc_xid();
        let msg = req.encode(xid);
        let deadline = req
            .timeout
            .or(self.default_timeout)
            .and_then(|t| now.checked_add(t));
        self.register(xid, deadline, data);
        (xid, msg)
    }

    /// Register an outstanding call whose message the caller built itself.
    /// Any earlier call with the same xid is replaced (and its data
    /// returned).
    pub fn register(&mut self, xid: u32, deadline: Option<Instant>, data: T) -> Option<T> {
        if let Some(dl) = deadline {
            self.deadlines.insert((dl, xid));
        }
        let old = self.pending.insert(xid, Pending { deadline, data });
        old.map(|p| {
            if let Some(dl) = p.deadline {
                if Some(dl) != deadline {
                    self.deadlines.remove(&(dl, xid));
                }
            }
            p.data
        })
    }

    fn take(&mut self, xid: u32) -> Option<T> {
        let p = self.pending.remove(&xid)?;
        if let Some(dl) = p.deadline {
            self.deadlines.remove(&(dl, xid));
        }
        Some(p.data)
    }

    /// Match a received message against the outstanding calls.
    pub fn handle_reply(&mut self, msg: &Payload) -> ReplyOutcome<T> {
        let mut d = PayloadDecoder::new(msg);
        let head = (xdr::XdrRead::u32(&mut d), xdr::XdrRead::u32(&mut d));
        if let (Ok(xid), Ok(mtype)) = head {
            if mtype == MsgType::Call as u32 {
                return ReplyOutcome::NotAReply(xid);
            }
        }
        match decode_reply(msg) {
            Err(e) => match head {
                // A REPLY to an outstanding call that does not decode (an
                // unknown accept/reject/auth status, a cut-off body): that
                // call fails now with the reason, rather than waiting for
                // its timeout, or for ever without one.
                (Ok(xid), Ok(mtype)) if mtype == MsgType::Reply as u32 => match self.take(xid) {
                    Some(data) => ReplyOutcome::Completed {
                        xid,
                        data,
                        result: Err(RpcError::BadReply(e)),
                    },
                    None => ReplyOutcome::Malformed(e),
                },
                _ => ReplyOutcome::Malformed(e),
            },
            Ok((xid, result)) => match self.take(xid) {
                Some(data) => ReplyOutcome::Completed { xid, data, result },
                None => ReplyOutcome::UnknownXid(xid),
            },
        }
    }

    /// Remove and return the calls whose deadline is at or before `now`;
    /// the caller completes them with [`RpcError::Timeout`].
    pub fn poll_timeouts(&mut self, now: Instant) -> Vec<(u32, T)> {
        let mut out = Vec::new();
        while let Some(&(dl, xid)) = self.deadlines.first() {
            if dl > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(p) = self.pending.remove(&xid) {
                out.push((xid, p.data));
            }
        }
        out
    }

    /// The earliest deadline of the outstanding calls.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|&(dl, _)| dl)
    }

    /// Forget an outstanding call (e.g. the caller gave up).
    pub fn cancel(&mut self, xid: u32) -> Option<T> {
        self.take(xid)
    }

    /// Remove every outstanding call (e.g. the connection was lost; complete
    /// them with [`RpcError::ConnectionLost`]).
    pub fn fail_all(&mut self) -> Vec<(u32, T)> {
        self.deadlines.clear();
        self.pending.drain().map(|(x, p)| (x, p.data)).collect()
    }
}
