//! Re-segmenting a capture so that no TCP segment carries the end of more
//! than one MPA FPDU.
//!
//! Why: Wireshark 4.0's RPC-over-RDMA dissector (`packet-rpcrdma.c`) keeps
//! its reassembly state *per frame* (`RPCRDMA_FRAG_HEAD`, "call
//! process_reassembled_data just once per frame"). When one TCP segment
//! carries, say, the last RDMA Read Response of call N's Read chunk and the
//! Send of call N+1, tshark reassembles neither call N nor anything else
//! correctly. On loopback, TCP coalesces back-to-back FPDUs into one segment
//! all the time, so a capture of correct traffic would show spurious
//! failures.
//!
//! What: the TCP byte stream of every direction is left exactly as it was
//! (same bytes, same sequence numbers, same ACKs, same order of segments
//! across both directions, same retransmissions and gaps); only segments
//! are split at MPA frame boundaries (the end of the MPA Request/Reply frame
//! and the end of every FPDU, RFC 5044 §6 and §7.1), so each resulting
//! segment completes at most one FPDU. tshark then reassembles and checks
//! the stream as before, CRC included. Boundaries are found by walking the
//! MPA framing of the in-order stream (ULPDU_Length, pad, CRC); a stream
//! that does not start with an MPA Request/Reply frame, or negotiated
//! markers, is not split at all, and bytes that stop making sense as MPA
//! (garbage sent by hostile-peer tests) only produce harmless extra splits:
//! tshark's own framing decides what the bytes mean.
//!
//! [`resegment`] returns, for every frame of the new capture, the number of
//! the original frame it came from, so failures are reported against the
//! original capture.

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, Endianness, TsResolution};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufReader, BufWriter, Read};
use std::path::Path;
use std::time::Duration;

/// Errors reading or writing captures.
#[derive(Debug, thiserror::Error)]
pub enum ResegmentError {
    /// File I/O.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// The pcap/pcapng parser or writer.
    #[error("{0}: {1}")]
    Pcap(String, pcap_file::PcapError),
    /// A capture with a link type this tool does not handle.
    #[error("{0}: unsupported link type {1:?}")]
    LinkType(String, DataLink),
}

/// Counters of one re-segmentation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames read.
    pub frames_in: u64,
    /// Frames written.
    pub frames_out: u64,
    /// TCP segments split in two or more.
    pub segments_split: u64,
    /// TCP directions whose MPA framing was followed.
    pub mpa_directions: u64,
    /// MPA directions whose byte stream has a hole the capture never
    /// filled (bytes after it, or a FIN beyond it, were captured): the
    /// capture lost data of that connection.
    pub incomplete_directions: Vec<String>,
}

/// One captured frame.
struct Packet {
    ts: Duration,
    orig_len: u32,
    data: Vec<u8>,
}

/// Reads every frame of a pcap or pcapng file and hands it to `f` with its
/// link type; all frames must share one link type, which is returned.
fn read_capture(
    path: &Path,
    mut f: impl FnMut(DataLink, Packet),
) -> Result<DataLink, ResegmentError> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| ResegmentError::Io(name.clone(), e))?;
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut magic = [0u8; 4];
    r.read_exact(&mut magic)
        .map_err(|e| ResegmentError::Io(name.clone(), e))?;
    let chained = std::io::Cursor::new(magic).chain(r);
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut rd =
            PcapNgReader::new(chained).map_err(|e| ResegmentError::Pcap(name.clone(), e))?;
        let mut link: Option<DataLink> = None;
        while let Some(b) = rd.next_block() {
            let b = b.map_err(|e| ResegmentError::Pcap(name.clone(), e))?;
            let (iface, ts, orig_len, data) = match b {
                Block::EnhancedPacket(p) => (
                    p.interface_id,
                    p.timestamp,
                    p.original_len,
                    p.data.into_owned(),
                ),
                Block::SimplePacket(p) => (0, Duration::ZERO, p.original_len, p.data.into_owned()),
                _ => continue,
            };
            let lt = rd
                .interfaces()
                .get(iface as usize)
                .map(|i| i.linktype)
                .unwrap_or(DataLink::ETHERNET);
            match link {
                None => link = Some(lt),
                Some(l) if l != lt => return Err(ResegmentError::LinkType(name, lt)),
                Some(_) => {}
            }
            f(lt, Packet { ts, orig_len, data });
        }
        Ok(link.unwrap_or(DataLink::ETHERNET))
    } else {
        let mut rd = pcap_file::pcap::PcapReader::new(chained)
            .map_err(|e| ResegmentError::Pcap(name.clone(), e))?;
        let link = rd.header().datalink;
        while let Some(p) = rd.next_packet() {
            let p = p.map_err(|e| ResegmentError::Pcap(name.clone(), e))?;
            f(
                link,
                Packet {
                    ts: p.timestamp,
                    orig_len: p.orig_len,
                    data: p.data.into_owned(),
                },
            );
        }
        Ok(link)
    }
}

