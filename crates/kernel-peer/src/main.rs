//! `kernel-peer`: the Rust side of the kernel scenarios (`scripts/kernel`).
//!
//! - `guest`: runs a shell script in the qemu guest through its control
//!   channel (the guest's second serial port, a unix socket on the host)
//!   and exits with the script's status;
//! - `null`: NFSv3 NULL calls to the guest's kernel NFS server, over
//!   RPC-over-RDMA (svcrdma on soft-iWARP) or ONC RPC over TCP, with what
//!   went on the wire;
//! - `first-call`: fresh RPC-over-RDMA connections, each with a call sent
//!   at once, every one answered within a bound;
//! - `nfs-client`: this workspace's NFSv3 client against the guest's
//!   kernel nfsd (scenario 1);
//! - `cut-relay`: a TCP relay whose connections SIGUSR1 cuts (RST both
//!   ways), to break the connection under an iWARP stream mid-transfer.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod control;
mod nfs;
mod probe;
mod relay;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run SCRIPT (shell) in the guest; print its output, exit with its
    /// status.
    Guest {
        /// The control channel's unix socket.
        #[arg(long)]
        socket: PathBuf,
        /// Seconds to wait for the script to finish.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
        /// The script (its words are joined with spaces).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        script: Vec<String>,
    },
    /// NFSv3 NULL calls to a server (RFC 1813 §3.3.0).
    Null {
        /// RPC-over-RDMA address of the server (svcrdma: port 20049).
        #[arg(long, conflicts_with = "tcp")]
        rdma: Option<SocketAddr>,
        /// ONC RPC over TCP address of the server (port 2049).
        #[arg(long)]
        tcp: Option<SocketAddr>,
        /// Calls to make.
        #[arg(long, default_value_t = 3)]
        count: u32,
    },
    /// COUNT fresh RPC-over-RDMA connections, each with an NFSv3 NULL sent
    /// as soon as it is connected: every one must be answered within
    /// WITHIN_MS milliseconds.
    FirstCall {
        /// RPC-over-RDMA address of the server.
        addr: SocketAddr,
        /// Connections to make, one after the other.
        #[arg(long, default_value_t = 50)]
        connections: u32,
        /// The bound for each first call, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        within_ms: u64,
        /// Do not post zero-length RDMA Writes on a silent new connection
        /// (`RdmaConfig::first_reply_nudge` off): shows the race.
        #[arg(long)]
        no_nudge: bool,
    },
    /// Scenario 1: our NFSv3 client against a kernel nfsd.
    NfsClient {
        /// `rdma` or `tcp`.
        #[arg(long)]
        transport: String,
        /// NFS address (RDMA: port 20049; TCP: 2049).
        #[arg(long)]
        nfs: SocketAddr,
        /// mountd's TCP address.
        #[arg(long)]
        mount: SocketAddr,
        /// Exported path.
        #[arg(long, default_value = "/export")]
        export: String,
        /// Directory for the data read and the data to write (`up1m`).
        #[arg(long)]
        out: PathBuf,
        /// Suffix of the names created in the export.
        #[arg(long)]
        tag: String,
    },
    /// Relay TCP connections from LISTEN to TARGET; SIGUSR1 aborts every
    /// connection relayed so far.
    CutRelay {
        /// Address to accept connections on.
        listen: SocketAddr,
        /// Address to relay them to.
        target: SocketAddr,
    },
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Guest {
            socket,
            timeout,
            script,
        } => control::run(&socket, &script.join(" "), Duration::from_secs(timeout)),
        Command::Null { rdma, tcp, count } => runtime().block_on(probe::null(rdma, tcp, count)),
        Command::FirstCall {
            addr,
            connections,
            within_ms,
            no_nudge,
        } => runtime().block_on(probe::first_call(
            addr,
            connections,
            Duration::from_millis(within_ms),
            no_nudge,
        )),
        Command::NfsClient {
            transport,
            nfs,
            mount,
            export,
            out,
            tag,
        } => runtime().block_on(nfs::run(nfs::Target {
            transport,
            nfs,
            mount,
            export,
            out,
            tag,
        })),
        Command::CutRelay { listen, target } => runtime().block_on(relay::run(listen, target)),
    };
    match r {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("kernel-peer: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}
