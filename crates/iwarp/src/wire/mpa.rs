//! MPA connection setup frames: RFC 5044 §7.1 Request/Reply, with the
//! RFC 6581 enhanced-connection IRD/ORD block.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                     Key (16 bytes)                            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |M|C|R|E| Res   |     Rev       |          PD_Length            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ~                 Private Data (PD_Length ≤ 512)                ~
//! ```
//!
//! With revision 2 and the enhanced flag `E` (`0x10`, as Linux siw and cxgb4
//! use it), the first 4 bytes of the private data are the IRD/ORD block
//! ([`IrdOrd`]); they count toward PD_Length. [`MpaRepr`] separates them
//! from the ULP's private data.

use super::{be16, Error};

/// Key of an MPA Request frame (RFC 5044 §7.1), no terminator.
pub const REQ_KEY: &[u8; 16] = b"MPA ID Req Frame";
/// Key of an MPA Reply frame (RFC 5044 §7.1), no terminator.
pub const REP_KEY: &[u8; 16] = b"MPA ID Rep Frame";
/// Length of the fixed part of a Request/Reply frame.
pub const HEADER_LEN: usize = 20;
/// Largest PD_Length allowed (RFC 5044 §7.1).
pub const MAX_PRIVATE_DATA: usize = 512;
/// Length of the RFC 6581 IRD/ORD block.
pub const IRD_ORD_LEN: usize = 4;
/// Largest ULP private data that fits next to the IRD/ORD block.
pub const MAX_ULP_PRIVATE_DATA_ENHANCED: usize = MAX_PRIVATE_DATA - IRD_ORD_LEN;

/// Flag bits of byte 16.
pub mod flags {
    /// M: the sender of this frame wants markers in FPDUs sent to it.
    pub const MARKERS: u8 = 0x80;
    /// C: CRC32c required.
    pub const CRC: u8 = 0x40;
    /// R: rejected (Reply only).
    pub const REJECT: u8 = 0x20;
    /// RFC 6581 enhanced connection establishment (IRD/ORD block present).
    pub const ENHANCED: u8 = 0x10;
}

/// MPA revision of RFC 5044.
pub const REV_1: u8 = 1;
/// MPA revision of RFC 6581.
pub const REV_2: u8 = 2;

/// Which frame of the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// Sent by the Initiator (active TCP side).
    Request,
    /// Sent by the Responder.
    Reply,
}

impl FrameKind {
    /// The 16-byte key of this frame kind.
    pub fn key(self) -> &'static [u8; 16] {
        match self {
            FrameKind::Request => REQ_KEY,
            FrameKind::Reply => REP_KEY,
        }
    }
}

