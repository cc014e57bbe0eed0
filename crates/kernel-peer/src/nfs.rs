//! Scenario 1: this workspace's NFSv3 client (`nfs3::client`) against the
//! kernel's nfsd, over RPC-over-RDMA (svcrdma on siw) or over TCP. MNT goes
//! over TCP to mountd. Every step prints one line; the first failure ends
//! the run. Data read is written under `out` and data written is read from
//! `out/up1m`, so that the caller can compare both with sha256 in the
//! guest.
//!
//! Expects in the export: `big1m` (1 MiB), `f33` (33 bytes), `odd100003`,
//! `odd4097`, and a directory `many` of 2,000 entries.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context};
use bytes::{Bytes, BytesMut};
use nfs3::args::Createhow3;
use nfs3::client::{MountClient, Nfs3Client};
use nfs3::types::{Sattr3, StableHow};
use nfs3::{NfsFh3, Nfsstat3};
use oncrpc::Channel;
use rpcrdma::{Bindings, RdmaClient, RdmaConfig};

/// Where and how to reach the server.
pub struct Target {
    /// `rdma` or `tcp`.
    pub transport: String,
    /// NFS address (svcrdma: port 20049; TCP: 2049).
    pub nfs: SocketAddr,
    /// mountd's TCP address.
    pub mount: SocketAddr,
    /// The exported path.
    pub export: String,
    /// Local directory for the data read and the data to write.
    pub out: PathBuf,
    /// Suffix of the names this run creates in the export.
    pub tag: String,
}

/// Runs the scenario; exit status 0 when every step passed.
pub async fn run(t: Target) -> anyhow::Result<u8> {
    let mch = oncrpc_tcp::TcpChannel::connect(t.mount)
        .await
        .with_context(|| format!("mountd at {}", t.mount))?;
    let mount = MountClient::new(&mch).with_auth_sys(0, 0, vec![], "kernel-peer")?;
    let root = mount.mnt(&t.export).await.context("MNT")?.fhandle;
    println!("ok MNT {} (over TCP)", t.export);
    match t.transport.as_str() {
        "rdma" => {
            let mut b = Bindings::new();
            b.add(nfs3::Nfs3Binding);
            let c = RdmaClient::connect(iwarp::Device::default(), t.nfs, RdmaConfig::default(), b)
                .await
                .with_context(|| format!("RPC-over-RDMA connection to {}", t.nfs))?;
            steps(&c, &root, &t).await?;
            let s = c.stats();
            println!("rdma transport: {}", s.counters);
            println!(
                "rdma transport: {} replies by Send with Invalidate, {} zero-length RDMA Writes",
                s.remote_invalidations
                    .load(std::sync::atomic::Ordering::Relaxed),
                s.first_reply_nudges
                    .load(std::sync::atomic::Ordering::Relaxed)
            );
            c.close();
        }
        "tcp" => {
            let c = oncrpc_tcp::TcpChannel::connect(t.nfs)
                .await
                .with_context(|| format!("TCP connection to {}", t.nfs))?;
            steps(&c, &root, &t).await?;
        }
        other => bail!("transport {other}: want rdma or tcp"),
    }
    let _ = mount.umnt(&t.export).await;
    println!("nfs-client {}: every step passed", t.transport);
    Ok(0)
}

fn file_attrs() -> Sattr3 {
    Sattr3 {
        mode: Some(0o644),
        ..Default::default()
    }
}

async fn lookup<C: Channel>(
    nfs: &Nfs3Client<C>,
    dir: &NfsFh3,
    name: &str,
) -> anyhow::Result<NfsFh3> {
    Ok(nfs
        .lookup(dir, name.as_bytes())
        .await
        .with_context(|| format!("LOOKUP {name}"))?
        .object)
}

/// READ of `name` in pieces of `piece` bytes to the end; saved as out/name.
async fn read_file<C: Channel>(
    nfs: &Nfs3Client<C>,
    root: &NfsFh3,
    name: &str,
    piece: u32,
    out: &Path,
) -> anyhow::Result<usize> {
    let fh = lookup(nfs, root, name).await?;
    let mut data = Vec::new();
    loop {
        let r = nfs
            .read_into(
                &fh,
                data.len() as u64,
                piece,
                BytesMut::with_capacity(piece as usize),
            )
            .await
            .with_context(|| format!("READ {name} at {}", data.len()))?;
        data.extend_from_slice(&r.data);
        if r.eof {
            break;
        }
        ensure!(r.count > 0, "READ {name}: 0 bytes before EOF");
    }
    std::fs::write(out.join(name), &data)?;
    Ok(data.len())
}

async fn create<C: Channel>(
    nfs: &Nfs3Client<C>,
    dir: &NfsFh3,
    name: &str,
) -> anyhow::Result<NfsFh3> {
    let r = nfs
        .create(dir, name.as_bytes(), Createhow3::Unchecked(file_attrs()))
        .await
        .with_context(|| format!("CREATE {name}"))?;
    match r.obj {
        Some(fh) => Ok(fh),
        None => lookup(nfs, dir, name).await,
    }
}

