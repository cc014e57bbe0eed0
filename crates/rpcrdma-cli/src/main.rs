//! `rpcrdma`: serve and call the RDMATEST program (0x20005244) over ONC RPC
//! transports.
//!
//! ```text
//! rpcrdma serve --tcp-listen 127.0.0.1:20049
//! rpcrdma call tcp://127.0.0.1:20049 get 16MiB
//! ```
//!
//! One module per subcommand; the transport of `call` is chosen by the URL
//! scheme in [`target`] and connected in [`channel`].
#![forbid(unsafe_code)]

mod call;
mod channel;
mod serve;
mod size;
mod target;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Serve and call the RDMATEST program over ONC RPC transports.
#[derive(Debug, Parser)]
#[command(name = "rpcrdma", version, about)]
struct Cli {
    /// Log filter for diagnostics on stderr (tracing `EnvFilter` syntax, e.g.
    /// `debug` or `oncrpc_tcp=trace`); the `RUST_LOG` variable overrides it.
    #[arg(long, global = true, default_value = "warn")]
    log: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the RDMATEST program until SIGINT or SIGTERM.
    Serve(serve::ServeArgs),
    /// Make one RDMATEST call and verify its result.
    Call(call::CallArgs),
}

fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(default))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(&cli.log);
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
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rpcrdma: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
