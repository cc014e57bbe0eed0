//! Record marking for ONC RPC over byte streams (RFC 5531 §11), sans-IO.
//!
//! On a stream transport each RPC message is sent as one *record*, made of
//! one or more *fragments*. Every fragment starts with a 4-octet big-endian
//! header: bit 31 is set on the last fragment of the record, bits 30..0 hold
//! the fragment's length in octets (header not counted). Zero-length
//! fragments are legal.
//!
//! * [`FragmentHeader`] is the `Repr` of that header (`parse` / `emit`).
//! * [`RecordDecoder`] turns a stream, fed in arbitrary chunks, into complete
//!   [`Record`]s. Each fragment body is split off the read buffer without
//!   copying and kept as a separate [`Bytes`] piece (so a single-fragment
//!   record is one contiguous piece). The size of a record and
//!   the number of its fragments are bounded by [`RecordLimits`]; a violation
//!   is a [`RecordError`], after which the stream must be closed.
//! * [`RecordEncoder`] frames a message (a chain of `Bytes` pieces) into one
//!   or more fragments, producing a chain of `Bytes` suitable for a vectored
//!   write; the payload is never copied.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Bit 31 of a fragment header: this fragment is the last one of its record
/// (RFC 5531 §11).
pub const LAST_FRAGMENT: u32 = 0x8000_0000;

/// The largest fragment length a header can express: 2³¹ − 1 (RFC 5531 §11).
pub const MAX_FRAGMENT_LEN: u32 = 0x7FFF_FFFF;

/// Length of a fragment header in octets.
pub const HEADER_LEN: usize = 4;

/// Default bound on the size of one record: 64 MiB.
pub const DEFAULT_MAX_RECORD_SIZE: usize = 64 * 1024 * 1024;

/// Default bound on the number of fragments (empty ones included) in one record.
///
/// Admits a record of the default maximum size
/// ([`DEFAULT_MAX_RECORD_SIZE`], 64 MiB) sent in fragments of 2 KiB or more.
/// That covers glibc's sunrpc peers: their `xdrrec` streams use 4000-byte
/// buffers, so each fragment carries 3996 bytes and a 64 MiB record takes
/// 16 794 fragments (a limit of 16 Ki would close the connection for
/// records of 62.4 to 64 MiB from them). Small enough that
/// the bookkeeping of a record stays bounded: one 32-byte `Bytes` handle
/// per non-empty fragment, at most 1 MiB.
pub const DEFAULT_MAX_FRAGMENTS: usize = 32 * 1024;

/// Fragment body of glibc's sunrpc record streams: its 4000-byte `xdrrec`
/// buffer less the 4-byte fragment header.
const GLIBC_FRAGMENT_BODY: usize = 3996;

// A maximal record from a glibc peer fits the default fragment count.
const _: () =
    assert!(DEFAULT_MAX_RECORD_SIZE.div_ceil(GLIBC_FRAGMENT_BODY) <= DEFAULT_MAX_FRAGMENTS);

/// Default size limit of the fragments [`RecordEncoder`] produces: the
/// largest a header can express, so every message of up to 2 GiB is one
/// fragment (as Linux and libtirpc servers send replies). A receiver then
/// gets each message as one contiguous buffer and decodes its opaque data
/// without copying; smaller fragments are a configuration choice.
pub const DEFAULT_MAX_FRAGMENT_SIZE: usize = MAX_FRAGMENT_LEN as usize;

/// The 4-octet header in front of every fragment (RFC 5531 §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentHeader {
    /// Set on the last fragment of a record.
    pub last: bool,
    /// Length of the fragment body in octets, at most [`MAX_FRAGMENT_LEN`].
    pub len: u32,
}

