//! DDP segment headers (RFC 5041 §4) and message segmentation (RFC 5041 §5).
//!
//! Offsets are relative to the first byte of the ULPDU (just after MPA's
//! ULPDU_Length).
//!
//! ```text
//! Tagged (T=1), 14 bytes:
//! | T L Rsvd DV | RsvdULP | STag (4) | TO (8) |
//! Untagged (T=0), 18 bytes:
//! | T L Rsvd DV | RsvdULP (5) | QN (4) | MSN (4) | MO (4) |
//! ```
//! RDMAP (RFC 5040 §4) uses the first RsvdULP byte as its control byte and
//! untagged RsvdULP\[1..5\] as the Invalidate STag.

use core::ops::Range;

use super::{be32, be64, Error};

/// Tagged DDP header length.
pub const TAGGED_HEADER_LEN: usize = 14;
/// Untagged DDP header length.
pub const UNTAGGED_HEADER_LEN: usize = 18;
/// The DDP version this implementation speaks (RFC 5041 §4.2: DV = 01b).
pub const DDP_VERSION: u8 = 1;

/// DDP control byte bits (RFC 5041 §4.2).
pub mod control {
    /// T: tagged buffer model.
    pub const TAGGED: u8 = 0x80;
    /// L: last segment of the message.
    pub const LAST: u8 = 0x40;
    /// Reserved bits (send 0, ignore on receive).
    pub const RSVD: u8 = 0x3C;
    /// DV: DDP version.
    pub const VERSION: u8 = 0x03;
}

/// Header length for a segment whose first ULPDU byte is `control_byte`.
#[inline]
pub fn header_len_for(control_byte: u8) -> usize {
    if control_byte & control::TAGGED != 0 {
        TAGGED_HEADER_LEN
    } else {
        UNTAGGED_HEADER_LEN
    }
}

/// Zero-copy view of a DDP segment (header + payload).
#[derive(Debug, Clone)]
pub struct Segment<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Segment<T> {
    /// Wrap without checking; accessors may panic on short buffers. Prefer
    /// [`Segment::new_checked`].
    pub fn new_unchecked(buffer: T) -> Self {
        Segment { buffer }
    }

    /// Wrap and check that the complete header is present.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let s = Segment { buffer };
        s.check_len()?;
        Ok(s)
    }

    /// Check that the header (14 or 18 bytes, by the T bit) is present.
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        match b.first() {
            None => Err(Error::Truncated),
            Some(&c) if b.len() < header_len_for(c) => Err(Error::Truncated),
            Some(_) => Ok(()),
        }
    }

    /// Consume the view.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The DDP control byte.
    pub fn control(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// T bit.
    pub fn tagged(&self) -> bool {
        self.control() & control::TAGGED != 0
    }

    /// L bit.
    pub fn last(&self) -> bool {
        self.control() & control::LAST != 0
    }

    /// DV field.
    pub fn version(&self) -> u8 {
        self.control() & control::VERSION
    }

    /// First RsvdULP byte (the RDMAP control byte).
    pub fn rsvd_ulp0(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// Header length (14 tagged, 18 untagged).
    pub fn header_len(&self) -> usize {
        header_len_for(self.control())
    }

    /// The header bytes.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// Tagged: Data Sink STag.
    pub fn stag(&self) -> u32 {
        be32(self.buffer.as_ref(), 2)
    }

    /// Tagged: Tagged Offset.
    pub fn to(&self) -> u64 {
        be64(self.buffer.as_ref(), 6)
    }

    /// Untagged: the 5 RsvdULP bytes.
    pub fn rsvd_ulp_untagged(&self) -> [u8; 5] {
        let mut a = [0u8; 5];
        a.copy_from_slice(&self.buffer.as_ref()[1..6]);
        a
    }

    /// Untagged: queue number.
    pub fn qn(&self) -> u32 {
        be32(self.buffer.as_ref(), 6)
    }

    /// Untagged: message sequence number.
    pub fn msn(&self) -> u32 {
        be32(self.buffer.as_ref(), 10)
    }

    /// Untagged: message offset.
    pub fn mo(&self) -> u32 {
        be32(self.buffer.as_ref(), 14)
    }

    /// Payload after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// Tagged buffer model header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaggedRepr {
    /// L bit.
    pub last: bool,
    /// RsvdULP (RDMAP control byte).
    pub rsvd_ulp: u8,
    /// Data Sink STag.
    pub stag: u32,
    /// Tagged Offset of this segment's first payload byte.
    pub to: u64,
}

/// Untagged buffer model header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UntaggedRepr {
    /// L bit.
    pub last: bool,
    /// RsvdULP (RDMAP control byte, then the Invalidate STag or zero).
    pub rsvd_ulp: [u8; 5],
    /// Queue number.
    pub qn: u32,
    /// Message sequence number (starts at 1 per queue).
    pub msn: u32,
    /// Message offset of this segment's first payload byte.
    pub mo: u32,
}

