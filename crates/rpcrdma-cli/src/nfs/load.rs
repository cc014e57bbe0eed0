//! `rpcrdma nfs URL bench read|write`: NFS READ or WRITE of SIZE bytes per
//! call against one file, measured like `rpcrdma bench` (the same
//! measurement, summary and JSON: [`crate::bench::measure_loads`]).
//!
//! Offsets are SIZE-aligned, sequential (one counter shared by every
//! call, wrapping around) or, with `--random`, uniformly random, within
//! the region: READ, the file's size; WRITE, the first 64 MiB or the
//! file's size if larger (so a long run does not fill the disk). WRITEs
//! are UNSTABLE (the way a client streams data); the run ends with one
//! COMMIT, outside the measurement. Every call is checked: READ must
//! return SIZE bytes, WRITE must write SIZE bytes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nfs3::args::Createhow3;
use nfs3::client::Nfs3Client;
use nfs3::types::{Ftype3, NfsFh3, Sattr3, StableHow};

use super::commands::parent_and_name;
use super::mounted::Mounted;
use super::wire::Wire;
use super::{BenchArgs, BenchOp, NfsArgs};
use crate::bench::{self, Load, Outcome, RunInfo};
use crate::size::format_size;

/// The region a WRITE run writes in when the file is smaller.
const WRITE_REGION: u64 = 64 << 20;

/// One task of the run.
struct NfsLoad {
    nfs: Arc<Nfs3Client<Wire>>,
    fh: NfsFh3,
    op: BenchOp,
    size: u32,
    /// SIZE-aligned slots in the region.
    slots: u64,
    random: bool,
    /// The next sequential slot (shared by every task).
    next: Arc<AtomicU64>,
    rng: u64,
    data: Bytes,
    /// READ: the previous call's buffer, reused once nothing holds it.
    spare: Option<BytesMut>,
}

impl NfsLoad {
    /// splitmix64: a different, well-spread stream per task.
    fn random_slot(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % self.slots
    }
}

impl Load for NfsLoad {
    async fn call(&mut self, _seq: u64) -> Result<u64, String> {
        let slot = if self.random {
            self.random_slot()
        } else {
            self.next.fetch_add(1, Relaxed) % self.slots
        };
        let offset = slot * u64::from(self.size);
        match self.op {
            BenchOp::Read => {
                let len = self.size as usize;
                let buf = self
                    .spare
                    .take()
                    .filter(|b| b.capacity() >= len)
                    .unwrap_or_else(|| BytesMut::with_capacity(len));
                let r = super::read::read(&self.nfs, &self.fh, offset, self.size, buf)
                    .await
                    .map_err(|e| e.to_string())?;
                let n = r.data.len();
                if n != len {
                    return Err(format!("READ at {offset}: {n} of {len} bytes"));
                }
                if let Ok(b) = r.data.try_into_mut() {
                    self.spare = Some(b);
                }
                Ok(n as u64)
            }
            BenchOp::Write => {
                let r = self
                    .nfs
                    .write(&self.fh, offset, self.data.clone(), StableHow::Unstable)
                    .await
                    .map_err(|e| e.to_string())?;
                if r.count != self.size {
                    return Err(format!(
                        "WRITE at {offset}: {} of {} bytes",
                        r.count, self.size
                    ));
                }
                Ok(u64::from(self.size))
            }
        }
    }
}

