//! The argument of every NFS version 3 procedure (RFC 1813 §3.3).
//!
//! WRITE's `data` and SYMLINK's `symlink_data` are DDP-eligible (RFC 8267
//! §3): their [`PayloadEncode`] appends them as [`oncrpc::Piece::Ddp`]
//! pieces, without copying; their decoders return them as zero-copy
//! [`Bytes`] slices when read through `oncrpc::PayloadDecoder` or
//! `xdr::BytesDecoder`.

use bytes::Bytes;
use oncrpc::PayloadBuilder;
use xdr::{Encoder, XdrDecode, XdrEncode, XdrRead};

use crate::codec::{xdr_struct, PayloadEncode};
use crate::types::*;

xdr_struct! {
    /// `GETATTR3args` (RFC 1813 §3.3.1).
    pub struct Getattr3Args {
        /// `object`.
        pub object: NfsFh3,
    }
}

xdr_struct! {
    /// `SETATTR3args` (RFC 1813 §3.3.2). `guard` is `sattrguard3`: the
    /// ctime the object must have, if checked.
    pub struct Setattr3Args {
        /// `object`.
        pub object: NfsFh3,
        /// `new_attributes`.
        pub new_attributes: Sattr3,
        /// `guard` (`sattrguard3`: `check` and `obj_ctime`).
        pub guard: Option<Nfstime3>,
    }
}

xdr_struct! {
    /// `LOOKUP3args` (RFC 1813 §3.3.3).
    pub struct Lookup3Args {
        /// `what`.
        pub what: Diropargs3,
    }
}

xdr_struct! {
    /// `ACCESS3args` (RFC 1813 §3.3.4).
    pub struct Access3Args {
        /// `object`.
        pub object: NfsFh3,
        /// `access`: bits of [`access`](crate::types::access).
        pub access: u32,
    }
}

xdr_struct! {
    /// `READLINK3args` (RFC 1813 §3.3.5).
    pub struct Readlink3Args {
        /// `symlink`.
        pub symlink: NfsFh3,
    }
}

xdr_struct! {
    /// `READ3args` (RFC 1813 §3.3.6).
    pub struct Read3Args {
        /// `file`.
        pub file: NfsFh3,
        /// `offset`.
        pub offset: u64,
        /// `count`.
        pub count: u32,
    }
}

/// `WRITE3args` (RFC 1813 §3.3.7). `data` is DDP-eligible (RFC 8267 §3);
/// the decoder accepts at most [`MAX_IO_SIZE`] bytes of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write3Args {
    /// `file`.
    pub file: NfsFh3,
    /// `offset`.
    pub offset: u64,
    /// `count`: RFC 1813 requires it to equal `data`'s length; the server
    /// checks.
    pub count: u32,
    /// `stable`.
    pub stable: StableHow,
    /// `data`.
    pub data: Bytes,
}

impl XdrEncode for Write3Args {
    fn encoded_len(&self) -> usize {
        self.file.encoded_len() + 8 + 4 + 4 + xdr::opaque_encoded_len(self.data.len())
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        self.file.encode(e);
        e.u64(self.offset);
        e.u32(self.count);
        self.stable.encode(e);
        e.opaque(&self.data);
    }
}

impl XdrDecode for Write3Args {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        Ok(Write3Args {
            file: NfsFh3::decode(r)?,
            offset: r.u64()?,
            count: r.u32()?,
            stable: StableHow::decode(r)?,
            data: r.opaque_bytes(MAX_IO_SIZE)?,
        })
    }
}

impl PayloadEncode for Write3Args {
    fn encode_payload(&self, b: &mut PayloadBuilder) {
        b.item(&self.file)
            .u64(self.offset)
            .u32(self.count)
            .u32(self.stable as u32)
            .ddp_opaque(self.data.clone());
    }
}

/// `createhow3` (RFC 1813 §3.3.8): a union on [`Createmode3`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Createhow3 {
    /// `UNCHECKED` with `obj_attributes`.
    Unchecked(Sattr3),
    /// `GUARDED` with `obj_attributes`.
    Guarded(Sattr3),
    /// `EXCLUSIVE` with `verf`.
    Exclusive(Createverf3),
}

impl XdrEncode for Createhow3 {
    fn encoded_len(&self) -> usize {
        4 + match self {
            Createhow3::Unchecked(a) | Createhow3::Guarded(a) => a.encoded_len(),
            Createhow3::Exclusive(v) => v.encoded_len(),
        }
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        match self {
            Createhow3::Unchecked(a) => {
                Createmode3::Unchecked.encode(e);
                a.encode(e);
            }
            Createhow3::Guarded(a) => {
                Createmode3::Guarded.encode(e);
                a.encode(e);
            }
            Createhow3::Exclusive(v) => {
                Createmode3::Exclusive.encode(e);
                v.encode(e);
            }
        }
    }
}

