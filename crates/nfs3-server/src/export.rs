//! [`Export`]: one served directory — its root descriptor, identity,
//! write verifier, and the caches that turn handles into open objects.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, Statx, StatxFlags};
use rustix::io::Errno;

use crate::cred::{Owner, S_IFDIR, S_IFMT, S_IFREG};
use crate::fh::{fnv1a, FhError, FileHandle, FileId};
use crate::locate::{Locations, MAX_DEPTH};
use crate::lru::Lru;
use crate::options::ExportOptions;
use crate::status::{NfsErr, NfsResult};

/// Open descriptors kept (regular files and directories), LRU.
pub const FD_CACHE_SIZE: usize = 256;
/// How long a cached descriptor is trusted to still be inside the export
/// before it is checked again (a directory's `..` chain, anything else's
/// location from the root): an object moved out of the export by a local
/// user stays reachable through its handle for at most this long.
pub const RECHECK_INTERVAL: Duration = Duration::from_secs(1);
/// Handles remembered as naming nothing (after a walk did not find them).
pub const NEGATIVE_CACHE_SIZE: usize = 4096;
/// How long a negative result is trusted.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(30);
/// At most one walk of the export starts in this interval; a handle that
/// misses every cache meanwhile is answered NFS3ERR_STALE.
pub const WALK_INTERVAL: Duration = Duration::from_secs(2);
/// A walk visits at most this many directory entries.
pub const WALK_MAX_ENTRIES: u64 = 1 << 20;

/// Why an export could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The directory could not be opened or examined.
    #[error("cannot open export {path}: {source}")]
    Open {
        /// The path given.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

/// Counters of an export (monotonic, for tests and diagnostics).
#[derive(Debug, Default)]
pub struct ExportCounters {
    /// Descriptors opened for objects (fd-cache misses).
    pub fd_opens: AtomicU64,
    /// Walks of the export run to locate handles.
    pub walks: AtomicU64,
    /// Handles answered STALE or BADHANDLE.
    pub bad_handles: AtomicU64,
}

#[derive(Debug, Default)]
struct WalkState {
    last_start: Option<Instant>,
    last_end: Option<Instant>,
}

/// An object of the export, open: a descriptor and its attributes as just
/// read.
///
/// The descriptor is a directory opened `O_RDONLY|O_DIRECTORY`, a regular
/// file opened read-write (read-only on a read-only export), or an
/// `O_PATH|O_NOFOLLOW` descriptor for anything else (symbolic links,
/// devices, FIFOs, sockets): the server never opens those for I/O.
#[derive(Debug, Clone)]
pub struct Obj {
    /// Identity (the handle's contents).
    pub id: FileId,
    /// The descriptor.
    pub fd: Arc<OwnedFd>,
    /// Attributes.
    pub st: Statx,
}

impl Obj {
    /// Owner, group and mode, for permission checks.
    pub fn owner(&self) -> Owner {
        owner_of(&self.st)
    }
    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        u32::from(self.st.stx_mode) & S_IFMT == S_IFDIR
    }
    /// Whether this is a regular file.
    pub fn is_reg(&self) -> bool {
        u32::from(self.st.stx_mode) & S_IFMT == S_IFREG
    }
    /// Read the attributes again.
    pub fn restat(&mut self) -> NfsResult<()> {
        self.st = stat_fd(self.fd.as_fd())?;
        Ok(())
    }
}

/// Owner, group and mode of a `statx` result.
pub fn owner_of(st: &Statx) -> Owner {
    Owner {
        uid: st.stx_uid,
        gid: st.stx_gid,
        mode: u32::from(st.stx_mode),
    }
}

/// The identity of a `statx` result.
pub fn file_id(st: &Statx) -> FileId {
    let has_btime = st.stx_mask & StatxFlags::BTIME.bits() != 0;
    FileId {
        ino: st.stx_ino,
        btime_sec: if has_btime { st.stx_btime.tv_sec } else { 0 },
        btime_nsec: if has_btime { st.stx_btime.tv_nsec } else { 0 },
    }
}

const STATX_MASK: StatxFlags = StatxFlags::BASIC_STATS.union(StatxFlags::BTIME);

/// `statx` of a descriptor itself (never following a symlink).
pub fn stat_fd(fd: BorrowedFd<'_>) -> rustix::io::Result<Statx> {
    rfs::statx(
        fd,
        "",
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        STATX_MASK,
    )
}

