//! Upper-Layer Binding interface (RFC 8166 §6).
//!
//! A ULB says, per procedure, which argument and result items are
//! DDP-eligible (§6.1) and how large a reply can get (§6.2). The transport
//! asks it:
//! - on the Responder, how many Read chunks a call of (prog, vers, proc) may
//!   carry and how large each may be (the largest eligible argument: which
//!   argument a chunk reduces is known only to the ULP's decoder, since a
//!   requester may keep any of them inline, §3.4.2) — a call that reduces
//!   more items than its binding declares DDP-eligible MUST NOT be
//!   processed (§6.1);
//! - on the Requester, how many Write chunks to offer and how large, and the
//!   largest reduced reply, which decides whether to offer a Reply chunk
//!   (§4.3.3, §6.2).

/// One DDP-eligible XDR data item (an opaque, whose length word stays in the
/// Payload stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DdpItem {
    /// Name from the ULP's XDR, for diagnostics.
    pub name: &'static str,
    /// Largest content length the binding allows.
    pub max_len: u32,
}

/// The DDP-eligibility of one procedure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProcedureBinding {
    /// Procedure name, for diagnostics.
    pub name: &'static str,
    /// DDP-eligible argument items, in XDR order.
    pub ddp_args: &'static [DdpItem],
    /// DDP-eligible result items, in XDR order.
    pub ddp_results: &'static [DdpItem],
}

impl ProcedureBinding {
    /// A procedure with no DDP-eligible items.
    pub const fn plain(name: &'static str) -> ProcedureBinding {
        ProcedureBinding {
            name,
            ddp_args: &[],
            ddp_results: &[],
        }
    }

    /// Whether a Requester may offer a call's DDP-eligible argument contents,
    /// of lengths `lens` in XDR order, for reduction: at most one per
    /// argument the binding declares DDP-eligible, the `i`-th no longer than
    /// the `i`-th such argument's largest length. Senders MUST NOT reduce
    /// data items that are not DDP-eligible (RFC 8166 §6.1), so when this
    /// is false the whole call travels as plain XDR (inline, or in a
    /// Position-Zero Read chunk).
    pub fn allows_ddp_args(&self, lens: impl IntoIterator<Item = u64>) -> bool {
        let mut eligible = self.ddp_args.iter();
        lens.into_iter()
            .all(|len| eligible.next().is_some_and(|a| len <= u64::from(a.max_len)))
    }
}

/// What a Requester's transport can show a binding about a call's arguments
/// to estimate the reply: the first bytes of the encoded arguments (as much
/// as is at hand in the first XDR run) and their total unreduced length.
#[derive(Clone, Copy, Debug)]
pub struct ArgsView<'a> {
    /// Leading bytes of the XDR-encoded arguments (after the RPC call header).
    pub head: &'a [u8],
    /// Total length of the encoded arguments, DDP items and pads included.
    pub len: u64,
}

