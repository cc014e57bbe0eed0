//! [`ExportOptions`]: how one directory is exported.

/// Default largest READ/WRITE count (`rtmax` = `wtmax`): 1 MiB.
pub const DEFAULT_MAX_IO: u32 = 1 << 20;

/// The uid and gid that squashed and anonymous callers get by default
/// (`nobody`/`nogroup` on Debian).
pub const DEFAULT_ANON_ID: u32 = 65534;

/// How a directory is exported (the usual `exports(5)` options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportOptions {
    /// Refuse every modifying procedure with NFS3ERR_ROFS.
    pub read_only: bool,
    /// Map uid 0 (and gid 0) to `anon_uid`/`anon_gid`. Default true.
    pub root_squash: bool,
    /// Map every caller to `anon_uid`/`anon_gid`.
    pub all_squash: bool,
    /// The uid of squashed and AUTH_NONE callers. Default 65534.
    pub anon_uid: u32,
    /// The gid of squashed and AUTH_NONE callers. Default 65534.
    pub anon_gid: u32,
    /// Largest READ and WRITE count (FSINFO `rtmax` = `wtmax`), kept
    /// between 4096 and the `nfs3` codec's limit for READ and WRITE data
    /// (`nfs3::types::MAX_IO_SIZE`, 1 MiB). Default 1 MiB.
    pub max_io: u32,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            read_only: false,
            root_squash: true,
            all_squash: false,
            anon_uid: DEFAULT_ANON_ID,
            anon_gid: DEFAULT_ANON_ID,
            max_io: DEFAULT_MAX_IO,
        }
    }
}
