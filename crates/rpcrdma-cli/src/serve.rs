//! `rpcrdma serve`: serve the RDMATEST program until SIGINT or SIGTERM.
//!
//! `--listen` (RPC-over-RDMA on the software iWARP provider) and
//! `--tcp-listen` (ONC RPC over TCP) each start one server per occurrence,
//! all sharing one `Dispatcher`. To add a transport: add its option to
//! [`ServeArgs`] in the `listeners` group, a `start_*` function in
//! [`crate::listeners`] returning a `Running`, and a loop over the option in [`run`]. Readiness is
//! announced on stdout in ONE line, flushed:
//! `rpcrdma: listening on rdma 127.0.0.1:20049 and tcp 127.0.0.1:20050 (...)`.
//!
//! On SIGINT/SIGTERM every server stops accepting at once and lets its
//! in-flight calls finish (RDMA: up to the transport's shutdown grace, 5 s),
//! then closes its connections. Meanwhile the rpcbind mappings (if
//! `--rpcbind`) are removed, within [`crate::rpcbind::UNREGISTER_LIMIT`] in all, so a hung
//! rpcbind cannot hold the exit up. Then the process exits 0. A second
//! signal during the wait exits at once with status 1.
//!
//! rpcbind holds one address per (program, version, netid): with several
//! listeners of one netid (two `--listen` on IPv4, say), only the first is
//! registered, and the ready line names the ones left out.

use std::sync::Arc;

use anyhow::Context;
use clap::{ArgGroup, Args};
use oncrpc::Dispatcher;
use oncrpc_tcp::record::RecordLimits;
use oncrpc_tcp::ServerConfig;
use rdmatest::RdmatestServer;

use crate::listeners::{
    announce, registered_note, shut_down, start_rdma, start_tcp, stop_all, Signals,
};
use crate::rdma_opts::RdmaArgs;
use crate::rpcbind::{Mapping, Registered, LOCAL_RPCBIND};
use crate::size::{format_size, parse_size_nonzero, parse_size_u32};

/// Arguments of `rpcrdma serve`. Each listener option names one transport;
/// at least one is required, and several may be combined.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("listeners").required(true).multiple(true)))]
pub struct ServeArgs {
    /// Serve RPC-over-RDMA (RFC 8166) on the software iWARP provider on
    /// HOST:PORT (iWARP runs over TCP; port 0 picks a free port; 20049 is
    /// the registered NFS-over-RDMA port). May be repeated.
    #[arg(long, value_name = "HOST:PORT", group = "listeners")]
    listen: Vec<String>,

    /// Serve ONC RPC over TCP (RFC 5531 record marking) on HOST:PORT; port 0
    /// picks a free port. May be repeated.
    #[arg(long, value_name = "HOST:PORT", group = "listeners")]
    tcp_listen: Vec<String>,

    /// Largest ECHO, PUT and GET data the service accepts or produces; a GET
    /// for more answers status 1.
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = parse_size_u32)]
    max_data: u32,

    /// Largest RPC message (record) accepted on a TCP connection; a peer
    /// sending a larger one is disconnected.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size_nonzero)]
    max_record: usize,

    /// Largest record-marking fragment of a TCP reply (default: one fragment
    /// per reply); smaller values split replies into many fragments.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_nonzero)]
    max_fragment: Option<usize>,

    /// Calls of one connection executed concurrently.
    #[arg(long, value_name = "N", default_value = "128", value_parser = crate::values::at_least_one, allow_negative_numbers = true)]
    max_calls_per_connection: usize,

    /// Register the listeners with the local rpcbind (127.0.0.1:111) under
    /// netids `rdma` and `tcp` (`rdma6`/`tcp6` for IPv6), and remove them on
    /// exit. rpcbind holds one address per netid: of several listeners of
    /// one netid only the first is registered (the ready line says so).
    #[arg(long)]
    rpcbind: bool,

    /// The rpcbind `--rpcbind` registers with (ONC RPC over TCP).
    #[arg(long, value_name = "HOST:PORT", default_value = LOCAL_RPCBIND, requires = "rpcbind")]
    rpcbind_server: String,

    #[command(flatten)]
    rdma: RdmaArgs,
}

