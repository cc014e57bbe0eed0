//! MPA connection setup (RFC 5044 §7, RFC 6581), sans-IO.
//!
//! The initiator sends a Request and waits for the Reply; the responder
//! reads the Request, then accepts or rejects. Revision 1 and 2 are both
//! spoken: an initiator configured for revision 2 sends the RFC 6581
//! IRD/ORD block (Enhanced bit) and, in peer-to-peer mode, offers a
//! zero-length RDMA Write as RTR; a responder answers a revision-1 or a
//! non-enhanced request in kind and an enhanced request with the negotiated
//! IRD/ORD. CRC is used if either side asks for it (RFC 5044 §7.1). Markers
//! are not supported: a request asking for them is rejected.

use crate::engine::tx::Rtr;
use crate::wire::mpa::{
    frame_len_hint, FrameKind, IrdOrd, MpaRepr, HEADER_LEN, MAX_PRIVATE_DATA,
    MAX_ULP_PRIVATE_DATA_ENHANCED, REV_1, REV_2,
};

/// Local MPA preferences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MpaConfig {
    /// Ask for / require CRC32c.
    pub crc: bool,
    /// Revision to send as initiator (1 or 2; default 2). Responders
    /// accept both.
    ///
    /// Revision 1 cannot connect to Linux's NFS server (svcrdma) over
    /// iWARP: revision 1 carries no IRD/ORD (RFC 6581 §3 added them), so
    /// the kernel's iWARP connection manager hands svcrdma an initiator
    /// depth of 0, which svcrdma rejects (an MPA Reply with the Reject bit
    /// and no private data). Use revision 2, the default, against Linux;
    /// revision 1 only reaches responders that need no IRD/ORD, such as
    /// this crate's own.
    pub revision: u8,
    /// As a revision-2 initiator, request the peer-to-peer RTR model.
    pub peer_to_peer: bool,
}

impl Default for MpaConfig {
    fn default() -> Self {
        MpaConfig {
            crc: true,
            revision: REV_2,
            peer_to_peer: true,
        }
    }
}

/// Result of a successful exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// CRC in both directions.
    pub crc: bool,
    /// Revision in use.
    pub revision: u8,
    /// Our ORD (outbound Reads allowed outstanding).
    pub ord: u16,
    /// Our IRD (inbound Reads accepted outstanding).
    pub ird: u16,
    /// The RTR message the initiator sends first (peer-to-peer mode).
    pub rtr: Option<Rtr>,
    /// The peer's ULP private data (without the IRD/ORD block).
    pub private_data: Vec<u8>,
}

/// Handshake failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The peer rejected, with its private data.
    #[error("rejected by peer")]
    Rejected(Vec<u8>),
    /// The frame is invalid (bad key, revision, length, flags): RFC 5044
    /// §7.1 says close the connection.
    #[error("invalid MPA frame: {0}")]
    Invalid(String),
    /// RFC 6581: the peer's IRD/ORD cannot be satisfied.
    #[error("insufficient IRD/ORD")]
    InsufficientIrd,
    /// RFC 6581: no common RTR message.
    #[error("no matching RTR model")]
    NoMatchingRtr,
    /// Private data too long.
    #[error("private data of {0} bytes is too long")]
    PrivateDataTooLong(usize),
}

/// How many bytes of `buf` form a complete frame (None: need more).
pub fn frame_complete(buf: &[u8]) -> Result<Option<usize>, HandshakeError> {
    match frame_len_hint(buf) {
        Ok(Some(n)) if buf.len() >= n => Ok(Some(n)),
        Ok(_) => Ok(None),
        Err(e) => Err(HandshakeError::Invalid(e.to_string())),
    }
}

/// Largest frame.
pub const MAX_FRAME: usize = HEADER_LEN + MAX_PRIVATE_DATA;

