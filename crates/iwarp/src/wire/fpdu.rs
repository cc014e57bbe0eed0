//! MPA FPDU framing (RFC 5044 §4, markers not supported).
//!
//! ```text
//! | ULPDU_Length (2) | ULPDU (DDP header + payload) | PAD (0-3) | CRC32c (4) |
//! ```
//! ULPDU_Length counts only the ULPDU. PAD makes length + ULPDU + PAD a
//! multiple of 4. The CRC32c covers length, ULPDU and PAD and is sent least
//! significant byte first (see [`crate::crc`]). When CRC was not negotiated
//! the 4-byte field is still present, sent as zero and not checked.
//!
//! Receiving: [`Deframer`] is fed the bytes of the TCP stream in chunks of
//! any size and yields [`Event`]s: the DDP header of each FPDU once
//! complete, then its payload as **borrowed sub-slices of the caller's read
//! buffer** (so tagged payload can be copied once, straight into registered
//! memory), then the end of the FPDU after the CRC check. Only the ≤ 20
//! header bytes and ≤ 7 trailer bytes are buffered internally.
//!
//! Sending: [`FpduBuilder`] produces the length+header prefix and the
//! pad+CRC trailer for a header plus a payload given as any number of
//! slices; the caller sends `prefix, payload slices…, trailer` with
//! `write_vectored` — the payload is never copied.

use std::io::IoSlice;

use super::ddp::{header_len_for, DdpRepr, UNTAGGED_HEADER_LEN};
use super::terminate::TerminateCause;
use super::{be16, Error};
use crate::crc::{self, Crc32c};

/// Length of the ULPDU_Length field.
pub const ULPDU_LENGTH_LEN: usize = 2;
/// Length of the CRC field.
pub const CRC_LEN: usize = 4;
/// Smallest possible FPDU (RFC 5044).
pub const MIN_FPDU_LEN: usize = 8;
/// Largest ULPDU_Length value.
pub const MAX_ULPDU_LEN: usize = u16::MAX as usize;
/// Largest header ([`FpduBuilder::frame`]'s `header`) kept inline in an
/// [`FpduPrefix`]: room for an untagged DDP header plus a Terminate body.
pub const MAX_INLINE_HEADER: usize = 72;

/// PAD octets after a ULPDU of `ulpdu_len` bytes.
#[inline]
pub const fn pad_len(ulpdu_len: usize) -> usize {
    (4 - ((ulpdu_len + ULPDU_LENGTH_LEN) & 3)) & 3
}

/// Total FPDU length on the wire for a ULPDU of `ulpdu_len` bytes.
#[inline]
pub const fn fpdu_len(ulpdu_len: usize) -> usize {
    ULPDU_LENGTH_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// MULPDU — the largest ULPDU MPA accepts from DDP — for an effective MSS
/// (RFC 5044):
/// markers off: `EMSS − (6 + EMSS mod 4)`;
/// markers on: `EMSS − (6 + 4·⌈EMSS/512⌉ + EMSS mod 4)`.
/// Capped at 65535 (ULPDU_Length is 16 bits); 0 for absurdly small MSS.
pub fn mulpdu(emss: usize, markers: bool) -> usize {
    let marker_bytes = if markers { 4 * emss.div_ceil(512) } else { 0 };
    emss.saturating_sub(6 + marker_bytes + emss % 4)
        .min(MAX_ULPDU_LEN)
}

/// Errors detected while deframing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FpduError {
    /// The received CRC does not match the computed one (RFC 5044 error handling:
    /// drop the FPDU, report, close).
    #[error("MPA CRC mismatch: computed {computed:#010x}, received {received:#010x}")]
    CrcMismatch {
        /// CRC32c computed over the received bytes.
        computed: u32,
        /// CRC32c carried by the FPDU.
        received: u32,
    },
    /// ULPDU_Length above the configured receive limit.
    #[error("ULPDU length {len} exceeds limit {max}")]
    UlpduTooLong {
        /// Received ULPDU_Length.
        len: usize,
        /// Configured limit.
        max: usize,
    },
    /// ULPDU_Length too short for the DDP header its control byte announces.
    #[error("ULPDU length {len} shorter than the DDP header ({header})")]
    UlpduTooShort {
        /// Received ULPDU_Length.
        len: usize,
        /// Header length the T bit asks for.
        header: usize,
    },
    /// An earlier error made the stream unusable; nothing more is decoded.
    #[error("deframer stopped after an earlier error")]
    Failed,
}