/// A DDP segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DdpRepr {
    /// T = 1.
    Tagged(TaggedRepr),
    /// T = 0.
    Untagged(UntaggedRepr),
}

impl DdpRepr {
    /// Parse the header of `seg`, checking its length and DV = 1.
    /// Reserved bits are ignored (RFC 5041 §4.2).
    pub fn parse<T: AsRef<[u8]>>(seg: &Segment<T>) -> Result<Self, Error> {
        seg.check_len()?;
        if seg.version() != DDP_VERSION {
            return Err(Error::DdpVersion {
                tagged: seg.tagged(),
                version: seg.version(),
            });
        }
        Ok(if seg.tagged() {
            DdpRepr::Tagged(TaggedRepr {
                last: seg.last(),
                rsvd_ulp: seg.rsvd_ulp0(),
                stag: seg.stag(),
                to: seg.to(),
            })
        } else {
            DdpRepr::Untagged(UntaggedRepr {
                last: seg.last(),
                rsvd_ulp: seg.rsvd_ulp_untagged(),
                qn: seg.qn(),
                msn: seg.msn(),
                mo: seg.mo(),
            })
        })
    }

    /// Parse from the start of a ULPDU.
    pub fn parse_bytes(ulpdu: &[u8]) -> Result<Self, Error> {
        Self::parse(&Segment::new_unchecked(ulpdu))
    }

    /// Header length (14 or 18).
    pub fn header_len(&self) -> usize {
        match self {
            DdpRepr::Tagged(_) => TAGGED_HEADER_LEN,
            DdpRepr::Untagged(_) => UNTAGGED_HEADER_LEN,
        }
    }

    /// L bit.
    pub fn last(&self) -> bool {
        match self {
            DdpRepr::Tagged(t) => t.last,
            DdpRepr::Untagged(u) => u.last,
        }
    }

    /// First RsvdULP byte (RDMAP control byte).
    pub fn rsvd_ulp0(&self) -> u8 {
        match self {
            DdpRepr::Tagged(t) => t.rsvd_ulp,
            DdpRepr::Untagged(u) => u.rsvd_ulp[0],
        }
    }

    /// Emit the header into `buf`; returns the header length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let n = self.header_len();
        let b = buf.get_mut(..n).ok_or(Error::BufferTooSmall)?;
        match self {
            DdpRepr::Tagged(t) => {
                b[0] = control::TAGGED | if t.last { control::LAST } else { 0 } | DDP_VERSION;
                b[1] = t.rsvd_ulp;
                b[2..6].copy_from_slice(&t.stag.to_be_bytes());
                b[6..14].copy_from_slice(&t.to.to_be_bytes());
            }
            DdpRepr::Untagged(u) => {
                b[0] = if u.last { control::LAST } else { 0 } | DDP_VERSION;
                b[1..6].copy_from_slice(&u.rsvd_ulp);
                b[6..10].copy_from_slice(&u.qn.to_be_bytes());
                b[10..14].copy_from_slice(&u.msn.to_be_bytes());
                b[14..18].copy_from_slice(&u.mo.to_be_bytes());
            }
        }
        Ok(n)
    }

    /// The header as a fixed array plus its length.
    pub fn to_bytes(&self) -> ([u8; UNTAGGED_HEADER_LEN], usize) {
        let mut a = [0u8; UNTAGGED_HEADER_LEN];
        // Cannot fail: the array holds the longest header.
        let n = self.emit(&mut a).unwrap_or(0);
        (a, n)
    }
}