impl FragmentHeader {
    /// Parses a header from the first four octets of `bytes`.
    ///
    /// Returns `None` if fewer than four octets are given. Every 32-bit value
    /// is a valid header.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let word: [u8; 4] = bytes.get(..HEADER_LEN)?.try_into().ok()?;
        let word = u32::from_be_bytes(word);
        Some(FragmentHeader {
            last: word & LAST_FRAGMENT != 0,
            len: word & MAX_FRAGMENT_LEN,
        })
    }

    /// The header as its 32-bit wire value.
    ///
    /// # Panics
    /// If `len` exceeds [`MAX_FRAGMENT_LEN`] (a caller bug, never peer input).
    pub fn to_word(&self) -> u32 {
        assert!(self.len <= MAX_FRAGMENT_LEN, "fragment length over 2^31-1");
        self.len | if self.last { LAST_FRAGMENT } else { 0 }
    }

    /// Writes the header into the first four octets of `out`.
    ///
    /// # Panics
    /// If `out` is shorter than four octets or `len` exceeds
    /// [`MAX_FRAGMENT_LEN`].
    pub fn emit(&self, out: &mut [u8]) {
        out[..HEADER_LEN].copy_from_slice(&self.to_word().to_be_bytes());
    }
}

/// Bounds the decoder enforces on every record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLimits {
    /// Largest accepted record (sum of its fragment lengths), in octets.
    pub max_record_size: usize,
    /// Largest accepted number of fragments in one record, empty ones included.
    pub max_fragments: usize,
}

impl Default for RecordLimits {
    fn default() -> Self {
        RecordLimits {
            max_record_size: DEFAULT_MAX_RECORD_SIZE,
            max_fragments: DEFAULT_MAX_FRAGMENTS,
        }
    }
}

/// Why a stream's record marking was rejected. The stream cannot be
/// resynchronised afterwards and must be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The record would exceed [`RecordLimits::max_record_size`].
    #[error("record of at least {size} octets exceeds the limit of {limit} octets")]
    RecordTooLarge {
        /// Size announced so far (the fragments received plus the new one).
        size: u64,
        /// The configured limit.
        limit: usize,
    },
    /// The record has more than [`RecordLimits::max_fragments`] fragments.
    #[error("record has more than {limit} fragments")]
    TooManyFragments {
        /// The configured limit.
        limit: usize,
    },
    /// The stream ended inside a record.
    #[error("stream ended inside a record ({buffered} octets of an unfinished record)")]
    Truncated {
        /// Octets of the unfinished record that had been received.
        buffered: usize,
    },
    /// `decode` was called again after an error.
    #[error("record decoder used after an error")]
    Poisoned,
}

/// One complete record: the bodies of its fragments, in order, as pieces.
///
/// Each non-empty fragment is one piece; empty fragments contribute none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    pieces: Vec<Bytes>,
    len: usize,
}

impl Record {
    /// Builds a record from pieces (empty pieces are dropped).
    pub fn from_pieces(pieces: impl IntoIterator<Item = Bytes>) -> Self {
        let mut record = Record::default();
        for piece in pieces {
            record.push(piece);
        }
        record
    }

    fn push(&mut self, piece: Bytes) {
        if !piece.is_empty() {
            self.len += piece.len();
            self.pieces.push(piece);
        }
    }

    /// Total length in octets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the record holds no octets.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces, in stream order. None is empty.
    pub fn pieces(&self) -> &[Bytes] {
        &self.pieces
    }

    /// Consumes the record, returning its pieces.
    pub fn into_pieces(self) -> Vec<Bytes> {
        self.pieces
    }

