//! Server side: the [`Service`] trait and the transport-independent
//! [`Dispatcher`].

use std::collections::BTreeMap;
use std::future::Future;
use std::ops::RangeInclusive;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use xdr::XdrRead;

use crate::auth::{AuthFlavor, AuthStat, Credential, OpaqueAuth, MAX_AUTH_BYTES};
use crate::msg::{AcceptStat, MsgType, RejectStat, ReplyHeader, RPC_VERSION};
use crate::payload::{Payload, PayloadDecoder};

/// A decoded call handed to a [`Service`].
#[derive(Debug, Clone)]
pub struct Call {
    /// Transaction id.
    pub xid: u32,
    /// Program number.
    pub prog: u32,
    /// Program version (within the service's [`Service::versions`]).
    pub vers: u32,
    /// Procedure number.
    pub procedure: u32,
    /// The caller's credential (AUTH_NONE or a well-formed AUTH_SYS).
    pub cred: Credential,
    /// The caller's verifier (always AUTH_NONE for the flavors accepted).
    pub verf: OpaqueAuth,
    /// The procedure arguments: the rest of the call message. On
    /// RPC-over-RDMA, DDP-eligible arguments are [`Piece::Ddp`](crate::Piece)
    /// slices of the memory the data was placed in.
    pub args: Payload,
}

/// How a procedure failed; the [`Dispatcher`] turns it into the matching
/// accepted reply (RFC 5531 §9 `accept_stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ProcError {
    /// PROC_UNAVAIL: the procedure number is not supported.
    #[error("procedure unavailable")]
    ProcUnavail,
    /// GARBAGE_ARGS: the arguments could not be decoded (or violate limits).
    #[error("garbage arguments")]
    GarbageArgs,
    /// SYSTEM_ERR: the server failed (e.g. memory allocation).
    #[error("system error")]
    SystemErr,
    /// The procedure refuses the caller's credential: MSG_DENIED
    /// AUTH_ERROR with this `auth_stat` (e.g. [`AuthStat::TooWeak`]). For
    /// checks that do not depend on the procedure, prefer
    /// [`Service::check_credential`].
    #[error("authentication error: {0}")]
    AuthError(AuthStat),
}

impl From<xdr::Error> for ProcError {
    /// Argument decoding errors are GARBAGE_ARGS.
    fn from(_: xdr::Error) -> Self {
        ProcError::GarbageArgs
    }
}

/// An RPC program (one or more versions) served through a [`Dispatcher`].
///
/// `handle` returns the procedure **results** as a [`Payload`] (without any
/// reply header); DDP-eligible results should be appended with
/// [`PayloadBuilder::ddp_opaque`](crate::PayloadBuilder::ddp_opaque) so an
/// RDMA transport can move them by direct data placement.
pub trait Service: Send + Sync + 'static {
    /// Program number.
    fn program(&self) -> u32;

    /// Supported versions (`low..=high`); also what PROG_MISMATCH reports.
    fn versions(&self) -> RangeInclusive<u32>;

    /// Accept or reject the credential of a call to this program, after the
    /// dispatcher found it well formed. Default: accept everything, AUTH_NONE
    /// included. Return e.g. [`AuthStat::TooWeak`] to require AUTH_SYS.
    fn check_credential(&self, _cred: &Credential) -> Result<(), AuthStat> {
        Ok(())
    }

    /// Execute a call.
    fn handle(&self, call: Call) -> impl Future<Output = Result<Payload, ProcError>> + Send;
}

/// prog -> services with their version ranges.
type ProgramTable = BTreeMap<u32, Vec<(RangeInclusive<u32>, Arc<dyn DynService>)>>;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Object-safe form of [`Service`], used inside the [`Dispatcher`].
trait DynService: Send + Sync {
    fn check_credential(&self, cred: &Credential) -> Result<(), AuthStat>;
    fn handle(&self, call: Call) -> BoxFuture<'_, Result<Payload, ProcError>>;
}

impl<S: Service> DynService for S {
    fn check_credential(&self, cred: &Credential) -> Result<(), AuthStat> {
        Service::check_credential(self, cred)
    }
    fn handle(&self, call: Call) -> BoxFuture<'_, Result<Payload, ProcError>> {
        Box::pin(Service::handle(self, call))
    }
}

/// Why the [`Dispatcher`] sent no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The message ended inside the call header (or before its msg_type).
    Truncated,
    /// The message is a REPLY or has an unknown msg_type.
    NotACall,
}

