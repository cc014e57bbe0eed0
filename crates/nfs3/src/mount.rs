//! The MOUNT program, version 3 (RFC 1813 Appendix I): numbers, limits,
//! `mountstat3`, `mountres3`, the mount list and the export list.
//!
//! | item | RFC 1813 | limit here |
//! |---|---|---|
//! | `dirpath` | `string<MNTPATHLEN>` | 1024 bytes ([`MNTPATHLEN`]) |
//! | `name` | `string<MNTNAMLEN>` | 255 bytes ([`MNTNAMLEN`]) |
//! | `fhandle3` | `opaque<FHSIZE3>` | 64 bytes ([`FHSIZE3`]; an [`NfsFh3`]) |
//! | `auth_flavors` | `int<>` | [`MAX_AUTH_FLAVORS`] |
//! | `mountlist`, `exports` | linked lists | [`MAX_MOUNT_ENTRIES`] entries |
//! | `groups` of one export | linked list | [`MAX_GROUPS`] names |
//!
//! Nothing in MOUNT is DDP-eligible (RFC 8267 gives MOUNT no RDMA
//! binding; see [`MountBinding`](crate::binding::MountBinding)).

use oncrpc::PayloadBuilder;
use xdr::{Encoder, XdrDecode, XdrEncode, XdrRead};

use crate::codec::{
    array_encoded_len, bounded_bytes, decode_array, decode_list, encode_array, encode_list,
    list_encoded_len, xdr_enum, xdr_struct, PayloadEncode,
};
use crate::procs::DecodeError;
use crate::types::NfsFh3;

/// A list type that is an XDR linked list on the wire (RFC 4506 §4.19:
/// each item preceded by a TRUE, the end by FALSE), holding at most the
/// given number of items when decoded.
macro_rules! xdr_linked_list {
    ($(#[$m:meta])* pub struct $name:ident(pub Vec<$item:ty>), at most $max:expr;) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name(pub Vec<$item>);

        impl XdrEncode for $name {
            fn encoded_len(&self) -> usize {
                list_encoded_len(&self.0)
            }
            fn encode(&self, e: &mut Encoder<'_>) {
                encode_list(&self.0, e)
            }
        }

        impl XdrDecode for $name {
            fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
                Ok($name(decode_list(r, $max)?))
            }
        }
    };
}

/// MOUNT program number.
pub const MOUNT_PROGRAM: u32 = 100_005;
/// MOUNT version 3.
pub const MOUNT_V3: u32 = 3;
/// `MNTPATHLEN`: longest `dirpath`.
pub const MNTPATHLEN: u32 = 1024;
/// `MNTNAMLEN`: longest `name`.
pub const MNTNAMLEN: u32 = 255;
/// `FHSIZE3`: longest `fhandle3`.
pub const FHSIZE3: u32 = 64;
/// Most `auth_flavors` a decoded `mountres3_ok` may hold.
pub const MAX_AUTH_FLAVORS: u32 = 32;
/// Most entries a decoded `mountlist` or `exports` list may hold.
pub const MAX_MOUNT_ENTRIES: u32 = 65_536;
/// Most names a decoded `groups` list may hold.
pub const MAX_GROUPS: u32 = 4096;

/// MOUNT version 3 procedure numbers (RFC 1813 Appendix I).
pub mod mntproc {
    /// MOUNTPROC3_NULL.
    pub const NULL: u32 = 0;
    /// MOUNTPROC3_MNT.
    pub const MNT: u32 = 1;
    /// MOUNTPROC3_DUMP.
    pub const DUMP: u32 = 2;
    /// MOUNTPROC3_UMNT.
    pub const UMNT: u32 = 3;
    /// MOUNTPROC3_UMNTALL.
    pub const UMNTALL: u32 = 4;
    /// MOUNTPROC3_EXPORT.
    pub const EXPORT: u32 = 5;
    /// Number of procedures (0..COUNT).
    pub const COUNT: u32 = 6;
}

bounded_bytes! {
    /// `dirpath` (`string<MNTPATHLEN>`): a server path name.
    Dirpath, MNTPATHLEN
}

bounded_bytes! {
    /// `name` (`string<MNTNAMLEN>`): a host or group name.
    Name, MNTNAMLEN
}

xdr_enum! {
    /// `mountstat3` (RFC 1813 Appendix I). `Display` gives the RFC name;
    /// the type is a [`std::error::Error`].
    pub enum Mountstat3 ("mountstat3") {
        /// `MNT3_OK`.
        Ok = 0 => "MNT3_OK",
        /// `MNT3ERR_PERM`.
        Perm = 1 => "MNT3ERR_PERM",
        /// `MNT3ERR_NOENT`.
        Noent = 2 => "MNT3ERR_NOENT",
        /// `MNT3ERR_IO`.
        Io = 5 => "MNT3ERR_IO",
        /// `MNT3ERR_ACCES`.
        Acces = 13 => "MNT3ERR_ACCES",
        /// `MNT3ERR_NOTDIR`.
        Notdir = 20 => "MNT3ERR_NOTDIR",
        /// `MNT3ERR_INVAL`.
        Inval = 22 => "MNT3ERR_INVAL",
        /// `MNT3ERR_NAMETOOLONG`.
        Nametoolong = 63 => "MNT3ERR_NAMETOOLONG",
        /// `MNT3ERR_NOTSUPP`.
        Notsupp = 10004 => "MNT3ERR_NOTSUPP",
        /// `MNT3ERR_SERVERFAULT`.
        Serverfault = 10006 => "MNT3ERR_SERVERFAULT",
    }
}