impl ArgsView<'_> {
    /// The `i`-th 32-bit XDR word of the arguments, if it is in `head`.
    pub fn word(&self, i: usize) -> Option<u32> {
        let b = self.head.get(i * 4..i * 4 + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// A binding's estimate of a reply (RFC 8166 §6.2), excluding the RPC reply
/// header (the RPC layer knows its verifier size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyEstimate {
    /// Largest encoded results when every DDP-eligible result is reduced into
    /// a Write chunk (length words stay in the Payload stream).
    pub max_reduced_results: u64,
    /// Largest content length of each DDP-eligible result, in XDR order: one
    /// Write chunk to offer per entry.
    pub ddp_results: Vec<u32>,
}

impl ReplyEstimate {
    /// Largest encoded results when nothing is reduced.
    pub fn max_unreduced_results(&self) -> u64 {
        self.max_reduced_results
            + self
                .ddp_results
                .iter()
                .map(|&n| crate::stream::roundup4(n as u64))
                .sum::<u64>()
    }
}

/// An Upper-Layer Binding for one RPC program and version.
pub trait UpperLayerBinding: Send + Sync {
    /// RPC program number.
    fn program(&self) -> u32;
    /// RPC program version.
    fn version(&self) -> u32;
    /// DDP-eligibility of a procedure; `None` for an unknown procedure.
    fn procedure(&self, proc_: u32) -> Option<ProcedureBinding>;
    /// Reply estimate for a call of `proc_` with these arguments; `None` for
    /// an unknown procedure or arguments too short to tell.
    fn reply_estimate(&self, proc_: u32, args: ArgsView<'_>) -> Option<ReplyEstimate>;
    /// Where DDP-eligible results sit in a reduced reply, for a Requester
    /// to put Write-chunk data back (§3.4.6). `None` (the default): the
    /// Requester offers no Write chunks for this program, and its results
    /// come inline or in a Reply chunk.
    fn reply_layout(&self) -> Option<&dyn ReplyLayout> {
        None
    }
}

/// Look-up of bindings by program and version (what a Responder consults).
pub trait BindingLookup {
    /// The binding of (prog, vers, proc), if known.
    fn lookup(&self, prog: u32, vers: u32, proc_: u32) -> Option<ProcedureBinding>;

    /// Maximum number of Read chunks (non-zero Position) a call may carry:
    /// the number of DDP-eligible arguments; zero for unknown procedures.
    fn max_read_chunks(&self, prog: u32, vers: u32, proc_: u32) -> usize {
        self.lookup(prog, vers, proc_)
            .map_or(0, |p| p.ddp_args.len())
    }
}

/// A set of bindings.
#[derive(Default)]
pub struct BindingSet {
    bindings: Vec<Box<dyn UpperLayerBinding>>,
}

impl BindingSet {
    /// An empty set (no item is DDP-eligible).
    pub fn new() -> BindingSet {
        BindingSet::default()
    }

    /// Adds a binding; a later one for the same (prog, vers) is ignored.
    pub fn add(&mut self, b: Box<dyn UpperLayerBinding>) -> &mut Self {
        self.bindings.push(b);
        self
    }

    /// The binding for (prog, vers).
    pub fn get(&self, prog: u32, vers: u32) -> Option<&dyn UpperLayerBinding> {
        self.bindings
            .iter()
            .find(|b| b.program() == prog && b.version() == vers)
            .map(|b| b.as_ref())
    }
}

impl BindingLookup for BindingSet {
    fn lookup(&self, prog: u32, vers: u32, proc_: u32) -> Option<ProcedureBinding> {
        self.get(prog, vers)?.procedure(proc_)
    }
}

impl<T: UpperLayerBinding + ?Sized> BindingLookup for T {
    fn lookup(&self, prog: u32, vers: u32, proc_: u32) -> Option<ProcedureBinding> {
        if prog == self.program() && vers == self.version() {
            self.procedure(proc_)
        } else {
            None
        }
    }
}

/// No bindings at all: nothing is DDP-eligible.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoBindings;

impl BindingLookup for NoBindings {
    fn lookup(&self, _: u32, _: u32, _: u32) -> Option<ProcedureBinding> {
        None
    }
}

pub mod layout;
pub mod rdmatest;

pub use layout::{DdpPlacement, LayoutError, ReplyLayout};

#[cfg(test)]
mod tests {
    use super::*;

    const ARGS: &[DdpItem] = &[
        DdpItem {
            name: "a",
            max_len: 100,
        },
        DdpItem {
            name: "b",
            max_len: 8,
        },
    ];

    #[test]
    fn rfc8166_s6_1_only_declared_arguments_within_their_size() {
        let pb = ProcedureBinding {
            name: "p",
            ddp_args: ARGS,
            ddp_results: &[],
        };
        assert!(pb.allows_ddp_args([]));
        assert!(pb.allows_ddp_args([100]));
        assert!(pb.allows_ddp_args([0, 8]));
        assert!(!pb.allows_ddp_args([101]), "longer than the first argument");
        assert!(
            !pb.allows_ddp_args([1, 9]),
            "longer than the second argument"
        );
        assert!(!pb.allows_ddp_args([1, 1, 1]), "more pieces than arguments");
        let plain = ProcedureBinding::plain("q");
        assert!(plain.allows_ddp_args([]));
        assert!(!plain.allows_ddp_args([0]));
    }
}