impl FpduError {
    /// The Terminate cause to report for this error: CRC errors are MPA
    /// error 0x02; a framing that cannot hold a DDP header is reported as a
    /// DDP catastrophic error (Linux siw does the same).
    pub fn terminate_cause(&self) -> TerminateCause {
        match self {
            FpduError::CrcMismatch { .. } => TerminateCause::MpaCrcError,
            _ => TerminateCause::DdpLocalCatastrophic,
        }
    }
}

/// The first bytes of a received FPDU: ULPDU_Length and the DDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentHeader {
    raw: [u8; ULPDU_LENGTH_LEN + UNTAGGED_HEADER_LEN],
    len: u8,
}

impl SegmentHeader {
    /// ULPDU_Length followed by the DDP header (16 or 20 bytes) — the
    /// "offending" bytes [`crate::wire::terminate::TerminateRepr::for_cause`] takes.
    pub fn raw(&self) -> &[u8] {
        &self.raw[..self.len as usize]
    }

    /// ULPDU_Length.
    pub fn ulpdu_len(&self) -> usize {
        be16(&self.raw, 0) as usize
    }

    /// The DDP header bytes (14 or 18).
    pub fn ddp_header(&self) -> &[u8] {
        &self.raw[ULPDU_LENGTH_LEN..self.len as usize]
    }

    /// T bit of the DDP header.
    pub fn tagged(&self) -> bool {
        self.raw[ULPDU_LENGTH_LEN] & super::ddp::control::TAGGED != 0
    }

    /// Payload bytes that follow the header in this FPDU.
    pub fn payload_len(&self) -> usize {
        self.ulpdu_len() - self.ddp_header().len()
    }

    /// Parse the DDP header.
    pub fn ddp(&self) -> Result<DdpRepr, Error> {
        DdpRepr::parse_bytes(self.ddp_header())
    }

    /// Parse DDP + RDMAP; errors are Terminate causes.
    pub fn rdmap(&self) -> Result<super::rdmap::RdmapRepr, super::rdmap::ParseFailure> {
        super::rdmap::RdmapRepr::parse_ulpdu(self.ddp_header())
    }
}

/// What [`Deframer::feed`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// A new FPDU's header is complete. Its payload follows.
    Header(SegmentHeader),
    /// Payload bytes of the current FPDU, in order; `offset` is relative to
    /// the start of this segment's payload. Borrowed from the input.
    Payload {
        /// Offset within the segment payload.
        offset: usize,
        /// The bytes.
        data: &'a [u8],
    },
    /// The current FPDU is complete and its CRC (if enabled) is good. Only
    /// now may the segment be considered valid (placed data may be used,
    /// messages delivered).
    End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Gathering ULPDU_Length and the DDP header.
    Header,
    /// Passing payload through.
    Payload,
    /// Gathering pad + CRC.
    Trailer,
}

/// Incremental FPDU receiver (sans-IO). See the module docs.
///
/// ```
/// # use iwarp::wire::fpdu::{Deframer, Event, FpduBuilder};
/// # let mut stream = Vec::new();
/// # let hdr = [0xc1u8, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
/// # FpduBuilder::new(true).frame(&hdr, [&b"data"[..]]).unwrap().write_to([&b"data"[..]], &mut stream);
/// let mut d = Deframer::new(true, 65535);
/// let mut input: &[u8] = &stream; // what one read() returned
/// loop {
///     let (used, ev) = d.feed(input).expect("protocol error: send Terminate, close");
///     input = &input[used..];
///     match ev {
///         Some(Event::Header(h)) => { /* validate h.rdmap(), look up STag / receive buffer */ }
///         Some(Event::Payload { offset, data }) => { /* copy `data` to its destination */ }
///         Some(Event::End) => { /* CRC good: complete / deliver */ }
///         None => break, // all input consumed; read more
///     }
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Deframer {
    crc_enabled: bool,
    max_ulpdu: usize,
    state: State,
    hdr: [u8; ULPDU_LENGTH_LEN + UNTAGGED_HEADER_LEN],
    hdr_have: usize,
    hdr_need: usize,
    payload_off: usize,
    payload_len: usize,
    trailer: [u8; 3 + CRC_LEN],
    trailer_have: usize,
    trailer_need: usize,
    crc: Crc32c,
    failed: bool,
    fpdus: u64,
}