    /// The record as one contiguous buffer. Free when the record is a single
    /// piece; otherwise the pieces are copied once.
    pub fn into_contiguous(self) -> Bytes {
        match self.pieces.len() {
            0 => Bytes::new(),
            1 => self.pieces.into_iter().next().unwrap_or_default(),
            _ => {
                let mut out = BytesMut::with_capacity(self.len);
                for piece in &self.pieces {
                    out.extend_from_slice(piece);
                }
                out.freeze()
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a fragment header.
    Header,
    /// Inside a fragment body with `remaining` octets still to come.
    Body { remaining: usize, last: bool },
    /// An error was returned; the stream is unusable.
    Failed,
}

/// Sans-IO record-marking decoder (RFC 5531 §11).
///
/// The caller reads stream bytes into a [`BytesMut`] and calls
/// [`decode`](Self::decode) until it returns `Ok(None)`; complete fragment
/// bodies are split off the front of that buffer without copying. A fragment
/// stays in the buffer until it is complete: [`read_hint`](Self::read_hint)
/// tells the caller how much room to reserve so that it lands contiguously.
#[derive(Debug)]
pub struct RecordDecoder {
    limits: RecordLimits,
    state: State,
    record: Record,
    fragments: usize,
}

impl Default for RecordDecoder {
    fn default() -> Self {
        RecordDecoder::new(RecordLimits::default())
    }
}

impl RecordDecoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: RecordLimits) -> Self {
        RecordDecoder {
            limits,
            state: State::Header,
            record: Record::default(),
            fragments: 0,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> RecordLimits {
        self.limits
    }

    /// Consumes bytes from the front of `buf` and returns the next complete
    /// record, if `buf` holds the rest of one.
    ///
    /// `Ok(None)` means more bytes are needed (a partial header or fragment
    /// body stays in `buf`). After an `Err` the decoder is poisoned.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Record>, RecordError> {
        loop {
            match self.state {
                State::Failed => return Err(RecordError::Poisoned),
                State::Header => {
                    let Some(header) = FragmentHeader::parse(buf) else {
                        return Ok(None);
                    };
                    buf.advance(HEADER_LEN);
                    if let Err(e) = self.start_fragment(header) {
                        self.state = State::Failed;
                        self.record = Record::default();
                        return Err(e);
                    }
                }
                State::Body { remaining, last } => {
                    if buf.len() < remaining {
                        return Ok(None);
                    }
                    self.record.push(buf.split_to(remaining).freeze());
                    if last {
                        self.state = State::Header;
                        self.fragments = 0;
                        return Ok(Some(std::mem::take(&mut self.record)));
                    }
                    self.state = State::Header;
                }
            }
        }
    }

    fn start_fragment(&mut self, header: FragmentHeader) -> Result<(), RecordError> {
        self.fragments += 1;
        if self.fragments > self.limits.max_fragments {
            return Err(RecordError::TooManyFragments {
                limit: self.limits.max_fragments,
            });
        }
        let size = self.record.len() as u64 + u64::from(header.len);
        if size > self.limits.max_record_size as u64 {
            return Err(RecordError::RecordTooLarge {
                size,
                limit: self.limits.max_record_size,
            });
        }
        self.state = State::Body {
            remaining: header.len as usize,
            last: header.last,
        };
        Ok(())
    }

    /// How many more octets would finish the current fragment and read the
    /// next header, given `buffered` octets already in the read buffer: the
    /// room to reserve for the next read. Never more than the record limit
    /// plus one header, since the fragment's header was checked against it.
    pub fn read_hint(&self, buffered: usize) -> usize {
        match self.state {
            State::Header | State::Failed => HEADER_LEN.saturating_sub(buffered).max(1),
            State::Body { remaining, .. } => (remaining + HEADER_LEN).saturating_sub(buffered),
        }
    }

    /// True between the first header of a record and its end.
    pub fn is_mid_record(&self) -> bool {
        matches!(self.state, State::Body { .. }) || self.fragments > 0
    }

    /// Checks the stream may end here: `buf` is what is left in the read
    /// buffer at end of stream. Ending between records is fine; ending inside
    /// a record or a header is [`RecordError::Truncated`].
    pub fn finish(&self, buf: &BytesMut) -> Result<(), RecordError> {
        if self.state == State::Failed {
            return Err(RecordError::Poisoned);
        }
        if self.is_mid_record() || !buf.is_empty() {
            return Err(RecordError::Truncated {
                buffered: self.record.len() + buf.len(),
            });
        }
        Ok(())
    }
}

/// Frames messages into records of one or more fragments (RFC 5531 §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordEncoder {
    max_fragment_size: usize,
}

impl Default for RecordEncoder {
    fn default() -> Self {
        RecordEncoder::new(DEFAULT_MAX_FRAGMENT_SIZE)
    }
}

impl RecordEncoder {
    /// An encoder whose fragments carry at most `max_fragment_size` octets
    /// (clamped to 1 ..= 2³¹ − 1).
    pub fn new(max_fragment_size: usize) -> Self {
        RecordEncoder {
            max_fragment_size: max_fragment_size.clamp(1, MAX_FRAGMENT_LEN as usize),
        }
    }

