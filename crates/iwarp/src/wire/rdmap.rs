//! RDMAP (RFC 5040 §4): control byte, opcodes, the RDMAP view of a DDP
//! segment header, and the RDMA Read Request body.
//!
//! The RDMAP control byte is DDP's first RsvdULP byte:
//! `RV (2 bits, = 01b) | Rsvd (2) | Opcode (4)`. Untagged RsvdULP\[1..5\]
//! carry the Invalidate STag for Send with (SE and) Invalidate, zero
//! otherwise (RFC 5040 §4.3).

use super::ddp::{DdpRepr, Segment, TaggedRepr, UntaggedRepr};
use super::terminate::TerminateCause;
use super::{be32, be64, Error};

/// The RDMAP version this implementation speaks (RV = 01b).
pub const RDMAP_VERSION: u8 = 1;
/// Mask of RV in the control byte.
pub const RV_MASK: u8 = 0xC0;
/// Mask of the opcode in the control byte.
pub const OPCODE_MASK: u8 = 0x0F;

/// Untagged queue for Sends (RFC 5040 §5.1).
pub const QN_SEND: u32 = 0;
/// Untagged queue for RDMA Read Requests.
pub const QN_READ_REQUEST: u32 = 1;
/// Untagged queue for Terminate.
pub const QN_TERMINATE: u32 = 2;

/// Length of the RDMA Read Request header (RFC 5040 §4.4).
pub const READ_REQUEST_LEN: usize = 28;

/// RDMAP opcodes (RFC 5040 §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Opcode {
    /// RDMA Write (tagged).
    RdmaWrite = 0,
    /// RDMA Read Request (untagged, QN 1).
    RdmaReadRequest = 1,
    /// RDMA Read Response (tagged).
    RdmaReadResponse = 2,
    /// Send (untagged, QN 0).
    Send = 3,
    /// Send with Invalidate.
    SendInvalidate = 4,
    /// Send with Solicited Event.
    SendSe = 5,
    /// Send with Solicited Event and Invalidate.
    SendSeInvalidate = 6,
    /// Terminate (untagged, QN 2).
    Terminate = 7,
}

impl Opcode {
    /// All opcodes, in numeric order.
    pub const ALL: [Opcode; 8] = [
        Opcode::RdmaWrite,
        Opcode::RdmaReadRequest,
        Opcode::RdmaReadResponse,
        Opcode::Send,
        Opcode::SendInvalidate,
        Opcode::SendSe,
        Opcode::SendSeInvalidate,
        Opcode::Terminate,
    ];

    /// Opcode from its 4-bit value; `None` for reserved values.
    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.get(v as usize).copied()
    }

    /// Whether messages with this opcode use the tagged buffer model.
    pub fn is_tagged(self) -> bool {
        matches!(self, Opcode::RdmaWrite | Opcode::RdmaReadResponse)
    }

    /// Untagged queue number, `None` for tagged opcodes.
    pub fn queue_number(self) -> Option<u32> {
        match self {
            Opcode::RdmaWrite | Opcode::RdmaReadResponse => None,
            Opcode::RdmaReadRequest => Some(QN_READ_REQUEST),
            Opcode::Terminate => Some(QN_TERMINATE),
            _ => Some(QN_SEND),
        }
    }

    /// Whether RsvdULP\[1..5\] carries an Invalidate STag.
    pub fn has_invalidate_stag(self) -> bool {
        matches!(self, Opcode::SendInvalidate | Opcode::SendSeInvalidate)
    }

    /// The RDMAP control byte for this opcode (RV = 1).
    pub fn control_byte(self) -> u8 {
        (RDMAP_VERSION << 6) | self as u8
    }
}

/// Parse an RDMAP control byte: RV must be 1, opcode known.
pub fn parse_control(b: u8) -> Result<Opcode, Error> {
    let rv = (b & RV_MASK) >> 6;
    if rv != RDMAP_VERSION {
        return Err(Error::RdmapVersion(rv));
    }
    Opcode::from_u8(b & OPCODE_MASK).ok_or(Error::RdmapOpcode(b & OPCODE_MASK))
}

