//! The result of every NFS version 3 procedure (RFC 1813 §3.3): for each,
//! the `resok` struct, the `resfail` struct when RFC 1813 gives one, and
//! the `XXX3res` union as an [`NfsResult`].
//!
//! READ's `data` and READLINK's `data` are DDP-eligible (RFC 8267 §3):
//! their [`PayloadEncode`] appends them as [`oncrpc::Piece::Ddp`] pieces
//! without copying; decoding returns them as zero-copy [`Bytes`] slices
//! when read through `oncrpc::PayloadDecoder` or `xdr::BytesDecoder`
//! (on RPC-over-RDMA, slices of the buffer the data was placed in).
//!
//! Directory listings (`dirlist3`, `dirlistplus3`) are XDR linked lists,
//! decoded into `Vec`s of at most [`MAX_DIR_ENTRIES`] entries.

use bytes::Bytes;
use oncrpc::PayloadBuilder;
use xdr::{Encoder, XdrDecode, XdrEncode, XdrRead};

use crate::codec::{decode_list, encode_list, list_encoded_len, xdr_struct, PayloadEncode};
use crate::types::*;

/// Most entries a decoded READDIR or READDIRPLUS reply may hold. Each entry
/// takes at least 24 bytes (READDIR) or 32 bytes (READDIRPLUS) on the wire,
/// so a 1 MiB reply holds fewer than 45,000.
pub const MAX_DIR_ENTRIES: u32 = 65_536;

xdr_struct! {
    /// `GETATTR3resok` (RFC 1813 §3.3.1).
    pub struct Getattr3ResOk {
        /// `obj_attributes`.
        pub obj_attributes: Fattr3,
    }
}
/// `GETATTR3res` (RFC 1813 §3.3.1); the failure arm is void.
pub type Getattr3Res = NfsResult<Getattr3ResOk, ()>;

xdr_struct! {
    /// `SETATTR3resok` and `SETATTR3resfail` (RFC 1813 §3.3.2): the same
    /// struct.
    #[derive(Default)]
    pub struct Setattr3ResOk {
        /// `obj_wcc`.
        pub obj_wcc: WccData,
    }
}
/// `SETATTR3resfail` (RFC 1813 §3.3.2).
pub type Setattr3ResFail = Setattr3ResOk;
/// `SETATTR3res` (RFC 1813 §3.3.2).
pub type Setattr3Res = NfsResult<Setattr3ResOk, Setattr3ResFail>;

xdr_struct! {
    /// `LOOKUP3resok` (RFC 1813 §3.3.3).
    pub struct Lookup3ResOk {
        /// `object`.
        pub object: NfsFh3,
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
        /// `dir_attributes`.
        pub dir_attributes: PostOpAttr,
    }
}
xdr_struct! {
    /// `LOOKUP3resfail` (RFC 1813 §3.3.3).
    #[derive(Default)]
    pub struct Lookup3ResFail {
        /// `dir_attributes`.
        pub dir_attributes: PostOpAttr,
    }
}
/// `LOOKUP3res` (RFC 1813 §3.3.3).
pub type Lookup3Res = NfsResult<Lookup3ResOk, Lookup3ResFail>;

xdr_struct! {
    /// A `resfail` arm made of one `post_op_attr`: `ACCESS3resfail`,
    /// `READLINK3resfail`, `READ3resfail`, `READDIR3resfail`,
    /// `READDIRPLUS3resfail`, `FSSTAT3resfail`, `FSINFO3resfail`,
    /// `PATHCONF3resfail` (RFC 1813 §3.3).
    #[derive(Default)]
    pub struct PostOpAttrFail {
        /// `obj_attributes` / `symlink_attributes` / `file_attributes` /
        /// `dir_attributes`.
        pub attributes: PostOpAttr,
    }
}

