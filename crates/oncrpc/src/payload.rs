//! The message payload shared by every transport: a sequence of [`Piece`]s.
//!
//! An RPC message (or the arguments/results inside it) is an XDR stream. On
//! a byte-stream transport (TCP) it arrives as contiguous bytes; on
//! RPC-over-RDMA (RFC 8166) the *DDP-eligible* opaque items named by the
//! Upper-Layer Binding (RFC 8166 §6) travel apart from the rest, in chunks,
//! directly between registered buffers. A [`Payload`] represents both:
//!
//! * [`Piece::Xdr`] — plain XDR bytes;
//! * [`Piece::Ddp`] — the **content** of one DDP-eligible variable-length
//!   opaque. Its 4-byte length word is the last 4 bytes of the XDR stream
//!   before it (it stays inline); its XDR roundup pad is *implied* and not
//!   part of the piece. A transport sending it inline appends the zero pad;
//!   RPC-over-RDMA moves the piece into a chunk without pad (RFC 8166
//!   §3.4.4: a reduced item's roundup padding is removed from the Payload
//!   stream; §3.4.5/§3.4.6: Read chunks SHOULD NOT and Write chunks MUST NOT
//!   carry it).
//!
//! The logical XDR stream of a payload is therefore: each piece's bytes in
//! order, each `Ddp` piece followed by `pad_len(len)` zero bytes.
//! [`Payload::xdr_len`] is the length of that stream.
//!
//! Build payloads with [`PayloadBuilder`]; read them with
//! [`PayloadDecoder`], which implements [`xdr::XdrRead`] across piece
//! boundaries and returns opaque data zero-copy whenever it lies in one piece.

use bytes::{Bytes, BytesMut};
use xdr::{pad_len, Encoder, XdrEncode, XdrRead};

static ZERO_PAD: [u8; 3] = [0; 3];

/// `Xdr` bytes up to this length appended to a [`PayloadBuilder`] are copied
/// into its inline buffer rather than kept as separate pieces.
pub const SMALL_COPY_MAX: usize = 256;

fn zero_pad(n: usize) -> Bytes {
    Bytes::from_static(&ZERO_PAD[..n])
}

/// One piece of a [`Payload`].
///
/// `Debug` shows the length and at most the first 16 bytes, so multi-MiB
/// payloads stay readable in logs and panic messages.
#[derive(Clone, PartialEq, Eq)]
pub enum Piece {
    /// Plain XDR bytes (any length; need not be a multiple of 4 alone).
    Xdr(Bytes),
    /// The content of a DDP-eligible variable-length opaque (RFC 8166 §6).
    /// The preceding 4 bytes of the stream are its length word; its roundup
    /// pad is implied.
    Ddp(Bytes),
}

impl core::fmt::Debug for Piece {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (kind, b) = match self {
            Piece::Xdr(b) => ("Xdr", b),
            Piece::Ddp(b) => ("Ddp", b),
        };
        write!(f, "{kind}({} bytes: ", b.len())?;
        for x in b.iter().take(16) {
            write!(f, "{x:02x}")?;
        }
        if b.len() > 16 {
            write!(f, "…")?;
        }
        write!(f, ")")
    }
}

impl Piece {
    /// The bytes of the piece (for `Ddp`, the content without pad).
    pub fn bytes(&self) -> &Bytes {
        match self {
            Piece::Xdr(b) | Piece::Ddp(b) => b,
        }
    }

    /// Whether this is a [`Piece::Ddp`].
    pub fn is_ddp(&self) -> bool {
        matches!(self, Piece::Ddp(_))
    }

    /// Length of the piece in the logical XDR stream (a `Ddp` piece counts
    /// its implied pad).
    pub fn xdr_len(&self) -> usize {
        match self {
            Piece::Xdr(b) => b.len(),
            Piece::Ddp(b) => b.len() + pad_len(b.len()),
        }
    }
}

/// An XDR stream made of [`Piece`]s; see the [module docs](self).
///
/// Cloning is cheap (reference-counted `Bytes`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Payload {
    pieces: Vec<Piece>,
}

impl Payload {
    /// An empty payload (XDR `void`).
    pub fn new() -> Self {
        Payload { pieces: Vec::new() }
    }

    /// A payload of one `Xdr` piece (none if `b` is empty).
    pub fn from_xdr(b: impl Into<Bytes>) -> Self {
        let mut p = Payload::new();
        p.push_xdr(b.into());
        p
    }