/// One segment's DDP + RDMAP header, as RDMAP sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmapRepr {
    /// RDMA Write segment.
    RdmaWrite {
        /// Data Sink STag.
        stag: u32,
        /// Tagged Offset of this segment.
        to: u64,
        /// L bit.
        last: bool,
    },
    /// RDMA Read Response segment.
    RdmaReadResponse {
        /// Data Sink STag (from the Read Request).
        stag: u32,
        /// Tagged Offset of this segment.
        to: u64,
        /// L bit.
        last: bool,
    },
    /// RDMA Read Request (its 28-byte body is the segment payload).
    RdmaReadRequest {
        /// MSN on queue 1.
        msn: u32,
        /// MO (0 for a well-formed request).
        mo: u32,
        /// L bit (1 for a well-formed request).
        last: bool,
    },
    /// Send, Send with SE, Send with Invalidate, Send with SE and Invalidate.
    Send {
        /// Solicited Event.
        solicited: bool,
        /// STag to invalidate (Send with Invalidate variants).
        invalidate: Option<u32>,
        /// MSN on queue 0.
        msn: u32,
        /// MO.
        mo: u32,
        /// L bit.
        last: bool,
    },
    /// Terminate (its body is the segment payload).
    Terminate {
        /// MSN on queue 2.
        msn: u32,
        /// MO.
        mo: u32,
        /// L bit.
        last: bool,
    },
}

impl RdmapRepr {
    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        match *self {
            RdmapRepr::RdmaWrite { .. } => Opcode::RdmaWrite,
            RdmapRepr::RdmaReadResponse { .. } => Opcode::RdmaReadResponse,
            RdmapRepr::RdmaReadRequest { .. } => Opcode::RdmaReadRequest,
            RdmapRepr::Send {
                solicited,
                invalidate,
                ..
            } => match (solicited, invalidate.is_some()) {
                (false, false) => Opcode::Send,
                (false, true) => Opcode::SendInvalidate,
                (true, false) => Opcode::SendSe,
                (true, true) => Opcode::SendSeInvalidate,
            },
            RdmapRepr::Terminate { .. } => Opcode::Terminate,
        }
    }

    /// L bit.
    pub fn last(&self) -> bool {
        match *self {
            RdmapRepr::RdmaWrite { last, .. }
            | RdmapRepr::RdmaReadResponse { last, .. }
            | RdmapRepr::RdmaReadRequest { last, .. }
            | RdmapRepr::Send { last, .. }
            | RdmapRepr::Terminate { last, .. } => last,
        }
    }

    /// Interpret a parsed DDP header as RDMAP (RFC 5040 §4.2, §5).
    ///
    /// Errors are the Terminate cause the receiver reports:
    /// RV ≠ 1 → RDMAP invalid version; a reserved opcode, or an opcode in
    /// the wrong buffer model → RDMAP unexpected opcode; an untagged opcode
    /// on the wrong queue → DDP invalid QN.
    pub fn from_ddp(ddp: &DdpRepr) -> Result<Self, TerminateCause> {
        let op = match parse_control(ddp.rsvd_ulp0()) {
            Ok(op) => op,
            Err(Error::RdmapVersion(_)) => return Err(TerminateCause::RdmapInvalidVersion),
            Err(_) => return Err(TerminateCause::RdmapUnexpectedOpcode),
        };
        match ddp {
            DdpRepr::Tagged(t) => match op {
                Opcode::RdmaWrite => Ok(RdmapRepr::RdmaWrite {
                    stag: t.stag,
                    to: t.to,
                    last: t.last,
                }),
                Opcode::RdmaReadResponse => Ok(RdmapRepr::RdmaReadResponse {
                    stag: t.stag,
                    to: t.to,
                    last: t.last,
                }),
                _ => Err(TerminateCause::RdmapUnexpectedOpcode),
            },
            DdpRepr::Untagged(u) => {
                let Some(qn) = op.queue_number() else {
                    return Err(TerminateCause::RdmapUnexpectedOpcode);
                };
                if u.qn != qn {
                    return Err(TerminateCause::DdpInvalidQn);
                }
                let (msn, mo, last) = (u.msn, u.mo, u.last);
                Ok(match op {
                    Opcode::RdmaReadRequest => RdmapRepr::RdmaReadRequest { msn, mo, last },
                    Opcode::Terminate => RdmapRepr::Terminate { msn, mo, last },
                    _ => {
                        let inv = be32(&u.rsvd_ulp, 1);
                        RdmapRepr::Send {
                            solicited: matches!(op, Opcode::SendSe | Opcode::SendSeInvalidate),
                            invalidate: op.has_invalidate_stag().then_some(inv),
                            msn,
                            mo,
                            last,
                        }
                    }
                })
            }
        }
    }

    /// Parse DDP and RDMAP headers from the start of a ULPDU; errors are the
    /// Terminate cause to report (DDP version errors included).
    pub fn parse_ulpdu(ulpdu: &[u8]) -> Result<Self, ParseFailure> {
        let seg = Segment::new_unchecked(ulpdu);
        match DdpRepr::parse(&seg) {
            Ok(d) => Self::from_ddp(&d).map_err(ParseFailure::Terminate),
            Err(Error::DdpVersion { tagged: true, .. }) => Err(ParseFailure::Terminate(
                TerminateCause::DdpTaggedInvalidVersion,
            )),
            Err(Error::DdpVersion { tagged: false, .. }) => Err(ParseFailure::Terminate(
                TerminateCause::DdpUntaggedInvalidVersion,
            )),
            Err(e) => Err(ParseFailure::Malformed(e)),
        }
    }

    /// The DDP header carrying this RDMAP header.
    pub fn to_ddp(&self) -> DdpRepr {
        let ctl = self.opcode().control_byte();
        match *self {
            RdmapRepr::RdmaWrite { stag, to, last }
            | RdmapRepr::RdmaReadResponse { stag, to, last } => DdpRepr::Tagged(TaggedRepr {
                last,
                rsvd_ulp: ctl,
                stag,
                to,
            }),
            RdmapRepr::RdmaReadRequest { msn, mo, last }
            | RdmapRepr::Terminate { msn, mo, last } => {
                let qn = self.opcode().queue_number().unwrap_or(QN_SEND);
                DdpRepr::Untagged(UntaggedRepr {
                    last,
                    rsvd_ulp: [ctl, 0, 0, 0, 0],
                    qn,
                    msn,
                    mo,
                })
            }
            RdmapRepr::Send {
                invalidate,
                msn,
                mo,
                last,
                ..
            } => {
                let s = invalidate.unwrap_or(0).to_be_bytes();
                DdpRepr::Untagged(UntaggedRepr {
                    last,
                    rsvd_ulp: [ctl, s[0], s[1], s[2], s[3]],
                    qn: QN_SEND,
                    msn,
                    mo,
                })
            }
        }
    }

    /// Header length on the wire (14 or 18).
    pub fn header_len(&self) -> usize {
        if self.opcode().is_tagged() {
            super::ddp::TAGGED_HEADER_LEN
        } else {
            super::ddp::UNTAGGED_HEADER_LEN
        }
    }

    /// Emit the DDP+RDMAP header; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        self.to_ddp().emit(buf)
    }
}