/// Runs the server(s) until a signal asks them to stop.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    // Install the signal handlers before announcing readiness, so a signal
    // sent as soon as "listening" is printed is handled, not fatal.
    let mut stop = Signals::new().context("cannot install signal handlers")?;

    let service = RdmatestServer::new(rdmatest::ServerConfig {
        max_get_len: args.max_data,
        max_echo_len: args.max_data,
        max_put_len: args.max_data,
        ..Default::default()
    });
    let dispatcher = Arc::new(Dispatcher::builder().service(service).build());
    let mut about = format!(
        "RDMATEST program {:#x}, version {}, max data {}",
        rdmatest::PROGRAM,
        rdmatest::VERSION,
        format_size(args.max_data.into())
    );
    if !args.listen.is_empty() && args.max_data > rdmatest::proto::DEFAULT_MAX_DATA {
        // The RPC-over-RDMA requester sizes its Write and Reply chunks for
        // the default maximum: more does not fit, whatever the server allows.
        let warning = format!(
            "warning: over RPC-over-RDMA only up to {} works (the requester's chunks hold no more; larger calls fail with ERR_CHUNK)",
            format_size(rdmatest::proto::DEFAULT_MAX_DATA.into())
        );
        eprintln!("rpcrdma: {warning}");
        about.push_str(&format!("; {warning}"));
    }

    // Every listener of every transport becomes one `Running` server; a new
    // transport adds its option to the `listeners` group and a `start_*`.
    let mut running = Vec::new();
    if args.listen.is_empty() {
        args.rdma
            .warn_if_given("without an RPC-over-RDMA listener (--listen)");
    }
    if !args.listen.is_empty() {
        let config = args.rdma.config()?;
        let device = args.rdma.device()?;
        for addr in &args.listen {
            let server = start_rdma(
                addr,
                &device,
                &config,
                &dispatcher,
                rpcrdma::Bindings::rdmatest(),
            )
            .await;
            running.push(server.inspect_err(|_| stop_all(&running))?);
        }
    }
    for addr in &args.tcp_listen {
        let server = start_tcp(addr, "tcp", tcp_config(&args), dispatcher.clone()).await;
        running.push(server.inspect_err(|_| stop_all(&running))?);
    }

    let mut registered = None;
    if args.rpcbind {
        let mappings = running
            .iter()
            .map(|s| Mapping::new(rdmatest::PROGRAM, rdmatest::VERSION, s.transport, s.addr))
            .collect();
        match Registered::register(&args.rpcbind_server, mappings).await {
            Ok(r) => registered = Some(r),
            Err(e) => {
                stop_all(&running);
                return Err(e.context("--rpcbind: cannot register with rpcbind"));
            }
        }
    }

    let names: Vec<&str> = running.iter().map(|s| s.name.as_str()).collect();
    let mut line = format!("rpcrdma: listening on {} ({about}", names.join(" and "));
    if let Some(r) = &registered {
        line.push_str(&registered_note(&running, r));
    }
    line.push(')');
    announce(&line)?;

    let signal = stop.recv().await;
    eprintln!("rpcrdma: {signal}: shutting down");
    // Stop accepting at once; the servers drain their calls while the
    // mappings are removed. A failure to unregister (e.g. rpcbind stopped
    // before us) is reported but does not make the clean shutdown fail.
    shut_down(running, registered, &mut stop).await
}

/// The TCP server configuration of `--max-record`, `--max-fragment` and
/// `--max-calls-per-connection`.
fn tcp_config(args: &ServeArgs) -> ServerConfig {
    let defaults = ServerConfig::default();
    ServerConfig {
        limits: RecordLimits {
            max_record_size: args.max_record,
            ..RecordLimits::default()
        },
        max_fragment_size: args.max_fragment.unwrap_or(defaults.max_fragment_size),
        max_calls_per_connection: args.max_calls_per_connection,
        ..defaults
    }
}
