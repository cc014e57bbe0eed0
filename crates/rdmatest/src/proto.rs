//! The RDMATEST program definition: numbers, argument and result types, and
//! which items are DDP-eligible.
//!
//! ```text
//! program RDMATEST { version V1 {
//!   void                NULL(void)                          = 0;
//!   opaque<>            ECHO(opaque data<>)                 = 1;
//!   put_res             PUT(opaque data<>)                  = 2;  /* data DDP-eligible */
//!   get_res             GET(get_args)                       = 3;  /* result data DDP-eligible */
//!   get2_res            GET2(get2_args)                     = 4;  /* results a, b DDP-eligible */
//!   void                SLEEP(unsigned int milliseconds)    = 5;
//! } = 1; } = 0x20005244;
//! struct put_res   { unsigned int length; unsigned int crc32c; };
//! struct get_args  { unsigned int length; unsigned int seed; };
//! union  get_res switch (unsigned int status) { case 0: opaque data<>; default: void; };
//! struct get2_args { unsigned int len_a; unsigned int len_b; unsigned int seed; };
//! struct get2_res  { opaque a<>; unsigned int marker; opaque b<>; };
//! ```

use xdr::{Encoder, XdrDecode, XdrEncode, XdrRead};

/// Program number of RDMATEST (536891972).
pub const PROGRAM: u32 = 0x2000_5244;
/// The only version.
pub const VERSION: u32 = 1;

/// NULL: void → void.
pub const PROC_NULL: u32 = 0;
/// ECHO: opaque data<> → the same opaque.
pub const PROC_ECHO: u32 = 1;
/// PUT: opaque data<> (DDP-eligible) → [`PutResult`].
pub const PROC_PUT: u32 = 2;
/// GET: [`GetArgs`] → `get_res` (data DDP-eligible).
pub const PROC_GET: u32 = 3;
/// GET2: [`Get2Args`] → `get2_res` (a and b DDP-eligible).
pub const PROC_GET2: u32 = 4;
/// SLEEP: milliseconds → void.
pub const PROC_SLEEP: u32 = 5;

/// `get2_res.marker`.
pub const GET2_MARKER: u32 = 0xFEED_FACE;
/// `get_res.status` when the data follows.
pub const GET_STATUS_OK: u32 = 0;
/// `get_res.status` when the requested length exceeds the server maximum.
pub const GET_STATUS_TOO_LONG: u32 = 1;

/// 16 MiB: the default maximum of GET, ECHO and PUT data.
pub const DEFAULT_MAX_DATA: u32 = 16 * 1024 * 1024;

/// A procedure and its DDP-eligible items (the RDMATEST Upper-Layer
/// Binding, RFC 8166 §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcInfo {
    /// Procedure number.
    pub procedure: u32,
    /// Name.
    pub name: &'static str,
    /// Number of DDP-eligible opaques in the arguments (in stream order).
    pub ddp_args: usize,
    /// Number of DDP-eligible opaques in the results (in stream order).
    pub ddp_results: usize,
}

/// Every RDMATEST procedure, indexed by number.
pub const PROCEDURES: [ProcInfo; 6] = [
    ProcInfo {
        procedure: PROC_NULL,
        name: "NULL",
        ddp_args: 0,
        ddp_results: 0,
    },
    ProcInfo {
        procedure: PROC_ECHO,
        name: "ECHO",
        ddp_args: 0,
        ddp_results: 0,
    },
    ProcInfo {
        procedure: PROC_PUT,
        name: "PUT",
        ddp_args: 1,
        ddp_results: 0,
    },
    ProcInfo {
        procedure: PROC_GET,
        name: "GET",
        ddp_args: 0,
        ddp_results: 1,
    },
    ProcInfo {
        procedure: PROC_GET2,
        name: "GET2",
        ddp_args: 0,
        ddp_results: 2,
    },
    ProcInfo {
        procedure: PROC_SLEEP,
        name: "SLEEP",
        ddp_args: 0,
        ddp_results: 0,
    },
];

/// The [`ProcInfo`] of a procedure number.
pub fn proc_info(procedure: u32) -> Option<&'static ProcInfo> {
    PROCEDURES.get(procedure as usize)
}

/// `put_res`: what the server saw of PUT data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutResult {
    /// Length of the data.
    pub length: u32,
    /// CRC-32C (Castagnoli) of the data.
    pub crc32c: u32,
}

/// `get_args`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetArgs {
    /// Bytes requested.
    pub length: u32,
    /// Pattern seed.
    pub seed: u32,
}

/// `get2_args`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Get2Args {
    /// Length of `a`.
    pub len_a: u32,
    /// Length of `b`.
    pub len_b: u32,
    /// Pattern seed (`a` uses `seed`, `b` uses `seed + 1`).
    pub seed: u32,
}

macro_rules! words_struct {
    ($t:ident { $($f:ident),* }) => {
        impl XdrEncode for $t {
            fn encoded_len(&self) -> usize { 4 * [$(stringify!($f)),*].len() }
            fn encode(&self, e: &mut Encoder<'_>) { $(e.u32(self.$f);)* }
        }
        impl XdrDecode for $t {
            fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
                Ok($t { $($f: r.u32()?),* })
            }
        }
    };
}
words_struct!(PutResult { length, crc32c });
words_struct!(GetArgs { length, seed });
words_struct!(Get2Args { len_a, len_b, seed });

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_number() {
        assert_eq!(PROGRAM, 536_891_972);
        for (i, p) in PROCEDURES.iter().enumerate() {
            assert_eq!(p.procedure as usize, i);
        }
    }

    #[test]
    fn structs_round_trip() {
        let g = Get2Args {
            len_a: 1,
            len_b: 2,
            seed: 3,
        };
        let b = xdr::encode_to_bytes(&g).unwrap();
        assert_eq!(&b[..], &[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]);
        assert_eq!(xdr::Decoder::new(&b).decode::<Get2Args>().unwrap(), g);
    }
}
