//! The RDMATEST program's Upper-Layer Binding (program 0x20005244,
//! version 1), kept here as the reference binding until `crates/rdmatest`
//! hosts its own.
//!
//! | proc | name  | arguments                   | results                                   | DDP-eligible          |
//! |------|-------|-----------------------------|-------------------------------------------|-----------------------|
//! | 0    | NULL  | void                        | void                                      | none                  |
//! | 1    | ECHO  | opaque<>                    | opaque<>                                  | none (Long Call/Reply)|
//! | 2    | PUT   | opaque data<>               | struct { uint32 length; uint32 crc32c }   | argument `data`       |
//! | 3    | GET   | struct { length; seed }     | union switch (status) { 0: opaque data<> }| result `data`         |
//! | 4    | GET2  | struct { len_a; len_b; seed}| struct { opaque a<>; marker; opaque b<> } | results `a`, `b`      |
//! | 5    | SLEEP | uint32                      | void                                      | none                  |

use super::layout::{locate_opaque, word, DdpPlacement, LayoutError, ReplyLayout};
use super::{ArgsView, DdpItem, ProcedureBinding, ReplyEstimate, UpperLayerBinding};
use crate::reassemble::WriteChunkCursor;

/// RDMATEST program number.
pub const PROGRAM: u32 = 0x2000_5244;
/// RDMATEST version.
pub const VERSION: u32 = 1;
/// Largest DDP-eligible item RDMATEST allows (16 MiB).
pub const MAX_DATA: u32 = 16 << 20;

/// Procedure numbers.
pub mod procs {
    /// NULL.
    pub const NULL: u32 = 0;
    /// ECHO.
    pub const ECHO: u32 = 1;
    /// PUT.
    pub const PUT: u32 = 2;
    /// GET.
    pub const GET: u32 = 3;
    /// GET2.
    pub const GET2: u32 = 4;
    /// SLEEP.
    pub const SLEEP: u32 = 5;
}

const PUT_DATA: &[DdpItem] = &[DdpItem {
    name: "data",
    max_len: MAX_DATA,
}];
const GET_DATA: &[DdpItem] = &[DdpItem {
    name: "data",
    max_len: MAX_DATA,
}];
const GET2_DATA: &[DdpItem] = &[
    DdpItem {
        name: "a",
        max_len: MAX_DATA,
    },
    DdpItem {
        name: "b",
        max_len: MAX_DATA,
    },
];

/// The RDMATEST binding.
#[derive(Clone, Copy, Debug, Default)]
pub struct RdmatestBinding;

impl UpperLayerBinding for RdmatestBinding {
    fn program(&self) -> u32 {
        PROGRAM
    }

    fn reply_layout(&self) -> Option<&dyn ReplyLayout> {
        Some(self)
    }

    fn version(&self) -> u32 {
        VERSION
    }

    fn procedure(&self, proc_: u32) -> Option<ProcedureBinding> {
        Some(match proc_ {
            procs::NULL => ProcedureBinding::plain("NULL"),
            procs::ECHO => ProcedureBinding::plain("ECHO"),
            procs::PUT => ProcedureBinding {
                name: "PUT",
                ddp_args: PUT_DATA,
                ddp_results: &[],
            },
            procs::GET => ProcedureBinding {
                name: "GET",
                ddp_args: &[],
                ddp_results: GET_DATA,
            },
            procs::GET2 => ProcedureBinding {
                name: "GET2",
                ddp_args: &[],
                ddp_results: GET2_DATA,
            },
            procs::SLEEP => ProcedureBinding::plain("SLEEP"),
            _ => return None,
        })
    }

    fn reply_estimate(&self, proc_: u32, args: ArgsView<'_>) -> Option<ReplyEstimate> {
        let clamp = |n: u32| n.min(MAX_DATA);
        Some(match proc_ {
            procs::NULL | procs::SLEEP => ReplyEstimate {
                max_reduced_results: 0,
                ddp_results: vec![],
            },
            // The echoed opaque has exactly the argument's encoding.
            procs::ECHO => ReplyEstimate {
                max_reduced_results: args.len,
                ddp_results: vec![],
            },
            procs::PUT => ReplyEstimate {
                max_reduced_results: 8,
                ddp_results: vec![],
            },
            // status + data length word.
            procs::GET => ReplyEstimate {
                max_reduced_results: 8,
                ddp_results: vec![clamp(args.word(0)?)],
            },
            // a's length word + marker + b's length word.
            procs::GET2 => ReplyEstimate {
                max_reduced_results: 12,
                ddp_results: vec![clamp(args.word(0)?), clamp(args.word(1)?)],
            },
            _ => return None,
        })
    }
}

