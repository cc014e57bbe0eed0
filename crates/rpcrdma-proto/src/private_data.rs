//! RDMA-CM Private Data for RPC-over-RDMA Version 1 (RFC 8797).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       Format Identifier                       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    Version    |  Reserved   |R|   Send Size   | Receive Size  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use crate::marshal::Thresholds;

/// The Format Identifier, 0xf6ab0e18 in network byte order (RFC 8797 §5).
pub const FORMAT_IDENTIFIER: u32 = 0xf6ab_0e18;
/// The only message format version defined (RFC 8797 §5).
pub const PRIVATE_DATA_VERSION: u8 = 1;
/// Encoded length of a version-1 message.
pub const PRIVATE_DATA_LEN: usize = 8;
/// The R bit: bit 15 of the second word, the low bit of octet 5.
const R_BIT: u8 = 0x01;
/// RFC 8166 §3.3.3 default inline threshold.
pub const DEFAULT_INLINE: u32 = 1024;

/// A version-1 Private Data message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrivateData {
    /// R: the sender supports remote invalidation (RFC 8797 §6).
    pub remote_invalidation: bool,
    /// Largest Send this peer will transmit, in bytes.
    pub send_size: u32,
    /// Largest Receive this peer can accept, in bytes.
    pub recv_size: u32,
}

impl Default for PrivateData {
    /// What an absent message means: 1024/1024, no remote invalidation
    /// (RFC 8797 §8.1).
    fn default() -> Self {
        PrivateData {
            remote_invalidation: false,
            send_size: DEFAULT_INLINE,
            recv_size: DEFAULT_INLINE,
        }
    }
}

/// Encodes a size: (bytes / 1024) - 1, clamped to 1024..=262144 (RFC 8797 §7).
pub fn encode_size(bytes: u32) -> u8 {
    ((bytes / 1024).clamp(1, 256) - 1) as u8
}

/// Decodes a size: (v + 1) * 1024 (RFC 8797 §7).
pub fn decode_size(v: u8) -> u32 {
    (v as u32 + 1) * 1024
}

impl PrivateData {
    /// Encodes the 8-octet message. Sizes are rounded down to a multiple of
    /// 1024 within 1024..=262144.
    pub fn encode(&self) -> [u8; PRIVATE_DATA_LEN] {
        let id = FORMAT_IDENTIFIER.to_be_bytes();
        [
            id[0],
            id[1],
            id[2],
            id[3],
            PRIVATE_DATA_VERSION,
            if self.remote_invalidation { R_BIT } else { 0 },
            encode_size(self.send_size),
            encode_size(self.recv_size),
        ]
    }

    /// Searches received private data for the Format Identifier at any
    /// offset (other layers, e.g. RFC 6581's IRD/ORD word, may precede it)
    /// and parses the message after it. `None` when there is no valid
    /// version-1 message: the caller then uses [`PrivateData::default`]
    /// (RFC 8797 §8.2). Reserved bits are ignored.
    pub fn find(buf: &[u8]) -> Option<PrivateData> {
        let id = FORMAT_IDENTIFIER.to_be_bytes();
        buf.windows(4)
            .enumerate()
            .filter(|(_, w)| *w == id)
            .find_map(|(i, _)| Self::parse_at(buf, i))
    }

    fn parse_at(buf: &[u8], i: usize) -> Option<PrivateData> {
        let m = buf.get(i..i + PRIVATE_DATA_LEN)?;
        if m[4] != PRIVATE_DATA_VERSION {
            return None;
        }
        Some(PrivateData {
            remote_invalidation: m[5] & R_BIT != 0,
            send_size: decode_size(m[6]),
            recv_size: decode_size(m[7]),
        })
    }

    /// What a received buffer means: the message found in it, or the
    /// defaults when none is there.
    pub fn from_received(buf: &[u8]) -> PrivateData {
        Self::find(buf).unwrap_or_default()
    }
}

/// Connection parameters agreed from both sides' private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Negotiated {
    /// The two inline thresholds.
    pub thresholds: Thresholds,
    /// Both peers set R (RFC 8797 §6).
    pub remote_invalidation: bool,
}

impl Negotiated {
    /// Client (Requester) view: call threshold = min(our send, their
    /// receive); reply threshold = min(their send, our receive) (RFC 8797 §7).
    pub fn client(local: &PrivateData, server: &PrivateData) -> Negotiated {
        Negotiated {
            thresholds: Thresholds {
                call_inline: local.send_size.min(server.recv_size),
                reply_inline: server.send_size.min(local.recv_size),
            },
            remote_invalidation: local.remote_invalidation && server.remote_invalidation,
        }
    }

    /// Server (Responder) view; the same thresholds as the client computes.
    pub fn server(local: &PrivateData, client: &PrivateData) -> Negotiated {
        Negotiated::client(client, local)
    }

    /// The inline limits of `side` of this connection: what it may Send and
    /// what it can receive, whichever direction the RPC travels in
    /// ([`Thresholds::side`]).
    pub fn inline(&self, side: crate::classify::Side) -> crate::marshal::InlineLimits {
        self.thresholds.side(side)
    }