/// Runs the benchmark.
pub async fn run(args: &NfsArgs, b: &BenchArgs) -> anyhow::Result<()> {
    let op_name = match b.op {
        BenchOp::Read => "READ",
        BenchOp::Write => "WRITE",
    };
    let run = RunInfo {
        transport: bench::transport_name(&args.url.target),
        url: args.url.to_string(),
        proc_name: op_name,
        what: format!(
            "NFS {op_name} {} {} of {}",
            format_size(b.size.into()),
            if b.random { "random" } else { "sequential" },
            b.file
        ),
        size: b.size,
        depth: b.depth,
        connections: b.connections,
    };
    let mounted = match setup(args, b).await {
        Ok(s) => s,
        Err(e) => {
            if b.json {
                let o = Outcome::failed_setup(crate::report::error_chain(&e));
                println!("{}", bench::run_json(&o, &run));
            }
            return Err(e);
        }
    };
    let (mounted, fh, slots) = mounted;
    let next = Arc::new(AtomicU64::new(0));
    let data = Bytes::from(
        (0..b.size as usize)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0])
            .collect::<Vec<u8>>(),
    );
    let mut loads = Vec::new();
    for (c, nfs) in mounted.clients.iter().enumerate() {
        for d in 0..b.depth {
            loads.push(NfsLoad {
                nfs: nfs.clone(),
                fh: fh.clone(),
                op: b.op,
                size: b.size,
                slots,
                random: b.random,
                next: next.clone(),
                rng: (c * b.depth + d) as u64 * 0x1234_5678_9abc_def1 + 1,
                data: data.clone(),
                spare: None,
            });
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let interrupted = Arc::new(AtomicBool::new(false));
    let on_sigint = {
        let stop = stop.clone();
        let interrupted = interrupted.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupted.store(true, Relaxed);
                stop.store(true, Relaxed);
                eprintln!("rpcrdma: SIGINT: ending the measurement early");
            }
        })
    };
    let mut outcome = bench::measure_loads(
        loads,
        b.seconds,
        b.calls,
        bench::progress_bar(b.seconds),
        stop,
    )
    .await;
    on_sigint.abort();
    outcome.interrupted = interrupted.load(Relaxed);
    if b.op == BenchOp::Write {
        // Outside the measurement: leave the data durable.
        let commit = tokio::time::timeout(Duration::from_secs(30), mounted.nfs().commit(&fh, 0, 0));
        if let Ok(Err(e)) = commit.await {
            eprintln!("rpcrdma: warning: final COMMIT failed: {e}");
        }
    }
    mounted.close().await;
    if b.json {
        println!("{}", bench::run_json(&outcome, &run));
    } else {
        bench::print_run_summary(&outcome, &run, "rpcrdma nfs bench");
    }
    if outcome.errors > 0 {
        anyhow::bail!(
            "{} of {} calls of {} failed; first error: {}",
            outcome.errors,
            outcome.calls,
            run.what,
            outcome.first_error.as_deref().unwrap_or("?")
        );
    }
    Ok(())
}

/// Mounts, opens the connections and the file; returns the number of
/// SIZE-aligned slots the run uses.
async fn setup(args: &NfsArgs, b: &BenchArgs) -> anyhow::Result<(Mounted, NfsFh3, u64)> {
    if b.size == 0 {
        anyhow::bail!("--size must be at least 1 byte");
    }
    let mounted = Mounted::open(args, b.connections).await?;
    let (rtmax, wtmax) = mounted.max_io();
    let max = if b.op == BenchOp::Read { rtmax } else { wtmax };
    if b.size > max {
        anyhow::bail!(
            "--size {} is above the server's {} of {}",
            format_size(b.size.into()),
            if b.op == BenchOp::Read {
                "rtmax"
            } else {
                "wtmax"
            },
            format_size(max.into())
        );
    }
    let (dir, name) = parent_and_name(&mounted, &b.file).await?;
    let nfs = mounted.nfs();
    let (fh, file_size) = match nfs.lookup(&dir, name.as_bytes()).await {
        Ok(l) => {
            let a = match l.obj_attributes {
                Some(a) => a,
                None => nfs.getattr(&l.object).await?,
            };
            if a.ftype != Ftype3::Reg {
                anyhow::bail!("{:?} is not a regular file", b.file);
            }
            (l.object, a.size)
        }
        Err(e) if b.op == BenchOp::Write && e.nfs_status() == Some(nfs3::Nfsstat3::Noent) => {
            let c = nfs
                .create(
                    &dir,
                    name.as_bytes(),
                    Createhow3::Unchecked(Sattr3 {
                        mode: Some(0o644),
                        ..Sattr3::default()
                    }),
                )
                .await?;
            let fh = match c.obj {
                Some(fh) => fh,
                None => nfs.lookup(&dir, name.as_bytes()).await?.object,
            };
            (fh, 0)
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("{:?}", b.file))),
    };
    let region = match b.op {
        BenchOp::Read => file_size,
        BenchOp::Write => file_size.max(WRITE_REGION),
    };
    let slots = region / u64::from(b.size);
    if slots == 0 {
        anyhow::bail!(
            "{:?} holds {} bytes: fewer than one --size of {}",
            b.file,
            file_size,
            format_size(b.size.into())
        );
    }
    Ok((mounted, fh, slots))
}
