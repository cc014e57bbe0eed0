//! In-memory [`Channel`] for tests: runs a [`Dispatcher`] directly.

use std::sync::Mutex;
use std::time::Instant;

use bytes::Bytes;

use crate::client::{Channel, ClientCore, ReplyOutcome, Request, RpcError};
use crate::payload::{Payload, Piece};
use crate::service::{DispatchOutcome, Dispatcher};

/// How a [`LocalChannel`] carries messages between client and dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LocalMode {
    /// Keep pieces as they are, like RPC-over-RDMA: `Ddp` argument pieces
    /// reach the service as `Ddp` pieces, and each `Ddp` result piece is
    /// copied into the next [`Request::result_bufs`] buffer (when it fits),
    /// as RDMA Write placement would, so the caller receives a slice of its
    /// own buffer.
    #[default]
    Pieces,
    /// Flatten call and reply to contiguous bytes, like a byte-stream
    /// transport (TCP); `result_bufs` are ignored.
    Flatten,
}

/// A loopback [`Channel`]: every call goes through a [`ClientCore`] (xid
/// allocation, reply matching) and straight into a [`Dispatcher`].
///
/// Timeouts are not enforced (there is no clock): a call whose message the
/// dispatcher drops fails with [`RpcError::Transport`] at once.
#[derive(Debug)]
pub struct LocalChannel {
    dispatcher: Dispatcher,
    core: Mutex<ClientCore<()>>,
    mode: LocalMode,
}

impl LocalChannel {
    /// A channel to `dispatcher` in [`LocalMode::Pieces`].
    pub fn new(dispatcher: Dispatcher) -> Self {
        Self::with_mode(dispatcher, LocalMode::Pieces)
    }

    /// A channel to `dispatcher` in the given mode.
    pub fn with_mode(dispatcher: Dispatcher, mode: LocalMode) -> Self {
        LocalChannel {
            dispatcher,
            core: Mutex::new(ClientCore::new()),
            mode,
        }
    }

    fn core(&self) -> std::sync::MutexGuard<'_, ClientCore<()>> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn call_inner(&self, mut req: Request) -> Result<Payload, RpcError> {
        let (xid, mut msg) = self.core().start_call(&req, Instant::now(), ());
        if self.mode == LocalMode::Flatten {
            msg = Payload::from_xdr(msg.flatten());
        }
        let reply = match self.dispatcher.dispatch(msg).await {
            DispatchOutcome::Reply(r) => r,
            DispatchOutcome::Drop(reason) => {
                self.core().cancel(xid);
                return Err(RpcError::transport(format!(
                    "dispatcher dropped the call: {reason:?}"
                )));
            }
        };
        let reply = match self.mode {
            LocalMode::Flatten => Payload::from_xdr(reply.flatten()),
            LocalMode::Pieces => {
                let mut bufs = std::mem::take(&mut req.result_bufs).into_iter();
                Payload::from_pieces(reply.into_pieces().into_iter().map(|p| match p {
                    Piece::Ddp(data) => Piece::Ddp(place(&mut bufs, data)),
                    p => p,
                }))
            }
        };
        match self.core().handle_reply(&reply) {
            ReplyOutcome::Completed { result, .. } => result,
            other => Err(RpcError::transport(format!("reply not matched: {other:?}"))),
        }
    }
}

/// Copy `data` into the next caller buffer if it fits (emulating RDMA Write
/// placement); otherwise keep `data`.
fn place(bufs: &mut impl Iterator<Item = bytes::BytesMut>, data: Bytes) -> Bytes {
    match bufs.next() {
        Some(mut b) if b.capacity() >= data.len() => {
            b.clear();
            b.extend_from_slice(&data);
            b.freeze()
        }
        _ => data,
    }
}

impl Channel for LocalChannel {
    fn call(
        &self,
        req: Request,
    ) -> impl std::future::Future<Output = Result<Payload, RpcError>> + Send {
        self.call_inner(req)
    }
}