/// Zero-copy view of an MPA Request/Reply frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wrap without checking; accessors may panic on short buffers. Prefer
    /// [`Frame::new_checked`].
    pub fn new_unchecked(buffer: T) -> Self {
        Frame { buffer }
    }

    /// Wrap and check that the whole frame (header and PD_Length bytes of
    /// private data) is present.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let f = Frame { buffer };
        f.check_len()?;
        Ok(f)
    }

    /// Check that the header and the private data are present.
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN || b.len() < HEADER_LEN + self.pd_length() as usize {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Consume the view.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The 16-byte key.
    pub fn key(&self) -> &[u8] {
        &self.buffer.as_ref()[..16]
    }

    /// Request or Reply, from the key; `None` for any other key.
    pub fn kind(&self) -> Option<FrameKind> {
        match self.key() {
            k if k == REQ_KEY => Some(FrameKind::Request),
            k if k == REP_KEY => Some(FrameKind::Reply),
            _ => None,
        }
    }

    /// The raw flags byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[16]
    }

    /// M flag.
    pub fn markers(&self) -> bool {
        self.flags() & flags::MARKERS != 0
    }

    /// C flag.
    pub fn crc(&self) -> bool {
        self.flags() & flags::CRC != 0
    }

    /// R flag.
    pub fn reject(&self) -> bool {
        self.flags() & flags::REJECT != 0
    }

    /// RFC 6581 enhanced flag.
    pub fn enhanced(&self) -> bool {
        self.flags() & flags::ENHANCED != 0
    }

    /// Rev field.
    pub fn revision(&self) -> u8 {
        self.buffer.as_ref()[17]
    }

    /// PD_Length field.
    pub fn pd_length(&self) -> u16 {
        be16(self.buffer.as_ref(), 18)
    }

    /// All private data (including an IRD/ORD block, if any).
    pub fn private_data(&self) -> &[u8] {
        let n = self.pd_length() as usize;
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + n]
    }

    /// Total frame length: header plus PD_Length.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.pd_length() as usize
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Set the key.
    pub fn set_kind(&mut self, kind: FrameKind) {
        self.buffer.as_mut()[..16].copy_from_slice(kind.key());
    }

    /// Set the raw flags byte.
    pub fn set_flags(&mut self, f: u8) {
        self.buffer.as_mut()[16] = f;
    }

    /// Set Rev.
    pub fn set_revision(&mut self, rev: u8) {
        self.buffer.as_mut()[17] = rev;
    }

    /// Set PD_Length.
    pub fn set_pd_length(&mut self, len: u16) {
        self.buffer.as_mut()[18..20].copy_from_slice(&len.to_be_bytes());
    }

    /// Mutable private data (PD_Length must be set first).
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        let n = self.pd_length() as usize;
        &mut self.buffer.as_mut()[HEADER_LEN..HEADER_LEN + n]
    }
}

/// How many bytes the frame starting at `buf` needs in total, once its
/// 20-byte header is present: `Ok(None)` if fewer than 20 bytes are
/// available, `Ok(Some(len))` otherwise. Fails early on a bad key or a
/// PD_Length over 512, so a handshake reader never waits for (or buffers)
/// more than 532 bytes.
pub fn frame_len_hint(buf: &[u8]) -> Result<Option<usize>, Error> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let f = Frame::new_unchecked(buf);
    if f.kind().is_none() {
        return Err(Error::MpaBadKey);
    }
    let pd = f.pd_length() as usize;
    if pd > MAX_PRIVATE_DATA {
        return Err(Error::MpaPrivateDataTooLong(pd));
    }
    Ok(Some(HEADER_LEN + pd))
}

/// RFC 6581 IRD/ORD block, the first 4 octets of the private data of an
/// enhanced frame.
///
/// ```text
/// |P|S|   IRD (14 bits)  |W|R|   ORD (14 bits)   |
/// ```
/// P: peer-to-peer RTR model; S: zero-length Send as RTR (IRD word bit 14);
/// W: zero-length RDMA Write as RTR; R: zero-length RDMA Read as RTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IrdOrd {
    /// Inbound RDMA Read queue depth the sender offers (0..=0x3FFF).
    pub ird: u16,
    /// Outbound RDMA Read Requests the sender will issue (0..=0x3FFF).
    pub ord: u16,
    /// Peer-to-peer mode: an RTR message follows the handshake.
    pub peer_to_peer: bool,
    /// Zero-length Send may be the RTR.
    pub rtr_send: bool,
    /// Zero-length RDMA Write may be the RTR.
    pub rtr_write: bool,
    /// Zero-length RDMA Read may be the RTR.
    pub rtr_read: bool,
}

impl IrdOrd {
    /// Largest IRD/ORD value (14 bits).
    pub const MAX: u16 = 0x3FFF;
    const P: u16 = 0x8000;
    const S: u16 = 0x4000;
    const W: u16 = 0x8000;
    const R: u16 = 0x4000;