/// What the [`Dispatcher`] made of a received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DispatchOutcome {
    /// Send this complete reply message (header `Xdr` piece, then the
    /// results with their `Ddp` pieces).
    Reply(Payload),
    /// Send nothing.
    Drop(DropReason),
}

/// Routes calls to [`Service`]s and builds complete reply messages, for any
/// transport.
///
/// Cheap to clone (`Arc` inside), `Send + Sync`: share one among all
/// connections and tasks. Build with [`Dispatcher::builder`].
///
/// # Errors the dispatcher answers itself (RFC 5531 §9)
///
/// | condition | reply |
/// |---|---|
/// | message shorter than xid + msg_type, or ends inside the call header | no reply ([`DropReason::Truncated`]) |
/// | msg_type is REPLY or unknown | no reply ([`DropReason::NotACall`]) |
/// | rpcvers ≠ 2 | MSG_DENIED RPC_MISMATCH {2, 2} |
/// | credential body > 400 bytes | MSG_DENIED AUTH_ERROR AUTH_BADCRED |
/// | verifier body > 400 bytes | MSG_DENIED AUTH_ERROR AUTH_BADVERF |
/// | credential body with non-zero XDR padding | MSG_DENIED AUTH_ERROR AUTH_BADCRED |
/// | verifier body with non-zero XDR padding | MSG_DENIED AUTH_ERROR AUTH_BADVERF |
/// | AUTH_NONE credential with a body, malformed AUTH_SYS, other flavor | AUTH_ERROR AUTH_BADCRED |
/// | verifier not AUTH_NONE with an empty body | AUTH_ERROR AUTH_BADVERF |
/// | [`Service::check_credential`] refuses | AUTH_ERROR with its `auth_stat` |
/// | no service for the program | PROG_UNAVAIL |
/// | program known, version not | PROG_MISMATCH {lowest, highest registered} |
/// | [`ProcError`] from the service | PROC_UNAVAIL / GARBAGE_ARGS / SYSTEM_ERR / AUTH_ERROR |
///
/// RFC 5531 gives no reply for a message that is not a decodable call: the
/// xid of a truncated header cannot be trusted to name a call, and answering
/// a REPLY would make two peers loop. Like common implementations (Linux
/// sunrpc drops short headers), we drop. Once the header is complete, every
/// failure is answered. Authentication is checked before the program lookup,
/// as Linux does; RFC 5531 does not fix that order.
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

struct Inner {
    /// prog -> (version range, service), ordered by range start.
    programs: ProgramTable,
}

impl core::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let progs: Vec<_> = self
            .inner
            .programs
            .iter()
            .map(|(p, v)| (p, v.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>()))
            .collect();
        f.debug_struct("Dispatcher")
            .field("programs", &progs)
            .finish()
    }
}

/// Collects services for a [`Dispatcher`].
#[derive(Default)]
pub struct DispatcherBuilder {
    programs: ProgramTable,
}

impl DispatcherBuilder {
    /// Register a service for its program and versions. Several services may
    /// serve the same program with disjoint version ranges; for overlapping
    /// ranges the first registered wins.
    pub fn service<S: Service>(mut self, s: S) -> Self {
        self.add(s);
        self
    }

    /// Register a service (by reference to the builder).
    pub fn add<S: Service>(&mut self, s: S) -> &mut Self {
        let prog = s.program();
        let vers = Service::versions(&s);
        self.programs
            .entry(prog)
            .or_default()
            .push((vers, Arc::new(s)));
        self
    }

    /// The dispatcher.
    pub fn build(self) -> Dispatcher {
        Dispatcher {
            inner: Arc::new(Inner {
                programs: self.programs,
            }),
        }
    }
}

/// Outcome of decoding a call header step by step.
enum Decoded {
    Call(Call, Arc<dyn DynService>),
    Reply(Payload),
    Drop(DropReason),
}

fn reply_only(h: ReplyHeader) -> Payload {
    let mut b = Payload::builder();
    b.item(&h);
    b.finish()
}

fn trunc<T>(r: xdr::Result<T>) -> Result<T, DropReason> {
    r.map_err(|_| DropReason::Truncated)
}

/// The body of a credential or verifier whose length word was read: the
/// header is complete once it is there. Running out of input is still a
/// truncated header (dropped); any other defect, such as non-zero XDR
/// padding (RFC 4506 §4.10), is a malformed credential or verifier and is
/// answered with `stat` (RFC 5531 §9: AUTH_BADCRED or AUTH_BADVERF).
fn malformed<T>(r: xdr::Result<T>, stat: AuthStat) -> Result<Result<T, AuthStat>, DropReason> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(xdr::Error::Truncated { .. }) => Err(DropReason::Truncated),
        Err(_) => Ok(Err(stat)),
    }
}

