//! RDMAP Terminate message (RFC 5040 §4.8) and every error cause it can
//! report (RFC 5040 §7.2 RDMAP, RFC 5041 §7.2 DDP, RFC 5044 §8 / RFC 6581
//! MPA — the LLP layer).
//!
//! A Terminate is an untagged message on QN 2, MSN 1, MO 0, L = 1, opcode 7.
//! Its payload:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | Layer | EType |  Error Code   |M|D|R|       Reserved          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  DDP Segment Length (M or D)  |  Terminated DDP Header (if D) ~
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  14 (tagged) or 18 bytes      ~
//! ~  Terminated RDMA Header (if R): the 28-byte Read Request      ~
//! ```
//!
//! The DDP Segment Length slot sits where ULPDU_Length preceded the
//! failing segment's header, so "segment length + DDP header" is a copy of
//! the first bytes of the failing FPDU (Linux siw sends exactly that, with
//! the length rewritten to the segment's payload length, and Wireshark
//! decodes it so). The slot is present when M or D is set.

use super::ddp::{header_len_for, UntaggedRepr, UNTAGGED_HEADER_LEN};
use super::rdmap::{Opcode, QN_TERMINATE, READ_REQUEST_LEN};
use super::{be16, Error};

/// Terminate Layer field values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Layer {
    /// RDMAP (0).
    Rdmap = 0,
    /// DDP (1).
    Ddp = 1,
    /// LLP, i.e. MPA over TCP (2).
    Llp = 2,
}

/// Every Terminate cause, with its (Layer, EType, Error Code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TerminateCause {
    // --- RDMAP, EType 0: local catastrophic ---
    /// RDMAP local catastrophic error (0/0/0x00).
    RdmapLocalCatastrophic,
    // --- RDMAP, EType 1: remote protection ---
    /// Invalid STag (0/1/0x00).
    RdmapInvalidStag,
    /// Base or bounds violation (0/1/0x01).
    RdmapBaseBounds,
    /// Access rights violation (0/1/0x02).
    RdmapAccessRights,
    /// STag not associated with the RDMAP stream (0/1/0x03).
    RdmapStagNotAssociated,
    /// TO wrap (0/1/0x04).
    RdmapToWrap,
    /// STag cannot be invalidated, reported as a protection error
    /// (0/1/0x09; Linux siw's choice).
    RdmapProtectionCannotInvalidate,
    /// Unspecified protection error (0/1/0xFF).
    RdmapProtectionUnspecified,
    // --- RDMAP, EType 2: remote operation ---
    /// Invalid RDMAP version (0/2/0x05).
    RdmapInvalidVersion,
    /// Unexpected opcode (0/2/0x06).
    RdmapUnexpectedOpcode,
    /// Catastrophic error, localized to the RDMAP stream (0/2/0x07).
    RdmapCatastrophicStream,
    /// Catastrophic error, global (0/2/0x08).
    RdmapCatastrophicGlobal,
    /// STag cannot be invalidated (0/2/0x09).
    RdmapCannotInvalidate,
    /// Unspecified operation error (0/2/0xFF).
    RdmapOperationUnspecified,
    // --- DDP, EType 0: local catastrophic ---
    /// DDP local catastrophic error (1/0/0x00).
    DdpLocalCatastrophic,
    // --- DDP, EType 1: tagged buffer ---
    /// Invalid STag (1/1/0x00).
    DdpTaggedInvalidStag,
    /// Base or bounds violation (1/1/0x01).
    DdpTaggedBaseBounds,
    /// STag not associated with the DDP stream (1/1/0x02).
    DdpTaggedStagNotAssociated,
    /// TO wrap (1/1/0x03).
    DdpTaggedToWrap,
    /// Invalid DDP version on a tagged segment (1/1/0x04).
    DdpTaggedInvalidVersion,
    // --- DDP, EType 2: untagged buffer ---
    /// Invalid QN (1/2/0x01).
    DdpInvalidQn,
    /// Invalid MSN, no buffer available (1/2/0x02).
    DdpNoBuffer,
    /// Invalid MSN, MSN range not valid (1/2/0x03).
    DdpMsnRange,
    /// Invalid MO (1/2/0x04).
    DdpInvalidMo,
    /// DDP message too long for the available buffer (1/2/0x05).
    DdpMessageTooLong,
    /// Invalid DDP version on an untagged segment (1/2/0x06).
    DdpUntaggedInvalidVersion,
    // --- LLP (MPA), EType 0 ---
    /// TCP connection closed, terminated or lost (2/0/0x01).
    LlpConnectionLost,
    /// MPA CRC mismatch (2/0/0x02).
    MpaCrcError,
    /// Marker and ULPDU_Length disagree (2/0/0x03).
    MpaMarkerError,
    /// Invalid MPA Request or Reply (2/0/0x04).
    MpaInvalidReqRep,
    /// Local catastrophic (RFC 6581) (2/0/0x05).
    MpaLocalCatastrophic,
    /// Insufficient IRD resources (RFC 6581) (2/0/0x06).
    MpaInsufficientIrd,
    /// No matching RTR model (RFC 6581) (2/0/0x07).
    MpaNoMatchingRtr,
}