impl XdrDecode for Createhow3 {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        Ok(match Createmode3::decode(r)? {
            Createmode3::Unchecked => Createhow3::Unchecked(Sattr3::decode(r)?),
            Createmode3::Guarded => Createhow3::Guarded(Sattr3::decode(r)?),
            Createmode3::Exclusive => Createhow3::Exclusive(Createverf3::decode(r)?),
        })
    }
}

xdr_struct! {
    /// `CREATE3args` (RFC 1813 §3.3.8).
    pub struct Create3Args {
        /// `where`.
        pub where_: Diropargs3,
        /// `how`.
        pub how: Createhow3,
    }
}

xdr_struct! {
    /// `MKDIR3args` (RFC 1813 §3.3.9).
    pub struct Mkdir3Args {
        /// `where`.
        pub where_: Diropargs3,
        /// `attributes`.
        pub attributes: Sattr3,
    }
}

/// `symlinkdata3` (RFC 1813 §3.3.10). `symlink_data` is DDP-eligible
/// (RFC 8267 §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symlinkdata3 {
    /// `symlink_attributes`.
    pub symlink_attributes: Sattr3,
    /// `symlink_data`.
    pub symlink_data: Nfspath3,
}

impl XdrEncode for Symlinkdata3 {
    fn encoded_len(&self) -> usize {
        self.symlink_attributes.encoded_len() + self.symlink_data.encoded_len()
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        self.symlink_attributes.encode(e);
        self.symlink_data.encode(e);
    }
}

impl XdrDecode for Symlinkdata3 {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        Ok(Symlinkdata3 {
            symlink_attributes: Sattr3::decode(r)?,
            symlink_data: Nfspath3::decode(r)?,
        })
    }
}

impl PayloadEncode for Symlinkdata3 {
    fn encode_payload(&self, b: &mut PayloadBuilder) {
        b.item(&self.symlink_attributes)
            .ddp_opaque(self.symlink_data.0.clone());
    }
}

/// `SYMLINK3args` (RFC 1813 §3.3.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symlink3Args {
    /// `where`.
    pub where_: Diropargs3,
    /// `symlink`.
    pub symlink: Symlinkdata3,
}

impl XdrEncode for Symlink3Args {
    fn encoded_len(&self) -> usize {
        self.where_.encoded_len() + self.symlink.encoded_len()
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        self.where_.encode(e);
        self.symlink.encode(e);
    }
}

impl XdrDecode for Symlink3Args {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        Ok(Symlink3Args {
            where_: Diropargs3::decode(r)?,
            symlink: Symlinkdata3::decode(r)?,
        })
    }
}

impl PayloadEncode for Symlink3Args {
    fn encode_payload(&self, b: &mut PayloadBuilder) {
        b.item(&self.where_);
        self.symlink.encode_payload(b);
    }
}

xdr_struct! {
    /// `devicedata3` (RFC 1813 §3.3.11).
    pub struct Devicedata3 {
        /// `dev_attributes`.
        pub dev_attributes: Sattr3,
        /// `spec`.
        pub spec: Specdata3,
    }
}

/// `mknoddata3` (RFC 1813 §3.3.11): a union on [`Ftype3`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mknoddata3 {
    /// `NF3CHR` with `device`.
    Chr(Devicedata3),
    /// `NF3BLK` with `device`.
    Blk(Devicedata3),
    /// `NF3SOCK` with `pipe_attributes`.
    Sock(Sattr3),
    /// `NF3FIFO` with `pipe_attributes`.
    Fifo(Sattr3),
    /// `NF3REG`, `NF3DIR` or `NF3LNK`: no data (the server answers
    /// `NFS3ERR_BADTYPE`).
    Other(Ftype3),
}

impl Mknoddata3 {
    /// The `type` discriminant.
    pub fn ftype(&self) -> Ftype3 {
        match self {
            Mknoddata3::Chr(_) => Ftype3::Chr,
            Mknoddata3::Blk(_) => Ftype3::Blk,
            Mknoddata3::Sock(_) => Ftype3::Sock,
            Mknoddata3::Fifo(_) => Ftype3::Fifo,
            Mknoddata3::Other(t) => *t,
        }
    }
}