impl std::error::Error for Mountstat3 {}

/// `mountres3_ok` (RFC 1813 Appendix I).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mountres3Ok {
    /// `fhandle`: the root file handle of the export.
    pub fhandle: NfsFh3,
    /// `auth_flavors`: RPC authentication flavors the server accepts
    /// (e.g. 1 = AUTH_SYS).
    pub auth_flavors: Vec<u32>,
}

impl XdrEncode for Mountres3Ok {
    fn encoded_len(&self) -> usize {
        self.fhandle.encoded_len() + array_encoded_len(&self.auth_flavors)
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        self.fhandle.encode(e);
        encode_array(&self.auth_flavors, e);
    }
}

impl XdrDecode for Mountres3Ok {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        Ok(Mountres3Ok {
            fhandle: NfsFh3::decode(r)?,
            auth_flavors: decode_array(r, MAX_AUTH_FLAVORS, 4)?,
        })
    }
}

/// `mountres3` (RFC 1813 Appendix I): a union on [`Mountstat3`].
///
/// `Fail` must not carry [`Mountstat3::Ok`]; such a value is encoded as
/// `MNT3ERR_SERVERFAULT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mountres3 {
    /// `MNT3_OK` with `mountinfo`.
    Ok(Mountres3Ok),
    /// Any other status.
    Fail(Mountstat3),
}

impl Mountres3 {
    /// The status on the wire.
    pub fn status(&self) -> Mountstat3 {
        match self {
            Mountres3::Ok(_) => Mountstat3::Ok,
            Mountres3::Fail(Mountstat3::Ok) => Mountstat3::Serverfault,
            Mountres3::Fail(s) => *s,
        }
    }
}

impl XdrEncode for Mountres3 {
    fn encoded_len(&self) -> usize {
        4 + match self {
            Mountres3::Ok(ok) => ok.encoded_len(),
            Mountres3::Fail(_) => 0,
        }
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        self.status().encode(e);
        if let Mountres3::Ok(ok) = self {
            ok.encode(e);
        }
    }
}

impl XdrDecode for Mountres3 {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        Ok(match Mountstat3::decode(r)? {
            Mountstat3::Ok => Mountres3::Ok(Mountres3Ok::decode(r)?),
            s => Mountres3::Fail(s),
        })
    }
}

impl PayloadEncode for Mountres3 {
    fn encode_payload(&self, b: &mut PayloadBuilder) {
        b.item(self);
    }
}

xdr_struct! {
    /// `mountbody` (RFC 1813 Appendix I), without its `ml_next` link.
    pub struct Mountbody {
        /// `ml_hostname`.
        pub ml_hostname: Name,
        /// `ml_directory`.
        pub ml_directory: Dirpath,
    }
}

xdr_linked_list! {
    /// `mountlist` (RFC 1813 Appendix I): the DUMP result, a linked list on
    /// the wire.
    pub struct Mountlist(pub Vec<Mountbody>), at most MAX_MOUNT_ENTRIES;
}

impl PayloadEncode for Mountlist {
    fn encode_payload(&self, b: &mut PayloadBuilder) {
        b.item(self);
    }
}

xdr_linked_list! {
    /// `groups` (RFC 1813 Appendix I): the hosts or groups an export is
    /// offered to (a linked list of [`Name`]s on the wire).
    pub struct Groups(pub Vec<Name>), at most MAX_GROUPS;
}

xdr_struct! {
    /// `exportnode` (RFC 1813 Appendix I), without its `ex_next` link.
    pub struct Exportnode {
        /// `ex_dir`.
        pub ex_dir: Dirpath,
        /// `ex_groups`.
        pub ex_groups: Groups,
    }
}

xdr_linked_list! {
    /// `exports` (RFC 1813 Appendix I): the EXPORT result.
    pub struct Exports(pub Vec<Exportnode>), at most MAX_MOUNT_ENTRIES;
}

impl PayloadEncode for Exports {
    fn encode_payload(&self, b: &mut PayloadBuilder) {
        b.item(self);
    }
}

impl PayloadEncode for Dirpath {
    fn encode_payload(&self, b: &mut PayloadBuilder) {
        b.item(self);
    }
}

