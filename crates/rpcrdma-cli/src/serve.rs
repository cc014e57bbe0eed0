//! `rpcrdma serve`: serve the RDMATEST program until SIGINT or SIGTERM.
//!
//! Each `--*-listen` option starts one server per occurrence, all sharing
//! one `Dispatcher`. To add a transport: add its option to [`ServeArgs`] in
//! the `listeners` group, a `start_*` function returning a [`Running`], and
//! a loop over the option in [`run`]. Readiness is announced on stdout as
//! `rpcrdma: listening on <transport> <address> (...)`, flushed.

use std::io::Write;
use std::sync::Arc;

use anyhow::Context;
use clap::{ArgGroup, Args};
use oncrpc::Dispatcher;
use oncrpc_tcp::record::RecordLimits;
use oncrpc_tcp::{ServerConfig, TcpServer};
use rdmatest::RdmatestServer;
use tokio::task::JoinHandle;

use crate::size::{format_size, parse_size_nonzero, parse_size_u32};

/// Arguments of `rpcrdma serve`. Each listener option names one transport;
/// at least one is required, and several may be combined.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("listeners").required(true).multiple(true)))]
pub struct ServeArgs {
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
    #[arg(long, value_name = "N", default_value_t = 128)]
    max_calls_per_connection: usize,
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
    let about = format!(
        "RDMATEST program {}, version {}, max data {}",
        rdmatest::PROGRAM,
        rdmatest::VERSION,
        format_size(args.max_data.into())
    );

    // Every listener of every transport becomes one `Running` server; a new
    // transport adds its option to the `listeners` group and a `start_*`.
    let mut running = Vec::new();
    for addr in &args.tcp_listen {
        let server = start_tcp(addr, &args, dispatcher.clone()).await?;
        announce(&format!("rpcrdma: listening on {} ({about})", server.name))?;
        running.push(server);
    }

    let signal = stop.recv().await;
    eprintln!("rpcrdma: {signal}: shutting down");
    for server in &running {
        (server.stop)();
    }
    for server in running {
        server
            .task
            .await
            .with_context(|| format!("server {} panicked", server.name))?
            .with_context(|| format!("server {} failed", server.name))?;
    }
    Ok(())
}

/// A started server of some transport.
struct Running {
    /// "tcp 127.0.0.1:20049" and the like: transport and bound address.
    name: String,
    /// Asks the server to stop gracefully.
    stop: Box<dyn Fn() + Send + Sync>,
    /// Completes when the server has stopped.
    task: JoinHandle<anyhow::Result<()>>,
}

/// Binds an ONC RPC over TCP server on `addr`.
async fn start_tcp(
    addr: &str,
    args: &ServeArgs,
    dispatcher: Arc<Dispatcher>,
) -> anyhow::Result<Running> {
    let defaults = ServerConfig::default();
    let config = ServerConfig {
        limits: RecordLimits {
            max_record_size: args.max_record,
            ..RecordLimits::default()
        },
        max_fragment_size: args.max_fragment.unwrap_or(defaults.max_fragment_size),
        max_calls_per_connection: args.max_calls_per_connection,
        ..defaults
    };
    let server = TcpServer::bind(addr, dispatcher, config)
        .await
        .with_context(|| format!("cannot listen on tcp {addr}"))?;
    let local = server.local_addr()?;
    let handle = server.shutdown_handle();
    Ok(Running {
        name: format!("tcp {local}"),
        stop: Box::new(move || handle.shutdown()),
        task: tokio::spawn(async move { Ok(server.run().await?) }),
    })
}

/// Prints a line on stdout and flushes it at once (scripts wait for it).
fn announce(line: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// SIGINT and SIGTERM, registered at creation.
struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// Waits for the next signal; returns its name.
    async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => "SIGINT",
                _ = self.terminate.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "interrupt"
        }
    }
}