    /// The largest fragment body this encoder emits.
    pub fn max_fragment_size(&self) -> usize {
        self.max_fragment_size
    }

    /// Number of fragments a message of `len` octets is split into.
    pub fn fragment_count(&self, len: usize) -> usize {
        len.div_ceil(self.max_fragment_size).max(1)
    }

    /// Appends to `out` the record for the message made of `pieces`: fragment
    /// headers interleaved with (zero-copy) slices of the pieces. An empty
    /// message becomes one empty last fragment.
    pub fn encode(&self, pieces: &[Bytes], out: &mut Vec<Bytes>) {
        let total: usize = pieces.iter().map(Bytes::len).sum();
        let count = self.fragment_count(total);
        let mut headers = BytesMut::with_capacity(count * HEADER_LEN);
        let mut left = total;
        for _ in 0..count {
            let len = left.min(self.max_fragment_size);
            left -= len;
            let header = FragmentHeader {
                last: left == 0,
                // `len` is at most max_fragment_size ≤ MAX_FRAGMENT_LEN.
                len: len as u32,
            };
            headers.put_u32(header.to_word());
        }
        let mut headers = headers.freeze();

        let mut pieces = pieces.iter().filter(|p| !p.is_empty()).cloned();
        let mut current = Bytes::new();
        let mut left = total;
        for _ in 0..count {
            out.push(headers.split_to(HEADER_LEN));
            let mut frag_left = left.min(self.max_fragment_size);
            left -= frag_left;
            while frag_left > 0 {
                if current.is_empty() {
                    match pieces.next() {
                        Some(p) => current = p,
                        None => break, // unreachable: lengths were summed above
                    }
                }
                let take = current.len().min(frag_left);
                out.push(current.split_to(take));
                frag_left -= take;
            }
        }
    }

