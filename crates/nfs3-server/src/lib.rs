//! # nfs3-server — NFSv3 and MOUNT v3 over a local directory
//!
//! Serves one directory of the local file system (the export) as NFS
//! version 3 (RFC 1813) and MOUNT version 3, as `oncrpc` services that any
//! of the workspace's transports carry:
//!
//! ```no_run
//! use nfs3_server::{Export, ExportOptions, MountService, NfsService};
//! let export = Export::open("/srv/data".as_ref(), ExportOptions::default()).unwrap();
//! let dispatcher = oncrpc::Dispatcher::builder()
//!     .service(NfsService::new(export.clone()))
//!     .service(MountService::new(export))
//!     .build();
//! # drop(dispatcher);
//! ```
//!
//! ## Design
//!
//! * **Handles** ([`fh`]): 32 bytes of stable facts — an export identity
//!   (from the root's inode number and birth time), the object's inode
//!   number and birth time. No in-memory ids, so handles survive restarts.
//!   A handle is turned back into an object through a bounded cache of
//!   open descriptors, a location map of (parent, name) hints
//!   ([`locate`]), and, on a miss, a bounded, serialised, rate-limited
//!   walk of the export (at most one per two seconds, at most 2^20
//!   entries) with a negative cache for handles a walk did not find. What
//!   is found is checked against the handle's inode number and birth time
//!   and must have links: a stale or forged handle is NFS3ERR_STALE or
//!   NFS3ERR_BADHANDLE, never another object.
//! * **Confinement**: the export directory is opened once; every other
//!   object is reached relative to directory descriptors with
//!   `O_NOFOLLOW` (`openat`, `statx(AT_SYMLINK_NOFOLLOW)`, `mkdirat`,
//!   `renameat`, ...). The server never follows a symlink for a client
//!   and never resolves a client's path through the process's path
//!   lookup. `..` of the root is the root; `..` elsewhere is checked to
//!   lead back to the root. Names that are empty or hold `/` or NUL are
//!   NFS3ERR_ACCES; `.`/`..` as an entry to create are NFS3ERR_EXIST, to
//!   remove or rename NFS3ERR_INVAL (RMDIR `..`: NFS3ERR_NOTEMPTY).
//!   Another file system mounted inside the export is not crossed
//!   (NFS3ERR_ACCES), so one fsid and unique fileids hold.
//!
//! ## Known limits
//!
//! * An object that a local user moves out of the export stays reachable
//!   through a handle whose descriptor is cached for at most
//!   [`export::RECHECK_INTERVAL`] (1 s): then the cached descriptor is
//!   checked again (a directory's `..` chain must reach the root, anything
//!   else must be found from the root by name) and the handle is STALE.
//! * On a file system without birth times (`statx` `STX_BTIME`), a reused
//!   inode number is not told apart from the object that had it.
//! * Names longer than 255 bytes and paths longer than 4096 bytes are
//!   GARBAGE_ARGS (the `nfs3` codec's limits), not NFS3ERR_NAMETOOLONG.
//! * ACLs are not consulted; `max_io` is at most 1 MiB (the `nfs3` codec's
//!   READ/WRITE data limit).
//! * **Credentials** ([`cred`], [`setattr`]): the AUTH_SYS uid, gid and
//!   gids, after root/all squashing (AUTH_NONE is anonymous), decide every
//!   check the way the kernel's mode-bit check would (ACLs are not
//!   consulted). The server acts as root (it normally runs as root) and
//!   gives new objects the caller's uid and gid (the directory's gid when
//!   it is setgid). When the server does not run as root, new objects
//!   belong to the server's user, chown to others fails with NFS3ERR_PERM,
//!   and the kernel additionally applies its own checks for that user.
//! * **Durability**: UNSTABLE writes reply after `pwrite`; DATA_SYNC
//!   `fdatasync`s, FILE_SYNC and COMMIT `fsync` before replying. The write
//!   verifier is new at each [`Export::open`]. [`Export::sync_all`] syncs
//!   everything on shutdown.
//! * **I/O**: an LRU of 256 open descriptors keyed by handle; procedures
//!   run off the async executor (tokio's blocking pool, or
//!   `block_in_place`; see [`BlockingMode`]); READ reads
//!   into one buffer that becomes the reply's DDP piece without a copy.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod attr;
pub mod cred;
pub mod ctx;
pub mod export;
pub mod fh;
pub mod locate;
pub mod lru;
pub mod mount;
pub mod nfs;
pub mod ops;
pub mod options;
pub mod readdir;
pub mod setattr;
pub mod status;

pub use export::{Export, ExportCounters, ExportError, Obj};
pub use mount::MountService;
pub use nfs::{BlockingMode, NfsService};
pub use options::ExportOptions;
pub use status::{NfsErr, NfsResult};
