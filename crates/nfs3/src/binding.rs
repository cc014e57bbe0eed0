//! The RPC-over-RDMA Upper-Layer Bindings of NFS version 3 and MOUNT
//! version 3 (RFC 8267 §3, on RFC 8166 §6).
//!
//! * [`Nfs3Binding`] (program 100003, version 3): DDP-eligible are exactly
//!   the WRITE `data` argument, the SYMLINK `symlink_data` argument, the
//!   READ `data` result and the READLINK `data` result (RFC 8267 §3).
//!   Its [`ReplyLayout`] finds the READ and READLINK results in a reduced
//!   reply.
//! * [`MountBinding`] (program 100005, version 3): RFC 8267 gives MOUNT
//!   no RDMA binding (deployments carry it over TCP); this one declares
//!   nothing DDP-eligible, so MOUNT can also run over RPC-over-RDMA, and
//!   only estimates reply sizes.
//!
//! NFSACL (program 100227) has nothing DDP-eligible (RFC 8267) and needs
//! no binding.
//!
//! # Reply size estimates (RFC 8166 §6.2; RFC 8267, reply size estimation)
//!
//! A requester offers a Reply chunk only when the largest reply may exceed
//! the reply inline threshold, so the estimates are the exact largest
//! reduced results each procedure can produce within this crate's limits
//! (file handles of 64 bytes, `fattr3` of 84 bytes). The RPC reply header
//! is not included. With `post_op_attr` = 88, `wcc_data` = 116,
//! `nfs_fh3` = 68, `post_op_fh3` = 72 bytes:
//!
//! | procedure | largest reduced results | DDP results |
//! |---|---|---|
//! | NULL | 0 | |
//! | GETATTR | 4 + 84 = 88 | |
//! | SETATTR, REMOVE, RMDIR | 4 + 116 = 120 | |
//! | LOOKUP | 4 + 68 + 88 + 88 = 248 | |
//! | ACCESS | 4 + 88 + 4 = 96 | |
//! | READLINK | 4 + 88 + 4 = 96 | path ≤ 4096 |
//! | READ | 4 + 88 + 4 + 4 + 4 = 104 | `count` ≤ [`MAX_IO_SIZE`] |
//! | WRITE | 4 + 116 + 4 + 4 + 8 = 136 | |
//! | CREATE, MKDIR, SYMLINK, MKNOD | 4 + 72 + 88 + 116 = 280 | |
//! | RENAME | 4 + 116 + 116 = 236 | |
//! | LINK | 4 + 88 + 116 = 208 | |
//! | READDIR | 4 + `count` (≥ 104, ≤ [`MAX_DIR_REPLY`]) | |
//! | READDIRPLUS | 4 + `maxcount` (≥ 104, ≤ [`MAX_DIR_REPLY`]) | |
//! | FSSTAT | 4 + 88 + 48 + 4 = 144 | |
//! | FSINFO | 4 + 88 + 28 + 8 + 8 + 4 = 140 | |
//! | PATHCONF | 4 + 88 + 8 + 16 = 116 | |
//! | COMMIT | 4 + 116 + 8 = 128 | |
//!
//! READDIR's `count` and READDIRPLUS's `maxcount` bound the XDR size of
//! the `resok` (RFC 1813 §3.3.16, §3.3.17); an empty listing still takes
//! 104 bytes (`dir_attributes`, `cookieverf`, the list end, `eof`).

use rpcrdma_proto::binding::layout::{locate_opaque, word, DdpPlacement, LayoutError, ReplyLayout};
use rpcrdma_proto::binding::{
    ArgsView, DdpItem, ProcedureBinding, ReplyEstimate, UpperLayerBinding,
};
use rpcrdma_proto::reassemble::WriteChunkCursor;

use crate::mount::{mntproc, MAX_AUTH_FLAVORS, MOUNT_PROGRAM, MOUNT_V3};
use crate::procs::{proc3, proc_name, NFS_PROGRAM, NFS_V3};
use crate::types::{Nfspath3, FATTR3_LEN, MAX_IO_SIZE, NFS3_FHSIZE};

/// Largest READDIR / READDIRPLUS `resok` the NFS binding provisions a
/// Reply chunk for: `count` / `maxcount` above it are clamped (1 MiB, as
/// [`MAX_IO_SIZE`]; a server limits these counts to its own maximum).
pub const MAX_DIR_REPLY: u32 = MAX_IO_SIZE;

