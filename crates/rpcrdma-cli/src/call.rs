//! `rpcrdma call URL PROCEDURE [ARGS]`: one RDMATEST call, verified.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};
use rdmatest::{pattern, ClientError, RdmatestClient};

use crate::channel::{self, Recorder};
use crate::rdma_opts::RdmaArgs;
use crate::report::rdma_error_kind;
use crate::size::{bytes_word, format_size, parse_size_nonzero, parse_size_u32};
use crate::target::{parse_target, Target};
use crate::values;

/// Arguments of `rpcrdma call`.
#[derive(Debug, Args)]
pub struct CallArgs {
    /// The server: rdma://HOST:PORT (RPC-over-RDMA on the software iWARP
    /// provider) or tcp://HOST:PORT (ONC RPC over TCP).
    #[arg(value_name = "URL", value_parser = parse_target)]
    url: Target,

    /// The procedure to call and its arguments.
    #[command(subcommand)]
    procedure: Procedure,

    /// Pattern seed for ECHO, PUT, GET and GET2 data.
    #[arg(long, global = true, default_value_t = 0)]
    seed: u32,

    /// Give up on connecting (RDMA: including the MPA handshake) or on the
    /// reply after this many seconds, above 0 and at most 86400 (default:
    /// 30, plus the duration of a SLEEP).
    #[arg(long, global = true, value_name = "SECONDS", value_parser = values::up_to_a_day, allow_negative_numbers = true)]
    timeout: Option<Duration>,

    /// TCP: split the call into record-marking fragments of at most SIZE
    /// bytes (default: one fragment).
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_size_nonzero)]
    max_fragment: Option<usize>,

    #[command(flatten)]
    rdma: RdmaArgs,
}

/// An RDMATEST procedure (program 0x20005244, version 1).
#[derive(Debug, Clone, Copy, Subcommand)]
enum Procedure {
    /// NULL (0): no arguments, no results.
    Null,
    /// ECHO (1): send SIZE bytes of pattern data, check the same bytes return.
    Echo {
        /// Data size: bytes, or with a unit (4k, 1M, 16MiB).
        #[arg(value_parser = parse_size_u32, allow_negative_numbers = true)]
        size: u32,
    },
    /// PUT (2): send SIZE bytes, check the server's length and CRC-32C.
    Put {
        /// Data size: bytes, or with a unit (4k, 1M, 16MiB).
        #[arg(value_parser = parse_size_u32, allow_negative_numbers = true)]
        size: u32,
    },
    /// GET (3): fetch SIZE bytes of pattern data and check every byte.
    Get {
        /// Data size: bytes, or with a unit (4k, 1M, 16MiB).
        #[arg(value_parser = parse_size_u32, allow_negative_numbers = true)]
        size: u32,
    },
    /// GET2 (4): fetch two pattern items A and B around a marker; check all.
    Get2 {
        /// Size of the first item.
        #[arg(value_parser = parse_size_u32, allow_negative_numbers = true)]
        a: u32,
        /// Size of the second item.
        #[arg(value_parser = parse_size_u32, allow_negative_numbers = true)]
        b: u32,
    },
    /// SLEEP (5): the server waits MS milliseconds before replying.
    Sleep {
        /// Milliseconds.
        #[arg(allow_negative_numbers = true)]
        ms: u32,
    },
}

impl Procedure {
    /// "GET 16 MiB" and the like.
    fn describe(&self) -> String {
        match *self {
            Procedure::Null => "NULL".into(),
            Procedure::Echo { size } => format!("ECHO {}", format_size(size.into())),
            Procedure::Put { size } => format!("PUT {}", format_size(size.into())),
            Procedure::Get { size } => format!("GET {}", format_size(size.into())),
            Procedure::Get2 { a, b } => {
                format!("GET2 {} + {}", format_size(a.into()), format_size(b.into()))
            }
            Procedure::Sleep { ms } => format!("SLEEP {ms} ms"),
        }
    }
}