/// Offset of the network-layer header for `link`, if handled.
fn network_offset(link: DataLink, data: &[u8]) -> Option<usize> {
    match link {
        DataLink::ETHERNET => {
            let mut off = 12;
            let mut et = u16::from_be_bytes(data.get(off..off + 2)?.try_into().ok()?);
            // 802.1Q / QinQ tags.
            while et == 0x8100 || et == 0x88a8 {
                off += 4;
                et = u16::from_be_bytes(data.get(off..off + 2)?.try_into().ok()?);
            }
            matches!(et, 0x0800 | 0x86dd).then_some(off + 2)
        }
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Some(0),
        DataLink::LINUX_SLL => {
            let et = u16::from_be_bytes(data.get(14..16)?.try_into().ok()?);
            matches!(et, 0x0800 | 0x86dd).then_some(16)
        }
        DataLink::LINUX_SLL2 => {
            let et = u16::from_be_bytes(data.get(0..2)?.try_into().ok()?);
            matches!(et, 0x0800 | 0x86dd).then_some(20)
        }
        _ => None,
    }
}

/// A TCP segment inside a frame.
#[derive(Debug, Clone, Copy)]
struct Tcp {
    /// Offset of the IP header.
    ip: usize,
    /// IPv6?
    v6: bool,
    /// Offset of the TCP header.
    tcp: usize,
    /// Offset of the payload.
    payload: usize,
    /// Payload length (by the IP length, limited to what was captured).
    len: usize,
    seq: u32,
    syn: bool,
}

/// The four-tuple of a direction: source address, source port, destination
/// address, destination port.
type Dir = (Vec<u8>, u16, Vec<u8>, u16);

fn parse_tcp(link: DataLink, p: &Packet) -> Option<(Dir, Tcp)> {
    let d = &p.data;
    let ip = network_offset(link, d)?;
    let ver = d.get(ip)? >> 4;
    let (v6, tcp, end, src, dst) = match ver {
        4 => {
            let ihl = usize::from(d[ip] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes(d.get(ip + 2..ip + 4)?.try_into().ok()?));
            let frag = u16::from_be_bytes(d.get(ip + 6..ip + 8)?.try_into().ok()?);
            // Fragments are not handled (never on loopback): left alone.
            if *d.get(ip + 9)? != 6 || frag & 0x3fff != 0 || ihl < 20 {
                return None;
            }
            (
                false,
                ip + ihl,
                ip + total,
                d.get(ip + 12..ip + 16)?.to_vec(),
                d.get(ip + 16..ip + 20)?.to_vec(),
            )
        }
        6 => {
            // Only TCP directly after the fixed header.
            if *d.get(ip + 6)? != 6 {
                return None;
            }
            let plen = usize::from(u16::from_be_bytes(d.get(ip + 4..ip + 6)?.try_into().ok()?));
            (
                true,
                ip + 40,
                ip + 40 + plen,
                d.get(ip + 8..ip + 24)?.to_vec(),
                d.get(ip + 24..ip + 40)?.to_vec(),
            )
        }
        _ => return None,
    };
    let h = d.get(tcp..tcp + 20)?;
    let sport = u16::from_be_bytes([h[0], h[1]]);
    let dport = u16::from_be_bytes([h[2], h[3]]);
    let seq = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
    let doff = usize::from(h[12] >> 4) * 4;
    let flags = h[13];
    let payload = tcp + doff;
    if doff < 20 || payload > end {
        return None;
    }
    // A frame cut by the snap length cannot be split faithfully.
    if end > d.len() || p.orig_len as usize != d.len() {
        return None;
    }
    Some((
        (src, sport, dst, dport),
        Tcp {
            ip,
            v6,
            tcp,
            payload,
            len: end - payload,
            seq,
            syn: flags & 0x02 != 0,
        },
    ))
}