use TerminateCause as C;

/// (cause, layer, etype, code) for every cause.
const TABLE: [(TerminateCause, u8, u8, u8); 33] = [
    (C::RdmapLocalCatastrophic, 0, 0, 0x00),
    (C::RdmapInvalidStag, 0, 1, 0x00),
    (C::RdmapBaseBounds, 0, 1, 0x01),
    (C::RdmapAccessRights, 0, 1, 0x02),
    (C::RdmapStagNotAssociated, 0, 1, 0x03),
    (C::RdmapToWrap, 0, 1, 0x04),
    (C::RdmapProtectionCannotInvalidate, 0, 1, 0x09),
    (C::RdmapProtectionUnspecified, 0, 1, 0xFF),
    (C::RdmapInvalidVersion, 0, 2, 0x05),
    (C::RdmapUnexpectedOpcode, 0, 2, 0x06),
    (C::RdmapCatastrophicStream, 0, 2, 0x07),
    (C::RdmapCatastrophicGlobal, 0, 2, 0x08),
    (C::RdmapCannotInvalidate, 0, 2, 0x09),
    (C::RdmapOperationUnspecified, 0, 2, 0xFF),
    (C::DdpLocalCatastrophic, 1, 0, 0x00),
    (C::DdpTaggedInvalidStag, 1, 1, 0x00),
    (C::DdpTaggedBaseBounds, 1, 1, 0x01),
    (C::DdpTaggedStagNotAssociated, 1, 1, 0x02),
    (C::DdpTaggedToWrap, 1, 1, 0x03),
    (C::DdpTaggedInvalidVersion, 1, 1, 0x04),
    (C::DdpInvalidQn, 1, 2, 0x01),
    (C::DdpNoBuffer, 1, 2, 0x02),
    (C::DdpMsnRange, 1, 2, 0x03),
    (C::DdpInvalidMo, 1, 2, 0x04),
    (C::DdpMessageTooLong, 1, 2, 0x05),
    (C::DdpUntaggedInvalidVersion, 1, 2, 0x06),
    (C::LlpConnectionLost, 2, 0, 0x01),
    (C::MpaCrcError, 2, 0, 0x02),
    (C::MpaMarkerError, 2, 0, 0x03),
    (C::MpaInvalidReqRep, 2, 0, 0x04),
    (C::MpaLocalCatastrophic, 2, 0, 0x05),
    (C::MpaInsufficientIrd, 2, 0, 0x06),
    (C::MpaNoMatchingRtr, 2, 0, 0x07),
];

/// Which optional parts a Terminate for a cause carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderControl {
    /// M: DDP Segment Length valid.
    pub m: bool,
    /// D: terminated DDP header included.
    pub d: bool,
    /// R: terminated RDMA (Read Request) header included.
    pub r: bool,
}