impl XdrEncode for Mknoddata3 {
    fn encoded_len(&self) -> usize {
        4 + match self {
            Mknoddata3::Chr(d) | Mknoddata3::Blk(d) => d.encoded_len(),
            Mknoddata3::Sock(a) | Mknoddata3::Fifo(a) => a.encoded_len(),
            Mknoddata3::Other(_) => 0,
        }
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        match self {
            Mknoddata3::Chr(d) | Mknoddata3::Blk(d) => {
                self.ftype().encode(e);
                d.encode(e);
            }
            Mknoddata3::Sock(a) | Mknoddata3::Fifo(a) => {
                self.ftype().encode(e);
                a.encode(e);
            }
            Mknoddata3::Other(t) => {
                // A type with an arm of its own is encoded with empty data
                // by its variant; `Other` only carries the void ones.
                let t = match t {
                    Ftype3::Chr | Ftype3::Blk | Ftype3::Sock | Ftype3::Fifo => Ftype3::Reg,
                    t => *t,
                };
                t.encode(e);
            }
        }
    }
}

impl XdrDecode for Mknoddata3 {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        Ok(match Ftype3::decode(r)? {
            Ftype3::Chr => Mknoddata3::Chr(Devicedata3::decode(r)?),
            Ftype3::Blk => Mknoddata3::Blk(Devicedata3::decode(r)?),
            Ftype3::Sock => Mknoddata3::Sock(Sattr3::decode(r)?),
            Ftype3::Fifo => Mknoddata3::Fifo(Sattr3::decode(r)?),
            t => Mknoddata3::Other(t),
        })
    }
}

xdr_struct! {
    /// `MKNOD3args` (RFC 1813 §3.3.11).
    pub struct Mknod3Args {
        /// `where`.
        pub where_: Diropargs3,
        /// `what`.
        pub what: Mknoddata3,
    }
}

xdr_struct! {
    /// `REMOVE3args` (RFC 1813 §3.3.12).
    pub struct Remove3Args {
        /// `object`.
        pub object: Diropargs3,
    }
}

xdr_struct! {
    /// `RMDIR3args` (RFC 1813 §3.3.13).
    pub struct Rmdir3Args {
        /// `object`.
        pub object: Diropargs3,
    }
}

xdr_struct! {
    /// `RENAME3args` (RFC 1813 §3.3.14).
    pub struct Rename3Args {
        /// `from`.
        pub from: Diropargs3,
        /// `to`.
        pub to: Diropargs3,
    }
}

xdr_struct! {
    /// `LINK3args` (RFC 1813 §3.3.15).
    pub struct Link3Args {
        /// `file`.
        pub file: NfsFh3,
        /// `link`.
        pub link: Diropargs3,
    }
}

xdr_struct! {
    /// `READDIR3args` (RFC 1813 §3.3.16).
    pub struct Readdir3Args {
        /// `dir`.
        pub dir: NfsFh3,
        /// `cookie`.
        pub cookie: u64,
        /// `cookieverf`.
        pub cookieverf: Cookieverf3,
        /// `count`: largest reply (XDR bytes of the `READDIR3resok`).
        pub count: u32,
    }
}

xdr_struct! {
    /// `READDIRPLUS3args` (RFC 1813 §3.3.17).
    pub struct Readdirplus3Args {
        /// `dir`.
        pub dir: NfsFh3,
        /// `cookie`.
        pub cookie: u64,
        /// `cookieverf`.
        pub cookieverf: Cookieverf3,
        /// `dircount`: largest directory information (fileid, name, cookie).
        pub dircount: u32,
        /// `maxcount`: largest reply (XDR bytes of the `READDIRPLUS3resok`).
        pub maxcount: u32,
    }
}

xdr_struct! {
    /// `FSSTAT3args` (RFC 1813 §3.3.18).
    pub struct Fsstat3Args {
        /// `fsroot`.
        pub fsroot: NfsFh3,
    }
}

xdr_struct! {
    /// `FSINFO3args` (RFC 1813 §3.3.19).
    pub struct Fsinfo3Args {
        /// `fsroot`.
        pub fsroot: NfsFh3,
    }
}

xdr_struct! {
    /// `PATHCONF3args` (RFC 1813 §3.3.20).
    pub struct Pathconf3Args {
        /// `object`.
        pub object: NfsFh3,
    }
}

xdr_struct! {
    /// `COMMIT3args` (RFC 1813 §3.3.21).
    pub struct Commit3Args {
        /// `file`.
        pub file: NfsFh3,
        /// `offset`.
        pub offset: u64,
        /// `count`.
        pub count: u32,
    }
}