/// Largest DUMP or EXPORT result the MOUNT binding provisions a Reply
/// chunk for (64 KiB).
pub const MAX_MOUNT_LIST_REPLY: u64 = 64 * 1024;

const STATUS: u64 = 4;
const POST_OP_ATTR: u64 = 4 + FATTR3_LEN as u64;
const WCC_DATA: u64 = 4 + 24 + POST_OP_ATTR;
const NFS_FH3: u64 = 4 + NFS3_FHSIZE as u64;
const POST_OP_FH3: u64 = 4 + NFS_FH3;
/// An empty `READDIR3resok`/`READDIRPLUS3resok`.
const EMPTY_DIR_RESOK: u64 = POST_OP_ATTR + 8 + 4 + 4;

const WRITE_DATA: &[DdpItem] = &[DdpItem {
    name: "data",
    max_len: MAX_IO_SIZE,
}];
const SYMLINK_DATA: &[DdpItem] = &[DdpItem {
    name: "symlink_data",
    max_len: Nfspath3::MAX,
}];
const READ_DATA: &[DdpItem] = &[DdpItem {
    name: "data",
    max_len: MAX_IO_SIZE,
}];
const READLINK_DATA: &[DdpItem] = &[DdpItem {
    name: "data",
    max_len: Nfspath3::MAX,
}];

/// The NFS version 3 Upper-Layer Binding (RFC 8267 §3).
#[derive(Clone, Copy, Debug, Default)]
pub struct Nfs3Binding;

/// The XDR word index right after the `nfs_fh3` that starts the
/// arguments, from its length word; `None` if the handle is too long or
/// the length word is not in `args`.
fn after_fh(args: &ArgsView<'_>) -> Option<usize> {
    let len = args.word(0)?;
    if len > NFS3_FHSIZE {
        return None;
    }
    Some(1 + (len as usize).div_ceil(4))
}

fn fixed(max_reduced_results: u64) -> ReplyEstimate {
    ReplyEstimate {
        max_reduced_results,
        ddp_results: vec![],
    }
}

fn dir_reply(count: u32) -> ReplyEstimate {
    let resok = u64::from(count.min(MAX_DIR_REPLY)).max(EMPTY_DIR_RESOK);
    fixed(STATUS + resok)
}

impl UpperLayerBinding for Nfs3Binding {
    fn program(&self) -> u32 {
        NFS_PROGRAM
    }

    fn version(&self) -> u32 {
        NFS_V3
    }

    fn procedure(&self, proc_: u32) -> Option<ProcedureBinding> {
        let name = proc_name(proc_)?;
        Some(match proc_ {
            proc3::WRITE => ProcedureBinding {
                name,
                ddp_args: WRITE_DATA,
                ddp_results: &[],
            },
            proc3::SYMLINK => ProcedureBinding {
                name,
                ddp_args: SYMLINK_DATA,
                ddp_results: &[],
            },
            proc3::READ => ProcedureBinding {
                name,
                ddp_args: &[],
                ddp_results: READ_DATA,
            },
            proc3::READLINK => ProcedureBinding {
                name,
                ddp_args: &[],
                ddp_results: READLINK_DATA,
            },
            _ => ProcedureBinding::plain(name),
        })
    }