xdr_struct! {
    /// A `resfail` arm made of one `wcc_data`: `WRITE3resfail`,
    /// `CREATE3resfail`, `MKDIR3resfail`, `SYMLINK3resfail`,
    /// `MKNOD3resfail`, `REMOVE3resfail`, `RMDIR3resfail`,
    /// `COMMIT3resfail` (RFC 1813 §3.3).
    #[derive(Default)]
    pub struct WccDataFail {
        /// `file_wcc` / `dir_wcc`.
        pub wcc: WccData,
    }
}

xdr_struct! {
    /// `ACCESS3resok` (RFC 1813 §3.3.4).
    pub struct Access3ResOk {
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
        /// `access`: the bits granted.
        pub access: u32,
    }
}
/// `ACCESS3res` (RFC 1813 §3.3.4).
pub type Access3Res = NfsResult<Access3ResOk, PostOpAttrFail>;

/// `READLINK3resok` (RFC 1813 §3.3.5). `data` is DDP-eligible
/// (RFC 8267 §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readlink3ResOk {
    /// `symlink_attributes`.
    pub symlink_attributes: PostOpAttr,
    /// `data`.
    pub data: Nfspath3,
}

impl XdrEncode for Readlink3ResOk {
    fn encoded_len(&self) -> usize {
        self.symlink_attributes.encoded_len() + self.data.encoded_len()
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        self.symlink_attributes.encode(e);
        self.data.encode(e);
    }
}

impl XdrDecode for Readlink3ResOk {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        Ok(Readlink3ResOk {
            symlink_attributes: PostOpAttr::decode(r)?,
            data: Nfspath3::decode(r)?,
        })
    }
}

impl PayloadEncode for Readlink3ResOk {
    fn encode_payload(&self, b: &mut PayloadBuilder) {
        b.item(&self.symlink_attributes)
            .ddp_opaque(self.data.0.clone());
    }
}
/// `READLINK3res` (RFC 1813 §3.3.5).
pub type Readlink3Res = NfsResult<Readlink3ResOk, PostOpAttrFail>;

/// `READ3resok` (RFC 1813 §3.3.6). `data` is DDP-eligible (RFC 8267 §3);
/// the decoder accepts at most [`MAX_IO_SIZE`] bytes of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read3ResOk {
    /// `file_attributes`.
    pub file_attributes: PostOpAttr,
    /// `count`: bytes read (RFC 1813: equal to `data`'s length).
    pub count: u32,
    /// `eof`.
    pub eof: bool,
    /// `data`.
    pub data: Bytes,
}

impl XdrEncode for Read3ResOk {
    fn encoded_len(&self) -> usize {
        self.file_attributes.encoded_len() + 8 + xdr::opaque_encoded_len(self.data.len())
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        self.file_attributes.encode(e);
        e.u32(self.count);
        e.bool(self.eof);
        e.opaque(&self.data);
    }
}

impl XdrDecode for Read3ResOk {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        Ok(Read3ResOk {
            file_attributes: PostOpAttr::decode(r)?,
            count: r.u32()?,
            eof: r.bool()?,
            data: r.opaque_bytes(MAX_IO_SIZE)?,
        })
    }
}

impl PayloadEncode for Read3ResOk {
    fn encode_payload(&self, b: &mut PayloadBuilder) {
        b.item(&self.file_attributes)
            .u32(self.count)
            .bool(self.eof)
            .ddp_opaque(self.data.clone());
    }
}
/// `READ3res` (RFC 1813 §3.3.6).
pub type Read3Res = NfsResult<Read3ResOk, PostOpAttrFail>;

xdr_struct! {
    /// `WRITE3resok` (RFC 1813 §3.3.7).
    pub struct Write3ResOk {
        /// `file_wcc`.
        pub file_wcc: WccData,
        /// `count`: bytes written.
        pub count: u32,
        /// `committed`.
        pub committed: StableHow,
        /// `verf`.
        pub verf: Writeverf3,
    }
}
/// `WRITE3res` (RFC 1813 §3.3.7).
pub type Write3Res = NfsResult<Write3ResOk, WccDataFail>;

