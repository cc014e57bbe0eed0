//! `bench-report`: measures RPC-over-RDMA against RPC over TCP with the
//! `rpcrdma` command and writes the benchmark page of the documentation.
//!
//! It starts one `rpcrdma serve` on 127.0.0.1 with both listeners, runs
//! `rpcrdma bench … --json` for every point (GET and PUT from 4 KiB to
//! 16 MiB at depth 4, and NULL at depth 1 for latency), the two transports
//! alternating within each round, stops the server, and writes
//! `benchmarks.md` and its SVG plots (made with `plotters`) into the output
//! directory, replacing what was there. `scripts/bench-report.sh` builds
//! the release binaries and runs it.
#![forbid(unsafe_code)]

mod machine;
mod measure;
mod plot;
mod report;
mod results;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Parser;

/// Measure RPC-over-RDMA against RPC over TCP and write the benchmark page.
#[derive(Debug, Parser)]
#[command(name = "bench-report")]
struct Args {
    /// The `rpcrdma` binary to measure (a release build).
    #[arg(long, value_name = "PATH")]
    rpcrdma: PathBuf,
    /// Seconds per measurement (`rpcrdma bench --seconds`).
    #[arg(long, value_name = "S", default_value_t = 4.0)]
    seconds: f64,
    /// Rounds per point; the page reports the median round.
    #[arg(long, value_name = "N", default_value_t = 3)]
    rounds: u32,
    /// Directory of the page: `benchmarks.md` and `bench/*.svg` go there.
    #[arg(long, value_name = "DIR", default_value = "docs")]
    out: PathBuf,
    /// The command that produced this run, recorded on the page.
    #[arg(long, value_name = "TEXT", default_value = "scripts/bench-report.sh")]
    generated_by: String,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if !(args.seconds > 0.0 && args.seconds <= 600.0) {
        bail!("--seconds must be above 0 and at most 600");
    }
    if args.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let before = machine::Machine::probe();
    let plan = measure::Plan::standard(args.seconds, args.rounds);
    eprintln!(
        "bench-report: {} measurements of {} s each",
        plan.len(),
        args.seconds
    );
    let runs = measure::run(&args.rpcrdma, &plan)
        .with_context(|| format!("measuring with {}", args.rpcrdma.display()))?;
    let after = machine::Machine::probe();
    let set = results::ResultSet::new(runs)?;
    let bench_dir = args.out.join("bench");
    std::fs::create_dir_all(&bench_dir)
        .with_context(|| format!("creating {}", bench_dir.display()))?;
    plot::throughput(&set, &bench_dir.join("throughput.svg"))?;
    plot::latency(&set, &bench_dir.join("latency.svg"))?;
    let page = report::page(&report::Context {
        set: &set,
        plan: &plan,
        before: &before,
        after: &after,
        generated_by: &args.generated_by,
    });
    let path = args.out.join("benchmarks.md");
    std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench-report: wrote {}", path.display());
    Ok(())
}
