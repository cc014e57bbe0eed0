//! pcap capture of the provider's own traffic.
//!
//! The software RNIC talks over ordinary TCP sockets, so the kernel never
//! shows its bytes to a packet sniffer on loopback in a useful form. This
//! module re-creates the conversation as Ethernet/IPv4 (or IPv6)/TCP frames
//! with correct checksums, per-direction sequence and acknowledgement
//! numbers, optional synthetic SYN/SYN-ACK/ACK and FIN, and the MPA bytes as
//! TCP payload, so Wireshark/tshark can decode MPA, DDP and RDMAP.
//!
//! Use: one [`Capture`] per file (cheap to clone, thread-safe), one
//! [`ConnCapture`] per connection (also clonable, so a reader and a writer
//! task can share it). Call [`ConnCapture::sent`] after bytes were written
//! to the socket and [`ConnCapture::received`] after bytes were read.
//!
//! Decoding with tshark: Wireshark's MPA dissector is a TCP heuristic (no
//! port is registered) that recognises the MPA Request/Reply keys and then
//! decodes that conversation's FPDUs, so the capture must include the MPA
//! handshake. tshark 4.0.17 decodes our captures with default preferences
//! (checked with server ports 20049 and 2049); `-o
//! tcp.try_heuristic_first:TRUE` makes it robust against port-based
//! dissectors claiming the port first. `tests/wire_tshark.rs` runs
//! `tshark -2 -o tcp.try_heuristic_first:TRUE -o iwarp_ddp_rdmap.reassemble_iwarp_rdma_send:FALSE -r f.pcap -V`.
//! A bad CRC shows only as "Bad CRC32" in the decode (no expert item).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};

/// Largest TCP payload per captured segment: an IPv4 datagram (20-byte IP
/// header + 20-byte TCP header) must fit the 16-bit total length.
pub const MAX_SEGMENT_PAYLOAD: usize = 65535 - 20 - 20;

/// Errors from the capture writer.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// I/O on the capture file.
    #[error("capture I/O: {0}")]
    Io(#[from] io::Error),
    /// pcap encoding.
    #[error("pcap: {0}")]
    Pcap(#[from] pcap_file::PcapError),
    /// Frame construction.
    #[error("frame build: {0}")]
    Build(String),
}

/// A `Write` shared between the pcap writer and [`Capture::flush`].
#[derive(Clone)]
struct SharedWrite(Arc<Mutex<Box<dyn Write + Send>>>);

impl SharedWrite {
    fn lock(&self) -> MutexGuard<'_, Box<dyn Write + Send>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Write for SharedWrite {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.lock().write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.lock().flush()
    }
}

struct Inner {
    writer: PcapWriter<SharedWrite>,
    ip_id: u16,
    frames: u64,
}

/// A pcap file being written. Clone it freely; all clones append to the
/// same file, serialised by a mutex.
#[derive(Clone)]
pub struct Capture {
    inner: Arc<Mutex<Inner>>,
    sink: SharedWrite,
    max_segment: usize,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("max_segment", &self.max_segment)
            .finish_non_exhaustive()
    }
}