    /// Whether a reply may use Send With Invalidate: both peers advertised
    /// R, and the call exposed exactly one STag, which therefore belongs
    /// only to this XID (RFC 8797 §6; Linux's rule). Returns that STag.
    pub fn send_with_invalidate(&self, call_stags: &[u32]) -> Option<u32> {
        if !self.remote_invalidation {
            return None;
        }
        let first = *call_stags.first()?;
        call_stags.iter().all(|&s| s == first).then_some(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8797_s7_each_side_sends_what_the_other_receives() {
        use crate::classify::Side;
        let client = PrivateData {
            remote_invalidation: false,
            send_size: 8192,
            recv_size: 2048,
        };
        let server = PrivateData {
            remote_invalidation: false,
            send_size: 4096,
            recv_size: 16384,
        };
        let c = Negotiated::client(&client, &server).inline(Side::Client);
        let s = Negotiated::server(&server, &client).inline(Side::Server);
        // Client sends min(8192, 16384); server sends min(4096, 2048).
        assert_eq!((c.send, c.recv), (8192, 2048));
        assert_eq!((s.send, s.recv), (2048, 8192));
    }

    #[test]
    fn rfc8797_s5_byte_layout() {
        let p = PrivateData {
            remote_invalidation: true,
            send_size: 4096,
            recv_size: 262144,
        };
        assert_eq!(p.encode(), [0xf6, 0xab, 0x0e, 0x18, 1, 0x01, 3, 255]);
        let d = PrivateData::default().encode();
        assert_eq!(d, [0xf6, 0xab, 0x0e, 0x18, 1, 0, 0, 0]);
        assert_eq!(PrivateData::find(&p.encode()), Some(p));
    }

    #[test]
    fn rfc8797_s7_size_encoding() {
        assert_eq!(encode_size(1024), 0);
        assert_eq!(encode_size(1500), 0);
        assert_eq!(encode_size(262144), 255);
        assert_eq!(encode_size(1 << 20), 255);
        assert_eq!(encode_size(0), 0);
        assert_eq!(decode_size(0), 1024);
        assert_eq!(decode_size(255), 262144);
        for v in 0..=255u8 {
            assert_eq!(encode_size(decode_size(v)), v);
        }
    }

    #[test]
    fn rfc8797_s8_2_found_at_any_offset() {
        let p = PrivateData {
            remote_invalidation: false,
            send_size: 8192,
            recv_size: 16384,
        };
        // After an RFC 6581 IRD/ORD word, and at an odd offset.
        for prefix in [&[0x80u8, 0x10, 0x00, 0x10][..], &[1, 2, 3][..], &[][..]] {
            let mut b = prefix.to_vec();
            b.extend_from_slice(&p.encode());
            b.extend_from_slice(&[9, 9]);
            assert_eq!(PrivateData::find(&b), Some(p), "prefix {prefix:?}");
        }
    }

    #[test]
    fn rfc8797_s8_1_absent_or_invalid_means_defaults() {
        assert_eq!(PrivateData::from_received(&[]), PrivateData::default());
        assert_eq!(PrivateData::from_received(&[0; 32]), PrivateData::default());
        // Unknown version.
        let mut b = PrivateData::default().encode();
        b[4] = 2;
        b[6] = 7;
        assert_eq!(PrivateData::find(&b), None);
        // Overruns the buffer.
        let b = PrivateData {
            send_size: 8192,
            ..Default::default()
        }
        .encode();
        assert_eq!(PrivateData::find(&b[..7]), None);
        // Reserved bits are ignored.
        let mut b = PrivateData::default().encode();
        b[5] = 0xfe;
        assert_eq!(PrivateData::find(&b), Some(PrivateData::default()));
        let def = Negotiated::client(&PrivateData::default(), &PrivateData::default());
        assert_eq!(
            def.thresholds,
            Thresholds {
                call_inline: 1024,
                reply_inline: 1024
            }
        );
        assert!(!def.remote_invalidation);
    }

    proptest::proptest! {
        #[test]
        fn rfc8797_round_trip_after_any_prefix(
            r: bool,
            send in 0u8..=255,
            recv in 0u8..=255,
            prefix in proptest::collection::vec(0u8..0xf6, 0..40),
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8),
        ) {
            let p = PrivateData {
                remote_invalidation: r,
                send_size: decode_size(send),
                recv_size: decode_size(recv),
            };
            let mut b = prefix;
            b.extend_from_slice(&p.encode());
            b.extend_from_slice(&tail);
            proptest::prop_assert_eq!(PrivateData::find(&b), Some(p));
        }

        #[test]
        fn rfc8797_find_never_panics(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = PrivateData::find(&b);
        }
    }

    #[test]
    fn rfc8797_s7_thresholds() {
        let client = PrivateData {
            remote_invalidation: true,
            send_size: 4096,
            recv_size: 65536,
        };
        let server = PrivateData {
            remote_invalidation: true,
            send_size: 32768,
            recv_size: 8192,
        };
        let c = Negotiated::client(&client, &server);
        assert_eq!(
            c.thresholds,
            Thresholds {
                call_inline: 4096,
                reply_inline: 32768
            }
        );
        assert_eq!(Negotiated::server(&server, &client), c);
    }

    #[test]
    fn rfc8797_s6_send_with_invalidate() {
        let r = PrivateData {
            remote_invalidation: true,
            ..Default::default()
        };
        let n = PrivateData::default();
        let both = Negotiated::client(&r, &r);
        assert_eq!(both.send_with_invalidate(&[7]), Some(7));
        assert_eq!(both.send_with_invalidate(&[7, 7]), Some(7));
        assert_eq!(both.send_with_invalidate(&[7, 8]), None);
        assert_eq!(both.send_with_invalidate(&[]), None);
        assert_eq!(Negotiated::client(&r, &n).send_with_invalidate(&[7]), None);
        assert_eq!(Negotiated::client(&n, &r).send_with_invalidate(&[7]), None);
    }
}