    /// Parse the 4-byte block (at least 4 bytes are needed).
    pub fn parse(b: &[u8]) -> Result<Self, Error> {
        if b.len() < IRD_ORD_LEN {
            return Err(Error::Truncated);
        }
        let a = be16(b, 0);
        let o = be16(b, 2);
        Ok(IrdOrd {
            ird: a & Self::MAX,
            ord: o & Self::MAX,
            peer_to_peer: a & Self::P != 0,
            rtr_send: a & Self::S != 0,
            rtr_write: o & Self::W != 0,
            rtr_read: o & Self::R != 0,
        })
    }

    /// The 4 wire bytes (IRD/ORD values are truncated to 14 bits).
    pub fn to_bytes(&self) -> [u8; 4] {
        let mut a = self.ird & Self::MAX;
        let mut o = self.ord & Self::MAX;
        if self.peer_to_peer {
            a |= Self::P;
        }
        if self.rtr_send {
            a |= Self::S;
        }
        if self.rtr_write {
            o |= Self::W;
        }
        if self.rtr_read {
            o |= Self::R;
        }
        let mut out = [0u8; 4];
        out[..2].copy_from_slice(&a.to_be_bytes());
        out[2..].copy_from_slice(&o.to_be_bytes());
        out
    }

    /// Emit into the first 4 bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        let dst = buf.get_mut(..IRD_ORD_LEN).ok_or(Error::BufferTooSmall)?;
        dst.copy_from_slice(&self.to_bytes());
        Ok(())
    }
}

/// High-level MPA Request/Reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MpaRepr<'a> {
    /// Request or Reply.
    pub kind: FrameKind,
    /// M: the sender wants markers in FPDUs sent to it.
    pub markers: bool,
    /// C: the sender wants CRC32c (in either frame → CRC in both directions).
    pub crc: bool,
    /// R: connection rejected. Always `false` for a parsed Request (the bit
    /// is only meaningful in a Reply).
    pub reject: bool,
    /// Rev: 1 (RFC 5044) or 2 (RFC 6581).
    pub revision: u8,
    /// RFC 6581 IRD/ORD block; `Some` exactly when the enhanced flag is set
    /// (which requires revision 2).
    pub ird_ord: Option<IrdOrd>,
    /// ULP private data (after the IRD/ORD block, if any).
    pub private_data: &'a [u8],
}

impl<'a> MpaRepr<'a> {
    /// Parse and validate a complete frame: known key, revision 1 or 2,
    /// PD_Length ≤ 512, enhanced frames are revision 2 and carry the 4-byte
    /// IRD/ORD block. Extra bytes after the frame are ignored (use
    /// [`Frame::frame_len`] / [`frame_len_hint`] to find the end).
    pub fn parse(frame: &Frame<&'a [u8]>) -> Result<Self, Error> {
        let b: &'a [u8] = frame.buffer;
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let kind = frame.kind().ok_or(Error::MpaBadKey)?;
        let pd_len = frame.pd_length() as usize;
        if pd_len > MAX_PRIVATE_DATA {
            return Err(Error::MpaPrivateDataTooLong(pd_len));
        }
        let rev = frame.revision();
        if rev != REV_1 && rev != REV_2 {
            return Err(Error::MpaRevision(rev));
        }
        let pd = b
            .get(HEADER_LEN..HEADER_LEN + pd_len)
            .ok_or(Error::Truncated)?;
        let (ird_ord, private_data) = if frame.enhanced() {
            if rev != REV_2 {
                return Err(Error::MpaRevision(rev));
            }
            if pd.len() < IRD_ORD_LEN {
                return Err(Error::MpaMissingIrdOrd);
            }
            (Some(IrdOrd::parse(pd)?), &pd[IRD_ORD_LEN..])
        } else {
            (None, pd)
        };
        Ok(MpaRepr {
            kind,
            markers: frame.markers(),
            crc: frame.crc(),
            reject: kind == FrameKind::Reply && frame.reject(),
            revision: rev,
            ird_ord,
            private_data,
        })
    }

    /// Convenience: parse from a byte slice holding at least the whole frame.
    pub fn parse_bytes(buf: &'a [u8]) -> Result<Self, Error> {
        let f = Frame::new_checked(buf)?;
        Self::parse(&f)
    }