/// Sequence-space bookkeeping of one direction: 32-bit sequence numbers
/// unwrapped to 64-bit stream offsets (the SYN is offset 0).
#[derive(Debug, Clone)]
struct SeqSpace {
    isn: u32,
    /// Highest offset seen, to unwrap against.
    hi: u64,
}

impl SeqSpace {
    fn new(isn: u32) -> Self {
        SeqSpace { isn, hi: 0 }
    }
    fn offset(&mut self, seq: u32) -> u64 {
        let rel = seq.wrapping_sub(self.isn);
        // Candidate in the same 4 GiB window as `hi`, or a neighbour.
        let base = self.hi & !0xffff_ffff;
        let mut best = base | u64::from(rel);
        for c in [best.wrapping_sub(1 << 32), best.wrapping_add(1 << 32)] {
            if c.abs_diff(self.hi) < best.abs_diff(self.hi) && c < (1 << 62) {
                best = c;
            }
        }
        self.hi = self.hi.max(best);
        best
    }
}

/// MPA framing walker of one direction (RFC 5044 §7.1 frames, §6 FPDUs).
#[derive(Debug, Clone)]
enum Mpa {
    /// Collecting the 20-byte frame header (key, flags, revision, PD_Length).
    Header(Vec<u8>),
    /// Skipping `n` more bytes of private data, then FPDUs.
    PrivateData(u64),
    /// Collecting the 2-byte ULPDU_Length.
    Length(Vec<u8>),
    /// Skipping `n` more bytes of the current FPDU.
    Fpdu(u64),
    /// Not MPA (or markers): no splits.
    Opaque,
}

const REQ_KEY: &[u8; 16] = b"MPA ID Req Frame";
const REP_KEY: &[u8; 16] = b"MPA ID Rep Frame";

/// The stream of one direction in pass 1: in-order delivery into the MPA
/// walker, which records frame ends.
struct Stream {
    seq: SeqSpace,
    /// Next in-order offset.
    next: u64,
    /// Out-of-order data waiting for the gap before it.
    ooo: BTreeMap<u64, Vec<u8>>,
    mpa: Mpa,
    /// Offsets right after each MPA frame / FPDU.
    ends: Vec<u64>,
    /// Offset of the first data byte (1 after a SYN).
    first: u64,
    /// Offset of the FIN, if one was captured.
    fin: Option<u64>,
}

impl Stream {
    fn new(isn: u32, syn: bool) -> Self {
        Stream {
            seq: SeqSpace::new(isn),
            next: u64::from(syn),
            ooo: BTreeMap::new(),
            mpa: Mpa::Header(Vec::with_capacity(20)),
            ends: Vec::new(),
            first: u64::from(syn),
            fin: None,
        }
    }

    fn push(&mut self, seq: u32, syn: bool, fin: bool, data: &[u8]) {
        let mut off = self.seq.offset(seq);
        if syn {
            off += 1;
        }
        if fin {
            self.fin = Some(off + data.len() as u64);
        }
        if data.is_empty() {
            return;
        }
        let end = off + data.len() as u64;
        if end <= self.next {
            return; // retransmission of delivered bytes
        }
        if off > self.next {
            // Ahead of a gap: keep the longest copy.
            let e = self.ooo.entry(off).or_default();
            if data.len() > e.len() {
                *e = data.to_vec();
            }
            return;
        }
        let skip = (self.next - off) as usize;
        self.feed(&data[skip..]);
        while let Some((&o, _)) = self.ooo.first_key_value() {
            if o > self.next {
                break;
            }
            let (o, d) = self.ooo.pop_first().expect("present");
            let e = o + d.len() as u64;
            if e > self.next {
                let skip = (self.next - o) as usize;
                self.feed(&d[skip..]);
            }
        }
    }