impl Deframer {
    /// A deframer for a stream whose CRC use was negotiated as `crc_enabled`,
    /// accepting ULPDUs up to `max_ulpdu` bytes (at most 65535).
    pub fn new(crc_enabled: bool, max_ulpdu: usize) -> Self {
        Deframer {
            crc_enabled,
            max_ulpdu: max_ulpdu.min(MAX_ULPDU_LEN),
            state: State::Header,
            hdr: [0; ULPDU_LENGTH_LEN + UNTAGGED_HEADER_LEN],
            hdr_have: 0,
            hdr_need: ULPDU_LENGTH_LEN + 1,
            payload_off: 0,
            payload_len: 0,
            trailer: [0; 3 + CRC_LEN],
            trailer_have: 0,
            trailer_need: 0,
            crc: Crc32c::new(),
            failed: false,
            fpdus: 0,
        }
    }

    /// Whether CRCs are checked.
    pub fn crc_enabled(&self) -> bool {
        self.crc_enabled
    }

    /// Number of complete FPDUs seen.
    pub fn fpdus(&self) -> u64 {
        self.fpdus
    }

    /// True between FPDUs (no partial FPDU buffered or in flight).
    pub fn at_boundary(&self) -> bool {
        !self.failed && self.state == State::Header && self.hdr_have == 0
    }

    fn fail(&mut self, e: FpduError) -> Result<(usize, Option<Event<'static>>), FpduError> {
        self.failed = true;
        Err(e)
    }

    /// Consume bytes from the front of `input`. Returns how many bytes were
    /// used and at most one event. `(n, None)` always means `n ==
    /// input.len()`: everything was used and more input is needed. After an
    /// error every later call fails with [`FpduError::Failed`].
    pub fn feed<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<Event<'a>>), FpduError> {
        if self.failed {
            return Err(FpduError::Failed);
        }
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match self.state {
                State::Header => {
                    if rest.is_empty() {
                        return Ok((used, None));
                    }
                    let take = (self.hdr_need - self.hdr_have).min(rest.len());
                    self.hdr[self.hdr_have..self.hdr_have + take].copy_from_slice(&rest[..take]);
                    self.hdr_have += take;
                    used += take;
                    if self.hdr_have < self.hdr_need {
                        continue;
                    }
                    if self.hdr_need == ULPDU_LENGTH_LEN + 1 {
                        // Length and control byte known: check, then gather the rest.
                        let ulpdu = be16(&self.hdr, 0) as usize;
                        let hl = header_len_for(self.hdr[ULPDU_LENGTH_LEN]);
                        if ulpdu > self.max_ulpdu {
                            return self.fail(FpduError::UlpduTooLong {
                                len: ulpdu,
                                max: self.max_ulpdu,
                            });
                        }
                        if ulpdu < hl {
                            return self.fail(FpduError::UlpduTooShort {
                                len: ulpdu,
                                header: hl,
                            });
                        }
                        self.hdr_need = ULPDU_LENGTH_LEN + hl;
                        continue;
                    }
                    // Header complete.
                    let ulpdu = be16(&self.hdr, 0) as usize;
                    self.crc = Crc32c::new();
                    if self.crc_enabled {
                        self.crc.update(&self.hdr[..self.hdr_need]);
                    }
                    let h = SegmentHeader {
                        raw: self.hdr,
                        len: self.hdr_need as u8,
                    };
                    self.payload_off = 0;
                    self.payload_len = ulpdu + ULPDU_LENGTH_LEN - self.hdr_need;
                    self.trailer_have = 0;
                    self.trailer_need = pad_len(ulpdu) + CRC_LEN;
                    self.hdr_have = 0;
                    self.hdr_need = ULPDU_LENGTH_LEN + 1;
                    self.state = if self.payload_len == 0 {
                        State::Trailer
                    } else {
                        State::Payload
                    };
                    return Ok((used, Some(Event::Header(h))));
                }
                State::Payload => {
                    if rest.is_empty() {
                        return Ok((used, None));
                    }
                    let take = (self.payload_len - self.payload_off).min(rest.len());
                    let data = &rest[..take];
                    if self.crc_enabled {
                        self.crc.update(data);
                    }
                    let offset = self.payload_off;
                    self.payload_off += take;
                    if self.payload_off == self.payload_len {
                        self.state = State::Trailer;
                    }
                    return Ok((used + take, Some(Event::Payload { offset, data })));
                }
                State::Trailer => {
                    if rest.is_empty() {
                        return Ok((used, None));
                    }
                    let take = (self.trailer_need - self.trailer_have).min(rest.len());
                    self.trailer[self.trailer_have..self.trailer_have + take]
                        .copy_from_slice(&rest[..take]);
                    self.trailer_have += take;
                    used += take;
                    if self.trailer_have < self.trailer_need {
                        continue;
                    }
                    let pad = self.trailer_need - CRC_LEN;
                    if self.crc_enabled {
                        self.crc.update(&self.trailer[..pad]);
                        let mut c = [0u8; 4];
                        c.copy_from_slice(&self.trailer[pad..pad + CRC_LEN]);
                        let received = crc::from_wire(c);
                        let computed = self.crc.finish();
                        if received != computed {
                            return self.fail(FpduError::CrcMismatch { computed, received });
                        }
                    }
                    self.state = State::Header;
                    self.fpdus += 1;
                    return Ok((used, Some(Event::End)));
                }
            }
        }
    }
}