impl TerminateCause {
    /// Every cause.
    pub fn all() -> impl Iterator<Item = TerminateCause> {
        TABLE.iter().map(|t| t.0)
    }

    fn entry(self) -> (TerminateCause, u8, u8, u8) {
        // Every variant is in TABLE (checked by a unit test); the fallback
        // is never taken.
        TABLE
            .iter()
            .copied()
            .find(|t| t.0 == self)
            .unwrap_or((self, 0, 0, 0))
    }

    /// Layer field.
    pub fn layer(self) -> Layer {
        match self.entry().1 {
            0 => Layer::Rdmap,
            1 => Layer::Ddp,
            _ => Layer::Llp,
        }
    }

    /// EType field.
    pub fn etype(self) -> u8 {
        self.entry().2
    }

    /// Error Code field.
    pub fn code(self) -> u8 {
        self.entry().3
    }

    /// The cause for a (layer, etype, code) triple; `None` if undefined.
    pub fn from_codes(layer: u8, etype: u8, code: u8) -> Option<Self> {
        TABLE
            .iter()
            .find(|t| t.1 == layer && t.2 == etype && t.3 == code)
            .map(|t| t.0)
            .or(
                // RFC 5040: a local catastrophic error is reported with any code.
                if layer == 0 && etype == 0 {
                    Some(C::RdmapLocalCatastrophic)
                } else {
                    None
                },
            )
    }

    /// Which headers a Terminate for this cause includes, when the failing
    /// segment is known (following Linux siw, RFC 5040 §4.8):
    /// none for LLP and catastrophic errors or when the header layout is
    /// unknown (bad DDP/RDMAP version, bad opcode); M + D + R for RDMAP
    /// remote protection errors (R only applies to Read Requests); M + D
    /// otherwise.
    pub fn header_control(self) -> HeaderControl {
        let md = HeaderControl {
            m: true,
            d: true,
            r: false,
        };
        match self {
            C::RdmapLocalCatastrophic
            | C::DdpLocalCatastrophic
            | C::RdmapInvalidVersion
            | C::RdmapUnexpectedOpcode
            | C::DdpTaggedInvalidVersion
            | C::DdpUntaggedInvalidVersion => HeaderControl::default(),
            _ if self.layer() == Layer::Llp => HeaderControl::default(),
            _ if self.layer() == Layer::Rdmap && self.etype() == 1 => {
                HeaderControl { r: true, ..md }
            }
            _ => md,
        }
    }
}

/// Longest Terminate payload: control (4) + segment length (2) + untagged
/// DDP header (18) + Read Request header (28).
pub const MAX_BODY_LEN: usize = 4 + 2 + UNTAGGED_HEADER_LEN + READ_REQUEST_LEN;
/// Longest Terminate ULPDU (untagged DDP header + body).
pub const MAX_ULPDU_LEN: usize = UNTAGGED_HEADER_LEN + MAX_BODY_LEN;

/// A copied DDP header (14 or 18 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TerminatedDdpHeader {
    bytes: [u8; UNTAGGED_HEADER_LEN],
    len: u8,
}

impl TerminatedDdpHeader {
    /// Copy the DDP header at the start of `ulpdu` (length from its T bit).
    pub fn from_ulpdu(ulpdu: &[u8]) -> Option<Self> {
        let n = header_len_for(*ulpdu.first()?);
        let src = ulpdu.get(..n)?;
        let mut bytes = [0u8; UNTAGGED_HEADER_LEN];
        bytes[..n].copy_from_slice(src);
        Some(TerminatedDdpHeader {
            bytes,
            len: n as u8,
        })
    }

    /// The header bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// A Terminate message payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TerminateRepr {
    /// Layer (4 bits).
    pub layer: u8,
    /// EType (4 bits).
    pub etype: u8,
    /// Error Code.
    pub code: u8,
    /// DDP Segment Length, if M is set.
    pub ddp_segment_length: Option<u16>,
    /// Terminated DDP header, if D is set.
    pub ddp_header: Option<TerminatedDdpHeader>,
    /// Terminated RDMA header (Read Request body), if R is set.
    pub rdma_header: Option<[u8; READ_REQUEST_LEN]>,
}