    /// In-order bytes.
    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            match &mut self.mpa {
                Mpa::Opaque => {
                    self.next += data.len() as u64;
                    return;
                }
                Mpa::Header(h) => {
                    let take = (20 - h.len()).min(data.len());
                    h.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    self.next += take as u64;
                    if h.len() == 20 {
                        let key = &h[..16];
                        let markers = h[16] & 0x80 != 0;
                        if (key != REQ_KEY && key != REP_KEY) || markers {
                            self.mpa = Mpa::Opaque;
                        } else {
                            let pd = u64::from(u16::from_be_bytes([h[18], h[19]]));
                            self.mpa = Mpa::PrivateData(pd);
                            if pd == 0 {
                                self.ends.push(self.next);
                                self.mpa = Mpa::Length(Vec::with_capacity(2));
                            }
                        }
                    }
                }
                Mpa::PrivateData(n) | Mpa::Fpdu(n) => {
                    let take = (*n).min(data.len() as u64);
                    *n -= take;
                    data = &data[take as usize..];
                    self.next += take;
                    if *n == 0 {
                        self.ends.push(self.next);
                        self.mpa = Mpa::Length(Vec::with_capacity(2));
                    }
                }
                Mpa::Length(l) => {
                    let take = (2 - l.len()).min(data.len());
                    l.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    self.next += take as u64;
                    if l.len() == 2 {
                        let ulpdu = u64::from(u16::from_be_bytes([l[0], l[1]]));
                        // ULPDU, pad to a multiple of 4 (counting the
                        // length field), CRC.
                        let pad = (4 - (2 + ulpdu) % 4) % 4;
                        self.mpa = Mpa::Fpdu(ulpdu + pad + 4);
                    }
                }
            }
        }
    }
}

/// Key of one direction of one connection: the four-tuple and how many
/// SYNs with a new ISN were seen on it before (port reuse).
type Key = (Dir, u32);

/// Per-direction connection tracking shared by both passes: maps a
/// segment to its direction's epoch and sequence space.
#[derive(Default)]
struct Tracker {
    /// Current epoch and ISN of every four-tuple.
    epoch: HashMap<Dir, (u32, u32)>,
}

impl Tracker {
    /// The key of a segment; `Some(isn)` when it starts a new epoch.
    fn key(&mut self, dir: &Dir, t: &Tcp) -> (Key, Option<u32>) {
        match self.epoch.get_mut(dir) {
            Some((e, isn)) => {
                if t.syn && t.seq != *isn {
                    *e += 1;
                    *isn = t.seq;
                    ((dir.clone(), *e), Some(t.seq))
                } else {
                    ((dir.clone(), *e), None)
                }
            }
            None => {
                self.epoch.insert(dir.clone(), (0, t.seq));
                ((dir.clone(), 0), Some(t.seq))
            }
        }
    }
}