fn max_ulp_pd(rev2: bool) -> usize {
    if rev2 {
        MAX_ULP_PRIVATE_DATA_ENHANCED
    } else {
        MAX_PRIVATE_DATA
    }
}

/// The initiator's Request.
pub fn request(
    cfg: &MpaConfig,
    ird: u16,
    ord: u16,
    private_data: &[u8],
) -> Result<Vec<u8>, HandshakeError> {
    let rev2 = cfg.revision == REV_2;
    if private_data.len() > max_ulp_pd(rev2) {
        return Err(HandshakeError::PrivateDataTooLong(private_data.len()));
    }
    let repr = MpaRepr {
        kind: FrameKind::Request,
        markers: false,
        crc: cfg.crc,
        reject: false,
        revision: if rev2 { REV_2 } else { REV_1 },
        ird_ord: rev2.then_some(IrdOrd {
            ird: ird.min(IrdOrd::MAX),
            ord: ord.min(IrdOrd::MAX),
            peer_to_peer: cfg.peer_to_peer,
            rtr_send: false,
            rtr_write: cfg.peer_to_peer,
            rtr_read: false,
        }),
        private_data,
    };
    repr.to_vec()
        .map_err(|e| HandshakeError::Invalid(e.to_string()))
}

/// The initiator processes the Reply (`frame` = exactly the frame bytes).
pub fn process_reply(
    cfg: &MpaConfig,
    ird: u16,
    ord: u16,
    frame: &[u8],
) -> Result<Negotiated, HandshakeError> {
    let r = MpaRepr::parse_bytes(frame).map_err(|e| HandshakeError::Invalid(e.to_string()))?;
    if r.kind != FrameKind::Reply {
        return Err(HandshakeError::Invalid("expected an MPA Reply".into()));
    }
    if r.reject {
        return Err(HandshakeError::Rejected(r.private_data.to_vec()));
    }
    if r.markers {
        return Err(HandshakeError::Invalid("peer requires markers".into()));
    }
    let sent_rev2 = cfg.revision == REV_2;
    let (ord_n, ird_n, rtr) = match (sent_rev2, r.ird_ord) {
        (true, Some(io)) => {
            // The responder's ORD must fit our IRD (RFC 6581 §3).
            if io.ord > ird {
                return Err(HandshakeError::InsufficientIrd);
            }
            let rtr = if cfg.peer_to_peer {
                if !io.peer_to_peer {
                    return Err(HandshakeError::NoMatchingRtr);
                }
                // We offered only the zero-length Write.
                if io.rtr_write {
                    Some(Rtr::Write)
                } else {
                    return Err(HandshakeError::NoMatchingRtr);
                }
            } else {
                None
            };
            (ord.min(io.ird), ird, rtr)
        }
        (true, None) => {
            return Err(HandshakeError::Invalid(
                "revision 2 Request answered without the IRD/ORD block".into(),
            ))
        }
        (false, _) => {
            if r.revision != REV_1 {
                return Err(HandshakeError::Invalid("revision mismatch".into()));
            }
            (ord, ird, None)
        }
    };
    Ok(Negotiated {
        crc: cfg.crc || r.crc,
        revision: r.revision,
        ord: ord_n,
        ird: ird_n,
        rtr,
        private_data: r.private_data.to_vec(),
    })
}

/// A parsed Request, as the responder sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Revision.
    pub revision: u8,
    /// CRC requested.
    pub crc: bool,
    /// Markers requested (unsupported: must be rejected).
    pub markers: bool,
    /// IRD/ORD block (enhanced requests).
    pub ird_ord: Option<IrdOrd>,
    /// ULP private data.
    pub private_data: Vec<u8>,
}

/// The responder parses the Request (`frame` = exactly the frame bytes).
pub fn parse_request(frame: &[u8]) -> Result<Request, HandshakeError> {
    let r = MpaRepr::parse_bytes(frame).map_err(|e| HandshakeError::Invalid(e.to_string()))?;
    if r.kind != FrameKind::Request {
        return Err(HandshakeError::Invalid("expected an MPA Request".into()));
    }
    Ok(Request {
        revision: r.revision,
        crc: r.crc,
        markers: r.markers,
        ird_ord: r.ird_ord,
        private_data: r.private_data.to_vec(),
    })
}