/// A complete FPDU found in a contiguous buffer by [`parse_fpdu`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedFpdu<'a> {
    /// The ULPDU (DDP header + payload).
    pub ulpdu: &'a [u8],
    /// Bytes the FPDU occupies in the buffer (length, ULPDU, pad, CRC).
    pub wire_len: usize,
}

impl ParsedFpdu<'_> {
    /// The DDP header length (by the T bit; 0 for an empty ULPDU, which
    /// [`parse_fpdu`] never returns).
    pub fn header_len(&self) -> usize {
        self.ulpdu.first().map_or(0, |&c| header_len_for(c))
    }

    /// Payload after the DDP header (empty if the ULPDU is shorter than
    /// its header, which [`parse_fpdu`] never returns).
    pub fn payload(&self) -> &[u8] {
        self.ulpdu.get(self.header_len()..).unwrap_or(&[])
    }
}

/// Parse one FPDU from the start of a contiguous buffer. `Ok(None)` if the
/// buffer holds only part of it. The same checks as [`Deframer`].
pub fn parse_fpdu(
    buf: &[u8],
    crc_enabled: bool,
    max_ulpdu: usize,
) -> Result<Option<ParsedFpdu<'_>>, FpduError> {
    if buf.len() < ULPDU_LENGTH_LEN + 1 {
        return Ok(None);
    }
    let ulpdu = be16(buf, 0) as usize;
    let hl = header_len_for(buf[ULPDU_LENGTH_LEN]);
    if ulpdu > max_ulpdu.min(MAX_ULPDU_LEN) {
        return Err(FpduError::UlpduTooLong {
            len: ulpdu,
            max: max_ulpdu.min(MAX_ULPDU_LEN),
        });
    }
    if ulpdu < hl {
        return Err(FpduError::UlpduTooShort {
            len: ulpdu,
            header: hl,
        });
    }
    let total = fpdu_len(ulpdu);
    if buf.len() < total {
        return Ok(None);
    }
    let crc_off = total - CRC_LEN;
    if crc_enabled {
        let computed = crc::crc32c(&buf[..crc_off]);
        let mut c = [0u8; 4];
        c.copy_from_slice(&buf[crc_off..total]);
        let received = crc::from_wire(c);
        if computed != received {
            return Err(FpduError::CrcMismatch { computed, received });
        }
    }
    Ok(Some(ParsedFpdu {
        ulpdu: &buf[ULPDU_LENGTH_LEN..ULPDU_LENGTH_LEN + ulpdu],
        wire_len: total,
    }))
}