xdr_struct! {
    /// `CREATE3resok`, and the same `resok` of MKDIR, SYMLINK and MKNOD
    /// (RFC 1813 §3.3.8–§3.3.11).
    pub struct Create3ResOk {
        /// `obj`.
        pub obj: PostOpFh3,
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
        /// `dir_wcc`.
        pub dir_wcc: WccData,
    }
}
/// `CREATE3res` (RFC 1813 §3.3.8).
pub type Create3Res = NfsResult<Create3ResOk, WccDataFail>;
/// `MKDIR3res` (RFC 1813 §3.3.9).
pub type Mkdir3Res = Create3Res;
/// `SYMLINK3res` (RFC 1813 §3.3.10).
pub type Symlink3Res = Create3Res;
/// `MKNOD3res` (RFC 1813 §3.3.11).
pub type Mknod3Res = Create3Res;

/// `REMOVE3res` and `RMDIR3res` (RFC 1813 §3.3.12, §3.3.13): `dir_wcc` in
/// both arms.
pub type Remove3Res = NfsResult<WccDataFail, WccDataFail>;
/// `RMDIR3res` (RFC 1813 §3.3.13).
pub type Rmdir3Res = Remove3Res;

xdr_struct! {
    /// `RENAME3resok` and `RENAME3resfail` (RFC 1813 §3.3.14).
    #[derive(Default)]
    pub struct Rename3ResOk {
        /// `fromdir_wcc`.
        pub fromdir_wcc: WccData,
        /// `todir_wcc`.
        pub todir_wcc: WccData,
    }
}
/// `RENAME3res` (RFC 1813 §3.3.14).
pub type Rename3Res = NfsResult<Rename3ResOk, Rename3ResOk>;

xdr_struct! {
    /// `LINK3resok` and `LINK3resfail` (RFC 1813 §3.3.15).
    #[derive(Default)]
    pub struct Link3ResOk {
        /// `file_attributes`.
        pub file_attributes: PostOpAttr,
        /// `linkdir_wcc`.
        pub linkdir_wcc: WccData,
    }
}
/// `LINK3res` (RFC 1813 §3.3.15).
pub type Link3Res = NfsResult<Link3ResOk, Link3ResOk>;

xdr_struct! {
    /// `entry3` (RFC 1813 §3.3.16), without its `nextentry` link.
    pub struct Entry3 {
        /// `fileid`.
        pub fileid: u64,
        /// `name`.
        pub name: Filename3,
        /// `cookie`.
        pub cookie: u64,
    }
}

/// `dirlist3` (RFC 1813 §3.3.16): the entries (a linked list on the
/// wire) and `eof`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dirlist3 {
    /// `entries`, in order.
    pub entries: Vec<Entry3>,
    /// `eof`.
    pub eof: bool,
}

impl XdrEncode for Dirlist3 {
    fn encoded_len(&self) -> usize {
        list_encoded_len(&self.entries) + 4
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        encode_list(&self.entries, e);
        e.bool(self.eof);
    }
}

impl XdrDecode for Dirlist3 {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        Ok(Dirlist3 {
            entries: decode_list(r, MAX_DIR_ENTRIES)?,
            eof: r.bool()?,
        })
    }
}

xdr_struct! {
    /// `READDIR3resok` (RFC 1813 §3.3.16).
    pub struct Readdir3ResOk {
        /// `dir_attributes`.
        pub dir_attributes: PostOpAttr,
        /// `cookieverf`.
        pub cookieverf: Cookieverf3,
        /// `reply`.
        pub reply: Dirlist3,
    }
}
/// `READDIR3res` (RFC 1813 §3.3.16).
pub type Readdir3Res = NfsResult<Readdir3ResOk, PostOpAttrFail>;

xdr_struct! {
    /// `entryplus3` (RFC 1813 §3.3.17), without its `nextentry` link.
    pub struct Entryplus3 {
        /// `fileid`.
        pub fileid: u64,
        /// `name`.
        pub name: Filename3,
        /// `cookie`.
        pub cookie: u64,
        /// `name_attributes`.
        pub name_attributes: PostOpAttr,
        /// `name_handle`.
        pub name_handle: PostOpFh3,
    }
}

