//! Running the measurements: one `rpcrdma serve`, then `rpcrdma bench
//! --json` per point and transport.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// The two transports compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Transport {
    /// RPC-over-RDMA on the software iWARP provider (`rdma://`).
    Rdma,
    /// ONC RPC over TCP (`tcp://`).
    Tcp,
}

impl Transport {
    /// Both, RDMA first.
    pub const BOTH: [Transport; 2] = [Transport::Rdma, Transport::Tcp];

    /// The URL scheme.
    pub fn scheme(self) -> &'static str {
        match self {
            Transport::Rdma => "rdma",
            Transport::Tcp => "tcp",
        }
    }

    /// How the page names it.
    pub fn label(self) -> &'static str {
        match self {
            Transport::Rdma => "RPC-over-RDMA",
            Transport::Tcp => "RPC over TCP",
        }
    }
}

/// One measured point: a procedure, a data size and a depth.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Point {
    /// `null`, `get` or `put`.
    pub proc_: &'static str,
    /// Data size in bytes (0 for NULL).
    pub size: u64,
    /// Calls in flight on the one connection.
    pub depth: u32,
}

impl Point {
    /// The `--size` argument as the page shows it.
    pub fn size_arg(&self) -> String {
        size_label(self.size)
    }

    /// The arguments of `rpcrdma bench` after the URL.
    pub fn bench_args(&self, seconds: f64) -> Vec<String> {
        let mut a = vec!["--proc".to_owned(), self.proc_.to_owned()];
        if self.size > 0 {
            a.push("--size".into());
            a.push(self.size_arg());
        }
        a.push("--depth".into());
        a.push(self.depth.to_string());
        a.push("--seconds".into());
        a.push(format!("{seconds}"));
        a.push("--json".into());
        a
    }
}

/// `4096` → `4KiB`, `1048576` → `1MiB` (binary units, as `rpcrdma` takes).
pub fn size_label(n: u64) -> String {
    match n {
        0 => "0".into(),
        n if n % (1 << 20) == 0 => format!("{}MiB", n >> 20),
        n if n % (1 << 10) == 0 => format!("{}KiB", n >> 10),
        n => n.to_string(),
    }
}

/// Data sizes of the throughput points: 4 KiB to 16 MiB, by factors of 4.
pub const SIZES: [u64; 7] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
];

/// Calls in flight for the throughput points.
pub const BULK_DEPTH: u32 = 4;

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Seconds per measurement.
    pub seconds: f64,
    /// Rounds per point.
    pub rounds: u32,
    /// The points, in the order they run within a round.
    pub points: Vec<Point>,
}

impl Plan {
    /// GET and PUT at every size of [`SIZES`] at depth [`BULK_DEPTH`], and
    /// NULL at depth 1 for latency.
    pub fn standard(seconds: f64, rounds: u32) -> Plan {
        let mut points = Vec::new();
        for proc_ in ["get", "put"] {
            for size in SIZES {
                points.push(Point {
                    proc_,
                    size,
                    depth: BULK_DEPTH,
                });
            }
        }
        points.push(Point {
            proc_: "null",
            size: 0,
            depth: 1,
        });
        Plan {
            seconds,
            rounds,
            points,
        }
    }

    /// Measurements in all (points × transports × rounds).
    pub fn len(&self) -> usize {
        self.points.len() * 2 * self.rounds as usize
    }
}

/// The server command line (after the binary).
pub const SERVE_ARGS: [&str; 5] = [
    "serve",
    "--listen",
    "127.0.0.1:0",
    "--tcp-listen",
    "127.0.0.1:0",
];

/// One `rpcrdma bench` run.
#[derive(Debug, Clone)]
pub struct Run {
    /// What was measured.
    pub point: Point,
    /// Over which transport.
    pub transport: Transport,
    /// Round, from 1.
    pub round: u32,
    /// The command as run (binary named `rpcrdma`).
    pub command: String,
    /// Its JSON output.
    pub json: serde_json::Value,
}

/// A running `rpcrdma serve`, stopped with SIGTERM on drop.
struct Server {
    child: Child,
    rdma: SocketAddr,
    tcp: SocketAddr,
}

