//! `get` and `put`: a file streamed in calls of the server's preferred
//! size (FSINFO `rtpref`/`wtpref`) with several calls in flight, a
//! progress bar on a terminal, and the throughput at the end.
//!
//! `put` writes UNSTABLE and ends with COMMIT (RFC 1813 §3.3.7, §3.3.21):
//! data written under a write verifier other than the one COMMIT returns
//! may have been lost by a server restart, so every such range is written
//! again and committed again, until the verifiers agree.

use std::io::IsTerminal;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::{Bytes, BytesMut};
use nfs3::args::Createhow3;
use nfs3::client::Nfs3Client;
use nfs3::types::{Ftype3, NfsFh3, Sattr3, StableHow, Writeverf3};
use tokio::task::JoinSet;

use super::commands::{parent_and_name, resolve};
use super::mounted::Mounted;
use super::wire::Wire;
use crate::size::format_size;

/// How many times `put` writes again after a COMMIT verifier mismatch.
const MAX_RESENDS: u32 = 4;

fn progress(total: u64, what: &str) -> Option<indicatif::ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(what.to_string());
        bar
    })
}

fn rate(bytes: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-9);
    format!(
        "{} in {:.3} s, {:.1} MiB/s",
        format_size(bytes),
        secs,
        bytes as f64 / secs / (1 << 20) as f64
    )
}

/// `get REMOTE LOCAL`.
pub async fn get(s: &Mounted, remote: &str, local: &Path, in_flight: usize) -> anyhow::Result<()> {
    let (fh, attrs) = resolve(s, remote).await?;
    if attrs.ftype != Ftype3::Reg {
        anyhow::bail!("{remote:?} is not a regular file");
    }
    let file = std::fs::File::create(local)
        .with_context(|| format!("cannot create {}", local.display()))?;
    let chunk = s.read_size();
    let mut end = attrs.size;
    let bar = progress(end, remote);
    let start = Instant::now();
    let nfs = s.nfs().clone();
    // Ranges still to read, and the calls in flight.
    let mut todo: Vec<(u64, u32)> = Vec::new();
    let mut next = 0u64;
    let mut tasks = JoinSet::new();
    let mut done = 0u64;
    loop {
        while tasks.len() < in_flight {
            let (offset, count) = if let Some(r) = todo.pop() {
                r
            } else if next < end {
                let count = (end - next).min(u64::from(chunk)) as u32;
                next += u64::from(count);
                (next - u64::from(count), count)
            } else {
                break;
            };
            let nfs = nfs.clone();
            let fh = fh.clone();
            tasks.spawn(async move {
                let buf = BytesMut::with_capacity(count as usize);
                let r = super::read::read(&nfs, &fh, offset, count, buf).await;
                (offset, count, r)
            });
        }
        let Some(joined) = tasks.join_next().await else {
            break;
        };
        let (offset, count, r) = joined.context("a READ task failed")?;
        let r = r.with_context(|| format!("get {remote:?} at offset {offset}"))?;
        let got = r.data.len() as u64;
        file.write_all_at(&r.data, offset)
            .with_context(|| format!("cannot write {}", local.display()))?;
        done += got;
        if let Some(b) = &bar {
            b.set_position(done);
        }
        if got < u64::from(count) {
            if r.eof || got == 0 {
                // The file is shorter than it was: it ends here.
                end = end.min(offset + got);
                next = next.min(end);
                todo.retain(|&(o, _)| o < end);
            } else {
                todo.push((offset + got, count - got as u32));
            }
        }
    }
    file.set_len(end)
        .with_context(|| format!("cannot set the size of {}", local.display()))?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    println!(
        "rpcrdma nfs: get {remote} -> {}: {}",
        local.display(),
        rate(end, start.elapsed())
    );
    Ok(())
}

/// What one WRITE call covered.
struct Written {
    offset: u64,
    len: u32,
    verf: Writeverf3,
}