    /// A payload made of the given pieces (empty `Xdr` pieces are dropped).
    pub fn from_pieces(pieces: impl IntoIterator<Item = Piece>) -> Self {
        let mut p = Payload::new();
        for piece in pieces {
            p.push(piece);
        }
        p
    }

    /// Start building a payload.
    pub fn builder() -> PayloadBuilder {
        PayloadBuilder::new()
    }

    /// Append a piece (an empty `Xdr` piece is dropped; an empty `Ddp` piece
    /// is kept, as it marks a zero-length DDP-eligible item).
    pub fn push(&mut self, piece: Piece) {
        match piece {
            Piece::Xdr(b) if b.is_empty() => {}
            p => self.pieces.push(p),
        }
    }

    /// Append plain XDR bytes.
    pub fn push_xdr(&mut self, b: Bytes) {
        self.push(Piece::Xdr(b));
    }

    /// Append the content of a DDP-eligible opaque. The caller must already
    /// have appended its length word.
    pub fn push_ddp(&mut self, b: Bytes) {
        self.push(Piece::Ddp(b));
    }

    /// Append all pieces of `other`.
    pub fn append(&mut self, other: Payload) {
        self.pieces.extend(other.pieces);
    }

    /// Prepend plain XDR bytes (e.g. a header).
    pub fn prepend_xdr(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.pieces.insert(0, Piece::Xdr(b));
        }
    }

    /// The pieces, in stream order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// Take the pieces.
    pub fn into_pieces(self) -> Vec<Piece> {
        self.pieces
    }

    /// Whether the logical XDR stream is empty.
    pub fn is_empty(&self) -> bool {
        self.xdr_len() == 0
    }

    /// Length of the logical XDR stream, implied pads of `Ddp` pieces
    /// included.
    pub fn xdr_len(&self) -> usize {
        self.pieces.iter().map(Piece::xdr_len).sum()
    }

    /// Total bytes of the `Xdr` pieces (what stays inline on RPC-over-RDMA
    /// when every `Ddp` piece moves to a chunk).
    pub fn inline_len(&self) -> usize {
        self.pieces
            .iter()
            .filter(|p| !p.is_ddp())
            .map(|p| p.bytes().len())
            .sum()
    }

    /// Total bytes of `Ddp` piece content (pads not counted).
    pub fn ddp_len(&self) -> usize {
        self.pieces
            .iter()
            .filter(|p| p.is_ddp())
            .map(|p| p.bytes().len())
            .sum()
    }

    /// Number of `Ddp` pieces.
    pub fn ddp_count(&self) -> usize {
        self.pieces.iter().filter(|p| p.is_ddp()).count()
    }

    /// Whether any piece is `Ddp`.
    pub fn has_ddp(&self) -> bool {
        self.pieces.iter().any(Piece::is_ddp)
    }

    /// The logical XDR stream as a sequence of `Bytes` (each `Ddp` piece
    /// followed by a static zero pad when needed), for vectored writes on a
    /// byte-stream transport. No payload byte is copied.
    pub fn xdr_chunks(&self) -> impl Iterator<Item = Bytes> + '_ {
        self.pieces.iter().flat_map(|p| {
            let (b, pad) = match p {
                Piece::Xdr(b) => (b.clone(), 0),
                Piece::Ddp(b) => (b.clone(), pad_len(b.len())),
            };
            [Some(b), (pad > 0).then(|| zero_pad(pad))]
                .into_iter()
                .flatten()
        })
    }

    /// Append the logical XDR stream to `buf` (copies).
    pub fn write_to(&self, buf: &mut BytesMut) {
        buf.reserve(self.xdr_len());
        for c in self.xdr_chunks() {
            buf.extend_from_slice(&c);
        }
    }

    /// The logical XDR stream as contiguous bytes. Zero-copy when the payload
    /// is a single `Xdr` piece (or empty); copies otherwise.
    pub fn flatten(&self) -> Bytes {
        match self.pieces.as_slice() {
            [] => Bytes::new(),
            [Piece::Xdr(b)] => b.clone(),
            _ => {
                let mut buf = BytesMut::with_capacity(self.xdr_len());
                self.write_to(&mut buf);
                buf.freeze()
            }
        }
    }

    /// The same stream with every `Ddp` piece turned into `Xdr` pieces
    /// (content plus explicit zero pad): what a transport that sends
    /// everything inline puts on the wire. No payload byte is copied.
    pub fn into_inline(self) -> Payload {
        if !self.has_ddp() {
            return self;
        }
        Payload {
            pieces: self.xdr_chunks().map(Piece::Xdr).collect(),
        }
    }

    /// A decoder over the logical XDR stream.
    pub fn decoder(&self) -> PayloadDecoder<'_> {
        PayloadDecoder::new(self)
    }
}