async fn steps<C: Channel>(ch: C, root: &NfsFh3, t: &Target) -> anyhow::Result<()> {
    let nfs = Nfs3Client::new(ch).with_auth_sys(0, 0, vec![], "kernel-peer")?;
    let tag = &t.tag;
    let a = nfs.getattr(root).await.context("GETATTR of the root")?;
    println!("ok GETATTR root: {:?}, mode {:o}", a.ftype, a.mode);
    let big = lookup(&nfs, root, "big1m").await?;
    let a = nfs.getattr(&big).await.context("GETATTR big1m")?;
    ensure!(a.size == 1 << 20, "big1m has {} bytes", a.size);
    println!("ok LOOKUP, GETATTR big1m: {} bytes", a.size);

    // READ: 1 MiB at once, 33 bytes, odd piece sizes, across EOF.
    ensure!(
        read_file(&nfs, root, "big1m", 1 << 20, &t.out).await? == 1 << 20,
        "big1m"
    );
    println!("ok READ big1m in one 1 MiB READ");
    ensure!(
        read_file(&nfs, root, "f33", 4096, &t.out).await? == 33,
        "f33"
    );
    println!("ok READ f33 (33 bytes)");
    ensure!(
        read_file(&nfs, root, "odd100003", 32771, &t.out).await? == 100_003,
        "odd100003"
    );
    println!("ok READ odd100003 in 32771-byte READs");
    let odd = lookup(&nfs, root, "odd4097").await?;
    let r = nfs
        .read_into(&odd, 4000, 1001, BytesMut::with_capacity(1001))
        .await
        .context("READ across EOF")?;
    ensure!(
        r.count == 97 && r.eof,
        "READ of 1001 at 4000 of 4097: {} bytes, eof {}",
        r.count,
        r.eof
    );
    std::fs::write(t.out.join("odd4097-tail"), &r.data)?;
    println!("ok READ across EOF: 97 of 1001 bytes, eof");

    // WRITE: 1 MiB FILE_SYNC; 1 MiB UNSTABLE in four WRITEs, then COMMIT.
    let up = Bytes::from(std::fs::read(t.out.join("up1m")).context("out/up1m")?);
    let sync = create(&nfs, root, &format!("w-sync-{tag}")).await?;
    let w = nfs
        .write(&sync, 0, up.clone(), StableHow::FileSync)
        .await
        .context("WRITE FILE_SYNC")?;
    ensure!(
        w.count as usize == up.len() && w.committed == StableHow::FileSync,
        "WRITE FILE_SYNC: {w:?}"
    );
    println!("ok CREATE, WRITE 1 MiB FILE_SYNC");
    let unst = create(&nfs, root, &format!("w-unstable-{tag}")).await?;
    let mut verf = None;
    for (i, piece) in up.chunks(256 << 10).enumerate() {
        let off = (i * (256 << 10)) as u64;
        let w = nfs
            .write(&unst, off, up.slice_ref(piece), StableHow::Unstable)
            .await
            .context("WRITE UNSTABLE")?;
        ensure!(
            w.count as usize == piece.len(),
            "WRITE UNSTABLE: {} of {}",
            w.count,
            piece.len()
        );
        verf.get_or_insert(w.verf);
    }
    let c = nfs.commit(&unst, 0, 0).await.context("COMMIT")?;
    ensure!(
        Some(c.verf) == verf,
        "COMMIT verifier differs from the WRITEs'"
    );
    println!("ok WRITE 1 MiB UNSTABLE (4 WRITEs) + COMMIT");

    // READDIRPLUS of 2,000 entries.
    let many = lookup(&nfs, root, "many").await?;
    let entries = nfs.readdirplus_all(&many).await.context("READDIRPLUS")?;
    let n = entries
        .iter()
        .filter(|e| e.name.as_bytes().starts_with(b"entry"))
        .count();
    ensure!(n == 2000, "READDIRPLUS: {n} entries, want 2000");
    ensure!(
        entries
            .iter()
            .all(|e| e.name_attributes.is_some() || e.name.as_bytes().starts_with(b".")),
        "READDIRPLUS without attributes"
    );
    println!("ok READDIRPLUS of many: 2000 entries with attributes");

    // SYMLINK, READLINK.
    let link = format!("link-{tag}");
    nfs.symlink(root, link.as_bytes(), b"big1m", Sattr3::default())
        .await
        .context("SYMLINK")?;
    let l = lookup(&nfs, root, &link).await?;
    let r = nfs.readlink(&l).await.context("READLINK")?;
    ensure!(r.data.as_bytes() == b"big1m", "READLINK: {:?}", r.data);
    println!("ok SYMLINK, READLINK");

    // MKDIR, CREATE, RENAME, REMOVE, RMDIR.
    let dname = format!("dir-{tag}");
    let d = nfs
        .mkdir(
            root,
            dname.as_bytes(),
            Sattr3 {
                mode: Some(0o755),
                ..Default::default()
            },
        )
        .await
        .context("MKDIR")?;
    let d = match d.obj {
        Some(fh) => fh,
        None => lookup(&nfs, root, &dname).await?,
    };
    create(&nfs, &d, "a").await?;
    nfs.rename(&d, b"a", &d, b"b").await.context("RENAME")?;
    lookup(&nfs, &d, "b").await?;
    match nfs.lookup(&d, b"a").await {
        Err(e) if e.nfs_status() == Some(Nfsstat3::Noent) => {}
        other => bail!("LOOKUP of the renamed name: {other:?}"),
    }
    nfs.remove(&d, b"b").await.context("REMOVE")?;
    nfs.rmdir(root, dname.as_bytes()).await.context("RMDIR")?;
    match nfs.lookup(root, dname.as_bytes()).await {
        Err(e) if e.nfs_status() == Some(Nfsstat3::Noent) => {}
        other => bail!("LOOKUP of the removed directory: {other:?}"),
    }
    println!("ok MKDIR, CREATE, RENAME, REMOVE, RMDIR");
    Ok(())
}