/// What every segment of one message shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageTemplate {
    /// Tagged message placed at `stag`, starting at `to`.
    Tagged {
        /// RsvdULP (RDMAP control byte).
        rsvd_ulp: u8,
        /// Data Sink STag.
        stag: u32,
        /// Tagged Offset of the message's first byte.
        to: u64,
    },
    /// Untagged message on queue `qn` with sequence number `msn`.
    Untagged {
        /// RsvdULP bytes (RDMAP control byte + Invalidate STag).
        rsvd_ulp: [u8; 5],
        /// Queue number.
        qn: u32,
        /// Message sequence number.
        msn: u32,
    },
}

impl MessageTemplate {
    fn header_len(&self) -> usize {
        match self {
            MessageTemplate::Tagged { .. } => TAGGED_HEADER_LEN,
            MessageTemplate::Untagged { .. } => UNTAGGED_HEADER_LEN,
        }
    }
}

/// One DDP segment of a message: its header and the byte range of the
/// message payload it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentPlan {
    /// The segment's DDP header.
    pub header: DdpRepr,
    /// Message payload bytes carried by this segment.
    pub range: Range<usize>,
}

/// Iterator splitting a message into DDP segments whose ULPDU (header +
/// payload) fits `mulpdu` (RFC 5041 §5.1). A zero-length message gives one
/// empty segment with L = 1.
#[derive(Debug, Clone)]
pub struct Segments {
    template: MessageTemplate,
    len: usize,
    max_payload: usize,
    off: usize,
    done: bool,
}

/// Plan the segmentation of a `message_len`-byte message. Fails if `mulpdu`
/// cannot carry the header plus one payload byte, if a tagged message would
/// wrap the 64-bit TO, or if an untagged message is longer than MO can
/// address (2^32 bytes).
pub fn segments(
    template: MessageTemplate,
    message_len: usize,
    mulpdu: usize,
) -> Result<Segments, Error> {
    let hl = template.header_len();
    if mulpdu <= hl {
        return Err(Error::MulpduTooSmall(mulpdu));
    }
    // ULPDU_Length is 16 bits.
    let max_payload = mulpdu.min(u16::MAX as usize) - hl;
    match template {
        MessageTemplate::Tagged { to, .. } => {
            if message_len > 0 && to.checked_add(message_len as u64 - 1).is_none() {
                return Err(Error::ToWrap);
            }
        }
        MessageTemplate::Untagged { .. } => {
            if message_len as u64 > u32::MAX as u64 + 1 {
                return Err(Error::TooLong);
            }
        }
    }
    Ok(Segments {
        template,
        len: message_len,
        max_payload,
        off: 0,
        done: false,
    })
}

impl Segments {
    /// Number of segments still to come.
    pub fn remaining(&self) -> usize {
        if self.done {
            0
        } else if self.len == self.off {
            1
        } else {
            (self.len - self.off).div_ceil(self.max_payload)
        }
    }
}

impl Iterator for Segments {
    type Item = SegmentPlan;

