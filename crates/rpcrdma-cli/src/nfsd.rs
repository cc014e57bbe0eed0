//! `rpcrdma nfsd`: serve a directory as NFS version 3 (RFC 1813) over
//! RPC-over-RDMA (RFC 8166 with the RFC 8267 binding) and over TCP, with
//! MOUNT version 3 on every TCP listener, until SIGINT or SIGTERM.
//!
//! Listeners (each started as a [`crate::listeners::Running`]):
//! * `--listen`: NFSv3 and MOUNT v3 over RPC-over-RDMA on the software
//!   iWARP provider, with the [`nfs3::Nfs3Binding`] and
//!   [`nfs3::MountBinding`] Upper-Layer Bindings;
//! * `--tcp-listen`: NFSv3 and MOUNT v3 over TCP;
//! * `--mount-listen`: MOUNT v3 only, over TCP (what `mountport=` names).
//!
//! The ready line, on stdout and flushed, names every listener:
//! `rpcrdma nfsd: listening on rdma 127.0.0.1:20049 and tcp 127.0.0.1:2049
//! and mount 127.0.0.1:20048 (export /srv/data, ...)`.
//!
//! On SIGINT/SIGTERM every listener stops accepting, the rpcbind mappings
//! are removed, in-flight calls finish, and then every file of the export
//! is synced ([`nfs3_server::Export::sync_all`]) before the exit (status 0):
//! data a client was told was committed stays committed.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use nfs3::{MountBinding, Nfs3Binding, MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3};
use nfs3_server::{Export, ExportOptions, MountService, NfsService};
use oncrpc::Dispatcher;
use oncrpc_tcp::ServerConfig;

use crate::listeners::{announce, shut_down, start_rdma, start_tcp, stop_all, Running, Signals};
use crate::rdma_opts::RdmaArgs;
use crate::rpcbind::{Mapping, Registered, LOCAL_RPCBIND};
use crate::size::format_size;

/// Arguments of `rpcrdma nfsd`.
#[derive(Debug, Args)]
pub struct NfsdArgs {
    /// The directory to serve. Clients mount it by the path `/` or by DIR
    /// exactly as given here.
    #[arg(long, value_name = "DIR")]
    export: PathBuf,

    /// Serve NFSv3 (and MOUNT v3) over RPC-over-RDMA on the software iWARP
    /// provider on HOST:PORT (20049 is the IANA port; port 0 picks a free
    /// port).
    #[arg(long, value_name = "HOST:PORT")]
    listen: String,

    /// Also serve NFSv3 and MOUNT v3 over TCP on HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    tcp_listen: Option<String>,

    /// Serve MOUNT v3 (only) over TCP on HOST:PORT: the port a Linux client
    /// names with `mountport=`.
    #[arg(long, value_name = "HOST:PORT")]
    mount_listen: Option<String>,

    /// Register NFS (netids `rdma` and `tcp`) and MOUNT (`tcp`) with the
    /// local rpcbind and remove them on exit.
    #[arg(long)]
    rpcbind: bool,

    /// The rpcbind `--rpcbind` registers with (ONC RPC over TCP).
    #[arg(long, value_name = "HOST:PORT", default_value = LOCAL_RPCBIND, requires = "rpcbind")]
    rpcbind_server: String,

    /// Refuse every change with NFS3ERR_ROFS.
    #[arg(long)]
    read_only: bool,

    /// Do not map uid 0 to the anonymous ids (root squashing is on by
    /// default).
    #[arg(long)]
    no_root_squash: bool,

    /// Map every caller to the anonymous ids.
    #[arg(long)]
    all_squash: bool,

    /// The uid of squashed and AUTH_NONE callers.
    #[arg(long, value_name = "N", default_value_t = nfs3_server::options::DEFAULT_ANON_ID)]
    anonuid: u32,

    /// The gid of squashed and AUTH_NONE callers.
    #[arg(long, value_name = "N", default_value_t = nfs3_server::options::DEFAULT_ANON_ID)]
    anongid: u32,

    /// Calls of one TCP connection executed concurrently.
    #[arg(long, value_name = "N", default_value = "128", value_parser = crate::values::at_least_one, allow_negative_numbers = true)]
    max_calls_per_connection: usize,

    #[command(flatten)]
    rdma: RdmaArgs,
}