/// `put LOCAL REMOTE`.
pub async fn put(s: &Mounted, local: &Path, remote: &str, in_flight: usize) -> anyhow::Result<()> {
    let file = Arc::new(
        std::fs::File::open(local).with_context(|| format!("cannot open {}", local.display()))?,
    );
    let size = file
        .metadata()
        .with_context(|| format!("cannot stat {}", local.display()))?
        .len();
    let (dir, name) = parent_and_name(s, remote).await?;
    // UNCHECKED with size 0: creates the file or truncates the one there.
    let created = s
        .nfs()
        .create(
            &dir,
            name.as_bytes(),
            Createhow3::Unchecked(Sattr3 {
                mode: Some(0o644),
                size: Some(0),
                ..Sattr3::default()
            }),
        )
        .await
        .with_context(|| format!("put {remote:?}"))?;
    let fh = match created.obj {
        Some(fh) => fh,
        None => s.nfs().lookup(&dir, name.as_bytes()).await?.object,
    };
    let chunk = s.write_size();
    let bar = progress(size, remote);
    let start = Instant::now();
    let mut ranges: Vec<(u64, u32)> = (0..size.div_ceil(u64::from(chunk)))
        .map(|i| {
            let offset = i * u64::from(chunk);
            (offset, (size - offset).min(u64::from(chunk)) as u32)
        })
        .collect();
    let mut resends = 0;
    loop {
        let written = write_ranges(s.nfs(), &fh, &file, ranges, in_flight, bar.as_ref()).await?;
        let commit = s
            .nfs()
            .commit(&fh, 0, 0)
            .await
            .with_context(|| format!("put {remote:?}: COMMIT"))?;
        ranges = written
            .iter()
            .filter(|w| w.verf != commit.verf)
            .map(|w| (w.offset, w.len))
            .collect();
        if ranges.is_empty() {
            break;
        }
        resends += 1;
        if resends > MAX_RESENDS {
            anyhow::bail!(
                "put {remote:?}: the server's write verifier kept changing ({MAX_RESENDS} resends)"
            );
        }
        eprintln!(
            "rpcrdma nfs: the write verifier changed (server restart?): writing {} range(s) again",
            ranges.len()
        );
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    println!(
        "rpcrdma nfs: put {} -> {remote}: {}, committed",
        local.display(),
        rate(size, start.elapsed())
    );
    Ok(())
}

/// WRITEs (UNSTABLE) every range of `file` with up to `in_flight` calls
/// at once; a short write is continued. Returns what each call covered.
async fn write_ranges(
    nfs: &Arc<Nfs3Client<Wire>>,
    fh: &NfsFh3,
    file: &Arc<std::fs::File>,
    mut ranges: Vec<(u64, u32)>,
    in_flight: usize,
    bar: Option<&indicatif::ProgressBar>,
) -> anyhow::Result<Vec<Written>> {
    ranges.reverse();
    let mut written = Vec::new();
    let mut tasks = JoinSet::new();
    let mut done = bar.map_or(0, |b| b.position());
    loop {
        while tasks.len() < in_flight {
            let Some((offset, len)) = ranges.pop() else {
                break;
            };
            let mut buf = vec![0u8; len as usize];
            file.read_exact_at(&mut buf, offset)
                .context("cannot read the local file (did it shrink?)")?;
            let nfs = nfs.clone();
            let fh = fh.clone();
            tasks.spawn(async move {
                let r = nfs
                    .write(&fh, offset, Bytes::from(buf), StableHow::Unstable)
                    .await;
                (offset, len, r)
            });
        }
        let Some(joined) = tasks.join_next().await else {
            break;
        };
        let (offset, len, r) = joined.context("a WRITE task failed")?;
        let ok = r.with_context(|| format!("WRITE at offset {offset}"))?;
        if ok.count == 0 && len > 0 {
            anyhow::bail!("WRITE at offset {offset}: the server wrote nothing");
        }
        written.push(Written {
            offset,
            len: ok.count,
            verf: ok.verf,
        });
        if ok.count < len {
            ranges.push((offset + u64::from(ok.count), len - ok.count));
        }
        done += u64::from(ok.count);
        if let Some(b) = bar {
            b.set_position(done);
        }
    }
    Ok(written)
}