    fn next(&mut self) -> Option<SegmentPlan> {
        if self.done {
            return None;
        }
        let start = self.off;
        let end = start + (self.len - start).min(self.max_payload);
        let last = end == self.len;
        self.off = end;
        self.done = last;
        let header = match self.template {
            MessageTemplate::Tagged { rsvd_ulp, stag, to } => DdpRepr::Tagged(TaggedRepr {
                last,
                rsvd_ulp,
                stag,
                to: to.wrapping_add(start as u64),
            }),
            MessageTemplate::Untagged { rsvd_ulp, qn, msn } => DdpRepr::Untagged(UntaggedRepr {
                last,
                rsvd_ulp,
                qn,
                msn,
                mo: start as u32,
            }),
        };
        Some(SegmentPlan {
            header,
            range: start..end,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.remaining();
        (n, Some(n))
    }
}

impl ExactSizeIterator for Segments {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_bytes() {
        let h = DdpRepr::Tagged(TaggedRepr {
            last: true,
            rsvd_ulp: 0x40,
            stag: 0x1122_3344,
            to: 0x0102_0304_0506_0708,
        });
        let (a, n) = h.to_bytes();
        assert_eq!(
            &a[..n],
            &[0xc1, 0x40, 0x11, 0x22, 0x33, 0x44, 1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert_eq!(DdpRepr::parse_bytes(&a[..n]).unwrap(), h);
        let seg = Segment::new_checked(&a[..n]).unwrap();
        assert!(seg.tagged() && seg.last() && seg.payload().is_empty());
    }

    #[test]
    fn untagged_bytes() {
        let h = DdpRepr::Untagged(UntaggedRepr {
            last: false,
            rsvd_ulp: [0x44, 0xde, 0xad, 0xbe, 0xef],
            qn: 0,
            msn: 1,
            mo: 0x100,
        });
        let (a, n) = h.to_bytes();
        assert_eq!(
            &a[..n],
            &[0x01, 0x44, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0]
        );
        assert_eq!(DdpRepr::parse_bytes(&a[..n]).unwrap(), h);
    }

    #[test]
    fn version_and_truncation() {
        assert_eq!(
            DdpRepr::parse_bytes(&[0x80 | 0x40, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(Error::DdpVersion {
                tagged: true,
                version: 0
            })
        );
        assert_eq!(
            DdpRepr::parse_bytes(&[0x02; 18]),
            Err(Error::DdpVersion {
                tagged: false,
                version: 2
            })
        );
        assert_eq!(DdpRepr::parse_bytes(&[]), Err(Error::Truncated));
        assert_eq!(DdpRepr::parse_bytes(&[0x81; 13]), Err(Error::Truncated));
        assert_eq!(DdpRepr::parse_bytes(&[0x01; 17]), Err(Error::Truncated));
        // Reserved bits are ignored.
        let mut a = [0u8; 14];
        a[0] = 0x80 | 0x3C | 1;
        assert!(DdpRepr::parse_bytes(&a).is_ok());
    }

    #[test]
    fn segmentation_tagged() {
        let t = MessageTemplate::Tagged {
            rsvd_ulp: 0x40,
            stag: 7,
            to: 1000,
        };
        let v: Vec<_> = segments(t, 250, 114).unwrap().collect();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].range, 0..100);
        assert_eq!(v[1].range, 100..200);
        assert_eq!(v[2].range, 200..250);
        match v[1].header {
            DdpRepr::Tagged(h) => {
                assert_eq!(h.to, 1100);
                assert!(!h.last)
            }
            _ => panic!(),
        }
        assert!(v[2].header.last());
        assert_eq!(segments(t, 250, 114).unwrap().len(), 3);
    }

    #[test]
    fn segmentation_untagged_and_edges() {
        let t = MessageTemplate::Untagged {
            rsvd_ulp: [0x43, 0, 0, 0, 0],
            qn: 0,
            msn: 9,
        };
        let v: Vec<_> = segments(t, 0, 100).unwrap().collect();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].range, 0..0);
        assert!(v[0].header.last());
        let v: Vec<_> = segments(t, 164, 100).unwrap().collect();
        assert_eq!(v.len(), 2);
        match v[1].header {
            DdpRepr::Untagged(h) => {
                assert_eq!((h.mo, h.msn, h.last), (82, 9, true))
            }
            _ => panic!(),
        }
        assert_eq!(segments(t, 10, 18).err(), Some(Error::MulpduTooSmall(18)));
        let w = MessageTemplate::Tagged {
            rsvd_ulp: 0x40,
            stag: 1,
            to: u64::MAX - 9,
        };
        assert!(segments(w, 10, 100).is_ok());
        assert_eq!(segments(w, 11, 100).err(), Some(Error::ToWrap));
    }
}