impl Dispatcher {
    /// Start registering services.
    pub fn builder() -> DispatcherBuilder {
        DispatcherBuilder::default()
    }

    /// The registered programs and the lowest/highest version of each.
    pub fn programs(&self) -> Vec<(u32, u32, u32)> {
        self.inner
            .programs
            .iter()
            .filter_map(|(p, v)| {
                let lo = v.iter().map(|(r, _)| *r.start()).min()?;
                let hi = v.iter().map(|(r, _)| *r.end()).max()?;
                Some((*p, lo, hi))
            })
            .collect()
    }

    /// Handle one received message (a whole RPC message, starting at the
    /// xid) and return the reply to send, if any.
    ///
    /// A procedure that panics is answered SYSTEM_ERR and the panic is
    /// logged; the dispatcher and the other calls go on. State a service
    /// shares across calls may be left as the panic left it (the call is
    /// treated as unwind-safe), and with `panic = "abort"` the process
    /// ends instead.
    pub async fn dispatch(&self, msg: Payload) -> DispatchOutcome {
        let (call, svc) = match self.decode(&msg) {
            Decoded::Call(c, s) => (c, s),
            Decoded::Reply(p) => return DispatchOutcome::Reply(p),
            Decoded::Drop(r) => {
                tracing::debug!(reason = ?r, "dropping message that is not a decodable call");
                return DispatchOutcome::Drop(r);
            }
        };
        let xid = call.xid;
        let (prog, vers, procedure) = (call.prog, call.vers, call.procedure);
        // A procedure that panics (making its future, or in a poll) is
        // answered SYSTEM_ERR; the connection and the other calls go on
        // (otherwise a TCP caller gets nothing and waits for its timeout,
        // and over RDMA the connection closes and the retransmitted call
        // panics again).
        let handled = match std::panic::catch_unwind(AssertUnwindSafe(|| svc.handle(call))) {
            Ok(fut) => CatchUnwind(Some(fut)).await,
            Err(panic) => Err(panic),
        };
        let handled = handled.unwrap_or_else(|panic| {
            tracing::error!(
                xid,
                prog,
                vers,
                procedure,
                panic = panic_message(&*panic),
                "procedure panicked; answering SYSTEM_ERR"
            );
            Err(ProcError::SystemErr)
        });
        let stat = match handled {
            Ok(results) => {
                let hdr = ReplyHeader::accepted(xid, AcceptStat::Success);
                return DispatchOutcome::Reply(reply_message(&hdr, results));
            }
            Err(ProcError::ProcUnavail) => AcceptStat::ProcUnavail,
            Err(ProcError::GarbageArgs) => AcceptStat::GarbageArgs,
            Err(ProcError::SystemErr) => AcceptStat::SystemErr,
            Err(ProcError::AuthError(s)) => {
                tracing::debug!(xid, prog, vers, procedure, stat = %s, "procedure refused credential");
                return DispatchOutcome::Reply(reply_only(ReplyHeader::denied(
                    xid,
                    RejectStat::AuthError(s),
                )));
            }
        };
        tracing::debug!(xid, prog, vers, procedure, ?stat, "procedure failed");
        DispatchOutcome::Reply(reply_only(ReplyHeader::accepted(xid, stat)))
    }

    /// [`dispatch`](Self::dispatch) for a message in contiguous bytes.
    pub async fn dispatch_bytes(&self, msg: bytes::Bytes) -> DispatchOutcome {
        self.dispatch(Payload::from_xdr(msg)).await
    }

    fn decode(&self, msg: &Payload) -> Decoded {
        match self.decode_inner(msg) {
            Ok(d) => d,
            Err(r) => Decoded::Drop(r),
        }
    }