    /// PD_Length this frame will carry.
    pub fn pd_length(&self) -> usize {
        self.private_data.len()
            + if self.ird_ord.is_some() {
                IRD_ORD_LEN
            } else {
                0
            }
    }

    /// Bytes [`MpaRepr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.pd_length()
    }

    /// Emit into `buf` (at least [`MpaRepr::buffer_len`] bytes); returns the
    /// frame length. Fails if PD_Length would exceed 512 or if an IRD/ORD
    /// block is given with a revision other than 2.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let pd_len = self.pd_length();
        if pd_len > MAX_PRIVATE_DATA {
            return Err(Error::MpaPrivateDataTooLong(pd_len));
        }
        if self.revision != REV_1 && self.revision != REV_2 {
            return Err(Error::MpaRevision(self.revision));
        }
        if self.ird_ord.is_some() && self.revision != REV_2 {
            return Err(Error::MpaRevision(self.revision));
        }
        let total = HEADER_LEN + pd_len;
        let buf = buf.get_mut(..total).ok_or(Error::BufferTooSmall)?;
        let mut f = Frame::new_unchecked(&mut *buf);
        f.set_kind(self.kind);
        let mut fl = 0u8;
        if self.markers {
            fl |= flags::MARKERS;
        }
        if self.crc {
            fl |= flags::CRC;
        }
        if self.reject && self.kind == FrameKind::Reply {
            fl |= flags::REJECT;
        }
        if self.ird_ord.is_some() {
            fl |= flags::ENHANCED;
        }
        f.set_flags(fl);
        f.set_revision(self.revision);
        f.set_pd_length(pd_len as u16);
        let pd = f.private_data_mut();
        let rest = match &self.ird_ord {
            Some(io) => {
                io.emit(pd)?;
                &mut pd[IRD_ORD_LEN..]
            }
            None => pd,
        };
        rest.copy_from_slice(self.private_data);
        Ok(total)
    }

    /// Emit into a fresh `Vec` (allocation sized by our own, validated repr).
    pub fn to_vec(&self) -> Result<Vec<u8>, Error> {
        let mut v = vec![0u8; self.buffer_len().min(HEADER_LEN + MAX_PRIVATE_DATA)];
        let n = self.emit(&mut v)?;
        v.truncate(n);
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_rev1_bytes() {
        let r = MpaRepr {
            kind: FrameKind::Request,
            markers: false,
            crc: true,
            reject: false,
            revision: 1,
            ird_ord: None,
            private_data: &[0xf6, 0xab, 0x0e, 0x18],
        };
        let v = r.to_vec().unwrap();
        let mut expect = b"MPA ID Req Frame".to_vec();
        expect.extend_from_slice(&[0x40, 0x01, 0x00, 0x04, 0xf6, 0xab, 0x0e, 0x18]);
        assert_eq!(v, expect);
        assert_eq!(MpaRepr::parse_bytes(&v).unwrap(), r);
    }

    #[test]
    fn reply_rev2_enhanced_bytes() {
        let r = MpaRepr {
            kind: FrameKind::Reply,
            markers: false,
            crc: false,
            reject: false,
            revision: 2,
            ird_ord: Some(IrdOrd {
                ird: 16,
                ord: 0x3FFF,
                peer_to_peer: true,
                rtr_send: false,
                rtr_write: true,
                rtr_read: false,
            }),
            private_data: b"hi",
        };
        let v = r.to_vec().unwrap();
        let mut expect = b"MPA ID Rep Frame".to_vec();
        // flags: enhanced 0x10; rev 2; PD_Length 6; IRD word 0x8010; ORD word 0xBFFF.
        expect.extend_from_slice(&[0x10, 0x02, 0x00, 0x06, 0x80, 0x10, 0xbf, 0xff, b'h', b'i']);
        assert_eq!(v, expect);
        assert_eq!(MpaRepr::parse_bytes(&v).unwrap(), r);
    }

    #[test]
    fn reject_reply_and_markers() {
        let r = MpaRepr {
            kind: FrameKind::Reply,
            markers: true,
            crc: true,
            reject: true,
            revision: 1,
            ird_ord: None,
            private_data: &[],
        };
        let v = r.to_vec().unwrap();
        assert_eq!(&v[16..20], &[0xe0, 0x01, 0x00, 0x00]);
        let p = MpaRepr::parse_bytes(&v).unwrap();
        assert!(p.reject && p.markers && p.crc);
    }

    #[test]
    fn reject_bit_ignored_in_request() {
        let mut v = b"MPA ID Req Frame".to_vec();
        v.extend_from_slice(&[0x20, 0x01, 0x00, 0x00]);
        assert!(!MpaRepr::parse_bytes(&v).unwrap().reject);
    }

    #[test]
    fn errors() {
        let mut v = b"MPA ID Xyz Frame".to_vec();
        v.extend_from_slice(&[0, 1, 0, 0]);
        assert_eq!(MpaRepr::parse_bytes(&v), Err(Error::MpaBadKey));
        assert_eq!(frame_len_hint(&v), Err(Error::MpaBadKey));

        let mut v = b"MPA ID Req Frame".to_vec();
        v.extend_from_slice(&[0, 1, 0x02, 0x01]); // PD_Length 513
        assert_eq!(frame_len_hint(&v), Err(Error::MpaPrivateDataTooLong(513)));
        v.resize(20 + 513, 0);
        assert_eq!(
            MpaRepr::parse_bytes(&v),
            Err(Error::MpaPrivateDataTooLong(513))
        );

        let mut v = b"MPA ID Req Frame".to_vec();
        v.extend_from_slice(&[0, 3, 0, 0]);
        assert_eq!(MpaRepr::parse_bytes(&v), Err(Error::MpaRevision(3)));

        let mut v = b"MPA ID Req Frame".to_vec();
        v.extend_from_slice(&[0x10, 2, 0, 2, 0, 0]);
        assert_eq!(MpaRepr::parse_bytes(&v), Err(Error::MpaMissingIrdOrd));

        let mut v = b"MPA ID Req Frame".to_vec();
        v.extend_from_slice(&[0x10, 1, 0, 4, 0, 0, 0, 0]);
        assert_eq!(MpaRepr::parse_bytes(&v), Err(Error::MpaRevision(1)));

        let mut v = b"MPA ID Req Frame".to_vec();
        v.extend_from_slice(&[0, 1, 0, 4, 1]);
        assert_eq!(MpaRepr::parse_bytes(&v), Err(Error::Truncated));
        assert_eq!(frame_len_hint(&v[..19]), Ok(None));
        assert_eq!(frame_len_hint(&v), Ok(Some(24)));

        let big = [0u8; 510];
        let r = MpaRepr {
            kind: FrameKind::Request,
            markers: false,
            crc: false,
            reject: false,
            revision: 2,
            ird_ord: Some(IrdOrd::default()),
            private_data: &big,
        };
        assert_eq!(r.to_vec(), Err(Error::MpaPrivateDataTooLong(514)));
        let mut small = [0u8; 10];
        let r = MpaRepr {
            private_data: &[],
            ..r
        };
        assert_eq!(r.emit(&mut small), Err(Error::BufferTooSmall));
    }

    #[test]
    fn ird_ord_bits() {
        let io = IrdOrd::parse(&[0x40, 0x05, 0x40, 0x07]).unwrap();
        assert_eq!(
            io,
            IrdOrd {
                ird: 5,
                ord: 7,
                peer_to_peer: false,
                rtr_send: true,
                rtr_write: false,
                rtr_read: true
            }
        );
        assert_eq!(io.to_bytes(), [0x40, 0x05, 0x40, 0x07]);
    }
}
