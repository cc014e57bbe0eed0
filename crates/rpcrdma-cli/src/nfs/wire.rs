//! The channel `rpcrdma nfs` calls through: any transport, and with
//! `--report` one line per call on stderr saying what went on the wire.

use std::sync::Arc;

use oncrpc::{Channel, Payload, Request, RpcError};

use crate::channel::AnyChannel;

/// A channel that reports each call when asked to.
#[derive(Debug, Clone)]
pub struct Wire {
    inner: Arc<AnyChannel>,
    report: bool,
}

impl Wire {
    /// Calls through `inner`; `report`: print what each call put on the
    /// wire.
    pub fn new(inner: Arc<AnyChannel>, report: bool) -> Self {
        Wire { inner, report }
    }

    /// The underlying connection.
    pub fn inner(&self) -> &Arc<AnyChannel> {
        &self.inner
    }
}

/// "NFS READ", "MOUNT MNT" or the numbers.
fn call_name(prog: u32, procedure: u32) -> String {
    let name = match prog {
        nfs3::NFS_PROGRAM => nfs3::procs::proc_name(procedure).map(|n| format!("NFS {n}")),
        nfs3::MOUNT_PROGRAM => {
            nfs3::mount::mount_proc_name(procedure).map(|n| format!("MOUNT {n}"))
        }
        _ => None,
    };
    name.unwrap_or_else(|| format!("program {prog} procedure {procedure}"))
}

impl Channel for Wire {
    async fn call(&self, req: Request) -> Result<Payload, RpcError> {
        if !self.report {
            return self.inner.call(req).await;
        }
        let name = call_name(req.prog, req.procedure);
        let args_len = req.args.xdr_len();
        let result = self.inner.call_reported(req).await;
        // Reports go to stderr so they never mix with file data (`cat`).
        match &result {
            Ok((_, Some(r))) => {
                eprintln!(
                    "rpcrdma: on the wire: {name}: {}",
                    crate::report::describe(r)
                );
            }
            Ok((results, None)) => eprintln!(
                "rpcrdma: on the wire: {name}: TCP record, arguments {args_len} B, results {} B, all inline (no chunks over TCP)",
                results.xdr_len()
            ),
            Err(e) => eprintln!("rpcrdma: on the wire: {name}: failed: {e}"),
        }
        result.map(|(p, _)| p)
    }
}