impl Capture {
    /// Create (truncate) a pcap file.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, CaptureError> {
        let f = File::create(path)?;
        Self::new(BufWriter::new(f))
    }

    /// Write pcap to any sink.
    pub fn new<W: Write + Send + 'static>(w: W) -> Result<Self, CaptureError> {
        let sink = SharedWrite(Arc::new(Mutex::new(Box::new(w))));
        let header = PcapHeader {
            // Ethernet + IPv4/IPv6 + TCP + 65535 bytes.
            snaplen: 0x40000,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::MicroSecond,
            endianness: Endianness::Little,
            ..Default::default()
        };
        let writer = PcapWriter::with_header(sink.clone(), header)?;
        Ok(Capture {
            inner: Arc::new(Mutex::new(Inner {
                writer,
                ip_id: 1,
                frames: 0,
            })),
            sink,
            max_segment: MAX_SEGMENT_PAYLOAD,
        })
    }

    /// Split captured writes into TCP segments of at most `n` payload bytes
    /// (clamped to 1..=[`MAX_SEGMENT_PAYLOAD`]); applies to connections
    /// created afterwards from this handle.
    pub fn with_max_segment(mut self, n: usize) -> Self {
        self.max_segment = n.clamp(1, MAX_SEGMENT_PAYLOAD);
        self
    }

    /// Flush buffered frames to the sink.
    pub fn flush(&self) -> io::Result<()> {
        let _g = self.lock();
        self.sink.lock().flush()
    }

    /// Frames written so far.
    pub fn frames(&self) -> u64 {
        self.lock().frames
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Start recording a connection between `local` and `remote`.
    /// `local_is_initiator`: whether the local side opened the TCP
    /// connection (the SYN goes local → remote). With `synthesize_handshake`
    /// a SYN, SYN-ACK, ACK exchange is written first (Wireshark then knows
    /// the ISNs and direction).
    pub fn connection(
        &self,
        local: SocketAddr,
        remote: SocketAddr,
        local_is_initiator: bool,
        synthesize_handshake: bool,
    ) -> Result<ConnCapture, CaptureError> {
        let c = ConnCapture {
            cap: self.clone(),
            state: Arc::new(Mutex::new(ConnState {
                local,
                remote,
                local_seq: rand::random::<u32>(),
                remote_seq: rand::random::<u32>(),
                local_fin: false,
                remote_fin: false,
            })),
            max_segment: self.max_segment,
        };
        if synthesize_handshake {
            let mut st = c.lock();
            let (a, b) = if local_is_initiator {
                (Dir::Out, Dir::In)
            } else {
                (Dir::In, Dir::Out)
            };
            // SYN consumes one sequence number.
            let syn = Flags {
                syn: true,
                ..Flags::default()
            };
            c.emit(&mut st, a, syn, &[])?;
            c.emit(
                &mut st,
                b,
                Flags {
                    syn: true,
                    ack: true,
                    ..Flags::default()
                },
                &[],
            )?;
            c.emit(
                &mut st,
                a,
                Flags {
                    ack: true,
                    ..Flags::default()
                },
                &[],
            )?;
        }
        Ok(c)
    }

    fn write_frame(&self, frame: &[u8]) -> Result<(), CaptureError> {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut g = self.lock();
        let pkt = PcapPacket::new(ts, frame.len() as u32, frame);
        g.writer.write_packet(&pkt)?;
        g.frames += 1;
        Ok(())
    }

    fn next_ip_id(&self) -> u16 {
        let mut g = self.lock();
        g.ip_id = g.ip_id.wrapping_add(1);
        g.ip_id
    }
}

#[derive(Debug)]
struct ConnState {
    local: SocketAddr,
    remote: SocketAddr,
    /// Next sequence number local → remote.
    local_seq: u32,
    /// Next sequence number remote → local.
    remote_seq: u32,
    local_fin: bool,
    remote_fin: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Out,
    In,
}

#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    syn: bool,
    ack: bool,
    psh: bool,
    fin: bool,
}

/// Recorder for one TCP connection. Clone to share between tasks.
#[derive(Clone)]
pub struct ConnCapture {
    cap: Capture,
    state: Arc<Mutex<ConnState>>,
    max_segment: usize,
}

impl std::fmt::Debug for ConnCapture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("ConnCapture")
            .field("local", &st.local)
            .field("remote", &st.remote)
            .finish_non_exhaustive()
    }
}

const LOCAL_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const REMOTE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

impl ConnCapture {
    fn lock(&self) -> MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record bytes the local side wrote to the socket.
    pub fn sent(&self, data: &[u8]) -> Result<(), CaptureError> {
        self.record(Dir::Out, &[data])
    }

    /// Record bytes the local side wrote with one vectored write.
    pub fn sent_vectored(&self, bufs: &[&[u8]]) -> Result<(), CaptureError> {
        self.record(Dir::Out, bufs)
    }

    /// Record bytes the local side read from the socket.
    pub fn received(&self, data: &[u8]) -> Result<(), CaptureError> {
        self.record(Dir::In, &[data])
    }

    /// Record a FIN from the local side (once).
    pub fn local_closed(&self) -> Result<(), CaptureError> {
        self.fin(Dir::Out)
    }

    /// Record a FIN from the remote side (once).
    pub fn remote_closed(&self) -> Result<(), CaptureError> {
        self.fin(Dir::In)
    }

    fn fin(&self, dir: Dir) -> Result<(), CaptureError> {
        let mut st = self.lock();
        let done = match dir {
            Dir::Out => &mut st.local_fin,
            Dir::In => &mut st.remote_fin,
        };
        if *done {
            return Ok(());
        }
        *done = true;
        self.emit(
            &mut st,
            dir,
            Flags {
                fin: true,
                ack: true,
                ..Flags::default()
            },
            &[],
        )
    }

