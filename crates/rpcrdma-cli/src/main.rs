//! `rpcrdma`: serve, call, benchmark and demonstrate the RDMATEST program
//! (0x20005244) over RPC-over-RDMA (RFC 8166, on the software iWARP
//! provider) and ONC RPC over TCP; serve a directory as NFS version 3
//! (`nfsd`) and use one (`nfs`) over the same transports.
//!
//! ```text
//! rpcrdma serve --listen 127.0.0.1:20049 --tcp-listen 127.0.0.1:20050
//! rpcrdma call rdma://127.0.0.1:20049 get 16MiB
//! rpcrdma bench rdma://127.0.0.1:20049 --proc get --size 1MiB --seconds 5
//! rpcrdma demo
//! rpcrdma nfsd --export /srv/data --listen 127.0.0.1:20049 --tcp-listen 127.0.0.1:2049 --mount-listen 127.0.0.1:20048
//! rpcrdma nfs rdma://127.0.0.1:20049/ --mount-port 20048 ls -l /
//! ```
//!
//! One module per subcommand; the transport of `call` and `bench` is chosen
//! by the URL scheme in [`target`] and connected in [`channel`].
#![forbid(unsafe_code)]

mod bench;
mod call;
mod channel;
mod cpu;
mod demo;
mod listeners;
mod nfs;
mod nfsd;
mod rdma_opts;
mod report;
mod rpcbind;
mod serve;
mod size;
mod target;
mod values;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Serve, call, benchmark and demonstrate the RDMATEST program over
/// RPC-over-RDMA (software iWARP) and ONC RPC over TCP.
#[derive(Debug, Parser)]
#[command(name = "rpcrdma", version, about)]
struct Cli {
    /// Log filter for diagnostics on stderr (tracing `EnvFilter` syntax, e.g.
    /// `debug` or `oncrpc_tcp=trace`); the `RUST_LOG` variable overrides it.
    /// An invalid filter is a usage error (exit 2).
    #[arg(long, global = true, default_value = "warn", value_parser = parse_log_filter)]
    log: String,

    /// More diagnostics on stderr: -v info, -vv debug, -vvv trace (overrides
    /// --log; `RUST_LOG` still wins).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the RDMATEST program until SIGINT or SIGTERM.
    Serve(serve::ServeArgs),
    /// Make one RDMATEST call and verify its result.
    Call(call::CallArgs),
    /// Measure calls per second, throughput and latency against a server.
    Bench(bench::BenchArgs),
    /// Run a server and a client in this process and show every
    /// RPC-over-RDMA message kind, then a short RDMA vs TCP comparison.
    Demo(demo::DemoArgs),
    /// Serve a directory as NFS version 3 over RPC-over-RDMA and TCP until
    /// SIGINT or SIGTERM.
    Nfsd(nfsd::NfsdArgs),
    /// Use an NFS version 3 export: ls, stat, cat, get, put, mkdir, rm,
    /// rmdir, mv, ln -s, readlink, df, bench.
    Nfs(nfs::NfsArgs),
}

/// `--log`: must be a valid `EnvFilter`.
fn parse_log_filter(text: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(text)
        .map(|_| text.to_owned())
        .map_err(|e| format!("invalid log filter: {e}"))
}

fn init_tracing(default: &str) {
    // RUST_LOG wins when it is set and valid; an invalid one is reported
    // and `--log` (or -v) used instead.
    let from_env = match std::env::var(tracing_subscriber::EnvFilter::DEFAULT_ENV) {
        Ok(text) if !text.trim().is_empty() => {
            match tracing_subscriber::EnvFilter::try_new(&text) {
                Ok(filter) => Some(filter),
                Err(e) => {
                    eprintln!(
                        "rpcrdma: warning: ignoring RUST_LOG={text:?} ({e}); using {default:?}"
                    );
                    None
                }
            }
        }
        _ => None,
    };
    let filter = from_env.unwrap_or_else(|| {
        tracing_subscriber::EnvFilter::try_new(default)
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"))
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only for a terminal: no escape codes in log files.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => cli.log.as_str(),
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    init_tracing(level);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rpcrdma: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Call(args) => call::run(args).await,
            Command::Bench(args) => bench::run(args).await,
            Command::Demo(args) => demo::run(args).await,
            Command::Nfsd(args) => nfsd::run(args).await,
            Command::Nfs(args) => nfs::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rpcrdma: error: {}", report::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}