/// ULPDU_Length + the header bytes of an FPDU being sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FpduPrefix {
    buf: [u8; ULPDU_LENGTH_LEN + MAX_INLINE_HEADER],
    len: u8,
}

impl FpduPrefix {
    /// The bytes to send first.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
}

/// PAD + CRC of an FPDU being sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FpduTrailer {
    buf: [u8; 3 + CRC_LEN],
    len: u8,
}

impl FpduTrailer {
    /// The bytes to send last.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    /// The CRC value carried (0 when CRC is off).
    pub fn crc(&self) -> u32 {
        let n = self.len as usize;
        let mut c = [0u8; 4];
        c.copy_from_slice(&self.buf[n - CRC_LEN..n]);
        crc::from_wire(c)
    }
}

/// The framing of one FPDU: send `prefix`, the payload slices, `trailer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramedFpdu {
    /// ULPDU_Length + header.
    pub prefix: FpduPrefix,
    /// PAD + CRC.
    pub trailer: FpduTrailer,
    /// Payload length.
    pub payload_len: usize,
}

impl FramedFpdu {
    /// Total bytes on the wire.
    pub fn wire_len(&self) -> usize {
        self.prefix.as_bytes().len() + self.payload_len + self.trailer.as_bytes().len()
    }

    /// Append `IoSlice`s for `write_vectored`: prefix, the payload slices
    /// (which must be the ones given to [`FpduBuilder::frame`]), trailer.
    pub fn io_slices<'a, I>(&'a self, payload: I, out: &mut Vec<IoSlice<'a>>)
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        out.push(IoSlice::new(self.prefix.as_bytes()));
        out.extend(
            payload
                .into_iter()
                .filter(|p| !p.is_empty())
                .map(IoSlice::new),
        );
        out.push(IoSlice::new(self.trailer.as_bytes()));
    }

    /// Append the whole FPDU to `out` (copies; for tests, small messages and
    /// captures).
    pub fn write_to<'p, I>(&self, payload: I, out: &mut Vec<u8>)
    where
        I: IntoIterator<Item = &'p [u8]>,
    {
        out.reserve(self.wire_len());
        out.extend_from_slice(self.prefix.as_bytes());
        for p in payload {
            out.extend_from_slice(p);
        }
        out.extend_from_slice(self.trailer.as_bytes());
    }
}

/// Frames ULPDUs into FPDUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FpduBuilder {
    crc_enabled: bool,
}

impl FpduBuilder {
    /// A builder for a stream with CRC negotiated as `crc_enabled`.
    pub fn new(crc_enabled: bool) -> Self {
        FpduBuilder { crc_enabled }
    }

    /// Whether CRCs are computed.
    pub fn crc_enabled(&self) -> bool {
        self.crc_enabled
    }

    /// Frame `header` (DDP/RDMAP header, plus any small fixed body, ≤
    /// [`MAX_INLINE_HEADER`] bytes) and `payload` (any number of slices,
    /// never copied: walked once for the lengths and once for the CRC).
    /// Fails if the ULPDU would exceed 65535 bytes or the header is too
    /// long. The caller keeps ULPDUs ≤ MULPDU (see
    /// [`crate::wire::ddp::segments`]).
    pub fn frame<'p, I>(&self, header: &[u8], payload: I) -> Result<FramedFpdu, Error>
    where
        I: IntoIterator<Item = &'p [u8]> + Clone,
    {
        if header.len() > MAX_INLINE_HEADER {
            return Err(Error::BufferTooSmall);
        }
        let payload_len: usize = payload.clone().into_iter().map(<[u8]>::len).sum();
        let ulpdu = header.len() + payload_len;
        if ulpdu > MAX_ULPDU_LEN {
            return Err(Error::TooLong);
        }
        let mut prefix = FpduPrefix {
            buf: [0; ULPDU_LENGTH_LEN + MAX_INLINE_HEADER],
            len: (ULPDU_LENGTH_LEN + header.len()) as u8,
        };
        prefix.buf[..ULPDU_LENGTH_LEN].copy_from_slice(&(ulpdu as u16).to_be_bytes());
        prefix.buf[ULPDU_LENGTH_LEN..ULPDU_LENGTH_LEN + header.len()].copy_from_slice(header);
        let pad = pad_len(ulpdu);
        let mut trailer = FpduTrailer {
            buf: [0; 3 + CRC_LEN],
            len: (pad + CRC_LEN) as u8,
        };
        if self.crc_enabled {
            let mut c = Crc32c::new();
            c.update(prefix.as_bytes());
            for p in payload {
                c.update(p);
            }
            c.update(&trailer.buf[..pad]); // PAD is zero
            trailer.buf[pad..pad + CRC_LEN].copy_from_slice(&crc::to_wire(c.finish()));
        }
        Ok(FramedFpdu {
            prefix,
            trailer,
            payload_len,
        })
    }

