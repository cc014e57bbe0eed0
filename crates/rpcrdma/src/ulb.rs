//! Upper-Layer Bindings as the transport uses them (RFC 8166 §6).
//!
//! [`rpcrdma_proto::binding::UpperLayerBinding`] says which items are
//! DDP-eligible, how large a reply may get and, through its
//! [`ReplyLayout`], *where* in a reduced reply each DDP-eligible result sat,
//! so that a requester puts the data written into its Write chunk back into
//! the reply [`Payload`] (RFC 8166 §3.4.6: the reduced stream keeps the
//! item's length word, the data is gone).
//!
//! [`Bindings`] is the set a client or server knows; [`Bindings::rdmatest`]
//! holds the RDMATEST program's.
//!
//! [`Payload`]: oncrpc::Payload

use std::sync::Arc;

use oncrpc::Piece;
use rpcrdma_proto::stream::Item;

use rpcrdma_proto::binding::{
    rdmatest::{RdmatestBinding, PROGRAM, VERSION},
    BindingLookup, ProcedureBinding, ReplyLayout, UpperLayerBinding,
};

/// The Upper-Layer Bindings a client or server knows. Cheap to clone.
///
/// A program without a binding has no DDP-eligible items: its calls and
/// replies travel inline or in Position-Zero / Reply chunks. A binding
/// without a [`ReplyLayout`] (see [`UpperLayerBinding::reply_layout`]) gets
/// no Write chunks (its results come inline or in a Reply chunk).
#[derive(Clone, Default)]
pub struct Bindings {
    entries: Vec<Arc<dyn UpperLayerBinding>>,
}

impl std::fmt::Debug for Bindings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|b| (b.program(), b.version())))
            .finish()
    }
}

impl Bindings {
    /// No bindings.
    pub fn new() -> Self {
        Self::default()
    }

    /// The RDMATEST binding (with its reply layout).
    pub fn rdmatest() -> Self {
        let mut b = Self::new();
        b.add(RdmatestBinding);
        b
    }

    /// Adds a binding.
    pub fn add<B>(&mut self, binding: B) -> &mut Self
    where
        B: UpperLayerBinding + 'static,
    {
        self.entries.push(Arc::new(binding));
        self
    }

    /// The binding of (prog, vers).
    pub fn binding(&self, prog: u32, vers: u32) -> Option<&dyn UpperLayerBinding> {
        self.entries
            .iter()
            .find(|b| b.program() == prog && b.version() == vers)
            .map(|b| b.as_ref())
    }

    /// The reply layout of (prog, vers).
    pub fn layout(&self, prog: u32, vers: u32) -> Option<&dyn ReplyLayout> {
        self.binding(prog, vers)?.reply_layout()
    }
}

impl BindingLookup for Bindings {
    fn lookup(&self, prog: u32, vers: u32, proc_: u32) -> Option<ProcedureBinding> {
        self.binding(prog, vers)?.procedure(proc_)
    }
}

/// The pieces of an RPC message and their planning items (`Ddp` for a
/// DDP-eligible item, `Xdr` for the rest), as the marshal and reply plans
/// take them.
pub(crate) fn stream_items(msg: &oncrpc::Payload) -> Vec<Item> {
    msg.pieces()
        .iter()
        .map(|p| match p {
            Piece::Xdr(b) => Item::Xdr(b.len() as u32),
            Piece::Ddp(b) => Item::Ddp(b.len() as u32),
        })
        .collect()
}

/// RDMATEST program and version, re-exported for convenience.
pub const RDMATEST: (u32, u32) = (PROGRAM, VERSION);
