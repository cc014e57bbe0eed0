//! `rpcrdma nfs URL [--mount-port M] COMMAND`: an NFSv3 client for the
//! command line, over RPC-over-RDMA (`rdma://HOST:PORT/EXPORT`) or TCP
//! (`tcp://HOST:PORT/EXPORT`).
//!
//! The export's root handle comes from MOUNT v3 over TCP: on port M, or
//! where rpcbind on HOST says MOUNT v3 (`tcp`) is, or, for `tcp://` when
//! rpcbind does not know, on PORT itself (`rpcrdma nfsd` serves MOUNT on
//! every TCP listener). Every PATH is relative to the export.
//!
//! * [`mounted`]: connecting and mounting;
//! * [`commands`]: `ls`, `stat`, `cat`, `mkdir`, `rm`, `rmdir`, `mv`,
//!   `ln -s`, `readlink`, `df`;
//! * [`transfer`]: `get` and `put`, streamed with several calls in flight;
//! * [`load`]: `bench read|write`;
//! * [`wire`]: `--report`; [`format`]: how attributes are shown.

mod commands;
mod format;
mod load;
mod mounted;
mod read;
mod transfer;
mod wire;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

use crate::rdma_opts::RdmaArgs;
use crate::size::parse_size_u32;
use crate::target::{parse_nfs_target, NfsTarget};
use crate::values;

/// Arguments of `rpcrdma nfs`.
#[derive(Debug, Args)]
pub struct NfsArgs {
    /// The export: rdma://HOST:PORT/EXPORT (NFSv3 over RPC-over-RDMA on the
    /// software iWARP provider) or tcp://HOST:PORT/EXPORT (NFSv3 over TCP).
    #[arg(value_name = "URL", value_parser = parse_nfs_target)]
    url: NfsTarget,

    /// The TCP port of MOUNT v3 on HOST (default: ask rpcbind on HOST; for
    /// tcp:// URLs fall back to PORT).
    #[arg(long, global = true, value_name = "M")]
    mount_port: Option<u16>,

    /// Print, for each NFS call, what went on the wire (message kind,
    /// chunks, bytes), on stderr.
    #[arg(long, global = true)]
    report: bool,

    /// AUTH_SYS uid (default: this process's uid).
    #[arg(long, global = true, value_name = "UID")]
    uid: Option<u32>,

    /// AUTH_SYS gid (default: this process's gid).
    #[arg(long, global = true, value_name = "GID")]
    gid: Option<u32>,

    /// Give up on connecting or on a reply after this many seconds.
    #[arg(long, global = true, value_name = "SECONDS", default_value = "30", value_parser = values::up_to_a_day, allow_negative_numbers = true)]
    timeout: Duration,

    /// `get` and `put`: calls in flight.
    #[arg(long, global = true, value_name = "N", default_value = "8", value_parser = values::at_least_one, allow_negative_numbers = true)]
    in_flight: usize,

    #[command(subcommand)]
    command: NfsCommand,

    #[command(flatten)]
    rdma: RdmaArgs,
}

/// What `rpcrdma nfs` does.
#[derive(Debug, Subcommand)]
enum NfsCommand {
    #[command(flatten)]
    Fs(FsCommand),
    /// Measure NFS READ or WRITE against one file (like `rpcrdma bench`).
    Bench(BenchArgs),
}