impl From<Bytes> for Payload {
    fn from(b: Bytes) -> Self {
        Payload::from_xdr(b)
    }
}

impl From<Vec<u8>> for Payload {
    fn from(b: Vec<u8>) -> Self {
        Payload::from_xdr(Bytes::from(b))
    }
}

/// Builds a [`Payload`] by appending XDR items and DDP-eligible opaques.
///
/// Small items are encoded into an internal buffer that becomes one `Xdr`
/// piece; [`xdr_bytes`](Self::xdr_bytes), [`opaque_bytes`](Self::opaque_bytes)
/// and [`payload`](Self::payload) append caller `Bytes` without copying
/// (unless they are at most [`SMALL_COPY_MAX`] bytes), and
/// [`ddp_opaque`](Self::ddp_opaque) always keeps its data as a separate
/// [`Piece::Ddp`].
///
/// ```
/// use bytes::Bytes;
/// use oncrpc::{Payload, Piece};
/// let mut b = Payload::builder();
/// b.u32(7);
/// b.ddp_opaque(Bytes::from_static(b"hello"));
/// b.u32(0xFEEDFACE);
/// let p = b.finish();
/// assert_eq!(p.pieces().len(), 3);
/// assert!(matches!(&p.pieces()[1], Piece::Ddp(d) if &d[..] == b"hello"));
/// assert_eq!(p.xdr_len(), 4 + 4 + 8 + 4);
/// ```
#[derive(Debug, Default)]
pub struct PayloadBuilder {
    pieces: Vec<Piece>,
    cur: BytesMut,
}

/// Length words are 32 bits; callers never build items of 4 GiB or more.
fn len_word(len: usize) -> u32 {
    u32::try_from(len).expect("XDR item longer than u32::MAX bytes")
}

impl PayloadBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        PayloadBuilder::default()
    }

    /// An empty builder whose inline buffer has room for `n` bytes.
    pub fn with_capacity(n: usize) -> Self {
        PayloadBuilder {
            pieces: Vec::new(),
            cur: BytesMut::with_capacity(n),
        }
    }

    fn flush(&mut self) {
        if !self.cur.is_empty() {
            let b = self.cur.split().freeze();
            self.pieces.push(Piece::Xdr(b));
        }
    }

    /// Length of the logical XDR stream built so far.
    pub fn xdr_len(&self) -> usize {
        self.pieces.iter().map(Piece::xdr_len).sum::<usize>() + self.cur.len()
    }

    /// Append an unsigned integer.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.cur.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Append a signed integer.
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.cur.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Append an unsigned hyper.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.cur.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Append a hyper.
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.cur.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Append a boolean.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u32(v as u32)
    }

    /// Append fixed-length opaque data and its pad (copies).
    pub fn fixed_opaque(&mut self, b: &[u8]) -> &mut Self {
        self.cur.extend_from_slice(b);
        self.cur.extend_from_slice(&ZERO_PAD[..pad_len(b.len())]);
        self
    }

    /// Append a variable-length opaque (length word, data, pad; copies the
    /// data into the inline buffer). Panics if longer than `u32::MAX`.
    pub fn opaque(&mut self, b: &[u8]) -> &mut Self {
        self.u32(len_word(b.len()));
        self.fixed_opaque(b)
    }

    /// Append a string (length word, bytes, pad).
    pub fn string(&mut self, s: &str) -> &mut Self {
        self.opaque(s.as_bytes())
    }

    /// Append a value by its [`XdrEncode`] impl. Panics if the impl writes a
    /// different number of bytes than its `encoded_len` (a bug in it).
    pub fn item<T: XdrEncode + ?Sized>(&mut self, v: &T) -> &mut Self {
        let n = v.encoded_len();
        let start = self.cur.len();
        self.cur.resize(start + n, 0);
        let mut e = Encoder::new(&mut self.cur[start..]);
        v.encode(&mut e);
        let w = e.finish().expect("XdrEncode impl exceeded its encoded_len");
        assert_eq!(w, n, "XdrEncode impl wrote less than its encoded_len");
        self
    }

    /// Append already-encoded XDR bytes. Bytes longer than
    /// [`SMALL_COPY_MAX`] become their own piece (no copy); shorter ones are
    /// copied into the inline buffer, to avoid tiny pieces.
    pub fn xdr_bytes(&mut self, b: Bytes) -> &mut Self {
        if b.len() <= SMALL_COPY_MAX {
            self.cur.extend_from_slice(&b);
        } else {
            self.flush();
            self.pieces.push(Piece::Xdr(b));
        }
        self
    }

    /// Append a variable-length opaque whose data is *not* DDP-eligible,
    /// without copying it: the length word, then `b` as its own `Xdr` piece,
    /// then the pad. Panics if longer than `u32::MAX`.
    pub fn opaque_bytes(&mut self, b: Bytes) -> &mut Self {
        let pad = pad_len(b.len());
        self.u32(len_word(b.len()));
        self.xdr_bytes(b);
        self.cur.extend_from_slice(&ZERO_PAD[..pad]);
        self
    }

    /// Append a DDP-eligible variable-length opaque (RFC 8166 §6): its length
    /// word inline, then `b` as a [`Piece::Ddp`] (pad implied). Panics if
    /// longer than `u32::MAX`.
    pub fn ddp_opaque(&mut self, b: Bytes) -> &mut Self {
        self.u32(len_word(b.len()));
        self.flush();
        self.pieces.push(Piece::Ddp(b));
        self
    }

    /// Append all pieces of a payload (`Ddp` pieces stay `Ddp`; `Xdr` pieces
    /// as by [`xdr_bytes`](Self::xdr_bytes)).
    pub fn payload(&mut self, p: Payload) -> &mut Self {
        for piece in p.pieces {
            match piece {
                Piece::Xdr(b) => {
                    self.xdr_bytes(b);
                }
                Piece::Ddp(b) => {
                    self.flush();
                    self.pieces.push(Piece::Ddp(b));
                }
            }
        }
        self
    }

    /// The payload built.
    pub fn finish(mut self) -> Payload {
        self.flush();
        Payload {
            pieces: self.pieces,
        }
    }
}