    /// [`FpduBuilder::frame`] with the header given as a [`DdpRepr`].
    pub fn frame_ddp<'p, I>(&self, header: &DdpRepr, payload: I) -> Result<FramedFpdu, Error>
    where
        I: IntoIterator<Item = &'p [u8]> + Clone,
    {
        let (h, n) = header.to_bytes();
        self.frame(&h[..n], payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::rdmap::RdmapRepr;

    fn send_header(msn: u32) -> [u8; 18] {
        let mut h = [0u8; 18];
        RdmapRepr::Send {
            solicited: false,
            invalidate: None,
            msn,
            mo: 0,
            last: true,
        }
        .emit(&mut h)
        .unwrap();
        h
    }

    #[test]
    fn pad_and_lengths() {
        assert_eq!(pad_len(14), 0);
        assert_eq!(pad_len(18), 0);
        assert_eq!(pad_len(19), 3);
        assert_eq!(pad_len(20), 2);
        assert_eq!(pad_len(21), 1);
        assert_eq!(fpdu_len(18), 24);
        assert_eq!(fpdu_len(19), 28);
        assert_eq!(fpdu_len(0), MIN_FPDU_LEN);
        for n in 0..100 {
            assert_eq!(fpdu_len(n) % 4, 0);
        }
    }

    #[test]
    fn mulpdu_formula() {
        assert_eq!(mulpdu(1460, false), 1454);
        assert_eq!(mulpdu(1461, false), 1454);
        // loopback MSS
        assert_eq!(mulpdu(65483, false), 65483 - 9);
        // with markers: 1460 -> 1460 - (6 + 4*3 + 0)
        assert_eq!(mulpdu(1460, true), 1442);
        assert_eq!(mulpdu(3, false), 0);
        assert_eq!(mulpdu(1 << 20, false), MAX_ULPDU_LEN);
    }

    /// Hand-computed FPDU: a Send with payload "abc" (ULPDU 21, pad 1).
    #[test]
    fn send_fpdu_bytes() {
        let h = send_header(1);
        let f = FpduBuilder::new(true)
            .frame(&h, [&b"ab"[..], b"", b"c"])
            .unwrap();
        let mut v = Vec::new();
        f.write_to([&b"ab"[..], b"", b"c"], &mut v);
        let mut expect = vec![0x00, 21];
        expect.extend_from_slice(&h);
        expect.extend_from_slice(b"abc");
        expect.push(0); // pad
        let crc = crate::crc::crc32c(&expect);
        expect.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(v, expect);
        assert_eq!(f.wire_len(), 28);
        assert_eq!(f.trailer.crc(), crc);
        let mut io = Vec::new();
        f.io_slices([&b"ab"[..], b"", b"c"], &mut io);
        assert_eq!(io.len(), 4);
        // Without CRC the field is zero.
        let f = FpduBuilder::new(false).frame(&h, [&b"abc"[..]]).unwrap();
        let mut v2 = Vec::new();
        f.write_to([&b"abc"[..]], &mut v2);
        assert_eq!(&v2[24..], &[0, 0, 0, 0]);
        // parse_fpdu agrees.
        let p = parse_fpdu(&v, true, 65535).unwrap().unwrap();
        assert_eq!(p.wire_len, 28);
        assert_eq!(p.payload(), b"abc");
        assert_eq!(parse_fpdu(&v[..27], true, 65535), Ok(None));
        assert!(parse_fpdu(&v2, true, 65535).is_err());
        assert!(parse_fpdu(&v2, false, 65535).unwrap().is_some());
    }

    /// Known answer checked by an independent implementation: tshark 4.0.17
    /// decodes this FPDU (a Send, MSN 1, payload 0..100) as "CRC check:
    /// 0xdf74e546 (Good CRC32)" (see tests/wire_tshark.rs). Wireshark prints
    /// the 4 CRC bytes as they appear on the wire (`df 74 e5 46`); the
    /// CRC32c value is 0x46e574df, sent least-significant byte first.
    #[test]
    fn wireshark_verified_crc() {
        let payload: Vec<u8> = (0..100u8).collect();
        let f = FpduBuilder::new(true)
            .frame(&send_header(1), [&payload[..]])
            .unwrap();
        assert_eq!(f.trailer.crc(), 0x46e5_74df);
        assert_eq!(f.trailer.as_bytes(), &[0xdf, 0x74, 0xe5, 0x46]);
    }

    fn collect(d: &mut Deframer, mut input: &[u8], out: &mut Vec<(Vec<u8>, Vec<u8>)>) {
        loop {
            let (n, ev) = d.feed(input).unwrap();
            input = &input[n..];
            match ev {
                Some(Event::Header(h)) => out.push((h.raw().to_vec(), Vec::new())),
                Some(Event::Payload { offset, data }) => {
                    let p = &mut out.last_mut().unwrap().1;
                    assert_eq!(offset, p.len());
                    p.extend_from_slice(data);
                }
                Some(Event::End) => {}
                None => {
                    assert!(input.is_empty());
                    return;
                }
            }
        }
    }

    #[test]
    fn deframer_byte_at_a_time() {
        let b = FpduBuilder::new(true);
        let mut stream = Vec::new();
        let payloads: [&[u8]; 3] = [b"", b"hello world", &[7u8; 300]];
        for (i, p) in payloads.iter().enumerate() {
            let h = send_header(i as u32 + 1);
            b.frame(&h, [*p]).unwrap().write_to([*p], &mut stream);
        }
        let mut d = Deframer::new(true, 65535);
        let mut out = Vec::new();
        for byte in stream.chunks(1) {
            collect(&mut d, byte, &mut out);
        }
        assert_eq!(out.len(), 3);
        for (i, p) in payloads.iter().enumerate() {
            assert_eq!(out[i].1, *p);
            assert_eq!(&out[i].0[2..], &send_header(i as u32 + 1));
        }
        assert_eq!(d.fpdus(), 3);
        assert!(d.at_boundary());
    }

    #[test]
    fn deframer_errors() {
        let h = send_header(1);
        let mut v = Vec::new();
        FpduBuilder::new(true)
            .frame(&h, [&b"xyz"[..]])
            .unwrap()
            .write_to([&b"xyz"[..]], &mut v);
        let mut bad = v.clone();
        bad[21] ^= 1;
        let mut d = Deframer::new(true, 65535);
        let mut input = &bad[..];
        let err = loop {
            match d.feed(input) {
                Ok((n, _)) => input = &input[n..],
                Err(e) => break e,
            }
        };
        assert!(matches!(err, FpduError::CrcMismatch { .. }));
        assert_eq!(err.terminate_cause(), TerminateCause::MpaCrcError);
        assert_eq!(d.feed(&v), Err(FpduError::Failed));
        // Without CRC the same bytes pass.
        let mut d = Deframer::new(false, 65535);
        let mut out = Vec::new();
        collect(&mut d, &bad, &mut out);
        assert_eq!(out.len(), 1);
        // Length limits.
        let mut d = Deframer::new(true, 20);
        assert_eq!(
            d.feed(&[0, 21, 0x41]),
            Err(FpduError::UlpduTooLong { len: 21, max: 20 })
        );
        let mut d = Deframer::new(true, 65535);
        assert_eq!(
            d.feed(&[0, 13, 0xc1]),
            Err(FpduError::UlpduTooShort {
                len: 13,
                header: 14
            })
        );
        assert_eq!(
            parse_fpdu(&[0, 17, 0x41], true, 65535),
            Err(FpduError::UlpduTooShort {
                len: 17,
                header: 18
            })
        );
    }
}