/// The name the brief uses.
pub type Terminate = TerminateRepr;

impl TerminateRepr {
    /// A Terminate reporting `cause` about the FPDU whose first bytes are
    /// `offending` — starting at its **ULPDU_Length** field, followed by the
    /// DDP header and, for an RDMA Read Request, its 28-byte body (pass
    /// what is available; an empty slice for errors not tied to a segment).
    ///
    /// The optional parts follow [`TerminateCause::header_control`]; each
    /// is left out if `offending` is too short to supply it. The DDP
    /// Segment Length is the failing segment's payload length (ULPDU_Length
    /// minus the DDP header, minus the Read Request body), as Linux siw
    /// reports it.
    pub fn for_cause(cause: TerminateCause, offending: &[u8]) -> Self {
        let hc = cause.header_control();
        let mut t = TerminateRepr {
            layer: cause.layer() as u8,
            etype: cause.etype(),
            code: cause.code(),
            ddp_segment_length: None,
            ddp_header: None,
            rdma_header: None,
        };
        if !(hc.m || hc.d) || offending.len() < 2 {
            return t;
        }
        let ulpdu_len = be16(offending, 0) as usize;
        let Some(hdr) = TerminatedDdpHeader::from_ulpdu(&offending[2..]) else {
            return t;
        };
        let hdr_bytes = hdr.as_bytes();
        let is_read_req = hdr_bytes.len() == UNTAGGED_HEADER_LEN
            && hdr_bytes[1] & super::rdmap::OPCODE_MASK == Opcode::RdmaReadRequest as u8;
        let body_off = 2 + UNTAGGED_HEADER_LEN;
        let rreq = if is_read_req {
            offending.get(body_off..body_off + READ_REQUEST_LEN)
        } else {
            None
        };
        let mut overhead = hdr_bytes.len();
        if is_read_req {
            overhead += READ_REQUEST_LEN;
        }
        if hc.m {
            t.ddp_segment_length = Some(ulpdu_len.saturating_sub(overhead) as u16);
        }
        if hc.d {
            t.ddp_header = Some(hdr);
        }
        if hc.r {
            if let Some(b) = rreq {
                let mut a = [0u8; READ_REQUEST_LEN];
                a.copy_from_slice(b);
                t.rdma_header = Some(a);
            }
        }
        t
    }

    /// The cause, if (layer, etype, code) is a defined one.
    pub fn cause(&self) -> Option<TerminateCause> {
        TerminateCause::from_codes(self.layer, self.etype, self.code)
    }

    /// Header control bits as they will be emitted.
    pub fn header_control(&self) -> HeaderControl {
        HeaderControl {
            m: self.ddp_segment_length.is_some(),
            d: self.ddp_header.is_some(),
            r: self.rdma_header.is_some(),
        }
    }

    /// Payload length.
    pub fn body_len(&self) -> usize {
        let hc = self.header_control();
        let mut n = 4;
        if hc.m || hc.d {
            n += 2;
        }
        if let Some(h) = &self.ddp_header {
            n += h.as_bytes().len();
        }
        if hc.r {
            n += READ_REQUEST_LEN;
        }
        n
    }

    /// Emit the payload; returns its length.
    pub fn emit_body(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let n = self.body_len();
        let b = buf.get_mut(..n).ok_or(Error::BufferTooSmall)?;
        let hc = self.header_control();
        b[0] = (self.layer << 4) | (self.etype & 0x0F);
        b[1] = self.code;
        b[2] = (u8::from(hc.m) << 7) | (u8::from(hc.d) << 6) | (u8::from(hc.r) << 5);
        b[3] = 0;
        let mut off = 4;
        if hc.m || hc.d {
            let l = self.ddp_segment_length.unwrap_or(0);
            b[off..off + 2].copy_from_slice(&l.to_be_bytes());
            off += 2;
        }
        if let Some(h) = &self.ddp_header {
            let hb = h.as_bytes();
            b[off..off + hb.len()].copy_from_slice(hb);
            off += hb.len();
        }
        if let Some(r) = &self.rdma_header {
            b[off..off + READ_REQUEST_LEN].copy_from_slice(r);
            off += READ_REQUEST_LEN;
        }
        Ok(off)
    }