    fn decode_inner(&self, msg: &Payload) -> Result<Decoded, DropReason> {
        let mut d = PayloadDecoder::new(msg);
        let xid = trunc(d.u32())?;
        let mtype = trunc(d.u32())?;
        if mtype != MsgType::Call as u32 {
            return Err(DropReason::NotACall);
        }
        let rpcvers = trunc(d.u32())?;
        if rpcvers != RPC_VERSION {
            return Ok(Decoded::Reply(reply_only(ReplyHeader::denied(
                xid,
                RejectStat::RpcMismatch {
                    low: RPC_VERSION,
                    high: RPC_VERSION,
                },
            ))));
        }
        let prog = trunc(d.u32())?;
        let vers = trunc(d.u32())?;
        let procedure = trunc(d.u32())?;
        let auth_err = |s| {
            Ok(Decoded::Reply(reply_only(ReplyHeader::denied(
                xid,
                RejectStat::AuthError(s),
            ))))
        };

        // Credential and verifier: lengths over MAX_AUTH_BYTES and bodies
        // that do not decode (non-zero padding) are auth errors; truncation
        // is a drop.
        let cred_flavor = trunc(d.u32())?;
        let cred_len = trunc(d.u32())?;
        if cred_len > MAX_AUTH_BYTES {
            return auth_err(AuthStat::BadCred);
        }
        let cred_body = match malformed(d.fixed_opaque_bytes(cred_len as usize), AuthStat::BadCred)?
        {
            Ok(b) => b,
            Err(s) => return auth_err(s),
        };
        let verf_flavor = trunc(d.u32())?;
        let verf_len = trunc(d.u32())?;
        if verf_len > MAX_AUTH_BYTES {
            return auth_err(AuthStat::BadVerf);
        }
        let verf_body = match malformed(d.fixed_opaque_bytes(verf_len as usize), AuthStat::BadVerf)?
        {
            Ok(b) => b,
            Err(s) => return auth_err(s),
        };
        // Both bodies are ≤ 400 bytes here, so these cannot fail.
        let (Ok(cred), Ok(verf)) = (
            OpaqueAuth::new(AuthFlavor(cred_flavor), cred_body),
            OpaqueAuth::new(AuthFlavor(verf_flavor), verf_body),
        ) else {
            return auth_err(AuthStat::BadCred);
        };
        let cred = match Credential::from_opaque_auth(&cred) {
            Ok(Credential::Other(_)) => return auth_err(AuthStat::BadCred),
            Ok(c) => c,
            Err(s) => return auth_err(s),
        };
        if verf.flavor() != AuthFlavor::NONE || !verf.body().is_empty() {
            return auth_err(AuthStat::BadVerf);
        }

        let Some(services) = self.inner.programs.get(&prog) else {
            return Ok(Decoded::Reply(reply_only(ReplyHeader::accepted(
                xid,
                AcceptStat::ProgUnavail,
            ))));
        };
        let Some((_, svc)) = services.iter().find(|(r, _)| r.contains(&vers)) else {
            let low = services.iter().map(|(r, _)| *r.start()).min().unwrap_or(0);
            let high = services.iter().map(|(r, _)| *r.end()).max().unwrap_or(0);
            return Ok(Decoded::Reply(reply_only(ReplyHeader::accepted(
                xid,
                AcceptStat::ProgMismatch { low, high },
            ))));
        };
        if let Err(s) = svc.check_credential(&cred) {
            return auth_err(s);
        }
        let args = d.rest();
        Ok(Decoded::Call(
            Call {
                xid,
                prog,
                vers,
                procedure,
                cred,
                verf,
                args,
            },
            svc.clone(),
        ))
    }
}

/// Encode a complete reply message: `hdr` then `results` (normally only for
/// SUCCESS). Useful to transports that must answer without a dispatcher.
pub fn reply_message(hdr: &ReplyHeader, results: Payload) -> Payload {
    // Room for the header and small leading results copied inline.
    let cap = xdr::XdrEncode::encoded_len(hdr) + crate::payload::SMALL_COPY_MAX;
    let mut b = crate::payload::PayloadBuilder::with_capacity(cap);
    b.item(hdr);
    b.payload(results);
    b.finish()
}

/// Polls a future, catching a panic in a poll as `Err` with its payload.
/// The future is dropped as soon as it is done, inside the catch too: a
/// future that panics again in its `Drop` does not escape.
struct CatchUnwind<F>(Option<F>);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let Some(f) = self.0.as_mut() else {
            return std::task::Poll::Ready(Err(Box::new("polled after completion")));
        };
        let out = match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(&mut *f).poll(cx))) {
            Ok(std::task::Poll::Pending) => return std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(v)) => Ok(v),
            Err(panic) => Err(panic),
        };
        let done = self.0.take();
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(move || drop(done))) {
            tracing::error!(
                panic = panic_message(&*panic),
                "a procedure's future panicked when dropped"
            );
        }
        std::task::Poll::Ready(out)
    }
}

/// The message of a panic payload, when it has one.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}