/// `dirlistplus3` (RFC 1813 §3.3.17).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dirlistplus3 {
    /// `entries`, in order.
    pub entries: Vec<Entryplus3>,
    /// `eof`.
    pub eof: bool,
}

impl XdrEncode for Dirlistplus3 {
    fn encoded_len(&self) -> usize {
        list_encoded_len(&self.entries) + 4
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        encode_list(&self.entries, e);
        e.bool(self.eof);
    }
}

impl XdrDecode for Dirlistplus3 {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        Ok(Dirlistplus3 {
            entries: decode_list(r, MAX_DIR_ENTRIES)?,
            eof: r.bool()?,
        })
    }
}

xdr_struct! {
    /// `READDIRPLUS3resok` (RFC 1813 §3.3.17).
    pub struct Readdirplus3ResOk {
        /// `dir_attributes`.
        pub dir_attributes: PostOpAttr,
        /// `cookieverf`.
        pub cookieverf: Cookieverf3,
        /// `reply`.
        pub reply: Dirlistplus3,
    }
}
/// `READDIRPLUS3res` (RFC 1813 §3.3.17).
pub type Readdirplus3Res = NfsResult<Readdirplus3ResOk, PostOpAttrFail>;

xdr_struct! {
    /// `FSSTAT3resok` (RFC 1813 §3.3.18).
    pub struct Fsstat3ResOk {
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
        /// `tbytes`.
        pub tbytes: u64,
        /// `fbytes`.
        pub fbytes: u64,
        /// `abytes`.
        pub abytes: u64,
        /// `tfiles`.
        pub tfiles: u64,
        /// `ffiles`.
        pub ffiles: u64,
        /// `afiles`.
        pub afiles: u64,
        /// `invarsec`.
        pub invarsec: u32,
    }
}
/// `FSSTAT3res` (RFC 1813 §3.3.18).
pub type Fsstat3Res = NfsResult<Fsstat3ResOk, PostOpAttrFail>;

xdr_struct! {
    /// `FSINFO3resok` (RFC 1813 §3.3.19).
    pub struct Fsinfo3ResOk {
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
        /// `rtmax`.
        pub rtmax: u32,
        /// `rtpref`.
        pub rtpref: u32,
        /// `rtmult`.
        pub rtmult: u32,
        /// `wtmax`.
        pub wtmax: u32,
        /// `wtpref`.
        pub wtpref: u32,
        /// `wtmult`.
        pub wtmult: u32,
        /// `dtpref`.
        pub dtpref: u32,
        /// `maxfilesize`.
        pub maxfilesize: u64,
        /// `time_delta`.
        pub time_delta: Nfstime3,
        /// `properties`: bits of [`fsf`].
        pub properties: u32,
    }
}
/// `FSINFO3res` (RFC 1813 §3.3.19).
pub type Fsinfo3Res = NfsResult<Fsinfo3ResOk, PostOpAttrFail>;

xdr_struct! {
    /// `PATHCONF3resok` (RFC 1813 §3.3.20).
    pub struct Pathconf3ResOk {
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
        /// `linkmax`.
        pub linkmax: u32,
        /// `name_max`.
        pub name_max: u32,
        /// `no_trunc`.
        pub no_trunc: bool,
        /// `chown_restricted`.
        pub chown_restricted: bool,
        /// `case_insensitive`.
        pub case_insensitive: bool,
        /// `case_preserving`.
        pub case_preserving: bool,
    }
}
/// `PATHCONF3res` (RFC 1813 §3.3.20).
pub type Pathconf3Res = NfsResult<Pathconf3ResOk, PostOpAttrFail>;

xdr_struct! {
    /// `COMMIT3resok` (RFC 1813 §3.3.21).
    pub struct Commit3ResOk {
        /// `file_wcc`.
        pub file_wcc: WccData,
        /// `verf`.
        pub verf: Writeverf3,
    }
}
/// `COMMIT3res` (RFC 1813 §3.3.21).
pub type Commit3Res = NfsResult<Commit3ResOk, WccDataFail>;