    /// Parse a Terminate payload. Trailing bytes are ignored.
    pub fn parse(body: &[u8]) -> Result<Self, Error> {
        if body.len() < 4 {
            return Err(Error::TerminateMalformed);
        }
        let (m, d, r) = (
            body[2] & 0x80 != 0,
            body[2] & 0x40 != 0,
            body[2] & 0x20 != 0,
        );
        let mut t = TerminateRepr {
            layer: body[0] >> 4,
            etype: body[0] & 0x0F,
            code: body[1],
            ddp_segment_length: None,
            ddp_header: None,
            rdma_header: None,
        };
        let mut off = 4;
        if m || d {
            let l = body.get(off..off + 2).ok_or(Error::TerminateMalformed)?;
            if m {
                t.ddp_segment_length = Some(be16(l, 0));
            }
            off += 2;
        }
        if d {
            let h =
                TerminatedDdpHeader::from_ulpdu(&body[off..]).ok_or(Error::TerminateMalformed)?;
            off += h.as_bytes().len();
            t.ddp_header = Some(h);
        }
        if r {
            let src = body
                .get(off..off + READ_REQUEST_LEN)
                .ok_or(Error::TerminateMalformed)?;
            let mut a = [0u8; READ_REQUEST_LEN];
            a.copy_from_slice(src);
            t.rdma_header = Some(a);
        }
        Ok(t)
    }

    /// The untagged DDP header a Terminate message travels under
    /// (QN 2, MSN 1, MO 0, L = 1; RFC 5040 §5.2).
    pub fn ddp_header() -> UntaggedRepr {
        UntaggedRepr {
            last: true,
            rsvd_ulp: [Opcode::Terminate.control_byte(), 0, 0, 0, 0],
            qn: QN_TERMINATE,
            msn: 1,
            mo: 0,
        }
    }

    /// Length of the whole Terminate ULPDU (DDP header + payload).
    pub fn ulpdu_len(&self) -> usize {
        UNTAGGED_HEADER_LEN + self.body_len()
    }

    /// Emit the whole Terminate ULPDU (DDP header + payload), ready for
    /// MPA framing; returns its length.
    pub fn emit_ulpdu(&self, buf: &mut [u8]) -> Result<usize, Error> {
        if buf.len() < self.ulpdu_len() {
            return Err(Error::BufferTooSmall);
        }
        let h = super::ddp::DdpRepr::Untagged(Self::ddp_header()).emit(buf)?;
        let b = self.emit_body(&mut buf[h..])?;
        Ok(h + b)
    }

