//! Upper-Layer Bindings as the transport uses them (RFC 8166 §6).
//!
//! [`rpcrdma_proto::binding::UpperLayerBinding`] says which items are
//! DDP-eligible and how large a reply may get. A requester also needs to know
//! *where* in a reduced reply each DDP-eligible result sat, to put the data
//! that was written into its Write chunk back into the reply [`Payload`]
//! (RFC 8166 §3.4.6: the reduced stream keeps the item's length word, the
//! data is gone). That walk over the upper layer's XDR is a [`ReplyLayout`].
//!
//! [`Bindings`] pairs bindings with layouts; [`Bindings::rdmatest`] holds the
//! RDMATEST program's.
//!
//! [`Payload`]: oncrpc::Payload

use std::sync::Arc;

use rpcrdma_proto::binding::{
    rdmatest::{procs, RdmatestBinding, PROGRAM, VERSION},
    BindingLookup, ProcedureBinding, UpperLayerBinding,
};
use rpcrdma_proto::reassemble::{DdpResult, WriteChunkCursor};
use rpcrdma_proto::stream::roundup4;

/// A DDP-eligible result that arrived in a Write chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DdpPlacement {
    /// Offset in the reduced results (after the RPC reply header) right
    /// after the result's length word: where its data belongs.
    pub offset: usize,
    /// Write list index holding the data.
    pub chunk: usize,
    /// Content length.
    pub len: u32,
}

/// Why a reply's DDP-eligible results cannot be located.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LayoutError(pub String);

/// Walks the reduced results of a successful reply and reports where each
/// DDP-eligible result placed in a Write chunk belongs.
pub trait ReplyLayout: Send + Sync {
    /// For a reply to procedure `proc_`: `results` are the reduced results
    /// (the bytes after the RPC reply header); call `cursor.next_result`
    /// for every DDP-eligible result met, in XDR order, and skip those it
    /// reports inline.
    fn locate(
        &self,
        proc_: u32,
        results: &[u8],
        cursor: &mut WriteChunkCursor,
    ) -> Result<Vec<DdpPlacement>, LayoutError>;
}

fn word(b: &[u8], off: usize) -> Result<u32, LayoutError> {
    b.get(off..off + 4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
        .ok_or_else(|| LayoutError(format!("reply results end before offset {}", off + 4)))
}

/// One DDP-eligible opaque whose length word is at `at`: returns the offset
/// after the item in the reduced stream.
fn ddp_opaque(
    results: &[u8],
    at: usize,
    cursor: &mut WriteChunkCursor,
    out: &mut Vec<DdpPlacement>,
) -> Result<usize, LayoutError> {
    let len = word(results, at)?;
    let data = at + 4;
    match cursor
        .next_result(len)
        .map_err(|e| LayoutError(e.to_string()))?
    {
        DdpResult::Chunk { chunk, len } => {
            out.push(DdpPlacement {
                offset: data,
                chunk,
                len,
            });
            Ok(data)
        }
        DdpResult::Inline => Ok(data + roundup4(len as u64) as usize),
    }
}

/// The RDMATEST reply layout (GET: `status` then `data`; GET2: `a`,
/// `marker`, `b`).
#[derive(Clone, Copy, Debug, Default)]
pub struct RdmatestLayout;

impl ReplyLayout for RdmatestLayout {
    fn locate(
        &self,
        proc_: u32,
        results: &[u8],
        cursor: &mut WriteChunkCursor,
    ) -> Result<Vec<DdpPlacement>, LayoutError> {
        let mut out = Vec::new();
        match proc_ {
            procs::GET if word(results, 0)? == 0 => {
                ddp_opaque(results, 4, cursor, &mut out)?;
            }
            procs::GET2 => {
                let after_a = ddp_opaque(results, 0, cursor, &mut out)?;
                ddp_opaque(results, after_a + 4, cursor, &mut out)?;
            }
            _ => {}
        }
        Ok(out)
    }
}

#[derive(Clone)]
struct Entry {
    binding: Arc<dyn UpperLayerBinding>,
    layout: Option<Arc<dyn ReplyLayout>>,
}

/// The Upper-Layer Bindings a client or server knows. Cheap to clone.
///
/// A program without a binding has no DDP-eligible items: its calls and
/// replies travel inline or in Position-Zero / Reply chunks. A binding
/// without a [`ReplyLayout`] gets no Write chunks (its results come inline
/// or in a Reply chunk).
#[derive(Clone, Default)]
pub struct Bindings {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for Bindings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.entries
                    .iter()
                    .map(|e| (e.binding.program(), e.binding.version())),
            )
            .finish()
    }
}