    fn record(&self, dir: Dir, bufs: &[&[u8]]) -> Result<(), CaptureError> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(());
        }
        // Gather (capture is a debugging aid; copying here is fine).
        let mut data = Vec::with_capacity(total);
        for b in bufs {
            data.extend_from_slice(b);
        }
        let mut st = self.lock();
        let mut chunks = data.chunks(self.max_segment).peekable();
        while let Some(c) = chunks.next() {
            let last = chunks.peek().is_none();
            self.emit(
                &mut st,
                dir,
                Flags {
                    ack: true,
                    psh: last,
                    ..Flags::default()
                },
                c,
            )?;
        }
        Ok(())
    }

    /// Build and write one frame; advances that direction's sequence number.
    fn emit(
        &self,
        st: &mut ConnState,
        dir: Dir,
        flags: Flags,
        payload: &[u8],
    ) -> Result<(), CaptureError> {
        let (src, dst, smac, dmac, seq, ack) = match dir {
            Dir::Out => (
                st.local,
                st.remote,
                LOCAL_MAC,
                REMOTE_MAC,
                st.local_seq,
                st.remote_seq,
            ),
            Dir::In => (
                st.remote,
                st.local,
                REMOTE_MAC,
                LOCAL_MAC,
                st.remote_seq,
                st.local_seq,
            ),
        };
        let eth = PacketBuilder::ethernet2(smac, dmac);
        let ip = match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => eth.ipv4(s.octets(), d.octets(), 64),
            (s, d) => {
                let s6 = match s {
                    IpAddr::V4(a) => a.to_ipv6_mapped(),
                    IpAddr::V6(a) => a,
                };
                let d6 = match d {
                    IpAddr::V4(a) => a.to_ipv6_mapped(),
                    IpAddr::V6(a) => a,
                };
                eth.ipv6(s6.octets(), d6.octets(), 64)
            }
        };
        let mut tcp = ip.tcp(src.port(), dst.port(), seq, 65535);
        if flags.syn {
            tcp = tcp.syn();
        }
        if flags.ack {
            tcp = tcp.ack(ack);
        }
        if flags.psh {
            tcp = tcp.psh();
        }
        if flags.fin {
            tcp = tcp.fin();
        }
        let mut frame = Vec::with_capacity(tcp.size(payload.len()));
        tcp.write(&mut frame, payload)
            .map_err(|e| CaptureError::Build(e.to_string()))?;
        // IPv4 identification: etherparse leaves it 0; set it so tools do
        // not flag duplicates, then fix the header checksum.
        if frame.len() >= 34 && frame[12] == 0x08 && frame[13] == 0x00 {
            let id = self.cap.next_ip_id();
            frame[18..20].copy_from_slice(&id.to_be_bytes());
            frame[24..26].copy_from_slice(&[0, 0]);
            let sum = ipv4_checksum(&frame[14..34]);
            frame[24..26].copy_from_slice(&sum.to_be_bytes());
        }
        self.cap.write_frame(&frame)?;
        let adv = payload.len() as u32 + u32::from(flags.syn) + u32::from(flags.fin);
        match dir {
            Dir::Out => st.local_seq = st.local_seq.wrapping_add(adv),
            Dir::In => st.remote_seq = st.remote_seq.wrapping_add(adv),
        }
        Ok(())
    }
}

fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum = 0u32;
    for w in h.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Write` whose bytes can be read back.
    #[derive(Clone, Default)]
    struct Mem(Arc<Mutex<Vec<u8>>>);
    impl Write for Mem {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn sequence_numbers_and_checksums() {
        let mem = Mem::default();
        let cap = Capture::new(mem.clone()).unwrap().with_max_segment(1000);
        let c = cap
            .connection(
                "127.0.0.1:40000".parse().unwrap(),
                "127.0.0.1:4791".parse().unwrap(),
                true,
                true,
            )
            .unwrap();
        c.sent(&[1u8; 2500]).unwrap();
        c.received(&[2u8; 10]).unwrap();
        c.sent_vectored(&[b"ab", b"cd"]).unwrap();
        c.local_closed().unwrap();
        c.local_closed().unwrap();
        cap.flush().unwrap();
        assert_eq!(cap.frames(), 3 + 3 + 1 + 1 + 1);

        let bytes = mem.0.lock().unwrap().clone();
        let mut r = pcap_file::pcap::PcapReader::new(&bytes[..]).unwrap();
        let mut frames = Vec::new();
        while let Some(p) = r.next_packet() {
            frames.push(p.unwrap().data.into_owned());
        }
        assert_eq!(frames.len(), 9);
        let parsed: Vec<_> = frames
            .iter()
            .map(|f| etherparse::SlicedPacket::from_ethernet(f).unwrap())
            .collect();
        let tcp = |i: usize| match &parsed[i].transport {
            Some(etherparse::TransportSlice::Tcp(t)) => t.clone(),
            _ => panic!("not tcp"),
        };
        let (syn, synack, ack) = (tcp(0), tcp(1), tcp(2));
        assert!(syn.syn() && !syn.ack());
        assert!(synack.syn() && synack.ack());
        assert_eq!(
            synack.acknowledgment_number(),
            syn.sequence_number().wrapping_add(1)
        );
        assert_eq!(
            ack.acknowledgment_number(),
            synack.sequence_number().wrapping_add(1)
        );
        let d0 = tcp(3);
        assert_eq!(d0.sequence_number(), syn.sequence_number().wrapping_add(1));
        assert_eq!(
            tcp(4).sequence_number(),
            d0.sequence_number().wrapping_add(1000)
        );
        assert_eq!(
            tcp(5).sequence_number(),
            d0.sequence_number().wrapping_add(2000)
        );
        assert!(tcp(5).psh() && !tcp(4).psh());
        let rx = tcp(6);
        assert_eq!(
            rx.acknowledgment_number(),
            d0.sequence_number().wrapping_add(2500)
        );
        assert_eq!(
            tcp(7).sequence_number(),
            d0.sequence_number().wrapping_add(2500)
        );
        assert_eq!(
            tcp(7).acknowledgment_number(),
            rx.sequence_number().wrapping_add(10)
        );
        assert!(tcp(8).fin());
        // Checksums verify.
        assert_eq!(parsed.len(), 9);
        for p in &parsed {
            let ip = match &p.net {
                Some(etherparse::NetSlice::Ipv4(ip)) => ip.clone(),
                _ => panic!(),
            };
            let h = ip.header().to_header();
            assert_eq!(h.header_checksum, h.calc_header_checksum());
            let t = match &p.transport {
                Some(etherparse::TransportSlice::Tcp(t)) => t.clone(),
                _ => panic!(),
            };
            let th = t.to_header();
            assert_eq!(th.checksum, th.calc_checksum_ipv4(&h, t.payload()).unwrap());
        }
    }

    #[test]
    fn ipv6_frames_parse_with_valid_checksums() {
        let mem = Mem::default();
        let cap = Capture::new(mem.clone()).unwrap();
        let c = cap
            .connection(
                "[::1]:40000".parse().unwrap(),
                "[::1]:20049".parse().unwrap(),
                false,
                true,
            )
            .unwrap();
        c.received(b"MPA ID Req Frame").unwrap();
        c.sent(&[0u8; 70_000]).unwrap();
        c.remote_closed().unwrap();
        cap.flush().unwrap();
        let bytes = mem.0.lock().unwrap().clone();
        let mut r = pcap_file::pcap::PcapReader::new(&bytes[..]).unwrap();
        let mut n = 0;
        let mut payload = 0;
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            let s = etherparse::SlicedPacket::from_ethernet(&p.data).unwrap();
            let ip = match &s.net {
                Some(etherparse::NetSlice::Ipv6(ip)) => ip.header().to_header(),
                _ => panic!("not ipv6"),
            };
            let t = match &s.transport {
                Some(etherparse::TransportSlice::Tcp(t)) => t.clone(),
                _ => panic!("not tcp"),
            };
            assert_eq!(
                t.to_header().checksum,
                t.to_header().calc_checksum_ipv6(&ip, t.payload()).unwrap()
            );
            if n == 0 {
                // The remote side opened the connection.
                assert!(t.syn() && t.source_port() == 20049);
            }
            payload += t.payload().len();
            n += 1;
        }
        // SYN, SYN-ACK, ACK, 1 received, 2 sent (70000 > 65495), FIN.
        assert_eq!(n, 7);
        assert_eq!(payload, 16 + 70_000);
    }
}