    fn reply_estimate(&self, proc_: u32, args: ArgsView<'_>) -> Option<ReplyEstimate> {
        Some(match proc_ {
            proc3::NULL => fixed(0),
            proc3::GETATTR => fixed(STATUS + FATTR3_LEN as u64),
            proc3::SETATTR | proc3::REMOVE | proc3::RMDIR => fixed(STATUS + WCC_DATA),
            proc3::LOOKUP => fixed(STATUS + NFS_FH3 + 2 * POST_OP_ATTR),
            proc3::ACCESS => fixed(STATUS + POST_OP_ATTR + 4),
            proc3::READLINK => ReplyEstimate {
                max_reduced_results: STATUS + POST_OP_ATTR + 4,
                ddp_results: vec![Nfspath3::MAX],
            },
            proc3::READ => {
                // file, offset (2 words), count.
                let count = args.word(after_fh(&args)? + 2)?;
                ReplyEstimate {
                    max_reduced_results: STATUS + POST_OP_ATTR + 4 + 4 + 4,
                    ddp_results: vec![count.min(MAX_IO_SIZE)],
                }
            }
            proc3::WRITE => fixed(STATUS + WCC_DATA + 4 + 4 + 8),
            proc3::CREATE | proc3::MKDIR | proc3::SYMLINK | proc3::MKNOD => {
                fixed(STATUS + POST_OP_FH3 + POST_OP_ATTR + WCC_DATA)
            }
            proc3::RENAME => fixed(STATUS + 2 * WCC_DATA),
            proc3::LINK => fixed(STATUS + POST_OP_ATTR + WCC_DATA),
            // dir, cookie (2 words), cookieverf (2 words), count.
            proc3::READDIR => dir_reply(args.word(after_fh(&args)? + 4)?),
            // dir, cookie, cookieverf, dircount, maxcount.
            proc3::READDIRPLUS => dir_reply(args.word(after_fh(&args)? + 5)?),
            proc3::FSSTAT => fixed(STATUS + POST_OP_ATTR + 6 * 8 + 4),
            proc3::FSINFO => fixed(STATUS + POST_OP_ATTR + 7 * 4 + 8 + 8 + 4),
            proc3::PATHCONF => fixed(STATUS + POST_OP_ATTR + 2 * 4 + 4 * 4),
            proc3::COMMIT => fixed(STATUS + WCC_DATA + 8),
            _ => return None,
        })
    }

    fn reply_layout(&self) -> Option<&dyn ReplyLayout> {
        Some(self)
    }
}

/// Offset right after a `post_op_attr` at `at`.
fn skip_post_op_attr(results: &[u8], at: usize) -> Result<usize, LayoutError> {
    match word(results, at)? {
        0 => Ok(at + 4),
        1 => Ok(at + 4 + FATTR3_LEN),
        v => Err(LayoutError(format!(
            "post_op_attr at offset {at} has invalid discriminant {v}"
        ))),
    }
}

/// READ (`status`, `file_attributes`, `count`, `eof`, `data`) and READLINK
/// (`status`, `symlink_attributes`, `data`) results: the DDP-eligible
/// result follows a variable-length `post_op_attr`; a status other than
/// `NFS3_OK` has none.
impl ReplyLayout for Nfs3Binding {
    fn locate(
        &self,
        proc_: u32,
        results: &[u8],
        cursor: &mut WriteChunkCursor,
    ) -> Result<Vec<DdpPlacement>, LayoutError> {
        let mut out = Vec::new();
        match proc_ {
            proc3::READ if word(results, 0)? == 0 => {
                let after_attr = skip_post_op_attr(results, 4)?;
                // count, eof, then the data's length word.
                locate_opaque(results, after_attr + 8, cursor, &mut out)?;
            }
            proc3::READLINK if word(results, 0)? == 0 => {
                let after_attr = skip_post_op_attr(results, 4)?;
                locate_opaque(results, after_attr, cursor, &mut out)?;
            }
            _ => {}
        }
        Ok(out)
    }
}

/// A MOUNT version 3 Upper-Layer Binding (RFC 8267 defines none): nothing
/// is DDP-eligible; replies are estimated so that MNT, UMNT and UMNTALL stay
/// inline and DUMP and EXPORT get a Reply chunk of
/// [`MAX_MOUNT_LIST_REPLY`] bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct MountBinding;

impl UpperLayerBinding for MountBinding {
    fn program(&self) -> u32 {
        MOUNT_PROGRAM
    }

    fn version(&self) -> u32 {
        MOUNT_V3
    }

    fn procedure(&self, proc_: u32) -> Option<ProcedureBinding> {
        crate::mount::mount_proc_name(proc_).map(ProcedureBinding::plain)
    }

    fn reply_estimate(&self, proc_: u32, _args: ArgsView<'_>) -> Option<ReplyEstimate> {
        Some(match proc_ {
            mntproc::NULL | mntproc::UMNT | mntproc::UMNTALL => fixed(0),
            // fhs_status, fhandle, auth_flavors<>.
            mntproc::MNT => fixed(STATUS + NFS_FH3 + 4 + 4 * u64::from(MAX_AUTH_FLAVORS)),
            mntproc::DUMP | mntproc::EXPORT => fixed(MAX_MOUNT_LIST_REPLY),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests;