    /// Convenience: the whole record as one contiguous buffer (copies).
    pub fn encode_to_vec(&self, pieces: &[Bytes]) -> Vec<u8> {
        let mut chain = Vec::new();
        self.encode(pieces, &mut chain);
        let mut out = Vec::with_capacity(chain.iter().map(Bytes::len).sum());
        for piece in chain {
            out.extend_from_slice(&piece);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(
        decoder: &mut RecordDecoder,
        chunks: &[&[u8]],
    ) -> Result<Vec<Vec<u8>>, RecordError> {
        let mut buf = BytesMut::new();
        let mut records = Vec::new();
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            while let Some(record) = decoder.decode(&mut buf)? {
                records.push(record.into_contiguous().to_vec());
            }
        }
        decoder.finish(&buf)?;
        Ok(records)
    }

    /// A record of the default maximum size sent the way
    /// glibc's sunrpc sends it (3996-byte fragment bodies) is accepted by
    /// the default limits; the former 16 Ki fragment limit refused records
    /// from about 62.4 MiB up and closed the connection.
    #[test]
    fn maximal_record_in_glibc_fragments_fits_the_default_limits() {
        let body = [0u8; GLIBC_FRAGMENT_BODY];
        let mut d = RecordDecoder::default();
        let mut buf = BytesMut::new();
        let mut left = DEFAULT_MAX_RECORD_SIZE;
        loop {
            let n = left.min(GLIBC_FRAGMENT_BODY);
            left -= n;
            let h = FragmentHeader {
                last: left == 0,
                len: n as u32,
            };
            let mut hb = [0u8; HEADER_LEN];
            h.emit(&mut hb);
            buf.extend_from_slice(&hb);
            buf.extend_from_slice(&body[..n]);
            match d.decode(&mut buf) {
                Ok(None) if left > 0 => {}
                Ok(Some(r)) if left == 0 => {
                    assert_eq!(r.len(), DEFAULT_MAX_RECORD_SIZE);
                    break;
                }
                other => panic!("{} bytes left: {other:?}", left),
            }
        }
    }

    #[test]
    fn header_round_trip() {
        let h = FragmentHeader { last: true, len: 5 };
        let mut b = [0u8; 4];
        h.emit(&mut b);
        assert_eq!(b, [0x80, 0, 0, 5]);
        assert_eq!(FragmentHeader::parse(&b), Some(h));
        assert_eq!(FragmentHeader::parse(&b[..3]), None);
        let h = FragmentHeader::parse(&[0x7f, 0xff, 0xff, 0xff]).unwrap();
        assert_eq!(
            h,
            FragmentHeader {
                last: false,
                len: MAX_FRAGMENT_LEN
            }
        );
    }

    #[test]
    fn single_and_multi_fragment() {
        let mut d = RecordDecoder::default();
        let stream = [
            &[0x80, 0, 0, 3, b'a', b'b', b'c'][..],
            &[0, 0, 0, 2, b'd', b'e', 0, 0, 0, 0, 0x80, 0, 0, 1, b'f'][..],
            &[0x80, 0, 0, 0][..],
        ];
        let recs = decode_all(&mut d, &stream).unwrap();
        assert_eq!(recs, vec![b"abc".to_vec(), b"def".to_vec(), Vec::new()]);
    }

    #[test]
    fn multi_fragment_keeps_pieces() {
        let enc = RecordEncoder::new(3);
        let wire = enc.encode_to_vec(&[Bytes::from_static(b"hello world")]);
        assert_eq!(wire.len(), 11 + 4 * 4);
        let mut d = RecordDecoder::default();
        let mut buf = BytesMut::from(&wire[..]);
        let rec = d.decode(&mut buf).unwrap().unwrap();
        assert_eq!(rec.pieces().len(), 4);
        assert_eq!(rec.len(), 11);
        assert_eq!(&rec.into_contiguous()[..], b"hello world");
        assert!(buf.is_empty());
    }

    #[test]
    fn oversize_rejected_at_header() {
        let limits = RecordLimits {
            max_record_size: 10,
            max_fragments: 100,
        };
        let mut d = RecordDecoder::new(limits);
        // Two fragments of 6: the second pushes the record over 10.
        let mut buf = BytesMut::from(&[0, 0, 0, 6, 1, 2, 3, 4, 5, 6, 0x80, 0, 0, 6][..]);
        assert_eq!(
            d.decode(&mut buf),
            Err(RecordError::RecordTooLarge {
                size: 12,
                limit: 10
            })
        );
        assert_eq!(d.decode(&mut buf), Err(RecordError::Poisoned));
        // A huge announced length fails before any body arrives.
        let mut d = RecordDecoder::default();
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff][..]);
        assert!(matches!(
            d.decode(&mut buf),
            Err(RecordError::RecordTooLarge { .. })
        ));
    }

    #[test]
    fn empty_fragment_flood_rejected() {
        let limits = RecordLimits {
            max_record_size: 1 << 20,
            max_fragments: 8,
        };
        let mut d = RecordDecoder::new(limits);
        let mut buf = BytesMut::from(&[0u8; 4 * 9][..]);
        assert_eq!(
            d.decode(&mut buf),
            Err(RecordError::TooManyFragments { limit: 8 })
        );
        // Exactly at the limit is fine.
        let mut d = RecordDecoder::new(limits);
        let mut wire = vec![0u8; 4 * 7];
        wire.extend_from_slice(&[0x80, 0, 0, 0]);
        let mut buf = BytesMut::from(&wire[..]);
        assert_eq!(d.decode(&mut buf), Ok(Some(Record::default())));
    }