/// Reads the logical XDR stream of a [`Payload`] across piece boundaries.
///
/// Implements [`XdrRead`]. [`opaque`](Self::opaque) (and
/// `XdrRead::opaque_bytes`) return a zero-copy `Bytes` slice when the data
/// lies within one piece — in particular a whole `Ddp` piece, whose implied
/// pad is then skipped — and copy only when an item straddles pieces (the
/// copy is bounded by the caller's maximum and by the bytes present).
///
/// An opaque (fixed or variable) that starts exactly at a `Ddp` piece must
/// have that piece's length, else
/// [`xdr::Error::SeparateLengthMismatch`]: a length word that disagrees with
/// the data carried in a chunk is malformed, not data to reinterpret.
///
/// After an error the decoder's position is unspecified.
#[derive(Debug, Clone)]
pub struct PayloadDecoder<'a> {
    pieces: &'a [Piece],
    /// Index of the current piece.
    idx: usize,
    /// Offset within the current piece's logical bytes (content + implied pad).
    off: usize,
    pos: usize,
    total: usize,
}

impl<'a> PayloadDecoder<'a> {
    /// A decoder at the start of `p`.
    pub fn new(p: &'a Payload) -> Self {
        let mut d = PayloadDecoder {
            pieces: &p.pieces,
            idx: 0,
            off: 0,
            pos: 0,
            total: p.xdr_len(),
        };
        d.normalize();
        d
    }

    /// Skip exhausted pieces so that `off < xdr_len(idx)` or `idx == len`.
    fn normalize(&mut self) {
        while self.idx < self.pieces.len() && self.off >= self.pieces[self.idx].xdr_len() {
            self.off -= self.pieces[self.idx].xdr_len();
            self.idx += 1;
        }
    }

    fn truncated(&self, needed: usize) -> xdr::Error {
        xdr::Error::Truncated {
            needed,
            remaining: self.remaining(),
        }
    }

    /// Advance by `n` logical bytes (caller checked `n <= remaining`).
    fn advance(&mut self, n: usize) {
        self.off += n;
        self.pos += n;
        self.normalize();
    }

    /// Copy `out.len()` logical bytes (implied pads read as zero).
    fn copy_raw(&mut self, out: &mut [u8]) -> xdr::Result<()> {
        if out.len() > self.remaining() {
            return Err(self.truncated(out.len()));
        }
        let mut done = 0;
        while done < out.len() {
            let piece = &self.pieces[self.idx];
            let content = piece.bytes();
            let avail = piece.xdr_len() - self.off;
            let k = avail.min(out.len() - done);
            let dst = &mut out[done..done + k];
            // Bytes of the piece itself, then (for a Ddp piece) implied pad.
            let real = content.len().saturating_sub(self.off).min(k);
            if real > 0 {
                dst[..real].copy_from_slice(&content[self.off..self.off + real]);
            }
            dst[real..].fill(0);
            done += k;
            self.advance(k);
        }
        Ok(())
    }

