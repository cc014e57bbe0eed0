//! The caller's identity as the export sees it, and the permission checks
//! a local kernel would make with it (POSIX mode bits; ACLs are not
//! consulted).

use oncrpc::Credential;

use crate::options::ExportOptions;

/// Read permission bit (of a `rwx` triple).
pub const MAY_READ: u32 = 4;
/// Write permission bit.
pub const MAY_WRITE: u32 = 2;
/// Execute (search, for directories) permission bit.
pub const MAY_EXEC: u32 = 1;

/// `S_IFMT` and the file type values of `st_mode`.
pub(crate) const S_IFMT: u32 = 0o170000;
pub(crate) const S_IFDIR: u32 = 0o040000;
pub(crate) const S_IFREG: u32 = 0o100000;
pub(crate) const S_IFLNK: u32 = 0o120000;
pub(crate) const S_ISUID: u32 = 0o4000;
pub(crate) const S_ISGID: u32 = 0o2000;
pub(crate) const S_ISVTX: u32 = 0o1000;

/// The owner, group and mode of an object, for permission checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Owning user.
    pub uid: u32,
    /// Owning group.
    pub gid: u32,
    /// `st_mode` (type and permission bits).
    pub mode: u32,
}

impl Owner {
    fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
}

/// The identity a call acts with, after squashing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// Supplementary gids (at most 16, from AUTH_SYS).
    pub gids: Vec<u32>,
    /// Whether squashing changed the credential (or it was AUTH_NONE).
    pub squashed: bool,
    /// What the client sent, for logs: `sys:uid/gid`, `none`.
    pub sent: String,
}

impl Caller {
    /// Map a call's credential through the export's squash options.
    pub fn map(cred: &Credential, opts: &ExportOptions) -> Caller {
        let anon = |sent: String| Caller {
            uid: opts.anon_uid,
            gid: opts.anon_gid,
            gids: Vec::new(),
            squashed: true,
            sent,
        };
        match cred {
            Credential::Sys(s) => {
                let sent = format!("sys:{}/{}", s.uid(), s.gid());
                if opts.all_squash || (opts.root_squash && s.uid() == 0) {
                    return anon(sent);
                }
                let squash_gid = |g: u32| {
                    if opts.root_squash && g == 0 {
                        opts.anon_gid
                    } else {
                        g
                    }
                };
                Caller {
                    uid: s.uid(),
                    gid: squash_gid(s.gid()),
                    gids: s.gids().iter().map(|&g| squash_gid(g)).collect(),
                    squashed: false,
                    sent,
                }
            }
            _ => anon("none".into()),
        }
    }

    /// An unsquashed root caller (bypasses read/write permission bits, as
    /// CAP_DAC_OVERRIDE does).
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether `g` is the caller's gid or one of its supplementary gids.
    pub fn in_group(&self, g: u32) -> bool {
        self.gid == g || self.gids.contains(&g)
    }

    /// Whether the caller owns `o` (or is root).
    pub fn owns(&self, o: &Owner) -> bool {
        self.is_root() || self.uid == o.uid
    }

    /// Whether the caller has all the `want` bits (`MAY_*`) on `o`, as the
    /// kernel's generic permission check decides: root has read and write
    /// always, and execute on directories and on files with any `x` bit;
    /// others get the owner, else group, else other triple.
    pub fn may(&self, o: &Owner, want: u32) -> bool {
        if self.is_root() {
            if want & MAY_EXEC == 0 || o.is_dir() || o.mode & 0o111 != 0 {
                return true;
            }
            return false;
        }
        let bits = if self.uid == o.uid {
            (o.mode >> 6) & 7
        } else if self.in_group(o.gid) {
            (o.mode >> 3) & 7
        } else {
            o.mode & 7
        };
        bits & want == want
    }

    /// The sticky-directory rule for removing or renaming `victim` out of
    /// `dir`: in a sticky directory only the owner of the entry, the owner
    /// of the directory, or root may.
    pub fn may_delete_from(&self, dir: &Owner, victim: &Owner) -> bool {
        dir.mode & S_ISVTX == 0 || self.is_root() || self.uid == victim.uid || self.uid == dir.uid
    }
}

impl std::fmt::Display for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} as {}/{}", self.sent, self.uid, self.gid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncrpc::AuthSys;

    fn sys(uid: u32, gid: u32, gids: Vec<u32>) -> Credential {
        Credential::Sys(AuthSys::new(0, "h", uid, gid, gids).unwrap())
    }

    #[test]
    fn squash_rules() {
        let o = ExportOptions::default();
        let c = Caller::map(&sys(0, 0, vec![0, 5]), &o);
        assert_eq!((c.uid, c.gid, c.squashed), (65534, 65534, true));
        let c = Caller::map(&sys(1000, 0, vec![0, 5]), &o);
        assert_eq!(
            (c.uid, c.gid, c.gids.clone()),
            (1000, 65534, vec![65534, 5])
        );
        let no = ExportOptions {
            root_squash: false,
            ..o
        };
        assert!(Caller::map(&sys(0, 0, vec![]), &no).is_root());
        let all = ExportOptions {
            all_squash: true,
            anon_uid: 7,
            anon_gid: 8,
            ..o
        };
        let c = Caller::map(&sys(1000, 100, vec![]), &all);
        assert_eq!((c.uid, c.gid), (7, 8));
        let c = Caller::map(&Credential::None, &o);
        assert_eq!((c.uid, c.gid, c.squashed), (65534, 65534, true));
    }

    #[test]
    fn mode_bits() {
        let f = Owner {
            uid: 10,
            gid: 20,
            mode: S_IFREG | 0o640,
        };
        let owner = Caller::map(&sys(10, 1, vec![]), &ExportOptions::default());
        let member = Caller::map(&sys(11, 1, vec![20]), &ExportOptions::default());
        let other = Caller::map(&sys(12, 1, vec![]), &ExportOptions::default());
        assert!(owner.may(&f, MAY_READ | MAY_WRITE));
        assert!(!owner.may(&f, MAY_EXEC));
        assert!(member.may(&f, MAY_READ));
        assert!(!member.may(&f, MAY_WRITE));
        assert!(!other.may(&f, MAY_READ));
        let root = Caller::map(
            &sys(0, 0, vec![]),
            &ExportOptions {
                root_squash: false,
                ..Default::default()
            },
        );
        assert!(root.may(&f, MAY_READ | MAY_WRITE));
        assert!(!root.may(&f, MAY_EXEC));
        // Owner triple decides even when the group triple would allow more.
        let g = Owner {
            uid: 10,
            gid: 1,
            mode: S_IFREG | 0o070,
        };
        assert!(!owner.may(&g, MAY_READ));
    }

    #[test]
    fn sticky() {
        let d = Owner {
            uid: 0,
            gid: 0,
            mode: S_IFDIR | 0o1777,
        };
        let f = Owner {
            uid: 10,
            gid: 0,
            mode: S_IFREG | 0o666,
        };
        let a = Caller::map(&sys(10, 1, vec![]), &ExportOptions::default());
        let b = Caller::map(&sys(11, 1, vec![]), &ExportOptions::default());
        assert!(a.may_delete_from(&d, &f));
        assert!(!b.may_delete_from(&d, &f));
    }
}