/// Runs the server until a signal asks it to stop.
pub async fn run(args: NfsdArgs) -> anyhow::Result<()> {
    let mut stop = Signals::new().context("cannot install signal handlers")?;
    let options = ExportOptions {
        read_only: args.read_only,
        root_squash: !args.no_root_squash,
        all_squash: args.all_squash,
        anon_uid: args.anonuid,
        anon_gid: args.anongid,
        ..ExportOptions::default()
    };
    let export = Export::open(&args.export, options)
        .with_context(|| format!("cannot export {}", args.export.display()))?;
    let nfs_and_mount = Arc::new(
        Dispatcher::builder()
            .service(NfsService::new(export.clone()))
            .service(MountService::new(export.clone()))
            .build(),
    );

    let mut running: Vec<Running> = Vec::new();
    let config = args.rdma.config()?;
    let device = args.rdma.device()?;
    let mut bindings = rpcrdma::Bindings::new();
    bindings.add(Nfs3Binding).add(MountBinding);
    running.push(start_rdma(&args.listen, &device, &config, &nfs_and_mount, bindings).await?);
    if let Some(addr) = &args.tcp_listen {
        let server = start_tcp(addr, "tcp", tcp_config(&args), nfs_and_mount.clone()).await;
        running.push(server.inspect_err(|_| stop_all(&running))?);
    }
    if let Some(addr) = &args.mount_listen {
        let mount_only = Arc::new(
            Dispatcher::builder()
                .service(MountService::new(export.clone()))
                .build(),
        );
        let server = start_tcp(addr, "mount", tcp_config(&args), mount_only).await;
        running.push(server.inspect_err(|_| stop_all(&running))?);
    }

    let mut registered = None;
    if args.rpcbind {
        match Registered::register(&args.rpcbind_server, mappings(&running)).await {
            Ok(r) => registered = Some(r),
            Err(e) => {
                stop_all(&running);
                return Err(e.context("--rpcbind: cannot register with rpcbind"));
            }
        }
    }

    let names: Vec<&str> = running.iter().map(|s| s.name.as_str()).collect();
    let mut line = format!(
        "rpcrdma nfsd: listening on {} (export {}, NFS version 3 and MOUNT version 3, {}{}, rtmax/wtmax {}",
        names.join(" and "),
        args.export.display(),
        if options.read_only { "read-only" } else { "read-write" },
        if options.all_squash {
            ", all squashed"
        } else if options.root_squash {
            ", root squashed"
        } else {
            ", no root squash"
        },
        format_size(options.max_io.into()),
    );
    if let Some(r) = &registered {
        line.push_str(&registered_note(r));
    }
    line.push(')');
    announce(&line)?;

    let signal = stop.recv().await;
    eprintln!("rpcrdma nfsd: {signal}: shutting down");
    let drained = shut_down(running, registered, &mut stop).await;
    // Every call has finished: make everything written durable, whatever
    // the clients asked for, so nothing acknowledged is lost.
    let synced = export
        .sync_all()
        .with_context(|| format!("cannot sync {}", args.export.display()));
    drained.and(synced)
}

/// The rpcbind mappings of the listeners: NFS v3 on every RDMA and TCP
/// listener (not the MOUNT-only one); MOUNT v3 on the MOUNT-only listener
/// if there is one, else on the TCP listener.
fn mappings(running: &[Running]) -> Vec<Mapping> {
    let mount_only = |s: &&Running| s.name.starts_with("mount ");
    let mut out: Vec<Mapping> = running
        .iter()
        .filter(|s| !mount_only(s))
        .map(|s| Mapping::new(NFS_PROGRAM, NFS_V3, s.transport, s.addr))
        .collect();
    let mount = running
        .iter()
        .find(mount_only)
        .or_else(|| running.iter().find(|s| s.transport == "tcp"));
    if let Some(s) = mount {
        out.push(Mapping::new(MOUNT_PROGRAM, MOUNT_V3, "tcp", s.addr));
    }
    out
}

/// The rpcbind part of the ready line: what was registered where.
fn registered_note(r: &Registered) -> String {
    let what: Vec<String> = r
        .mappings()
        .iter()
        .map(|m| {
            let prog = if m.prog == NFS_PROGRAM {
                "NFS"
            } else {
                "MOUNT"
            };
            format!("{prog} v{} {} {}", m.vers, m.netid, m.uaddr)
        })
        .collect();
    format!("; registered with rpcbind: {}", what.join(", "))
}

/// The TCP server configuration (records of up to 64 MiB: a 1 MiB WRITE
/// fits with room to spare).
fn tcp_config(args: &NfsdArgs) -> ServerConfig {
    ServerConfig {
        max_calls_per_connection: args.max_calls_per_connection,
        ..ServerConfig::default()
    }
}