impl Request {
    /// The requester's ORD (0 if revision 1).
    pub fn ord(&self) -> u16 {
        self.ird_ord.map(|i| i.ord).unwrap_or(0)
    }
    /// The requester's IRD (0 if revision 1).
    pub fn ird(&self) -> u16 {
        self.ird_ord.map(|i| i.ird).unwrap_or(0)
    }
}

/// A failed accept: the reject frame to send (if any) and why.
pub type AcceptError = (Option<Vec<u8>>, HandshakeError);

/// The responder's accepting Reply and the negotiated result. `ird`/`ord`
/// are local limits. A Request that asks for markers gets a reject instead
/// (`Err` carries the reject frame to send).
pub fn accept(
    cfg: &MpaConfig,
    req: &Request,
    ird: u16,
    ord: u16,
    private_data: &[u8],
) -> Result<(Vec<u8>, Negotiated), AcceptError> {
    if req.markers {
        return Err((
            Some(reject(req, b"markers not supported")),
            HandshakeError::Invalid("markers requested".into()),
        ));
    }
    let rev2 = req.ird_ord.is_some();
    if private_data.len() > max_ulp_pd(rev2) {
        return Err((None, HandshakeError::PrivateDataTooLong(private_data.len())));
    }
    let crc = cfg.crc || req.crc;
    let (ord_n, ird_n, io) = match req.ird_ord {
        Some(rio) => {
            // Our ORD must not exceed the initiator's IRD, our IRD serves
            // its ORD (RFC 6581 §3).
            let ord_n = ord.min(rio.ird);
            let ird_n = ird.min(rio.ord);
            let (w, r) = if rio.peer_to_peer {
                if rio.rtr_write || !rio.rtr_read {
                    (true, false)
                } else {
                    (false, true)
                }
            } else {
                (false, false)
            };
            (
                ord_n,
                ird_n,
                Some(IrdOrd {
                    ird: ird_n,
                    ord: ord_n,
                    peer_to_peer: rio.peer_to_peer,
                    rtr_send: false,
                    rtr_write: w,
                    rtr_read: r,
                }),
            )
        }
        None => (ord, ird, None),
    };
    let repr = MpaRepr {
        kind: FrameKind::Reply,
        markers: false,
        crc,
        reject: false,
        revision: if rev2 {
            REV_2
        } else {
            req.revision.clamp(REV_1, REV_2)
        },
        ird_ord: io,
        private_data,
    };
    let frame = repr
        .to_vec()
        .map_err(|e| (None, HandshakeError::Invalid(e.to_string())))?;
    Ok((
        frame,
        Negotiated {
            crc,
            revision: repr.revision,
            ord: ord_n,
            ird: ird_n,
            rtr: None,
            private_data: req.private_data.clone(),
        },
    ))
}