impl Bindings {
    /// No bindings.
    pub fn new() -> Self {
        Self::default()
    }

    /// The RDMATEST binding and layout.
    pub fn rdmatest() -> Self {
        let mut b = Self::new();
        b.add(RdmatestBinding, Some(RdmatestLayout));
        b
    }

    /// Adds a binding (and its reply layout).
    pub fn add<B, L>(&mut self, binding: B, layout: Option<L>) -> &mut Self
    where
        B: UpperLayerBinding + 'static,
        L: ReplyLayout + 'static,
    {
        self.entries.push(Entry {
            binding: Arc::new(binding),
            layout: layout.map(|l| Arc::new(l) as Arc<dyn ReplyLayout>),
        });
        self
    }

    /// The binding of (prog, vers).
    pub fn binding(&self, prog: u32, vers: u32) -> Option<&dyn UpperLayerBinding> {
        self.entry(prog, vers).map(|e| e.binding.as_ref())
    }

    /// The reply layout of (prog, vers).
    pub fn layout(&self, prog: u32, vers: u32) -> Option<&dyn ReplyLayout> {
        self.entry(prog, vers).and_then(|e| e.layout.as_deref())
    }

    fn entry(&self, prog: u32, vers: u32) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.binding.program() == prog && e.binding.version() == vers)
    }
}

impl BindingLookup for Bindings {
    fn lookup(&self, prog: u32, vers: u32, proc_: u32) -> Option<ProcedureBinding> {
        self.binding(prog, vers)?.procedure(proc_)
    }
}

/// RDMATEST program and version, re-exported for convenience.
pub const RDMATEST: (u32, u32) = (PROGRAM, VERSION);

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma_proto::wire::{Segment, WriteChunkRepr};

    fn chunk(len: u32) -> WriteChunkRepr {
        WriteChunkRepr {
            segments: vec![Segment {
                handle: 1,
                length: len,
                offset: 0,
            }],
        }
    }

    #[test]
    fn get2_with_first_result_inline() {
        // a (5 bytes) forced inline by an empty Write chunk; b in chunk 1.
        let mut r = Vec::new();
        r.extend_from_slice(&5u32.to_be_bytes());
        r.extend_from_slice(&[1, 2, 3, 4, 5, 0, 0, 0]);
        r.extend_from_slice(&0xFEED_FACEu32.to_be_bytes());
        r.extend_from_slice(&9u32.to_be_bytes());
        let wl = [WriteChunkRepr::default(), chunk(9)];
        let mut cur = WriteChunkCursor::from_repr(&wl);
        let p = RdmatestLayout.locate(procs::GET2, &r, &mut cur).unwrap();
        assert_eq!(
            p,
            vec![DdpPlacement {
                offset: 20,
                chunk: 1,
                len: 9
            }]
        );
    }

    #[test]
    fn get_status_one_has_no_result_and_truncation_errors() {
        let wl = [chunk(0)];
        let mut cur = WriteChunkCursor::from_repr(&wl);
        assert!(RdmatestLayout
            .locate(procs::GET, &1u32.to_be_bytes(), &mut cur)
            .unwrap()
            .is_empty());
        let mut cur = WriteChunkCursor::from_repr(&wl);
        assert!(RdmatestLayout
            .locate(procs::GET, &0u32.to_be_bytes(), &mut cur)
            .is_err());
    }
}