/// The RDMATEST reply layout (GET: `status` then `data`; GET2: `a`,
/// `marker`, `b`).
impl ReplyLayout for RdmatestBinding {
    fn locate(
        &self,
        proc_: u32,
        results: &[u8],
        cursor: &mut WriteChunkCursor,
    ) -> Result<Vec<DdpPlacement>, LayoutError> {
        let mut out = Vec::new();
        match proc_ {
            procs::GET if word(results, 0)? == 0 => {
                locate_opaque(results, 4, cursor, &mut out)?;
            }
            procs::GET2 => {
                let after_a = locate_opaque(results, 0, cursor, &mut out)?;
                locate_opaque(results, after_a + 4, cursor, &mut out)?;
            }
            _ => {}
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binding::BindingLookup;

    #[test]
    fn rfc8166_s6_1_rdmatest_eligibility() {
        let b = RdmatestBinding;
        assert_eq!(b.max_read_chunks(PROGRAM, VERSION, procs::PUT), 1);
        for p in [
            procs::NULL,
            procs::ECHO,
            procs::GET,
            procs::GET2,
            procs::SLEEP,
        ] {
            assert_eq!(b.max_read_chunks(PROGRAM, VERSION, p), 0, "proc {p}");
        }
        assert_eq!(b.max_read_chunks(PROGRAM, 2, procs::PUT), 0);
        assert_eq!(b.max_read_chunks(PROGRAM, VERSION, 6), 0);
        assert_eq!(b.procedure(procs::GET2).unwrap().ddp_results.len(), 2);
    }

    #[test]
    fn rfc8166_s6_2_rdmatest_reply_estimates() {
        let b = RdmatestBinding;
        let mut head = Vec::new();
        head.extend_from_slice(&1000u32.to_be_bytes());
        head.extend_from_slice(&(64u32 << 20).to_be_bytes());
        head.extend_from_slice(&7u32.to_be_bytes());
        let args = ArgsView {
            head: &head,
            len: 12,
        };
        let get = b.reply_estimate(procs::GET, args).unwrap();
        assert_eq!(get.ddp_results, vec![1000]);
        let shape = crate::marshal::ReplyShape::from_estimate(&get, 24);
        assert_eq!(shape.write_chunks, vec![1000]);
        assert_eq!(shape.max_reduced_len, 32);
        assert_eq!(get.max_unreduced_results(), 8 + 1000);
        let get2 = b.reply_estimate(procs::GET2, args).unwrap();
        assert_eq!(get2.ddp_results, vec![1000, MAX_DATA]);
        let echo = b
            .reply_estimate(
                procs::ECHO,
                ArgsView {
                    head: &head[..4],
                    len: 4 + 1000,
                },
            )
            .unwrap();
        assert_eq!(echo.max_reduced_results, 1004);
        assert!(echo.ddp_results.is_empty());
        assert!(b
            .reply_estimate(procs::GET, ArgsView { head: &[], len: 0 })
            .is_none());
    }

    mod layout {
        use super::super::*;
        use crate::wire::{Segment, WriteChunkRepr};

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
            let p = RdmatestBinding.locate(procs::GET2, &r, &mut cur).unwrap();
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
            assert!(RdmatestBinding
                .locate(procs::GET, &1u32.to_be_bytes(), &mut cur)
                .unwrap()
                .is_empty());
            let mut cur = WriteChunkCursor::from_repr(&wl);
            assert!(RdmatestBinding
                .locate(procs::GET, &0u32.to_be_bytes(), &mut cur)
                .is_err());
            // An offset near usize::MAX is an error, not an overflow.
            assert!(word(&[0; 8], usize::MAX - 1).is_err());
        }
    }
}
