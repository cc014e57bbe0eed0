//! What every procedure works with: the export, the caller, the procedure
//! name (for logs), and the shared checks (names, permissions,
//! read-only).

use nfs3::types::{Filename3, Nfsstat3};

use crate::cred::{Caller, Owner};
use crate::export::{Export, Obj};
use crate::status::{NfsErr, NfsResult};

/// Context of one call.
pub struct Ctx<'a> {
    /// The export.
    pub ex: &'a Export,
    /// The caller, squashed.
    pub who: &'a Caller,
    /// Procedure name, for logs.
    pub proc_name: &'static str,
}

/// The `nfsstat3` of a failure.
pub fn stat(e: NfsErr) -> Nfsstat3 {
    Nfsstat3::from_u32(e.code()).unwrap_or(Nfsstat3::Serverfault)
}

/// How a name component is classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind<'n> {
    /// `.`
    Dot,
    /// `..`
    DotDot,
    /// Any other valid name.
    Plain(&'n [u8]),
}

impl<'a> Ctx<'a> {
    /// Log a refusal with the caller and procedure (warn level).
    pub fn refuse(&self, e: NfsErr, why: &str) -> NfsErr {
        tracing::warn!(proc = self.proc_name, caller = %self.who, status = %e, "refused: {why}");
        e
    }

    /// Check a name component (RFC 1813 `filename3`): empty names and
    /// names holding `/` or NUL are refused with NFS3ERR_ACCES (they
    /// could never name one entry of one directory); longer than 255
    /// bytes is NFS3ERR_NAMETOOLONG.
    pub fn name<'n>(&self, n: &'n Filename3) -> NfsResult<NameKind<'n>> {
        let b = n.as_bytes();
        if b.is_empty() || b.contains(&b'/') || b.contains(&0) {
            return Err(self.refuse(NfsErr::Acces, "name empty or holding '/' or NUL"));
        }
        if b.len() > 255 {
            return Err(NfsErr::Nametoolong);
        }
        Ok(match b {
            b"." => NameKind::Dot,
            b".." => NameKind::DotDot,
            _ => NameKind::Plain(b),
        })
    }

    /// A plain name for creating or removing an entry: `.` and `..` are
    /// refused with `dots`.
    pub fn plain_name<'n>(&self, n: &'n Filename3, dots: NfsErr) -> NfsResult<&'n [u8]> {
        match self.name(n)? {
            NameKind::Plain(b) => Ok(b),
            _ => Err(self.refuse(dots, "'.' or '..' as an entry to change")),
        }
    }

    /// NFS3ERR_ROFS on a read-only export.
    pub fn writable(&self) -> NfsResult<()> {
        if self.ex.options().read_only {
            return Err(self.refuse(NfsErr::Rofs, "read-only export"));
        }
        Ok(())
    }

    /// Require the `MAY_*` bits `want` on `o`, else NFS3ERR_ACCES.
    pub fn require(&self, o: &Owner, want: u32, what: &str) -> NfsResult<()> {
        if self.who.may(o, want) {
            Ok(())
        } else {
            Err(self.refuse(NfsErr::Acces, what))
        }
    }

    /// The object a handle names (logging a bad one).
    pub fn resolve(&self, fh: &nfs3::NfsFh3) -> NfsResult<Obj> {
        self.ex
            .resolve(fh.as_bytes())
            .map_err(|e| self.refuse(e, "handle names no object of this export"))
    }

    /// A directory from a handle (NFS3ERR_NOTDIR otherwise).
    pub fn resolve_dir(&self, fh: &nfs3::NfsFh3) -> NfsResult<Obj> {
        let d = self.resolve(fh)?;
        if !d.is_dir() {
            return Err(NfsErr::Notdir);
        }
        Ok(d)
    }

    /// The ids new objects get: the caller's uid, and the directory's gid
    /// when it is setgid, else the caller's gid.
    pub fn new_owner(&self, dir: &Obj) -> (u32, u32) {
        let gid = if u32::from(dir.st.stx_mode) & crate::cred::S_ISGID != 0 {
            dir.st.stx_gid
        } else {
            self.who.gid
        };
        (self.who.uid, gid)
    }
}