fn ones_complement_sum(mut sum: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        sum += u32::from(*b) << 8;
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Builds a frame from `p`'s link, IP and TCP headers carrying `payload`
/// at sequence number `seq`, with the TCP flags in `clear` removed; IP
/// length and checksums are recomputed.
fn build(p: &Packet, t: &Tcp, seq: u32, payload: &[u8], clear: u8) -> Vec<u8> {
    let d = &p.data;
    let mut out = Vec::with_capacity(t.payload + payload.len());
    out.extend_from_slice(&d[..t.payload]);
    out.extend_from_slice(payload);
    let tcp_len = out.len() - t.tcp;
    out[t.tcp + 4..t.tcp + 8].copy_from_slice(&seq.to_be_bytes());
    out[t.tcp + 13] &= !clear;
    let pseudo = if t.v6 {
        let plen = (out.len() - t.ip - 40) as u16;
        out[t.ip + 4..t.ip + 6].copy_from_slice(&plen.to_be_bytes());
        ones_complement_sum(
            ones_complement_sum(0, &out[t.ip + 8..t.ip + 40]),
            &[0, 0, (tcp_len >> 8) as u8, tcp_len as u8, 0, 6],
        )
    } else {
        let total = (out.len() - t.ip) as u16;
        out[t.ip + 2..t.ip + 4].copy_from_slice(&total.to_be_bytes());
        out[t.ip + 10..t.ip + 12].copy_from_slice(&[0, 0]);
        let ihl = t.tcp - t.ip;
        let c = fold(ones_complement_sum(0, &out[t.ip..t.ip + ihl]));
        out[t.ip + 10..t.ip + 12].copy_from_slice(&c.to_be_bytes());
        ones_complement_sum(
            ones_complement_sum(0, &out[t.ip + 12..t.ip + 20]),
            &[0, 6, (tcp_len >> 8) as u8, tcp_len as u8],
        )
    };
    out[t.tcp + 16..t.tcp + 18].copy_from_slice(&[0, 0]);
    let c = fold(ones_complement_sum(pseudo, &out[t.tcp..]));
    out[t.tcp + 16..t.tcp + 18].copy_from_slice(&c.to_be_bytes());
    out
}

/// The most TCP payload one IP packet with `t`'s IP and TCP headers can
/// carry: the IPv4 Total Length (RFC 791) and the IPv6 Payload Length
/// (RFC 8200) are 16-bit fields.
fn max_payload(t: &Tcp) -> usize {
    let headers = if t.v6 {
        t.payload - t.ip - 40
    } else {
        t.payload - t.ip
    };
    usize::from(u16::MAX).saturating_sub(headers).max(1)
}

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;

/// Pass 2 state of one MPA direction: the in-order stream rebuilt again,
/// and emitted one MPA frame at a time.
struct Emitter {
    seq: SeqSpace,
    /// Contiguous bytes received up to here.
    next: u64,
    /// Out-of-order data.
    ooo: BTreeMap<u64, Vec<u8>>,
    /// Bytes `[emitted, next)`, not yet emitted.
    buf: Vec<u8>,
    emitted: u64,
    /// Frame ends from pass 1, and the index of the first one not emitted.
    ends: Vec<u64>,
    at: usize,
}

impl Emitter {
    /// Adds a segment's payload at stream offset `off`.
    fn push(&mut self, off: u64, data: &[u8]) {
        let end = off + data.len() as u64;
        if end <= self.next || data.is_empty() {
            return;
        }
        if off > self.next {
            let e = self.ooo.entry(off).or_default();
            if data.len() > e.len() {
                *e = data.to_vec();
            }
            return;
        }
        self.buf
            .extend_from_slice(&data[(self.next - off) as usize..]);
        self.next = end;
        while let Some((&o, _)) = self.ooo.first_key_value() {
            if o > self.next {
                break;
            }
            let (o, d) = self.ooo.pop_first().expect("present");
            let e = o + d.len() as u64;
            if e > self.next {
                self.buf.extend_from_slice(&d[(self.next - o) as usize..]);
                self.next = e;
            }
        }
    }

    /// Takes the next piece to emit: a whole MPA frame, or (past the last
    /// known frame end, or with `flush`) whatever has arrived.
    fn take(&mut self, flush: bool) -> Option<(u64, Vec<u8>)> {
        let to = match self.ends.get(self.at) {
            Some(&e) if e <= self.next => {
                self.at += 1;
                e
            }
            Some(_) if !flush => return None,
            _ => self.next,
        };
        if to <= self.emitted {
            return None;
        }
        let n = (to - self.emitted) as usize;
        let rest = self.buf.split_off(n);
        let piece = std::mem::replace(&mut self.buf, rest);
        let at = self.emitted;
        self.emitted = to;
        Some((at, piece))
    }
}

/// The result of [`resegment`].
#[derive(Debug, Clone, Default)]
pub struct Resegmented {
    /// For every output frame, the number of the input frame it came from.
    pub to_input: Vec<u64>,
    /// For every input frame, the number of the first output frame written
    /// while or after it was processed (1-based; may be one past the end).
    pub to_output: Vec<u64>,
    /// Counters.
    pub stats: Stats,
}

/// Writes a copy of `input` to `output` (classic pcap, nanosecond
/// timestamps) in which the payload of every MPA connection travels one
/// MPA frame (Request/Reply frame or FPDU) per TCP segment: each frame is
/// emitted, at its own sequence numbers and with the headers of the
/// segment that completed it, as soon as its last byte was captured.
/// Retransmitted bytes are not repeated; other frames (handshakes, pure
/// ACKs, FIN/RST, other traffic) are copied in their place.
///
/// TCP-level analysis (lost or retransmitted segments, window, resets) is
/// to be done on `input`: in `output` ACKs may precede the bytes they
/// acknowledge.
pub fn resegment(input: &Path, output: &Path) -> Result<Resegmented, ResegmentError> {
    // Pass 1: every direction's MPA frame ends.
    let mut streams: HashMap<Key, Stream> = HashMap::new();
    let mut tr = Tracker::default();
    let link = read_capture(input, |link, p| {
        if let Some((dir, t)) = parse_tcp(link, &p) {
            let (key, new) = tr.key(&dir, &t);
            if let Some(isn) = new {
                streams.insert(key.clone(), Stream::new(isn, t.syn));
            }
            if let Some(s) = streams.get_mut(&key) {
                let fin = p.data[t.tcp + 13] & FIN != 0;
                s.push(t.seq, t.syn, fin, &p.data[t.payload..t.payload + t.len]);
            }
        }
    })?;
    let mut out = Resegmented::default();
    out.stats.mpa_directions = streams.values().filter(|s| !s.ends.is_empty()).count() as u64;
    let mut holes: Vec<String> = streams
        .iter()
        .filter(|(_, s)| !s.ends.is_empty())
        .filter(|(_, s)| !s.ooo.is_empty() || s.fin.is_some_and(|f| f > s.next))
        .map(|((d, _), s)| {
            format!(
                "port {} -> port {}: bytes missing after stream offset {}",
                d.1, d.3, s.next
            )
        })
        .collect();
    holes.sort();
    out.stats.incomplete_directions = holes;
    let mut em: HashMap<Key, Emitter> = streams
        .into_iter()
        .filter(|(_, s)| !s.ends.is_empty())
        .map(|(k, s)| {
            (
                k,
                Emitter {
                    seq: SeqSpace::new(s.seq.isn),
                    next: s.first,
                    ooo: BTreeMap::new(),
                    buf: Vec::new(),
                    emitted: s.first,
                    ends: s.ends,
                    at: 0,
                },
            )
        })
        .collect();

    // Pass 2: re-packetize and write.
    let name = output.display().to_string();
    let file = std::fs::File::create(output).map_err(|e| ResegmentError::Io(name.clone(), e))?;
    let header = PcapHeader {
        version_major: 2,
        version_minor: 4,
        ts_correction: 0,
        ts_accuracy: 0,
        snaplen: 262_144,
        datalink: link,
        ts_resolution: TsResolution::NanoSecond,
        endianness: Endianness::native(),
    };
    let mut w = PcapWriter::with_header(BufWriter::with_capacity(1 << 20, file), header)
        .map_err(|e| ResegmentError::Pcap(name.clone(), e))?;
    let mut tr = Tracker::default();
    let mut err = None;
    let mut frame = 0u64;
    read_capture(input, |link, p| {
        frame += 1;
        out.stats.frames_in += 1;
        out.to_output.push(out.stats.frames_out + 1);
        if err.is_some() {
            return;
        }
        // (frame, original length) to write.
        let mut frames: Vec<(Vec<u8>, u32)> = Vec::new();
        let mut copy = true;
        if let Some((dir, t)) = parse_tcp(link, &p) {
            let (key, _) = tr.key(&dir, &t);
            if let Some(e) = em.get_mut(&key) {
                let off = e.seq.offset(t.seq) + u64::from(t.syn);
                let flags = p.data[t.tcp + 13];
                if t.len > 0 {
                    copy = false;
                    e.push(off, &p.data[t.payload..t.payload + t.len]);
                    let closing = flags & (FIN | RST) != 0;
                    let mut n = 0;
                    // An MPA frame completed by this segment may have
                    // arrived over several: with this segment's headers it
                    // may not fit one IP packet, so it goes out in as many
                    // segments as it needs, the last one completing it.
                    let max = max_payload(&t);
                    while let Some((at, bytes)) = e.take(closing) {
                        let mut at = at;
                        for chunk in bytes.chunks(max) {
                            let seq = e.seq.isn.wrapping_add(at as u32);
                            let f = build(&p, &t, seq, chunk, SYN | FIN | RST);
                            let len = f.len() as u32;
                            frames.push((f, len));
                            at += chunk.len() as u64;
                            n += 1;
                        }
                    }
                    if n > 1 || n == 1 && frames[0].0.len() != p.data.len() {
                        out.stats.segments_split += 1;
                    }
                    if closing {
                        // The FIN/RST itself, after the data.
                        let seq = t
                            .seq
                            .wrapping_add(t.len as u32)
                            .wrapping_add(u32::from(t.syn));
                        let f = build(&p, &t, seq, &[], SYN);
                        let len = f.len() as u32;
                        frames.push((f, len));
                    }
                }
            }
        }
        if copy {
            let len = p.orig_len;
            frames.push((p.data, len));
        }
        for (d, orig) in frames {
            if let Err(e) = w.write_packet(&PcapPacket::new(p.ts, orig, &d)) {
                err = Some(e);
                return;
            }
            out.stats.frames_out += 1;
            out.to_input.push(frame);
        }
    })?;
    if let Some(e) = err {
        return Err(ResegmentError::Pcap(name, e));
    }
    use std::io::Write;
    w.into_writer()
        .flush()
        .map_err(|e| ResegmentError::Io(name, e))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet/IPv4/TCP frame from port `sp` to `dp`.
    fn frame(sp: u16, dp: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let total = (20 + 20 + payload.len()) as u16;
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1,
        ];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        let c = fold(ones_complement_sum(0, &ip));
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&sp.to_be_bytes());
        tcp[2..4].copy_from_slice(&dp.to_be_bytes());
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = flags;
        f.extend_from_slice(&tcp);
        f.extend_from_slice(payload);
        f
    }

    fn fpdu(ulpdu: usize, fill: u8) -> Vec<u8> {
        let mut v = (ulpdu as u16).to_be_bytes().to_vec();
        v.extend(std::iter::repeat_n(fill, ulpdu));
        while !v.len().is_multiple_of(4) {
            v.push(0);
        }
        v.extend_from_slice(&[0xc0, 0xc1, 0xc2, 0xc3]);
        v
    }

    fn mpa_frame(key: &[u8; 16], pd: &[u8]) -> Vec<u8> {
        let mut v = key.to_vec();
        v.extend_from_slice(&[0x40, 1]);
        v.extend_from_slice(&(pd.len() as u16).to_be_bytes());
        v.extend_from_slice(pd);
        v
    }

    fn write(path: &Path, frames: &[Vec<u8>]) {
        let h = PcapHeader {
            datalink: DataLink::ETHERNET,
            ..PcapHeader::default()
        };
        let mut w = PcapWriter::with_header(std::fs::File::create(path).unwrap(), h).unwrap();
        for (i, f) in frames.iter().enumerate() {
            let p = PcapPacket::new(Duration::from_micros(i as u64), f.len() as u32, f);
            w.write_packet(&p).unwrap();
        }
    }

    fn read(path: &Path) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        read_capture(path, |_, p| v.push(p.data)).unwrap();
        v
    }

    /// (seq, flags, payload) of an output frame.
    fn tcp_of(f: &[u8]) -> (u32, u8, Vec<u8>) {
        let t = 14 + 20;
        let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
        (
            u32::from_be_bytes(f[t + 4..t + 8].try_into().unwrap()),
            f[t + 13],
            f[t + 20..14 + total].to_vec(),
        )
    }

    #[test]
    fn one_mpa_frame_per_segment_same_bytes_and_order() {
        let dir = std::env::temp_dir().join(format!("wire-check-reseg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (40000u16, 20049u16);
        let req = mpa_frame(REQ_KEY, b"hello");
        let rep = mpa_frame(REP_KEY, b"");
        // Initiator: MPA Request and two whole FPDUs and 3 bytes of a
        // third in one segment, then the rest of the third with a fourth.
        let (f1, f2, f3, f4) = (fpdu(30, 1), fpdu(13, 2), fpdu(40, 3), fpdu(16, 4));
        let mut s1 = req.clone();
        s1.extend_from_slice(&f1);
        s1.extend_from_slice(&f2);
        s1.extend_from_slice(&f3[..3]);
        let mut s2 = f3[3..].to_vec();
        s2.extend_from_slice(&f4);
        let isn_a = 0xffff_fff0u32; // wraps inside the stream
        let frames = vec![
            frame(a, b, isn_a, 0x02, &[]),
            frame(b, a, 7, 0x12, &[]),
            frame(a, b, isn_a.wrapping_add(1), 0x18, &s1),
            frame(b, a, 8, 0x18, &rep),
            frame(a, b, isn_a.wrapping_add(1 + s1.len() as u32), 0x19, &s2),
            // A retransmission of the first segment is split the same way.
            frame(a, b, isn_a.wrapping_add(1), 0x18, &s1),
        ];
        let input = dir.join("in.pcap");
        let output = dir.join("out.pcap");
        write(&input, &frames);
        let r = resegment(&input, &output).unwrap();
        let out = read(&output);
        assert_eq!(r.stats.frames_in, 6);
        assert_eq!(r.stats.mpa_directions, 2);
        // One MPA frame per segment, each sent with the segment that
        // completed it: [req][f1][f2] with segment 3 (f3's first 3 bytes
        // wait), [rep], then [f3][f4] and the FIN on its own with segment
        // 5; the retransmission of segment 3 adds nothing.
        let lens: Vec<usize> = out.iter().map(|f| tcp_of(f).2.len()).collect();
        assert_eq!(
            lens,
            vec![
                0,
                0,
                req.len(),
                f1.len(),
                f2.len(),
                rep.len(),
                f3.len(),
                f4.len(),
                0
            ]
        );
        assert_eq!(r.to_input, vec![1, 2, 3, 3, 3, 4, 5, 5, 5]);
        assert_eq!(r.to_output, vec![1, 2, 3, 6, 7, 10]);
        assert_eq!(r.stats.frames_out, 9);
        assert_eq!(r.stats.segments_split, 2);
        // Same bytes at the same sequence numbers; FIN only on the last
        // frame, after the data.
        let mut stream = Vec::new();
        let mut seq = isn_a.wrapping_add(1);
        for i in [2, 3, 4, 6, 7, 8] {
            let (s, flags, p) = tcp_of(&out[i]);
            assert_eq!(s, seq, "frame {i}");
            assert_eq!(flags & FIN != 0, i == 8, "FIN on frame {i}");
            seq = seq.wrapping_add(p.len() as u32);
            stream.extend_from_slice(&p);
        }
        let mut orig = s1.clone();
        orig.extend_from_slice(&s2);
        assert_eq!(stream, orig);
        // IPv4 header checksums are valid.
        for f in &out {
            assert_eq!(fold(ones_complement_sum(0, &f[14..34])), 0);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An FPDU that arrived in two segments is emitted with the headers of
    /// the second; FPDU and headers together exceed the 65,535 bytes of an
    /// IPv4 packet, so it goes out as two segments (before the fix, one
    /// segment whose Total Length wrapped: tshark's "Bogus IP length").
    #[test]
    fn an_mpa_frame_too_big_for_one_packet_is_split_at_the_ip_limit() {
        let dir = std::env::temp_dir().join(format!("wire-check-reseg3-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (40001u16, 20049u16);
        let req = mpa_frame(REQ_KEY, b"");
        let big = fpdu(65_500, 7);
        assert_eq!(big.len(), 65_508);
        let mut s1 = req.clone();
        s1.extend_from_slice(&big[..30_000]);
        let s2 = big[30_000..].to_vec();
        let isn = 1000u32;
        let frames = vec![
            frame(a, b, isn, 0x02, &[]),
            frame(a, b, isn + 1, 0x18, &s1),
            frame(a, b, isn + 1 + s1.len() as u32, 0x18, &s2),
        ];
        let (input, output) = (dir.join("in.pcap"), dir.join("out.pcap"));
        write(&input, &frames);
        let r = resegment(&input, &output).unwrap();
        let out = read(&output);
        let mut stream = Vec::new();
        let mut seq = isn + 1;
        for f in &out {
            let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
            assert_eq!(total, f.len() - 14, "IP Total Length matches the frame");
            assert_eq!(fold(ones_complement_sum(0, &f[14..34])), 0);
            let (s, _, p) = tcp_of(f);
            if !p.is_empty() {
                assert_eq!(s, seq);
                seq = seq.wrapping_add(p.len() as u32);
                stream.extend_from_slice(&p);
            }
        }
        let lens: Vec<usize> = out.iter().map(|f| tcp_of(f).2.len()).collect();
        let max = 65_535 - 40;
        assert_eq!(lens, vec![0, req.len(), max, big.len() - max]);
        assert_eq!(r.to_input, vec![1, 2, 3, 3]);
        let mut orig = s1;
        orig.extend_from_slice(&s2);
        assert_eq!(stream, orig);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn non_mpa_streams_are_copied() {
        let dir = std::env::temp_dir().join(format!("wire-check-reseg2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let frames = vec![
            frame(1000, 2000, 5, 0x02, &[]),
            frame(1000, 2000, 6, 0x18, &[0u8; 300]),
        ];
        let (input, output) = (dir.join("in.pcap"), dir.join("out.pcap"));
        write(&input, &frames);
        let r = resegment(&input, &output).unwrap();
        assert_eq!(r.to_input, vec![1, 2]);
        assert_eq!(r.stats.segments_split, 0);
        assert_eq!(read(&output), frames);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