/// Makes the call, verifies it and prints what happened.
pub async fn run(args: CallArgs) -> anyhow::Result<()> {
    let timeout = match args.timeout {
        Some(t) => t,
        None => {
            let sleep = match args.procedure {
                Procedure::Sleep { ms } => Duration::from_millis(ms.into()),
                _ => Duration::ZERO,
            };
            Duration::from_secs(30) + sleep
        }
    };
    let what = args.procedure.describe();
    let target = &args.url;
    match target {
        Target::Tcp { .. } => args.rdma.warn_if_given("for tcp:// URLs"),
        Target::Rdma { .. } => {
            if args.max_fragment.is_some() {
                eprintln!("rpcrdma: warning: --max-fragment is TCP-only, ignored for rdma:// URLs");
            }
        }
    }

    let start = Instant::now();
    let options = channel::ConnectOptions {
        timeout,
        max_fragment: args.max_fragment,
        rdma: args.rdma.config()?,
        device: match target {
            // --timeout also bounds the MPA handshake.
            Target::Rdma { .. } => Some(args.rdma.device_with_handshake(Some(timeout))?),
            Target::Tcp { .. } => None,
        },
    };
    let channel = channel::connect(target, &options).await?;
    let connected = start.elapsed();
    let recorder = Recorder::new(&channel);
    let client = RdmatestClient::new(&recorder).with_timeout(timeout);

    let start = Instant::now();
    let result = perform(&client, args.procedure, args.seed).await;
    let latency = start.elapsed();
    let reports = recorder.take();
    let (verified, bytes) = match result {
        Ok(ok) => ok,
        Err(e) => {
            // What went on the wire still helps: e.g. the unused Write
            // chunk of a GET above the maximum, or the RDMA_ERROR kind.
            print_wire(&reports);
            if let Some(kind) = rdma_error_kind(&e) {
                println!("rpcrdma: on the wire: the responder answered RDMA_ERROR ({kind})");
            }
            channel.close();
            return Err(explain(e, args.procedure)).with_context(|| format!("{what} via {target}"));
        }
    };
    channel.close();
    if let Target::Rdma { .. } = target {
        if let Some(dev) = &options.device {
            dev.flush_capture()
                .context("cannot write the capture file")?;
        }
    }

    let mut line = format!(
        "rpcrdma: {what} via {target}: verified OK ({verified}); latency {}",
        format_duration(latency)
    );
    if bytes > 0 {
        let rate = bytes as f64 / latency.as_secs_f64() / (1024.0 * 1024.0);
        line.push_str(&format!(", {rate:.1} MiB/s"));
    }
    line.push_str(&format!(" (connect {})", format_duration(connected)));
    println!("{line}");
    print_wire(&reports);
    Ok(())
}

/// The "on the wire" lines of the recorded calls (RDMA only).
fn print_wire(reports: &[rpcrdma::CallReport]) {
    for report in reports {
        println!("rpcrdma: on the wire: {}", crate::report::describe(report));
        println!("rpcrdma:   {report}");
    }
}

/// Runs one procedure; returns what was verified and the payload bytes moved.
async fn perform<C: oncrpc::Channel>(
    client: &RdmatestClient<C>,
    procedure: Procedure,
    seed: u32,
) -> Result<(String, u64), ClientError> {
    Ok(match procedure {
        Procedure::Null => {
            client.null().await?;
            ("void reply".into(), 0)
        }
        Procedure::Echo { size } => {
            let data = pattern::pattern(seed, size as usize);
            let back = client.echo(data).await?;
            (
                format!("{} echoed identically", bytes_word(back.len() as u64)),
                2 * u64::from(size),
            )
        }
        Procedure::Put { size } => {
            let res = client.put(pattern::pattern(seed, size as usize)).await?;
            (
                format!(
                    "server saw {}, CRC-32C {:#010x} matches",
                    bytes_word(res.length),
                    res.crc32c
                ),
                size.into(),
            )
        }
        Procedure::Get { size } => {
            let data = client.get(size, seed).await?;
            (
                format!("{} of pattern seed {seed}", bytes_word(data.len() as u64)),
                size.into(),
            )
        }
        Procedure::Get2 { a, b } => {
            let res = client.get2(a, b, seed).await?;
            (
                format!(
                    "a: {} of pattern seed {seed}, marker 0xfeedface, b: {} of pattern seed {}",
                    bytes_word(res.a.len() as u64),
                    bytes_word(res.b.len() as u64),
                    seed.wrapping_add(1)
                ),
                u64::from(a) + u64::from(b),
            )
        }
        Procedure::Sleep { ms } => {
            client.sleep(ms).await?;
            (format!("server slept {ms} ms"), 0)
        }
    })
}

/// The longest SLEEP an RDMATEST server accepts (`rdmatest`'s default, as
/// `rpcrdma serve` uses it); longer ones are answered GARBAGE_ARGS.
const SERVER_MAX_SLEEP_MS: u32 = 60_000;

/// Adds what a failure means where the bare error does not say.
fn explain(e: ClientError, procedure: Procedure) -> anyhow::Error {
    let garbage = matches!(e, ClientError::Rpc(oncrpc::RpcError::GarbageArgs));
    match procedure {
        _ if matches!(e, ClientError::GetStatus(rdmatest::proto::GET_STATUS_TOO_LONG)) => anyhow::anyhow!(
            "server answered GET status 1: the length is above the server's maximum (see `rpcrdma serve --max-data`)"
        ),
        Procedure::Echo { size } | Procedure::Put { size } if garbage => anyhow::anyhow!(
            "{e}: {} is probably above the server's maximum data size (`rpcrdma serve --max-data`, default 16 MiB)",
            format_size(size.into())
        ),
        Procedure::Sleep { ms } if garbage && ms > SERVER_MAX_SLEEP_MS => anyhow::anyhow!(
            "{e}: the server sleeps at most {SERVER_MAX_SLEEP_MS} ms"
        ),
        _ => anyhow::Error::new(e),
    }
}

fn format_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 1e6 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{:.3} s", us / 1e6)
    }
}