    #[test]
    fn truncation_detected() {
        let mut d = RecordDecoder::default();
        let mut buf = BytesMut::from(&[0x80, 0, 0, 4, 1, 2][..]);
        assert_eq!(d.decode(&mut buf), Ok(None));
        assert!(matches!(
            d.finish(&buf),
            Err(RecordError::Truncated { buffered: 2 })
        ));
        let mut d = RecordDecoder::default();
        let buf = BytesMut::from(&[0x80, 0][..]);
        assert!(d.finish(&buf).is_err());
        let mut buf = BytesMut::new();
        assert_eq!(d.decode(&mut buf), Ok(None));
        assert!(d.finish(&buf).is_ok());
    }

    #[test]
    fn large_fragment_fed_in_chunks_is_one_piece() {
        let payload: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        let wire = RecordEncoder::new(1 << 30).encode_to_vec(&[Bytes::from(payload.clone())]);
        let mut d = RecordDecoder::default();
        let mut buf = BytesMut::new();
        let mut out = None;
        for chunk in wire.chunks(10_000) {
            buf.extend_from_slice(chunk);
            if let Some(r) = d.decode(&mut buf).unwrap() {
                out = Some(r);
            }
        }
        let rec = out.unwrap();
        assert_eq!(rec.pieces().len(), 1);
        assert_eq!(rec.into_contiguous().to_vec(), payload);
    }

    #[test]
    fn read_hint_tracks_fragment() {
        let mut d = RecordDecoder::default();
        assert_eq!(d.read_hint(0), 4);
        let mut buf = BytesMut::from(&[0x80, 0, 0x10, 0, 1, 2][..]);
        assert_eq!(d.decode(&mut buf), Ok(None));
        assert_eq!(d.read_hint(buf.len()), 4096 + 4 - 2);
    }

    #[test]
    fn encoder_empty_message() {
        let enc = RecordEncoder::default();
        assert_eq!(enc.encode_to_vec(&[]), vec![0x80, 0, 0, 0]);
        assert_eq!(
            enc.encode_to_vec(&[Bytes::new(), Bytes::new()]),
            vec![0x80, 0, 0, 0]
        );
    }

    #[test]
    fn encoder_exact_multiple() {
        let enc = RecordEncoder::new(4);
        let wire = enc.encode_to_vec(&[Bytes::from_static(b"abcd"), Bytes::from_static(b"efgh")]);
        assert_eq!(wire, b"\x00\x00\x00\x04abcd\x80\x00\x00\x04efgh".to_vec());
    }

    fn messages() -> impl Strategy<Value = Vec<Vec<Vec<u8>>>> {
        // Each message is a list of pieces.
        prop::collection::vec(
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..5),
            0..6,
        )
    }

    proptest! {
        #[test]
        fn cut_anywhere_decodes_identically(
            msgs in messages(),
            frag in 1usize..20,
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        ) {
            let enc = RecordEncoder::new(frag);
            let mut wire = Vec::new();
            let mut expected = Vec::new();
            for msg in &msgs {
                let pieces: Vec<Bytes> = msg.iter().cloned().map(Bytes::from).collect();
                wire.extend(enc.encode_to_vec(&pieces));
                expected.push(msg.concat());
            }
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
            points.sort_unstable();
            let mut chunks = Vec::new();
            let mut prev = 0;
            for p in points {
                chunks.push(&wire[prev..p]);
                prev = p;
            }
            chunks.push(&wire[prev..]);
            let mut d = RecordDecoder::default();
            let got = decode_all(&mut d, &chunks).unwrap();
            prop_assert_eq!(got, expected);
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            data in prop::collection::vec(any::<u8>(), 0..512),
            split in 1usize..64,
            max_record in 0usize..256,
            max_frags in 0usize..8,
        ) {
            let mut d = RecordDecoder::new(RecordLimits { max_record_size: max_record, max_fragments: max_frags });
            let mut buf = BytesMut::new();
            'outer: for chunk in data.chunks(split) {
                buf.extend_from_slice(chunk);
                loop {
                    match d.decode(&mut buf) {
                        Ok(Some(r)) => {
                            prop_assert!(r.len() <= max_record);
                        }
                        Ok(None) => break,
                        Err(_) => break 'outer,
                    }
                }
            }
            let _ = d.finish(&buf);
        }
    }
}