    /// The whole Terminate ULPDU as a fixed array plus its length.
    pub fn to_ulpdu(&self) -> ([u8; MAX_ULPDU_LEN], usize) {
        let mut a = [0u8; MAX_ULPDU_LEN];
        let n = self.emit_ulpdu(&mut a).unwrap_or(0);
        (a, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ddp::DdpRepr;
    use crate::wire::rdmap::{RdmapRepr, ReadRequestRepr};

    #[test]
    fn table_is_complete_and_unique() {
        let all: Vec<_> = TerminateCause::all().collect();
        assert_eq!(all.len(), 33);
        for (i, a) in TABLE.iter().enumerate() {
            for b in &TABLE[i + 1..] {
                assert_ne!(a.0, b.0);
                assert_ne!((a.1, a.2, a.3), (b.1, b.2, b.3));
            }
            assert_eq!(TerminateCause::from_codes(a.1, a.2, a.3), Some(a.0));
            assert_eq!(
                (a.0.layer() as u8, a.0.etype(), a.0.code()),
                (a.1, a.2, a.3)
            );
        }
        assert_eq!(TerminateCause::from_codes(3, 0, 0), None);
        assert_eq!(TerminateCause::from_codes(1, 2, 0), None);
        assert_eq!(
            TerminateCause::from_codes(0, 0, 0x42),
            Some(C::RdmapLocalCatastrophic)
        );
    }

    /// An offending Send FPDU prefix: ULPDU_Length = 18 + 100, untagged header.
    fn send_prefix() -> Vec<u8> {
        let mut v = vec![0, 118];
        let h = RdmapRepr::Send {
            solicited: false,
            invalidate: None,
            msn: 5,
            mo: 0,
            last: true,
        };
        let mut b = [0u8; 18];
        h.emit(&mut b).unwrap();
        v.extend_from_slice(&b);
        v
    }

    fn write_prefix() -> Vec<u8> {
        let mut v = vec![0, 14 + 64];
        let mut b = [0u8; 14];
        RdmapRepr::RdmaWrite {
            stag: 0x1234_5678,
            to: 0x40,
            last: true,
        }
        .emit(&mut b)
        .unwrap();
        v.extend_from_slice(&b);
        v
    }

    fn read_request_prefix() -> Vec<u8> {
        let mut v = vec![0, 46];
        let mut b = [0u8; 46];
        RdmapRepr::RdmaReadRequest {
            msn: 1,
            mo: 0,
            last: true,
        }
        .emit(&mut b)
        .unwrap();
        ReadRequestRepr {
            sink_stag: 1,
            sink_to: 2,
            size: 3,
            src_stag: 4,
            src_to: 5,
        }
        .emit(&mut b[18..])
        .unwrap();
        v.extend_from_slice(&b);
        v
    }

    /// Hand-computed expected payload bytes for every cause, for a given
    /// offending segment.
    fn expected(cause: TerminateCause, off: &[u8]) -> Vec<u8> {
        let (l, e, c) = (cause.layer() as u8, cause.etype(), cause.code());
        let mut v = vec![(l << 4) | e, c];
        let hc = cause.header_control();
        let is_rr = off.len() >= 20 && off[2] & 0x80 == 0 && off[3] & 0x0F == 1;
        let hlen = if off[2] & 0x80 != 0 { 14 } else { 18 };
        let r = hc.r && is_rr;
        v.push(
            if hc.m { 0x80 } else { 0 } | if hc.d { 0x40 } else { 0 } | if r { 0x20 } else { 0 },
        );
        v.push(0);
        if hc.m || hc.d {
            let ulpdu = u16::from_be_bytes([off[0], off[1]]) as usize;
            let seg = ulpdu - hlen - if is_rr { 28 } else { 0 };
            v.extend_from_slice(&(seg as u16).to_be_bytes());
            v.extend_from_slice(&off[2..2 + hlen]);
        }
        if r {
            v.extend_from_slice(&off[20..48]);
        }
        v
    }

    #[test]
    fn every_cause_encodes_and_decodes() {
        for off in [send_prefix(), write_prefix(), read_request_prefix()] {
            for cause in TerminateCause::all() {
                let t = TerminateRepr::for_cause(cause, &off);
                let mut b = [0u8; MAX_BODY_LEN];
                let n = t.emit_body(&mut b).unwrap();
                assert_eq!(b[..n], expected(cause, &off)[..], "{cause:?}");
                let p = TerminateRepr::parse(&b[..n]).unwrap();
                assert_eq!(p, t);
                assert_eq!(p.cause(), Some(cause));
            }
        }
    }

    /// Hand-typed from RFC 5040 §4.8 / §7, RFC 5041 §7, RFC 5044 §8 and
    /// RFC 6581 (cross-checked with Wireshark's value strings): the first
    /// three payload bytes (Layer|EType, Error Code, M/D/R) of the
    /// Terminate for each cause when the failing segment is a 100-byte
    /// Send, and for a Read Request.
    #[test]
    fn every_cause_hand_computed_control_bytes() {
        #[rustfmt::skip]
        let expect: [(TerminateCause, [u8; 3], [u8; 3]); 33] = [
            //                                   Send              Read Request
            (C::RdmapLocalCatastrophic,          [0x00, 0x00, 0x00], [0x00, 0x00, 0x00]),
            (C::RdmapInvalidStag,                [0x01, 0x00, 0xC0], [0x01, 0x00, 0xE0]),
            (C::RdmapBaseBounds,                 [0x01, 0x01, 0xC0], [0x01, 0x01, 0xE0]),
            (C::RdmapAccessRights,               [0x01, 0x02, 0xC0], [0x01, 0x02, 0xE0]),
            (C::RdmapStagNotAssociated,          [0x01, 0x03, 0xC0], [0x01, 0x03, 0xE0]),
            (C::RdmapToWrap,                     [0x01, 0x04, 0xC0], [0x01, 0x04, 0xE0]),
            (C::RdmapProtectionCannotInvalidate, [0x01, 0x09, 0xC0], [0x01, 0x09, 0xE0]),
            (C::RdmapProtectionUnspecified,      [0x01, 0xFF, 0xC0], [0x01, 0xFF, 0xE0]),
            (C::RdmapInvalidVersion,             [0x02, 0x05, 0x00], [0x02, 0x05, 0x00]),
            (C::RdmapUnexpectedOpcode,           [0x02, 0x06, 0x00], [0x02, 0x06, 0x00]),
            (C::RdmapCatastrophicStream,         [0x02, 0x07, 0xC0], [0x02, 0x07, 0xC0]),
            (C::RdmapCatastrophicGlobal,         [0x02, 0x08, 0xC0], [0x02, 0x08, 0xC0]),
            (C::RdmapCannotInvalidate,           [0x02, 0x09, 0xC0], [0x02, 0x09, 0xC0]),
            (C::RdmapOperationUnspecified,       [0x02, 0xFF, 0xC0], [0x02, 0xFF, 0xC0]),
            (C::DdpLocalCatastrophic,            [0x10, 0x00, 0x00], [0x10, 0x00, 0x00]),
            (C::DdpTaggedInvalidStag,            [0x11, 0x00, 0xC0], [0x11, 0x00, 0xC0]),
            (C::DdpTaggedBaseBounds,             [0x11, 0x01, 0xC0], [0x11, 0x01, 0xC0]),
            (C::DdpTaggedStagNotAssociated,      [0x11, 0x02, 0xC0], [0x11, 0x02, 0xC0]),
            (C::DdpTaggedToWrap,                 [0x11, 0x03, 0xC0], [0x11, 0x03, 0xC0]),
            (C::DdpTaggedInvalidVersion,         [0x11, 0x04, 0x00], [0x11, 0x04, 0x00]),
            (C::DdpInvalidQn,                    [0x12, 0x01, 0xC0], [0x12, 0x01, 0xC0]),
            (C::DdpNoBuffer,                     [0x12, 0x02, 0xC0], [0x12, 0x02, 0xC0]),
            (C::DdpMsnRange,                     [0x12, 0x03, 0xC0], [0x12, 0x03, 0xC0]),
            (C::DdpInvalidMo,                    [0x12, 0x04, 0xC0], [0x12, 0x04, 0xC0]),
            (C::DdpMessageTooLong,               [0x12, 0x05, 0xC0], [0x12, 0x05, 0xC0]),
            (C::DdpUntaggedInvalidVersion,       [0x12, 0x06, 0x00], [0x12, 0x06, 0x00]),
            (C::LlpConnectionLost,               [0x20, 0x01, 0x00], [0x20, 0x01, 0x00]),
            (C::MpaCrcError,                     [0x20, 0x02, 0x00], [0x20, 0x02, 0x00]),
            (C::MpaMarkerError,                  [0x20, 0x03, 0x00], [0x20, 0x03, 0x00]),
            (C::MpaInvalidReqRep,                [0x20, 0x04, 0x00], [0x20, 0x04, 0x00]),
            (C::MpaLocalCatastrophic,            [0x20, 0x05, 0x00], [0x20, 0x05, 0x00]),
            (C::MpaInsufficientIrd,              [0x20, 0x06, 0x00], [0x20, 0x06, 0x00]),
            (C::MpaNoMatchingRtr,                [0x20, 0x07, 0x00], [0x20, 0x07, 0x00]),
        ];
        assert_eq!(expect.len(), TerminateCause::all().count());
        for (cause, send, rreq) in expect {
            for (off, want) in [(send_prefix(), send), (read_request_prefix(), rreq)] {
                let mut b = [0u8; MAX_BODY_LEN];
                let n = TerminateRepr::for_cause(cause, &off)
                    .emit_body(&mut b)
                    .unwrap();
                assert_eq!(b[..3], want, "{cause:?}");
                assert_eq!(b[3], 0);
                let extra = if want[2] & 0x40 != 0 { 20 } else { 0 }
                    + if want[2] & 0x20 != 0 { 28 } else { 0 };
                assert_eq!(n, 4 + extra, "{cause:?}");
            }
        }
    }

    #[test]
    fn concrete_bytes() {
        // DDP untagged "no buffer" about a 100-byte Send.
        let t = TerminateRepr::for_cause(C::DdpNoBuffer, &send_prefix());
        let (u, n) = t.to_ulpdu();
        assert_eq!(
            u[..n],
            [
                // DDP untagged header: L, DV=1; RDMAP Terminate; QN 2, MSN 1, MO 0.
                0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0,
                // Layer 1, EType 2, code 2, M+D.
                0x12, 0x02, 0xC0, 0x00, // segment length 100
                0x00, 0x64, // copied Send header
                0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0,
            ]
        );
        match DdpRepr::parse_bytes(&u[..n]).unwrap() {
            DdpRepr::Untagged(h) => assert_eq!(h, TerminateRepr::ddp_header()),
            _ => panic!(),
        }
        // MPA CRC error: control word only.
        let t = TerminateRepr::for_cause(C::MpaCrcError, &send_prefix());
        let mut b = [0u8; 8];
        assert_eq!(t.emit_body(&mut b), Ok(4));
        assert_eq!(b[..4], [0x20, 0x02, 0, 0]);
        // Remote protection on a Read Request: M+D+R, segment length 0.
        let off = read_request_prefix();
        let t = TerminateRepr::for_cause(C::RdmapAccessRights, &off);
        let mut b = [0u8; MAX_BODY_LEN];
        let n = t.emit_body(&mut b).unwrap();
        assert_eq!(n, MAX_BODY_LEN);
        assert_eq!(b[..6], [0x01, 0x02, 0xE0, 0, 0, 0]);
        assert_eq!(b[6..24], off[2..20]);
        assert_eq!(b[24..52], off[20..48]);
    }

    #[test]
    fn short_offending_bytes_drop_parts() {
        let off = read_request_prefix();
        let t = TerminateRepr::for_cause(C::RdmapInvalidStag, &off[..30]);
        assert!(t.ddp_header.is_some() && t.rdma_header.is_none());
        let t = TerminateRepr::for_cause(C::DdpInvalidMo, &off[..5]);
        assert_eq!(t.header_control(), HeaderControl::default());
        let t = TerminateRepr::for_cause(C::DdpInvalidMo, &[]);
        assert_eq!(t.body_len(), 4);
    }

    #[test]
    fn parse_malformed() {
        assert_eq!(
            TerminateRepr::parse(&[0x12, 2]),
            Err(Error::TerminateMalformed)
        );
        assert_eq!(
            TerminateRepr::parse(&[0x12, 2, 0x40, 0, 0]),
            Err(Error::TerminateMalformed)
        );
        assert_eq!(
            TerminateRepr::parse(&[0x12, 2, 0x40, 0, 0, 0, 0x01, 0x43]),
            Err(Error::TerminateMalformed)
        );
        assert_eq!(
            TerminateRepr::parse(&[0x01, 0, 0x20, 0, 1, 2]),
            Err(Error::TerminateMalformed)
        );
    }
}