/// The arguments of any MOUNT version 3 procedure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountArgs {
    /// NULL (void).
    Null,
    /// MNT (`dirpath`).
    Mnt(Dirpath),
    /// DUMP (void).
    Dump,
    /// UMNT (`dirpath`).
    Umnt(Dirpath),
    /// UMNTALL (void).
    Umntall,
    /// EXPORT (void).
    Export,
}

/// The results of any MOUNT version 3 procedure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountRes {
    /// NULL (void).
    Null,
    /// MNT.
    Mnt(Mountres3),
    /// DUMP.
    Dump(Mountlist),
    /// UMNT (void).
    Umnt,
    /// UMNTALL (void).
    Umntall,
    /// EXPORT.
    Export(Exports),
}

/// The name of MOUNT procedure `p`, if defined.
pub fn mount_proc_name(p: u32) -> Option<&'static str> {
    ["NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"]
        .get(p as usize)
        .copied()
}

impl MountArgs {
    /// The procedure number.
    pub fn procedure(&self) -> u32 {
        match self {
            MountArgs::Null => mntproc::NULL,
            MountArgs::Mnt(_) => mntproc::MNT,
            MountArgs::Dump => mntproc::DUMP,
            MountArgs::Umnt(_) => mntproc::UMNT,
            MountArgs::Umntall => mntproc::UMNTALL,
            MountArgs::Export => mntproc::EXPORT,
        }
    }

    /// Decode the arguments of `procedure` (not checking the input ends).
    pub fn decode<R: XdrRead + ?Sized>(procedure: u32, r: &mut R) -> Result<Self, DecodeError> {
        Ok(match procedure {
            mntproc::NULL => MountArgs::Null,
            mntproc::MNT => MountArgs::Mnt(Dirpath::decode(r)?),
            mntproc::DUMP => MountArgs::Dump,
            mntproc::UMNT => MountArgs::Umnt(Dirpath::decode(r)?),
            mntproc::UMNTALL => MountArgs::Umntall,
            mntproc::EXPORT => MountArgs::Export,
            p => return Err(DecodeError::UnknownProcedure(p)),
        })
    }

    /// Decode a whole payload as the arguments of `procedure`.
    pub fn decode_payload(procedure: u32, p: &oncrpc::Payload) -> Result<Self, DecodeError> {
        let mut d = p.decoder();
        let v = Self::decode(procedure, &mut d)?;
        d.finish()?;
        Ok(v)
    }
}

impl XdrEncode for MountArgs {
    fn encoded_len(&self) -> usize {
        match self {
            MountArgs::Mnt(p) | MountArgs::Umnt(p) => p.encoded_len(),
            _ => 0,
        }
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        if let MountArgs::Mnt(p) | MountArgs::Umnt(p) = self {
            p.encode(e)
        }
    }
}

impl PayloadEncode for MountArgs {
    fn encode_payload(&self, b: &mut PayloadBuilder) {
        b.item(self);
    }
}

impl MountRes {
    /// The procedure number.
    pub fn procedure(&self) -> u32 {
        match self {
            MountRes::Null => mntproc::NULL,
            MountRes::Mnt(_) => mntproc::MNT,
            MountRes::Dump(_) => mntproc::DUMP,
            MountRes::Umnt => mntproc::UMNT,
            MountRes::Umntall => mntproc::UMNTALL,
            MountRes::Export(_) => mntproc::EXPORT,
        }
    }

    /// Decode the results of `procedure` (not checking the input ends).
    pub fn decode<R: XdrRead + ?Sized>(procedure: u32, r: &mut R) -> Result<Self, DecodeError> {
        Ok(match procedure {
            mntproc::NULL => MountRes::Null,
            mntproc::MNT => MountRes::Mnt(Mountres3::decode(r)?),
            mntproc::DUMP => MountRes::Dump(Mountlist::decode(r)?),
            mntproc::UMNT => MountRes::Umnt,
            mntproc::UMNTALL => MountRes::Umntall,
            mntproc::EXPORT => MountRes::Export(Exports::decode(r)?),
            p => return Err(DecodeError::UnknownProcedure(p)),
        })
    }

    /// Decode a whole payload as the results of `procedure`.
    pub fn decode_payload(procedure: u32, p: &oncrpc::Payload) -> Result<Self, DecodeError> {
        let mut d = p.decoder();
        let v = Self::decode(procedure, &mut d)?;
        d.finish()?;
        Ok(v)
    }
}

impl XdrEncode for MountRes {
    fn encoded_len(&self) -> usize {
        match self {
            MountRes::Mnt(r) => r.encoded_len(),
            MountRes::Dump(l) => l.encoded_len(),
            MountRes::Export(x) => x.encoded_len(),
            _ => 0,
        }
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        match self {
            MountRes::Mnt(r) => r.encode(e),
            MountRes::Dump(l) => l.encode(e),
            MountRes::Export(x) => x.encode(e),
            _ => {}
        }
    }
}

impl PayloadEncode for MountRes {
    fn encode_payload(&self, b: &mut PayloadBuilder) {
        b.item(self);
    }
}
