//! The file system commands of `rpcrdma nfs`: one or a few NFS calls
//! each. PATHs are relative to the export; a failure names the NFS status
//! (e.g. `LOOKUP: NFS3ERR_NOENT`).

use std::io::Write;

use anyhow::Context;
use nfs3::types::{Fattr3, Ftype3, NfsFh3, Sattr3};

use super::format;
use super::mounted::Mounted;

/// `PATH` split into its parent directory and last name; the parent is
/// resolved to a handle.
pub async fn parent_and_name<'p>(s: &Mounted, path: &'p str) -> anyhow::Result<(NfsFh3, &'p str)> {
    let trimmed = path.trim_end_matches('/');
    let (parent, name) = match trimmed.rsplit_once('/') {
        Some((p, n)) => (p, n),
        None => ("", trimmed),
    };
    if name.is_empty() || name == "." || name == ".." {
        anyhow::bail!("{path:?} does not end in a name");
    }
    let (dir, _) = s
        .nfs()
        .lookup_path(&s.root, parent)
        .await
        .with_context(|| format!("{parent:?}"))?;
    Ok((dir, name))
}

/// `PATH` resolved to its handle and attributes.
pub async fn resolve(s: &Mounted, path: &str) -> anyhow::Result<(NfsFh3, Fattr3)> {
    let (fh, attrs) = s
        .nfs()
        .lookup_path(&s.root, path)
        .await
        .with_context(|| format!("{path:?}"))?;
    let attrs = match attrs {
        Some(a) => a,
        None => s.nfs().getattr(&fh).await?,
    };
    Ok((fh, attrs))
}

/// `ls [-l] PATH`: the entries of a directory by name (without `.` and
/// `..`), or the one file PATH names.
pub async fn ls(s: &Mounted, path: &str, long: bool) -> anyhow::Result<()> {
    let (fh, attrs) = resolve(s, path).await?;
    let mut out = std::io::stdout().lock();
    if attrs.ftype != Ftype3::Dir {
        let name = path.trim_end_matches('/');
        let line = if long {
            let target = link_target(s, &fh, &attrs).await;
            format::long_line(&attrs, name, target.as_deref())
        } else {
            name.to_string()
        };
        writeln!(out, "{line}")?;
        return Ok(());
    }
    let mut entries = s
        .nfs()
        .readdirplus_all(&fh)
        .await
        .with_context(|| format!("{path:?}"))?;
    entries.retain(|e| e.name.as_bytes() != b"." && e.name.as_bytes() != b"..");
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for e in &entries {
        let name = String::from_utf8_lossy(e.name.as_bytes());
        if !long {
            writeln!(out, "{name}")?;
            continue;
        }
        let attrs = match (e.name_attributes, &e.name_handle) {
            (Some(a), _) => a,
            (None, Some(h)) => s.nfs().getattr(h).await?,
            (None, None) => {
                let l = s.nfs().lookup(&fh, e.name.as_bytes()).await?;
                match l.obj_attributes {
                    Some(a) => a,
                    None => s.nfs().getattr(&l.object).await?,
                }
            }
        };
        let target = match &e.name_handle {
            Some(h) => link_target(s, h, &attrs).await,
            None => None,
        };
        writeln!(
            out,
            "{}",
            format::long_line(&attrs, &name, target.as_deref())
        )?;
    }
    Ok(())
}

/// The target of a symbolic link (`None` for other types or on failure).
async fn link_target(s: &Mounted, fh: &NfsFh3, a: &Fattr3) -> Option<String> {
    if a.ftype != Ftype3::Lnk {
        return None;
    }
    let r = s.nfs().readlink(fh).await.ok()?;
    Some(String::from_utf8_lossy(r.data.as_bytes()).into_owned())
}

/// `stat PATH`.
pub async fn stat(s: &Mounted, path: &str) -> anyhow::Result<()> {
    let (fh, _) = resolve(s, path).await?;
    // GETATTR itself, so the attributes are the server's current ones.
    let attrs = s.nfs().getattr(&fh).await?;
    println!("{}", format::stat_block(path, &attrs));
    Ok(())
}