/// Why [`RdmapRepr::parse_ulpdu`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseFailure {
    /// A protocol error to answer with this Terminate cause.
    #[error("protocol error: {0:?}")]
    Terminate(TerminateCause),
    /// The bytes cannot hold a header at all (e.g. truncated ULPDU).
    #[error("malformed segment: {0}")]
    Malformed(Error),
}

/// RDMA Read Request header (RFC 5040 §4.4), the payload of an RDMA Read
/// Request message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReadRequestRepr {
    /// Data Sink STag (where the Read Response is placed).
    pub sink_stag: u32,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMA Read Message Size in octets.
    pub size: u32,
    /// Data Source STag (memory read at the responder).
    pub src_stag: u32,
    /// Data Source Tagged Offset.
    pub src_to: u64,
}

impl ReadRequestRepr {
    /// Parse the 28-byte body (extra bytes are not allowed: the caller
    /// passes exactly the payload; a longer payload is a protocol error the
    /// engine reports).
    pub fn parse(b: &[u8]) -> Result<Self, Error> {
        if b.len() < READ_REQUEST_LEN {
            return Err(Error::Truncated);
        }
        Ok(ReadRequestRepr {
            sink_stag: be32(b, 0),
            sink_to: be64(b, 4),
            size: be32(b, 12),
            src_stag: be32(b, 16),
            src_to: be64(b, 20),
        })
    }

    /// The 28 wire bytes.
    pub fn to_bytes(&self) -> [u8; READ_REQUEST_LEN] {
        let mut b = [0u8; READ_REQUEST_LEN];
        b[0..4].copy_from_slice(&self.sink_stag.to_be_bytes());
        b[4..12].copy_from_slice(&self.sink_to.to_be_bytes());
        b[12..16].copy_from_slice(&self.size.to_be_bytes());
        b[16..20].copy_from_slice(&self.src_stag.to_be_bytes());
        b[20..28].copy_from_slice(&self.src_to.to_be_bytes());
        b
    }

