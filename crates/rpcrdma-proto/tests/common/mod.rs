//! Fixtures shared by the integration tests.
#![allow(dead_code)]

use rpcrdma_proto::binding::{BindingLookup, DdpItem, ProcedureBinding};

/// Builds big-endian words.
#[derive(Default)]
pub struct Words(pub Vec<u8>);

impl Words {
    pub fn new() -> Self {
        Words(Vec::new())
    }
    pub fn w(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn ws(mut self, vs: &[u32]) -> Self {
        for v in vs {
            self.0.extend_from_slice(&v.to_be_bytes());
        }
        self
    }
    pub fn d(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// A plain segment HLOO.
    pub fn hloo(self, h: u32, l: u32, o: u64) -> Self {
        self.w(h).w(l).d(o)
    }
    pub fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    pub fn done(self) -> Vec<u8> {
        self.0
    }
}

/// An RPC CALL header with AUTH_NONE credential and verifier (40 bytes).
pub fn rpc_call(xid: u32, prog: u32, vers: u32, proc_: u32) -> Vec<u8> {
    Words::new()
        .ws(&[xid, 0, 2, prog, vers, proc_, 0, 0, 0, 0])
        .done()
}

/// An RPC accepted REPLY header with AUTH_NONE verifier, SUCCESS (24 bytes).
pub fn rpc_reply(xid: u32) -> Vec<u8> {
    Words::new().ws(&[xid, 1, 0, 0, 0, 0]).done()
}

/// A binding for tests: every (prog, vers, proc) has up to 8 DDP-eligible
/// arguments and results of up to 16 MiB.
pub struct AnyBinding;

const ANY: &[DdpItem] = &[DdpItem {
    name: "x",
    max_len: 16 << 20,
}; 8];

impl BindingLookup for AnyBinding {
    fn lookup(&self, _: u32, _: u32, _: u32) -> Option<ProcedureBinding> {
        Some(ProcedureBinding {
            name: "any",
            ddp_args: ANY,
            ddp_results: ANY,
        })
    }
}