/// `cat PATH`: READs of the preferred size, in order, to stdout.
pub async fn cat(s: &Mounted, path: &str) -> anyhow::Result<()> {
    let (fh, attrs) = resolve(s, path).await?;
    if attrs.ftype == Ftype3::Dir {
        anyhow::bail!("{path:?}: NFS3ERR_ISDIR (a directory)");
    }
    let size = s.read_size();
    let mut out = std::io::stdout().lock();
    let mut offset = 0u64;
    loop {
        let buf = bytes::BytesMut::with_capacity(size as usize);
        let r = super::read::read(s.nfs(), &fh, offset, size, buf).await?;
        out.write_all(&r.data)?;
        offset += r.data.len() as u64;
        if r.eof || r.data.is_empty() {
            break;
        }
    }
    out.flush()?;
    Ok(())
}

/// `mkdir PATH` (mode 0755).
pub async fn mkdir(s: &Mounted, path: &str) -> anyhow::Result<()> {
    let (dir, name) = parent_and_name(s, path).await?;
    let attrs = Sattr3 {
        mode: Some(0o755),
        ..Sattr3::default()
    };
    s.nfs()
        .mkdir(&dir, name.as_bytes(), attrs)
        .await
        .with_context(|| format!("mkdir {path:?}"))?;
    Ok(())
}

/// `rm PATH` (REMOVE).
pub async fn rm(s: &Mounted, path: &str) -> anyhow::Result<()> {
    let (dir, name) = parent_and_name(s, path).await?;
    s.nfs()
        .remove(&dir, name.as_bytes())
        .await
        .with_context(|| format!("rm {path:?}"))?;
    Ok(())
}

/// `rmdir PATH` (RMDIR).
pub async fn rmdir(s: &Mounted, path: &str) -> anyhow::Result<()> {
    let (dir, name) = parent_and_name(s, path).await?;
    s.nfs()
        .rmdir(&dir, name.as_bytes())
        .await
        .with_context(|| format!("rmdir {path:?}"))?;
    Ok(())
}

/// `mv FROM TO` (RENAME).
pub async fn mv(s: &Mounted, from: &str, to: &str) -> anyhow::Result<()> {
    let (from_dir, from_name) = parent_and_name(s, from).await?;
    let (to_dir, to_name) = parent_and_name(s, to).await?;
    s.nfs()
        .rename(&from_dir, from_name.as_bytes(), &to_dir, to_name.as_bytes())
        .await
        .with_context(|| format!("mv {from:?} {to:?}"))?;
    Ok(())
}

/// `ln -s TARGET PATH` (SYMLINK).
pub async fn ln_s(s: &Mounted, target: &str, path: &str) -> anyhow::Result<()> {
    let (dir, name) = parent_and_name(s, path).await?;
    s.nfs()
        .symlink(&dir, name.as_bytes(), target.as_bytes(), Sattr3::default())
        .await
        .with_context(|| format!("ln -s {target:?} {path:?}"))?;
    Ok(())
}

/// `readlink PATH` (READLINK).
pub async fn readlink(s: &Mounted, path: &str) -> anyhow::Result<()> {
    let (dir, name) = parent_and_name(s, path).await?;
    let l = s
        .nfs()
        .lookup(&dir, name.as_bytes())
        .await
        .with_context(|| format!("{path:?}"))?;
    let r = s
        .nfs()
        .readlink(&l.object)
        .await
        .with_context(|| format!("readlink {path:?}"))?;
    let mut out = std::io::stdout().lock();
    out.write_all(r.data.as_bytes())?;
    writeln!(out)?;
    Ok(())
}

/// `df` (FSSTAT of the root, and FSINFO's transfer sizes).
pub async fn df(s: &Mounted) -> anyhow::Result<()> {
    let f = s.nfs().fsstat(&s.root).await?;
    let i = &s.fsinfo;
    let used = f.tbytes.saturating_sub(f.fbytes);
    let pct = if f.tbytes > 0 {
        used as f64 * 100.0 / f.tbytes as f64
    } else {
        0.0
    };
    println!(
        "{:<40} {:>16} {:>16} {:>16} {:>5}",
        "Export", "Size", "Used", "Available", "Use%"
    );
    println!(
        "{:<40} {:>16} {:>16} {:>16} {:>4.0}%",
        s.url.to_string(),
        f.tbytes,
        used,
        f.abytes,
        pct
    );
    println!(
        "files: {} total, {} free, {} available; rtmax {} rtpref {} wtmax {} wtpref {} dtpref {}",
        f.tfiles, f.ffiles, f.afiles, i.rtmax, i.rtpref, i.wtmax, i.wtpref, i.dtpref
    );
    Ok(())
}