    /// Emit into `buf`; returns 28.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let d = buf
            .get_mut(..READ_REQUEST_LEN)
            .ok_or(Error::BufferTooSmall)?;
        d.copy_from_slice(&self.to_bytes());
        Ok(READ_REQUEST_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_bytes() {
        let expect = [0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47];
        for (op, e) in Opcode::ALL.iter().zip(expect) {
            assert_eq!(op.control_byte(), e);
            assert_eq!(parse_control(e), Ok(*op));
        }
        assert_eq!(parse_control(0x03), Err(Error::RdmapVersion(0)));
        assert_eq!(parse_control(0x48), Err(Error::RdmapOpcode(8)));
        // RDMAP reserved bits are ignored.
        assert_eq!(parse_control(0x73), Ok(Opcode::Send));
    }

    #[test]
    fn send_with_invalidate_bytes() {
        let r = RdmapRepr::Send {
            solicited: true,
            invalidate: Some(0xAABB_CCDD),
            msn: 1,
            mo: 0,
            last: true,
        };
        let mut b = [0u8; 18];
        assert_eq!(r.emit(&mut b), Ok(18));
        assert_eq!(
            b,
            [0x41, 0x46, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
        );
        assert_eq!(RdmapRepr::parse_ulpdu(&b), Ok(r));
    }

    #[test]
    fn write_and_read_response_bytes() {
        let w = RdmapRepr::RdmaWrite {
            stag: 0x100,
            to: 0x2000,
            last: false,
        };
        let mut b = [0u8; 14];
        w.emit(&mut b).unwrap();
        assert_eq!(b, [0x81, 0x40, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x20, 0]);
        assert_eq!(RdmapRepr::parse_ulpdu(&b), Ok(w));
        let rr = RdmapRepr::RdmaReadResponse {
            stag: 1,
            to: 2,
            last: true,
        };
        rr.emit(&mut b).unwrap();
        assert_eq!(b, [0xc1, 0x42, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2]);
        assert_eq!(RdmapRepr::parse_ulpdu(&b), Ok(rr));
    }

    #[test]
    fn read_request_bytes() {
        let h = RdmapRepr::RdmaReadRequest {
            msn: 3,
            mo: 0,
            last: true,
        };
        let mut b = [0u8; 18 + 28];
        h.emit(&mut b).unwrap();
        let body = ReadRequestRepr {
            sink_stag: 0x0a0b0c0d,
            sink_to: 0x10,
            size: 4096,
            src_stag: 0x55,
            src_to: 0xffff_0000_0000_0001,
        };
        body.emit(&mut b[18..]).unwrap();
        assert_eq!(
            b[..18],
            [0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 0]
        );
        assert_eq!(
            b[18..],
            [
                0x0a, 0x0b, 0x0c, 0x0d, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0x10, 0, 0, 0, 0, 0x55,
                0xff, 0xff, 0, 0, 0, 0, 0, 1
            ]
        );
        assert_eq!(RdmapRepr::parse_ulpdu(&b), Ok(h));
        assert_eq!(ReadRequestRepr::parse(&b[18..]), Ok(body));
        assert_eq!(ReadRequestRepr::parse(&b[19..]), Err(Error::Truncated));
    }

    #[test]
    fn errors_map_to_terminate_causes() {
        // Send on the tagged model.
        let b = [0x81, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            RdmapRepr::parse_ulpdu(&b),
            Err(ParseFailure::Terminate(
                TerminateCause::RdmapUnexpectedOpcode
            ))
        );
        // RDMA Write on the untagged model.
        let mut u = [0u8; 18];
        u[0] = 0x41;
        u[1] = 0x40;
        assert_eq!(
            RdmapRepr::parse_ulpdu(&u),
            Err(ParseFailure::Terminate(
                TerminateCause::RdmapUnexpectedOpcode
            ))
        );
        // Send on QN 1.
        u[1] = 0x43;
        u[9] = 1;
        assert_eq!(
            RdmapRepr::parse_ulpdu(&u),
            Err(ParseFailure::Terminate(TerminateCause::DdpInvalidQn))
        );
        // RV 0.
        u[1] = 0x03;
        assert_eq!(
            RdmapRepr::parse_ulpdu(&u),
            Err(ParseFailure::Terminate(TerminateCause::RdmapInvalidVersion))
        );
        // Reserved opcode.
        u[1] = 0x4C;
        assert_eq!(
            RdmapRepr::parse_ulpdu(&u),
            Err(ParseFailure::Terminate(
                TerminateCause::RdmapUnexpectedOpcode
            ))
        );
        // DDP version.
        u[0] = 0x40;
        assert_eq!(
            RdmapRepr::parse_ulpdu(&u),
            Err(ParseFailure::Terminate(
                TerminateCause::DdpUntaggedInvalidVersion
            ))
        );
        assert_eq!(
            RdmapRepr::parse_ulpdu(&[0x81, 0x40]),
            Err(ParseFailure::Malformed(Error::Truncated))
        );
    }
}