/// A rejecting Reply (RFC 5044 §7.1.1: R = 1, then close).
pub fn reject(req: &Request, private_data: &[u8]) -> Vec<u8> {
    let pd = &private_data[..private_data.len().min(MAX_PRIVATE_DATA)];
    let repr = MpaRepr {
        kind: FrameKind::Reply,
        markers: false,
        crc: req.crc,
        reject: true,
        revision: req.revision.clamp(REV_1, REV_2),
        ird_ord: None,
        private_data: pd,
    };
    repr.to_vec().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        ic: MpaConfig,
        rc: MpaConfig,
        iird: u16,
        iord: u16,
        rird: u16,
        rord: u16,
    ) -> (Negotiated, Negotiated) {
        let req = request(&ic, iird, iord, b"hello").unwrap();
        assert_eq!(frame_complete(&req).unwrap(), Some(req.len()));
        let r = parse_request(&req).unwrap();
        assert_eq!(r.private_data, b"hello");
        let (rep, resp) = accept(&rc, &r, rird, rord, b"world")
            .map_err(|e| e.1)
            .unwrap();
        let init = process_reply(&ic, iird, iord, &rep).unwrap();
        assert_eq!(init.private_data, b"world");
        (init, resp)
    }

    #[test]
    fn rev2_p2p_negotiates_ird_ord_and_rtr() {
        let (i, r) = run(MpaConfig::default(), MpaConfig::default(), 4, 16, 8, 2);
        assert_eq!((i.ord, i.ird), (8, 4)); // min(16, responder IRD 8)
        assert_eq!((r.ord, r.ird), (2, 8)); // min(2, initiator IRD 4), min(8, 16)
        assert_eq!(i.rtr, Some(Rtr::Write));
        assert!(i.crc && r.crc);
        assert_eq!(i.revision, 2);
    }

    #[test]
    fn rev1_and_crc_negotiation() {
        let ic = MpaConfig {
            crc: false,
            revision: 1,
            peer_to_peer: false,
        };
        let (i, r) = run(ic, MpaConfig::default(), 1, 1, 1, 1);
        assert!(i.crc && r.crc, "CRC if either asks");
        assert_eq!(i.revision, 1);
        assert_eq!(i.rtr, None);
        let rc = MpaConfig { crc: false, ..ic };
        let (i, r) = run(ic, rc, 1, 1, 1, 1);
        assert!(!i.crc && !r.crc);
    }

    #[test]
    fn rev2_without_p2p() {
        let ic = MpaConfig {
            peer_to_peer: false,
            ..MpaConfig::default()
        };
        let (i, _) = run(ic, MpaConfig::default(), 2, 2, 2, 2);
        assert_eq!(i.rtr, None);
    }

    #[test]
    fn markers_are_rejected() {
        let mut req = request(&MpaConfig::default(), 1, 1, b"").unwrap();
        req[16] |= 0x80;
        let r = parse_request(&req).unwrap();
        let (frame, _) = accept(&MpaConfig::default(), &r, 1, 1, b"").unwrap_err();
        let e = process_reply(&MpaConfig::default(), 1, 1, &frame.unwrap()).unwrap_err();
        assert!(matches!(e, HandshakeError::Rejected(_)));
    }

    #[test]
    fn reject_carries_private_data() {
        let req = request(&MpaConfig::default(), 1, 1, b"x").unwrap();
        let r = parse_request(&req).unwrap();
        let rep = reject(&r, b"go away");
        assert_eq!(
            process_reply(&MpaConfig::default(), 1, 1, &rep),
            Err(HandshakeError::Rejected(b"go away".to_vec()))
        );
    }

    #[test]
    fn bad_key_and_oversized_pd() {
        let mut req = request(&MpaConfig::default(), 1, 1, b"").unwrap();
        req[0] = b'X';
        assert!(frame_complete(&req).is_err());
        assert!(request(&MpaConfig::default(), 1, 1, &[0u8; 509]).is_err());
        assert!(request(
            &MpaConfig {
                revision: 1,
                ..MpaConfig::default()
            },
            1,
            1,
            &[0u8; 512]
        )
        .is_ok());
    }

    #[test]
    fn insufficient_ird_detected() {
        // Responder claims an ORD larger than our IRD.
        let ic = MpaConfig::default();
        let req = request(&ic, 1, 1, b"").unwrap();
        let mut r = parse_request(&req).unwrap();
        r.ird_ord.as_mut().unwrap().ird = 9; // pretend the initiator offered 9
        let (rep, _) = accept(&ic, &r, 9, 9, b"").map_err(|e| e.1).unwrap();
        assert_eq!(
            process_reply(&ic, 1, 1, &rep),
            Err(HandshakeError::InsufficientIrd)
        );
    }
}