/// `statx` of `name` in `dir`, not following a symlink.
pub fn stat_at(dir: BorrowedFd<'_>, name: &[u8]) -> rustix::io::Result<Statx> {
    rfs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Open a subdirectory `name` of `dir` without following a symlink.
pub fn open_dir_at(dir: BorrowedFd<'_>, name: &[u8]) -> rustix::io::Result<OwnedFd> {
    rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// One served directory. See the crate documentation for the design.
#[derive(Debug)]
pub struct Export {
    path: PathBuf,
    opts: ExportOptions,
    root: Arc<OwnedFd>,
    root_id: FileId,
    dev: (u32, u32),
    export_id: u64,
    verifier: std::sync::atomic::AtomicU64,
    server_is_root: bool,
    /// Open descriptors, with when each was last found inside the export.
    fds: Mutex<Lru<FileId, (Arc<OwnedFd>, Instant)>>,
    locs: Mutex<Locations>,
    negative: Mutex<Lru<FileId, Instant>>,
    walk: Mutex<WalkState>,
    counters: ExportCounters,
}

impl Export {
    /// Open `dir` for serving. `dir` is resolved once, here, by the
    /// process (it is the administrator's path); everything below it is
    /// reached only relative to its descriptor.
    pub fn open(dir: &Path, opts: ExportOptions) -> Result<Arc<Export>, ExportError> {
        let err = |source: std::io::Error| ExportError::Open {
            path: dir.to_path_buf(),
            source,
        };
        let root = rfs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| err(e.into()))?;
        let st = stat_fd(root.as_fd()).map_err(|e| err(e.into()))?;
        let root_id = file_id(&st);
        let export_id = fnv1a(&[
            b"nfs3-server export",
            &root_id.ino.to_be_bytes(),
            &root_id.btime_sec.to_be_bytes(),
            &root_id.btime_nsec.to_be_bytes(),
        ]);
        let mut opts = opts;
        opts.max_io = opts.max_io.clamp(4096, nfs3::types::MAX_IO_SIZE);
        Ok(Arc::new(Export {
            path: dir.to_path_buf(),
            opts,
            root: Arc::new(root),
            root_id,
            dev: (st.stx_dev_major, st.stx_dev_minor),
            export_id,
            verifier: std::sync::atomic::AtomicU64::new(new_write_verifier()),
            server_is_root: rustix::process::geteuid().is_root(),
            fds: Mutex::new(Lru::new(FD_CACHE_SIZE)),
            locs: Mutex::new(Locations::new(root_id.ino)),
            negative: Mutex::new(Lru::new(NEGATIVE_CACHE_SIZE)),
            walk: Mutex::new(WalkState::default()),
            counters: ExportCounters::default(),
        }))
    }

    /// The directory, as given to [`open`](Self::open).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The options.
    pub fn options(&self) -> &ExportOptions {
        &self.opts
    }

    /// The export identity (also the `fsid` of every object).
    pub fn fsid(&self) -> u64 {
        self.export_id
    }

    /// The write verifier (RFC 1813 §3.3.7 `writeverf3`): new at every
    /// [`open`](Self::open), the same for every reply of one run until an
    /// `fsync` or `fdatasync` fails (see [`sync_failed`](Self::sync_failed)).
    pub fn write_verifier(&self) -> [u8; 8] {
        self.verifier
            .load(std::sync::atomic::Ordering::Acquire)
            .to_be_bytes()
    }

    /// An `fsync` or `fdatasync` failed: unstable data written earlier may
    /// be lost, and the kernel reports such an error only once per open
    /// file, so another client's COMMIT on the same descriptor could see
    /// success. A new verifier makes every client resend what it has not
    /// seen committed under it (RFC 1813 §3.3.21), as Linux's server does.
    pub fn sync_failed(&self) {
        let old = self.verifier.load(std::sync::atomic::Ordering::Acquire);
        let mut new = new_write_verifier();
        if new == old {
            new = !old;
        }
        self.verifier
            .store(new, std::sync::atomic::Ordering::Release);
        tracing::warn!("fsync failed: write verifier changed, clients resend uncommitted data");
    }

    /// Whether the server process runs as root (so it can give created
    /// objects the caller's ownership).
    pub fn server_is_root(&self) -> bool {
        self.server_is_root
    }

    /// Counters.
    pub fn counters(&self) -> &ExportCounters {
        &self.counters
    }

    /// The root's handle.
    pub fn root_handle(&self) -> [u8; crate::fh::FH_LEN] {
        self.handle_of(self.root_id)
    }

    /// The handle of an object.
    pub fn handle_of(&self, id: FileId) -> [u8; crate::fh::FH_LEN] {
        FileHandle {
            export: self.export_id,
            id,
        }
        .encode()
    }

    /// Whether `id` is the export root.
    pub fn is_root(&self, id: &FileId) -> bool {
        *id == self.root_id
    }

    /// `fsync` every open file and directory, then `syncfs` the export's
    /// file system (on shutdown).
    pub fn sync_all(&self) -> std::io::Result<()> {
        let fds = lock(&self.fds).values();
        let mut first_err = None;
        for (fd, _) in fds {
            if let Err(e) = rfs::fsync(fd.as_fd()).inspect_err(|_| self.sync_failed()) {
                first_err.get_or_insert(e);
            }
        }
        rfs::syncfs(self.root.as_fd()).inspect_err(|_| self.sync_failed())?;
        match first_err {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// The root, open.
    pub fn root(&self) -> NfsResult<Obj> {
        let st = stat_fd(self.root.as_fd())?;
        Ok(Obj {
            id: self.root_id,
            fd: self.root.clone(),
            st,
        })
    }

    /// The object a handle names, or NFS3ERR_BADHANDLE (not a handle of
    /// this server) / NFS3ERR_STALE (names no live object of this export).
    pub fn resolve(&self, fh: &[u8]) -> NfsResult<Obj> {
        let r = match FileHandle::decode(fh, self.export_id) {
            Err(FhError::Malformed) => Err(NfsErr::Badhandle),
            Err(FhError::OtherExport) => Err(NfsErr::Stale),
            Ok(h) => self.find(h.id),
        };
        if r.is_err() {
            self.counters.bad_handles.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn find(&self, id: FileId) -> NfsResult<Obj> {
        if id == self.root_id {
            return self.root();
        }
        let cached = lock(&self.fds).get(&id);
        if let Some((fd, checked)) = cached {
            match stat_fd(fd.as_fd()) {
                Ok(st) if file_id(&st) == id && st.stx_nlink > 0 => {
                    let obj = Obj { id, fd, st };
                    if checked.elapsed() < RECHECK_INTERVAL || self.still_inside(&obj) {
                        return Ok(obj);
                    }
                    tracing::warn!(
                        ino = id.ino,
                        "object no longer inside the export; its handle is stale"
                    );
                    lock(&self.fds).remove(&id);
                }
                _ => {
                    lock(&self.fds).remove(&id);
                }
            }
        }
        let neg = lock(&self.negative).get(&id);
        if neg.is_some_and(|t| t.elapsed() < NEGATIVE_TTL) {
            return Err(NfsErr::Stale);
        }
        if let Some(o) = self.find_by_location(id) {
            return Ok(o);
        }
        self.walk_and_find(id)
    }

    /// Whether a cached object is still inside the export (a local user may
    /// have moved it out): a directory's `..` chain must reach the root;
    /// anything else must still be found from the root by its location.
    /// On success the descriptor counts as checked now.
    fn still_inside(&self, o: &Obj) -> bool {
        let inside = if o.is_dir() {
            self.dir_inside(o.fd.as_fd()).unwrap_or(false)
        } else {
            self.find_by_location(o.id).is_some()
        };
        if inside {
            lock(&self.fds).insert(o.id, (o.fd.clone(), Instant::now()));
        }
        inside
    }

    /// Whether the chain of `..` from directory `fd` reaches the root.
    fn dir_inside(&self, fd: BorrowedFd<'_>) -> rustix::io::Result<bool> {
        let st = stat_fd(fd)?;
        if file_id(&st) == self.root_id {
            return Ok(true);
        }
        let mut cur = open_dir_at(fd, b"..")?;
        let mut below = st.stx_ino;
        for _ in 0..MAX_DEPTH {
            let st = stat_fd(cur.as_fd())?;
            if file_id(&st) == self.root_id {
                return Ok(true);
            }
            if st.stx_ino == below {
                return Ok(false); // "/" is its own parent
            }
            below = st.stx_ino;
            cur = open_dir_at(cur.as_fd(), b"..")?;
        }
        Ok(false)
    }

    /// Follow the location map from the root to `id`.
    fn find_by_location(&self, id: FileId) -> Option<Obj> {
        let path = lock(&self.locs).path_of(id.ino)?;
        let found = self
            .open_path(&path)
            .and_then(|o| (o.id == id).then_some(o));
        if found.is_none() {
            lock(&self.locs).forget(id.ino);
        }
        found
    }

    /// Open a path of (expected inode, name) from the root.
    fn open_path(&self, path: &[(u64, Box<[u8]>)]) -> Option<Obj> {
        let (last, dirs) = path.split_last()?;
        let mut dir: Arc<OwnedFd> = self.root.clone();
        for (ino, name) in dirs {
            let fd = open_dir_at(dir.as_fd(), name).ok()?;
            let st = stat_fd(fd.as_fd()).ok()?;
            if st.stx_ino != *ino {
                return None;
            }
            dir = Arc::new(fd);
        }
        let o = self.open_child(dir.as_fd(), &last.1).ok()?;
        (o.id.ino == last.0).then_some(o)
    }

    /// Walk the export (at most once per [`WALK_INTERVAL`] or four times
    /// the last walk's duration, whichever is longer; serialised,
    /// bounded by [`WALK_MAX_ENTRIES`]) recording every location, then
    /// look `id` up again.
    fn walk_and_find(&self, id: FileId) -> NfsResult<Obj> {
        let asked = Instant::now();
        let mut w = lock(&self.walk);
        let covered = w.last_end.is_some_and(|t| t >= asked);
        // A walk that took long keeps the next one further off, so walks
        // fill at most a fifth of the time whatever the export's shape.
        let gap = match (w.last_start, w.last_end) {
            (Some(s), Some(e)) => WALK_INTERVAL.max(e.saturating_duration_since(s) * 4),
            _ => WALK_INTERVAL,
        };
        let recent = w.last_start.is_some_and(|t| t.elapsed() < gap);
        if !covered && !recent {
            w.last_start = Some(Instant::now());
            self.counters.walks.fetch_add(1, Ordering::Relaxed);
            let n = self.walk_all();
            w.last_end = Some(Instant::now());
            tracing::info!(entries = n, "walked the export to locate a handle");
        }
        drop(w);
        if let Some(o) = self.find_by_location(id) {
            return Ok(o);
        }
        if !recent || covered {
            lock(&self.negative).insert(id, Instant::now());
        }
        Err(NfsErr::Stale)
    }

    /// Breadth-first walk from the root recording locations; returns the
    /// number of entries seen.
    fn walk_all(&self) -> u64 {
        let mut seen = 0u64;
        let mut queue: VecDeque<u64> = VecDeque::from([self.root_id.ino]);
        while let Some(dino) = queue.pop_front() {
            let fd = if dino == self.root_id.ino {
                rfs::openat(
                    self.root.as_fd(),
                    ".",
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
            } else {
                let Some(path) = lock(&self.locs).path_of(dino) else {
                    continue;
                };
                let mut cur: Option<OwnedFd> = None;
                let mut ok = true;
                for (ino, name) in &path {
                    let parent = cur.as_ref().map(|f| f.as_fd()).unwrap_or(self.root.as_fd());
                    match open_dir_at(parent, name) {
                        Ok(f) if stat_fd(f.as_fd()).is_ok_and(|s| s.stx_ino == *ino) => {
                            cur = Some(f)
                        }
                        _ => {
                            ok = false;
                            break;
                        }
                    }
                }
                match (ok, cur) {
                    (true, Some(f)) => Ok(f),
                    _ => continue,
                }
            };
            let Ok(fd) = fd else { continue };
            let Ok(mut d) = rfs::Dir::new(fd) else {
                continue;
            };
            while let Some(Ok(e)) = d.read() {
                let name = e.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                seen += 1;
                if seen > WALK_MAX_ENTRIES {
                    tracing::warn!(
                        max = WALK_MAX_ENTRIES,
                        "export walk stopped at its entry limit"
                    );
                    return seen;
                }
                lock(&self.locs).record(e.ino(), dino, name);
                let is_dir = match e.file_type() {
                    rfs::FileType::Directory => true,
                    rfs::FileType::Unknown => d
                        .fd()
                        .ok()
                        .and_then(|f| stat_at(f, name).ok())
                        .is_some_and(|s| u32::from(s.stx_mode) & S_IFMT == S_IFDIR),
                    _ => false,
                };
                if is_dir && queue.len() < MAX_DEPTH * 256 {
                    queue.push_back(e.ino());
                }
            }
        }
        seen
    }

    /// Open `name` in directory `dir` (never following a symlink) as an
    /// [`Obj`], using and filling the descriptor cache.
    pub fn open_child(&self, dir: BorrowedFd<'_>, name: &[u8]) -> NfsResult<Obj> {
        let p = rfs::openat(
            dir,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let st = stat_fd(p.as_fd())?;
        if (st.stx_dev_major, st.stx_dev_minor) != self.dev {
            // Another file system mounted inside the export: not crossed
            // (its inode numbers would clash with the export's fileids).
            tracing::warn!(
                ino = st.stx_ino,
                "mount point inside the export not crossed"
            );
            return Err(NfsErr::Acces);
        }
        let id = file_id(&st);
        let cached = lock(&self.fds).get(&id);
        if let Some((fd, _)) = cached {
            // Reached by name from a directory of the export: inside.
            if let Ok(st) = stat_fd(fd.as_fd()) {
                if file_id(&st) == id && st.stx_nlink > 0 {
                    return Ok(Obj { id, fd, st });
                }
            }
            lock(&self.fds).remove(&id);
        }
        let kind = u32::from(st.stx_mode) & S_IFMT;
        let fd = if kind == S_IFDIR {
            rfs::openat(
                p.as_fd(),
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?
        } else if kind == S_IFREG {
            // Reopen exactly the inode just examined through the O_PATH
            // descriptor's /proc link (no race with a rename). Without
            // /proc, open the name again, never following a symlink and
            // never blocking (should it have become a FIFO); the identity
            // is checked below either way.
            let proc_path = format!("/proc/self/fd/{}", p.as_raw_fd());
            let open = |f: OFlags| {
                let extra = OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
                match rfs::openat(rfs::CWD, proc_path.as_str(), f | extra, Mode::empty()) {
                    Err(Errno::NOENT) => {
                        rfs::openat(dir, name, f | extra | OFlags::NOFOLLOW, Mode::empty())
                    }
                    r => r,
                }
            };
            if self.opts.read_only {
                open(OFlags::RDONLY)
            } else {
                open(OFlags::RDWR).or_else(|_| open(OFlags::RDONLY))
            }?
        } else {
            return Ok(Obj {
                id,
                fd: Arc::new(p),
                st,
            });
        };
        let st = stat_fd(fd.as_fd())?;
        if file_id(&st) != id {
            // Replaced between the two opens.
            return Err(NfsErr::Stale);
        }
        self.counters.fd_opens.fetch_add(1, Ordering::Relaxed);
        let fd = Arc::new(fd);
        lock(&self.fds).insert(id, (fd.clone(), Instant::now()));
        Ok(Obj { id, fd, st })
    }

    /// The parent of directory `dir`; the root's parent is the root. The
    /// parent found by `..` is checked to lie inside the export (its `..`
    /// chain reaches the root), else NFS3ERR_ACCES.
    pub fn parent_of(&self, dir: &Obj) -> NfsResult<Obj> {
        if dir.id == self.root_id {
            return self.root();
        }
        let pfd = open_dir_at(dir.fd.as_fd(), b"..")?;
        let pst = stat_fd(pfd.as_fd())?;
        let pid = file_id(&pst);
        if pid == self.root_id {
            return self.root();
        }
        let inside = self.dir_inside(pfd.as_fd())?;
        if !inside {
            tracing::warn!(
                ino = dir.id.ino,
                "directory's parent is outside the export; refused"
            );
            return Err(NfsErr::Acces);
        }
        let fd = Arc::new(pfd);
        lock(&self.fds).insert(pid, (fd.clone(), Instant::now()));
        Ok(Obj {
            id: pid,
            fd,
            st: pst,
        })
    }

    /// Record a location (after LOOKUP, READDIR, a create or a rename).
    pub fn note_location(&self, ino: u64, parent: u64, name: &[u8]) {
        lock(&self.locs).record(ino, parent, name);
    }

    /// Forget `ino` as `name` in `parent` (after REMOVE, RMDIR, RENAME).
    pub fn forget_location(&self, ino: u64, parent: u64, name: &[u8]) {
        lock(&self.locs).forget_name(ino, parent, name);
    }

    /// Drop `id`'s cached descriptor (it was removed or replaced).
    pub fn evict(&self, id: &FileId) {
        lock(&self.fds).remove(id);
    }

    /// Number of cached descriptors.
    pub fn cached_fds(&self) -> usize {
        lock(&self.fds).len()
    }
}

/// A write verifier for this run: the start time mixed with random bytes.
fn new_write_verifier() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let r: u64 = rand::random();
    now ^ r.rotate_left(17)
}