/// A file system command (one mount, one connection).
#[derive(Debug, Subcommand)]
enum FsCommand {
    /// List a directory (or show one file).
    Ls {
        /// Long listing: mode, links, owner, group, size, mtime, name.
        #[arg(short = 'l')]
        long: bool,
        /// Path relative to the export (default: its root).
        #[arg(default_value = "/")]
        path: String,
    },
    /// Show the attributes of PATH.
    Stat {
        /// Path relative to the export.
        path: String,
    },
    /// Write the contents of PATH to stdout.
    Cat {
        /// Path relative to the export.
        path: String,
    },
    /// Copy REMOTE to the local file LOCAL.
    Get {
        /// Path relative to the export.
        remote: String,
        /// Local file to write.
        local: PathBuf,
    },
    /// Copy the local file LOCAL to REMOTE (created or truncated).
    Put {
        /// Local file to read.
        local: PathBuf,
        /// Path relative to the export.
        remote: String,
    },
    /// Make a directory.
    Mkdir {
        /// Path relative to the export.
        path: String,
    },
    /// Remove a file (not a directory).
    Rm {
        /// Path relative to the export.
        path: String,
    },
    /// Remove an empty directory.
    Rmdir {
        /// Path relative to the export.
        path: String,
    },
    /// Rename FROM to TO (replacing TO if it exists).
    Mv {
        /// Path relative to the export.
        from: String,
        /// Path relative to the export.
        to: String,
    },
    /// Make a symbolic link: `ln -s TARGET PATH`.
    Ln {
        /// Symbolic (the only kind `rpcrdma nfs` makes; required).
        #[arg(short = 's', required = true)]
        symbolic: bool,
        /// What the link points to (stored as given, not resolved).
        target: String,
        /// Path of the new link, relative to the export.
        path: String,
    },
    /// Print the target of a symbolic link.
    Readlink {
        /// Path relative to the export.
        path: String,
    },
    /// Show the export's file system space and files (FSSTAT).
    Df,
}

/// `rpcrdma nfs URL bench read|write ...`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// READ or WRITE.
    #[arg(value_enum)]
    op: BenchOp,

    /// The file, relative to the export. READ: it must hold at least SIZE
    /// bytes. WRITE: created if missing; the run writes within the first
    /// 64 MiB (or the file's size, if larger).
    #[arg(long, value_name = "PATH")]
    file: String,

    /// Bytes per call (at most the server's rtmax/wtmax).
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_size_u32)]
    size: u32,

    /// Random SIZE-aligned offsets (default: sequential, wrapping around).
    #[arg(long)]
    random: bool,

    /// Calls in flight per connection.
    #[arg(long, value_name = "N", default_value = "1", value_parser = values::at_least_one, allow_negative_numbers = true)]
    depth: usize,

    /// Connections.
    #[arg(long, value_name = "C", default_value = "1", value_parser = values::at_least_one, allow_negative_numbers = true)]
    connections: usize,

    /// How long to measure, in seconds.
    #[arg(long, value_name = "S", default_value = "5", value_parser = values::up_to_a_day, allow_negative_numbers = true)]
    seconds: Duration,

    /// Stop after N calls in all (or after --seconds).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    calls: Option<u64>,

    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// The benchmarked procedure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchOp {
    /// NFS READ (data in a Write chunk over RDMA).
    Read,
    /// NFS WRITE, UNSTABLE (data in a Read chunk over RDMA).
    Write,
}

/// Runs `rpcrdma nfs`.
pub async fn run(args: NfsArgs) -> anyhow::Result<()> {
    if let crate::target::Target::Tcp { .. } = args.url.target {
        args.rdma.warn_if_given("for tcp:// URLs");
    }
    let command = match &args.command {
        NfsCommand::Bench(b) => return load::run(&args, b).await,
        NfsCommand::Fs(command) => command,
    };
    let mounted = mounted::Mounted::open(&args, 1).await?;
    let s = &mounted;
    let result = match command {
        FsCommand::Ls { long, path } => commands::ls(s, path, *long).await,
        FsCommand::Stat { path } => commands::stat(s, path).await,
        FsCommand::Cat { path } => commands::cat(s, path).await,
        FsCommand::Get { remote, local } => transfer::get(s, remote, local, args.in_flight).await,
        FsCommand::Put { local, remote } => transfer::put(s, local, remote, args.in_flight).await,
        FsCommand::Mkdir { path } => commands::mkdir(s, path).await,
        FsCommand::Rm { path } => commands::rm(s, path).await,
        FsCommand::Rmdir { path } => commands::rmdir(s, path).await,
        FsCommand::Mv { from, to } => commands::mv(s, from, to).await,
        FsCommand::Ln { target, path, .. } => commands::ln_s(s, target, path).await,
        FsCommand::Readlink { path } => commands::readlink(s, path).await,
        FsCommand::Df => commands::df(s).await,
    };
    mounted.close().await;
    result
}