/// The address after the word `transport` in the server's ready line.
pub fn listener(line: &str, transport: &str) -> Option<SocketAddr> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[0] == transport)
        .and_then(|w| w[1].trim_end_matches([',', ')']).parse().ok())
}

impl Server {
    fn start(bin: &Path) -> Result<Server> {
        let mut child = Command::new(bin)
            .args(SERVE_ARGS)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .context("reading the server's ready line")?;
        let (Some(rdma), Some(tcp)) = (listener(&line, "rdma"), listener(&line, "tcp")) else {
            let _ = child.kill();
            bail!("unexpected ready line from rpcrdma serve: {line:?}");
        };
        Ok(Server { child, rdma, tcp })
    }

    fn url(&self, t: Transport) -> String {
        let addr = match t {
            Transport::Rdma => self.rdma,
            Transport::Tcp => self.tcp,
        };
        format!("{}://{addr}", t.scheme())
    }

    fn stop(mut self) -> Result<()> {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(s) = self.child.try_wait()? {
                return if s.success() {
                    Ok(())
                } else {
                    Err(anyhow!("rpcrdma serve exited {s} after SIGTERM"))
                };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("rpcrdma serve did not stop within 20 s of SIGTERM")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs every measurement of `plan` with the binary `bin`.
pub fn run(bin: &Path, plan: &Plan) -> Result<Vec<Run>> {
    let server = Server::start(bin)?;
    let mut runs = Vec::with_capacity(plan.len());
    let total = plan.len();
    for round in 1..=plan.rounds {
        for point in &plan.points {
            // Alternate which transport goes first, so neither always
            // runs on a machine warmed (or disturbed) by the other.
            let mut order = Transport::BOTH;
            if round % 2 == 0 {
                order.reverse();
            }
            for t in order {
                let url = server.url(t);
                let args = point.bench_args(plan.seconds);
                let out = Command::new(bin)
                    .arg("bench")
                    .arg(&url)
                    .args(&args)
                    .output()
                    .context("running rpcrdma bench")?;
                let command = format!("rpcrdma bench {url} {}", args.join(" "));
                let json: serde_json::Value =
                    serde_json::from_slice(&out.stdout).with_context(|| {
                        format!(
                            "`{command}` printed no JSON: {}",
                            String::from_utf8_lossy(&out.stderr)
                        )
                    })?;
                if !out.status.success() || json["errors"].as_u64() != Some(0) {
                    bail!(
                        "`{command}` failed ({}): {}",
                        out.status,
                        json["first_error"]
                    );
                }
                runs.push(Run {
                    point: point.clone(),
                    transport: t,
                    round,
                    command,
                    json,
                });
                eprintln!(
                    "bench-report: {}/{total} {} {} {} over {}",
                    runs.len(),
                    point.proc_,
                    point.size_arg(),
                    format_args!("depth {}", point.depth),
                    t.scheme()
                );
            }
        }
    }
    server.stop()?;
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(size_label(4096), "4KiB");
        assert_eq!(size_label(16 << 20), "16MiB");
        assert_eq!(size_label(1000), "1000");
    }

    #[test]
    fn the_ready_line_names_both_listeners() {
        let line = "rpcrdma: listening on rdma 127.0.0.1:40001 and tcp 127.0.0.1:40002 (RDMATEST program 0x20005244, version 1, max data 16 MiB)\n";
        assert_eq!(
            listener(line, "rdma"),
            Some("127.0.0.1:40001".parse().unwrap())
        );
        assert_eq!(
            listener(line, "tcp"),
            Some("127.0.0.1:40002".parse().unwrap())
        );
    }

    #[test]
    fn the_standard_plan_spans_4k_to_16m() {
        let p = Plan::standard(1.0, 2);
        assert_eq!(p.points.len(), 15);
        assert_eq!(p.len(), 60);
        let get: Vec<u64> = p
            .points
            .iter()
            .filter(|x| x.proc_ == "get")
            .map(|x| x.size)
            .collect();
        assert_eq!(get.first(), Some(&4096));
        assert_eq!(get.last(), Some(&(16 << 20)));
        assert_eq!(
            p.points[0].bench_args(1.5).join(" "),
            "--proc get --size 4KiB --depth 4 --seconds 1.5 --json"
        );
    }
}