    fn skip_pad(&mut self, len: usize) -> xdr::Result<()> {
        let mut pad = [0u8; 3];
        let pad = &mut pad[..pad_len(len)];
        self.copy_raw(pad)?;
        if pad.iter().any(|&b| b != 0) {
            return Err(xdr::Error::NonZeroPadding);
        }
        Ok(())
    }

    /// Decode variable-length opaque data `opaque<max>`, zero-copy when it
    /// lies within one piece.
    pub fn opaque(&mut self, max: u32) -> xdr::Result<Bytes> {
        self.opaque_bytes(max)
    }

    /// Whether the next byte starts a [`Piece::Ddp`].
    pub fn at_ddp(&self) -> bool {
        self.off == 0 && self.pieces.get(self.idx).is_some_and(Piece::is_ddp)
    }

    /// The rest of the stream as a [`Payload`] (zero-copy), consuming it.
    ///
    /// A partly consumed `Ddp` piece becomes `Xdr` pieces (its remaining
    /// content and explicit pad), since its length word was consumed.
    pub fn rest(&mut self) -> Payload {
        let mut out = Payload::new();
        if self.idx < self.pieces.len() {
            let first = &self.pieces[self.idx];
            match first {
                Piece::Xdr(b) => out.push_xdr(b.slice(self.off..)),
                Piece::Ddp(b) if self.off == 0 => out.push_ddp(b.clone()),
                Piece::Ddp(b) => {
                    if self.off < b.len() {
                        out.push_xdr(b.slice(self.off..));
                    }
                    let pad_left = first.xdr_len() - self.off.max(b.len());
                    out.push_xdr(zero_pad(pad_left));
                }
            }
            for p in &self.pieces[self.idx + 1..] {
                out.push(p.clone());
            }
        }
        self.pos = self.total;
        self.idx = self.pieces.len();
        self.off = 0;
        out
    }

    /// Decode a value of type `T`.
    pub fn decode<T: xdr::XdrDecode>(&mut self) -> xdr::Result<T> {
        T::decode(self)
    }
}

impl XdrRead for PayloadDecoder<'_> {
    fn remaining(&self) -> usize {
        self.total - self.pos
    }

    fn position(&self) -> usize {
        self.pos
    }

    fn u32(&mut self) -> xdr::Result<u32> {
        // Fast path: the word lies within the current piece's own bytes.
        if let Some(p) = self.pieces.get(self.idx) {
            if let Some(w) = p.bytes().get(self.off..self.off + 4) {
                let v = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
                self.advance(4);
                return Ok(v);
            }
        }
        let mut b = [0u8; 4];
        self.copy_raw(&mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    fn fixed_opaque_into(&mut self, out: &mut [u8]) -> xdr::Result<()> {
        let needed = out.len() + pad_len(out.len());
        if needed > self.remaining() {
            return Err(self.truncated(needed));
        }
        self.copy_raw(out)?;
        self.skip_pad(out.len())
    }

    fn fixed_opaque_bytes(&mut self, len: usize) -> xdr::Result<Bytes> {
        let needed = len.saturating_add(pad_len(len));
        if needed > self.remaining() {
            return Err(self.truncated(needed));
        }
        let data = match self.pieces.get(self.idx) {
            // A Ddp piece is exactly the content of the opaque whose length
            // word precedes it (RFC 8166 §6); anything else is malformed.
            Some(Piece::Ddp(b)) if self.off == 0 && b.len() != len => {
                return Err(xdr::Error::SeparateLengthMismatch {
                    declared: len,
                    actual: b.len(),
                });
            }
            Some(p) if self.off + len <= p.bytes().len() => {
                let b = p.bytes().slice(self.off..self.off + len);
                self.advance(len);
                b
            }
            _ if len == 0 => Bytes::new(),
            _ => {
                // Straddles pieces: copy, bounded by `remaining()`.
                let mut buf = vec![0u8; len];
                self.copy_raw(&mut buf)?;
                Bytes::from(buf)
            }
        };
        self.skip_pad(len)?;
        Ok(data)
    }

    fn skip(&mut self, n: usize) -> xdr::Result<()> {
        if n > self.remaining() {
            return Err(self.truncated(n));
        }
        self.advance(n);
        Ok(())
    }
}
