//! Parsers for tshark's output.
//!
//! [`parse_verbose`] reads `tshark -V -O iwarp_mpa,iwarp_ddp_rdmap,rpcordma,rpc`
//! text: one block per frame, one unindented line per protocol layer, the
//! expanded layers' fields indented below. The text is used (rather than
//! `-T json`) because the MPA CRC verdict ("Good CRC32" / "Bad CRC32") only
//! exists in the field's label. [`parse_fields_line`] reads the `-T fields`
//! output of [`crate::tshark::FIELDS`].

use std::io::BufRead;

/// A parse failure of tshark's output (tshark changed its format, or the
/// output was cut).
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Reading the output failed.
    #[error("reading tshark output: {0}")]
    Io(#[from] std::io::Error),
    /// A line that should hold a value did not.
    #[error("line {line}: cannot parse {what} from {text:?}")]
    Bad {
        /// 1-based line number.
        line: usize,
        /// What was expected.
        what: &'static str,
        /// The line.
        text: String,
    },
}

/// The MPA CRC verdict tshark printed for one FPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CrcStatus {
    /// No CRC check line (CRC not in use, or not verified).
    #[default]
    Absent,
    /// "Good CRC32".
    Good,
    /// "Bad CRC32".
    Bad,
    /// A CRC line without a verdict.
    Unverified,
}

/// An MPA Request or Reply frame (RFC 5044 §7.1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MpaHandshake {
    /// M flag.
    pub markers: bool,
    /// C flag.
    pub crc: bool,
    /// R flag.
    pub reject: bool,
    /// Revision.
    pub revision: u32,
}

/// An RDMA Read Request body (RFC 5040 §4.4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadRequest {
    /// Data Sink STag.
    pub sink_stag: u32,
    /// RDMA Read Message Size.
    pub size: u64,
    /// Data Source STag.
    pub src_stag: u32,
}

/// The DDP/RDMAP header of one FPDU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ddp {
    /// T flag.
    pub tagged: bool,
    /// L flag.
    pub last: bool,
    /// QN (untagged).
    pub qn: Option<u32>,
    /// MSN (untagged).
    pub msn: Option<u32>,
    /// MO (untagged).
    pub mo: Option<u64>,
    /// Data Sink STag (tagged).
    pub stag: Option<u32>,
    /// Tagged offset (tagged).
    pub to: Option<u64>,
    /// RDMAP opcode.
    pub opcode: Option<u8>,
    /// Read Request body.
    pub read_request: Option<ReadRequest>,
}

/// RDMAP opcodes (RFC 5040 §4.3).
pub mod opcode {
    /// RDMA Write.
    pub const WRITE: u8 = 0;
    /// RDMA Read Request.
    pub const READ_REQUEST: u8 = 1;
    /// RDMA Read Response.
    pub const READ_RESPONSE: u8 = 2;
    /// Send.
    pub const SEND: u8 = 3;
    /// Send with Invalidate.
    pub const SEND_INVALIDATE: u8 = 4;
    /// Send with Solicited Event.
    pub const SEND_SE: u8 = 5;
    /// Send with SE and Invalidate.
    pub const SEND_SE_INVALIDATE: u8 = 6;
    /// Terminate.
    pub const TERMINATE: u8 = 7;
    /// One of the four Send opcodes.
    pub fn is_send(op: u8) -> bool {
        (SEND..=SEND_SE_INVALIDATE).contains(&op)
    }
}

/// One MPA FPDU and the DDP/RDMAP header tshark decoded in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fpdu {
    /// ULPDU_Length.
    pub ulpdu_len: Option<u32>,
    /// CRC verdict.
    pub crc: CrcStatus,
    /// DDP/RDMAP header.
    pub ddp: Option<Ddp>,
}

impl Fpdu {
    /// DDP payload length (ULPDU minus the DDP/RDMAP header), if known.
    pub fn payload_len(&self) -> Option<u64> {
        let ddp = self.ddp.as_ref()?;
        let hdr = if ddp.tagged { 14 } else { 18 };
        (self.ulpdu_len? as u64).checked_sub(hdr)
    }
}

/// An RPC-over-RDMA header (RFC 8166 §4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rpcordma {
    /// rdma_xid.
    pub xid: u32,
    /// rdma_proc (0 RDMA_MSG, 1 RDMA_NOMSG, 2 RDMA_MSGP, 3 RDMA_DONE, 4 RDMA_ERROR).
    pub msg_type: u32,
    /// Read segments in the Read list.
    pub reads: u32,
    /// Write chunks in the Write list.
    pub writes: u32,
    /// Reply chunk present.
    pub reply: u32,
    /// Handles of the Read list's segments, in order.
    pub read_handles: Vec<u32>,
    /// Handles of the Write list's segments, in order.
    pub write_handles: Vec<u32>,
    /// Handles of the Reply chunk's segments, in order.
    pub reply_handles: Vec<u32>,
    /// Length of each Write chunk (the sum of its segments' lengths), in
    /// order.
    pub write_chunk_lengths: Vec<u64>,
}

/// RPC-over-RDMA message types.
pub mod msg_type {
    /// RDMA_MSG.
    pub const MSG: u32 = 0;
    /// RDMA_NOMSG.
    pub const NOMSG: u32 = 1;
    /// RDMA_MSGP.
    pub const MSGP: u32 = 2;
    /// RDMA_DONE.
    pub const DONE: u32 = 3;
    /// RDMA_ERROR.
    pub const ERROR: u32 = 4;
    /// The RFC name.
    pub fn name(t: u32) -> &'static str {
        match t {
            MSG => "RDMA_MSG",
            NOMSG => "RDMA_NOMSG",
            MSGP => "RDMA_MSGP",
            DONE => "RDMA_DONE",
            ERROR => "RDMA_ERROR",
            _ => "unknown",
        }
    }
}

/// An ONC RPC message header as tshark decoded it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rpc {
    /// xid.
    pub xid: u32,
    /// true for a Call, false for a Reply.
    pub call: bool,
}

/// One decoded layer of a frame, in tshark's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// MPA Request frame.
    MpaRequest(MpaHandshake),
    /// MPA Reply frame.
    MpaReply(MpaHandshake),
    /// An FPDU.
    Fpdu(Fpdu),
    /// An RPC-over-RDMA header.
    Rpcordma(Rpcordma),
    /// An RPC message.
    Rpc(Rpc),
    /// "[N Reassembled RPCoRDMA fragments (B bytes)…]".
    Reassembled {
        /// Fragments.
        fragments: u32,
        /// Bytes.
        bytes: u64,
    },
    /// "[Malformed Packet…]".
    Malformed(String),
    /// An NFS version 3 layer ("Network File System…") below an RPC
    /// message of program 100003 version 3.
    Nfs3 {
        /// The RPC message's procedure (RFC 1813 §3.3: 5 READLINK, 6 READ…).
        procedure: u32,
        /// The data length of a READ reply ("READ Reply Len: N").
        read_len: Option<u64>,
    },
}

/// One frame of the capture.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frame {
    /// Frame number (1-based, as tshark counts).
    pub number: u64,
    /// TCP source port (0 when not TCP).
    pub src_port: u16,
    /// TCP destination port.
    pub dst_port: u16,
    /// Decoded layers.
    pub items: Vec<Item>,
}

fn num(s: &str) -> Option<u64> {
    let t = s.split_whitespace().next()?;
    let t = t.trim_end_matches([',', ')', ']', ':']);
    if let Some(h) = t.strip_prefix("0x") {
        u64::from_str_radix(h, 16).ok()
    } else {
        t.parse().ok()
    }
}

/// `(key, value)` of a field line: bit-field prefixes ("0... .... = ")
/// removed, split at the first ": ".
fn kv(line: &str) -> Option<(&str, &str)> {
    let t = line.trim();
    let t = match t.find(" = ") {
        Some(i) if t[..i].chars().all(|c| matches!(c, '0' | '1' | '.' | ' ')) => &t[i + 3..],
        _ => t,
    };
    let i = t.find(": ")?;
    Some((&t[..i], &t[i + 2..]))
}

/// "(count: N)" at the end of a list header.
fn count(s: &str) -> Option<u32> {
    let i = s.find("(count: ")?;
    num(&s[i + 8..]).map(|v| v as u32)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    Other,
    Tcp,
    Mpa,
    Ddp,
    Rpcordma,
    Rpc,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum List {
    None,
    Read,
    Write,
    Reply,
}

/// Streams frames parsed from `tshark -V` text to `sink`.
pub fn parse_verbose<R: BufRead>(input: R, mut sink: impl FnMut(Frame)) -> Result<u64, ParseError> {
    let mut cur: Option<Frame> = None;
    let mut block = Block::Other;
    let mut list = List::None;
    // Program, version and procedure of the frame's last RPC message.
    let mut rpc_proc: (Option<u64>, Option<u64>, Option<u64>) = (None, None, None);
    let mut n = 0u64;
    for (i, line) in input.lines().enumerate() {
        let line = line?;
        let bad = |what: &'static str| ParseError::Bad {
            line: i + 1,
            what,
            text: line.clone(),
        };
        if line.is_empty() {
            continue;
        }
        if !line.starts_with(' ') {
            block = Block::Other;
            if let Some(rest) = line.strip_prefix("Frame ") {
                rpc_proc = (None, None, None);
                if let Some(f) = cur.take() {
                    sink(f);
                    n += 1;
                }
                let number = rest
                    .split(':')
                    .next()
                    .and_then(|s| s.trim().parse().ok())
                    .ok_or_else(|| bad("frame number"))?;
                cur = Some(Frame {
                    number,
                    ..Frame::default()
                });
                continue;
            }
            let Some(f) = cur.as_mut() else { continue };
            if line.starts_with("Transmission Control Protocol") {
                block = Block::Tcp;
                for part in line.split(", ") {
                    if let Some(p) = part.strip_prefix("Src Port: ") {
                        f.src_port = num(p).ok_or_else(|| bad("source port"))? as u16;
                    } else if let Some(p) = part.strip_prefix("Dst Port: ") {
                        f.dst_port = num(p).ok_or_else(|| bad("destination port"))? as u16;
                    }
                }
            } else if line.starts_with("iWARP Marker Protocol data unit Aligned framing") {
                block = Block::Mpa;
            } else if line
                .starts_with("iWARP Direct Data Placement and Remote Direct Memory Access Protocol")
            {
                block = Block::Ddp;
                // Attach to the last FPDU that has no DDP header yet.
                let has_open = matches!(f.items.iter().rev().find(|it| matches!(it, Item::Fpdu(_))),
                    Some(Item::Fpdu(p)) if p.ddp.is_none());
                if !has_open {
                    f.items.push(Item::Fpdu(Fpdu::default()));
                }
                if let Some(Item::Fpdu(p)) = f
                    .items
                    .iter_mut()
                    .rev()
                    .find(|it| matches!(it, Item::Fpdu(_)))
                {
                    p.ddp = Some(Ddp::default());
                }
            } else if line == "RPC over RDMA" {
                block = Block::Rpcordma;
                list = List::None;
                f.items.push(Item::Rpcordma(Rpcordma::default()));
            } else if let Some(rest) = line.strip_prefix("Remote Procedure Call, ") {
                let call = rest.contains("Type:Call");
                let xid = rest
                    .find("XID:")
                    .and_then(|i| num(&rest[i + 4..]))
                    .ok_or_else(|| bad("RPC XID"))? as u32;
                f.items.push(Item::Rpc(Rpc { xid, call }));
                block = Block::Rpc;
                rpc_proc = (None, None, None);
            } else if line.starts_with('[') && line.contains("Reassembled RPCoRDMA fragments (") {
                let fragments = num(&line[1..]).ok_or_else(|| bad("fragment count"))? as u32;
                let at = line
                    .find("fragments (")
                    .ok_or_else(|| bad("reassembled length"))?;
                let bytes = num(&line[at + 11..]).ok_or_else(|| bad("reassembled length"))?;
                f.items.push(Item::Reassembled { fragments, bytes });
            } else if line.starts_with("[Malformed Packet") {
                f.items.push(Item::Malformed(line.clone()));
            } else if line == "Network File System" || line.starts_with("Network File System, ") {
                if let (Some(100003), Some(3), Some(p)) = rpc_proc {
                    let read_len = match line.strip_prefix("Network File System, READ Reply Len: ")
                    {
                        Some(rest) => Some(num(rest).ok_or_else(|| bad("NFS READ reply length"))?),
                        None => None,
                    };
                    f.items.push(Item::Nfs3 {
                        procedure: p as u32,
                        read_len,
                    });
                }
            }
            continue;
        }
        let Some(f) = cur.as_mut() else { continue };
        let trimmed = line.trim();
        match block {
            Block::Other | Block::Tcp => {}
            Block::Rpc => {
                // "[Program: NFS (100003)]", "[Program Version: 3]",
                // "[Procedure: READLINK (5)]".
                let paren = |t: &str| t.rfind('(').and_then(|i| num(&t[i + 1..]));
                if let Some(t) = trimmed.strip_prefix("[Program: ") {
                    rpc_proc.0 = paren(t);
                } else if let Some(t) = trimmed.strip_prefix("[Program Version: ") {
                    rpc_proc.1 = num(t);
                } else if let Some(t) = trimmed.strip_prefix("[Procedure: ") {
                    rpc_proc.2 = paren(t);
                }
            }
            Block::Mpa => {
                if line.starts_with("    ") && !line.starts_with("     ") {
                    match trimmed {
                        "FPDU" => f.items.push(Item::Fpdu(Fpdu::default())),
                        "Request frame header" => {
                            f.items.push(Item::MpaRequest(MpaHandshake::default()))
                        }
                        "Reply frame header" => {
                            f.items.push(Item::MpaReply(MpaHandshake::default()))
                        }
                        _ => {}
                    }
                    continue;
                }
                let Some((k, v)) = kv(trimmed) else { continue };
                match f.items.last_mut() {
                    Some(Item::Fpdu(p)) => match k {
                        "ULPDU length" => {
                            p.ulpdu_len = Some(num(v).ok_or_else(|| bad("ULPDU length"))? as u32)
                        }
                        "CRC check" | "CRC" => {
                            p.crc = if v.contains("Good CRC32") {
                                CrcStatus::Good
                            } else if v.contains("Bad CRC32") {
                                CrcStatus::Bad
                            } else {
                                CrcStatus::Unverified
                            }
                        }
                        _ => {}
                    },
                    Some(Item::MpaRequest(h)) | Some(Item::MpaReply(h)) => match k {
                        "Marker flag" => h.markers = v.starts_with("True"),
                        "CRC flag" => h.crc = v.starts_with("True"),
                        "Connection rejected flag" => h.reject = v.starts_with("True"),
                        "Revision" => {
                            h.revision = num(v).ok_or_else(|| bad("MPA revision"))? as u32
                        }
                        _ => {}
                    },
                    _ => {}
                }
            }
            Block::Ddp => {
                let Some(Item::Fpdu(Fpdu { ddp: Some(d), .. })) = f
                    .items
                    .iter_mut()
                    .rev()
                    .find(|it| matches!(it, Item::Fpdu(_)))
                else {
                    continue;
                };
                let Some((k, v)) = kv(trimmed) else { continue };
                let n = || num(v).ok_or_else(|| bad("DDP/RDMAP field"));
                match k {
                    "Tagged flag" => d.tagged = v.starts_with("True"),
                    "Last flag" => d.last = v.starts_with("True"),
                    "Queue number" => d.qn = Some(n()? as u32),
                    "Message sequence number" => d.msn = Some(n()? as u32),
                    "Message offset" => d.mo = Some(n()?),
                    "(Data Sink) Steering Tag" => d.stag = Some(n()? as u32),
                    "(Data Sink) Tagged offset" => d.to = Some(n()?),
                    // The RDMAP control field's opcode comes first; later
                    // "OpCode" lines (atomic extensions) do not replace it.
                    "OpCode" if d.opcode.is_none() => {
                        let op = v
                            .rfind('(')
                            .and_then(|i| num(&v[i + 1..]))
                            .ok_or_else(|| bad("RDMAP opcode"))?;
                        d.opcode = Some(op.min(255) as u8);
                    }
                    "Data Sink STag" => {
                        d.read_request
                            .get_or_insert_with(Default::default)
                            .sink_stag = n()? as u32
                    }
                    "RDMA Read Message Size" => {
                        d.read_request.get_or_insert_with(Default::default).size = n()?
                    }
                    "Data Source STag" => {
                        d.read_request.get_or_insert_with(Default::default).src_stag = n()? as u32
                    }
                    _ => {}
                }
            }
            Block::Rpcordma => {
                let Some(Item::Rpcordma(r)) = f.items.last_mut() else {
                    continue;
                };
                if trimmed.starts_with("Read list") {
                    list = List::Read;
                    r.reads = count(trimmed).ok_or_else(|| bad("read list count"))?;
                    continue;
                }
                if trimmed.starts_with("Write list") {
                    list = List::Write;
                    r.writes = count(trimmed).ok_or_else(|| bad("write list count"))?;
                    continue;
                }
                if list == List::Write && trimmed.starts_with("Write chunk (") {
                    r.write_chunk_lengths.push(0);
                    continue;
                }
                if trimmed.starts_with("Reply chunk (count") {
                    list = List::Reply;
                    r.reply = count(trimmed).ok_or_else(|| bad("reply chunk count"))?;
                    continue;
                }
                let Some((k, v)) = kv(trimmed) else { continue };
                match k {
                    "XID" => r.xid = num(v).ok_or_else(|| bad("rpcordma XID"))? as u32,
                    "Message Type" => {
                        let i = v.rfind('(').ok_or_else(|| bad("message type"))?;
                        r.msg_type = num(&v[i + 1..]).ok_or_else(|| bad("message type"))? as u32;
                    }
                    "RDMA handle" => {
                        let h = num(v).ok_or_else(|| bad("RDMA handle"))? as u32;
                        match list {
                            List::Read => r.read_handles.push(h),
                            List::Write => r.write_handles.push(h),
                            List::Reply => r.reply_handles.push(h),
                            List::None => {}
                        }
                    }
                    "RDMA length" if list == List::Write => {
                        let l = num(v).ok_or_else(|| bad("RDMA length"))?;
                        if let Some(c) = r.write_chunk_lengths.last_mut() {
                            *c = c.saturating_add(l);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    if let Some(f) = cur.take() {
        sink(f);
        n += 1;
    }
    Ok(n)
}

/// Per-frame TCP and expert information from [`crate::tshark::FIELDS`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrameMeta {
    /// Frame number.
    pub number: u64,
    /// tcp.stream (None when not TCP).
    pub stream: Option<u64>,
    /// TCP RST set.
    pub reset: bool,
    /// Expert items: (severity, message).
    pub expert: Vec<(u32, String)>,
    /// The expert group of each item of `expert` (0 when not printed).
    pub groups: Vec<u32>,
}

/// Expert severities (epan/proto.h).
pub mod severity {
    /// PI_NOTE.
    pub const NOTE: u32 = 0x0040_0000;
    /// PI_WARN.
    pub const WARN: u32 = 0x0060_0000;
    /// PI_ERROR.
    pub const ERROR: u32 = 0x0080_0000;
}

/// Expert groups (epan/proto.h).
pub mod group {
    /// PI_SEQUENCE: TCP's sequence analysis (lost, retransmitted or
    /// out-of-order segments, windows, connection setup and teardown).
    pub const SEQUENCE: u32 = 0x0200_0000;
    /// PI_MALFORMED.
    pub const MALFORMED: u32 = 0x0700_0000;
}

/// Separator of multiple occurrences in `-T fields` output.
pub const AGGREGATOR: &str = "\u{1f}";

/// Parses one `-T fields` line (`frame.number`, `tcp.stream`,
/// `tcp.flags.reset`, `_ws.expert.severity`, `_ws.expert.message`,
/// `_ws.malformed`, `_ws.expert.group`).
pub fn parse_fields_line(line: &str) -> Option<FrameMeta> {
    let cols: Vec<&str> = line.split('\t').collect();
    let number = cols.first()?.trim().parse().ok()?;
    let first = |s: &str| s.split(AGGREGATOR).next().and_then(num);
    let stream = cols.get(1).and_then(|s| first(s));
    let reset = cols
        .get(2)
        .map(|s| s.split(AGGREGATOR).any(|x| x == "1" || x == "True"))
        .unwrap_or(false);
    let sev: Vec<u32> = cols
        .get(3)
        .map(|s| {
            s.split(AGGREGATOR)
                .filter_map(num)
                .map(|v| v as u32)
                .collect()
        })
        .unwrap_or_default();
    let msgs: Vec<&str> = cols
        .get(4)
        .map(|s| s.split(AGGREGATOR).collect())
        .unwrap_or_default();
    let mut expert: Vec<(u32, String)> = sev
        .iter()
        .enumerate()
        .map(|(i, s)| (*s, msgs.get(i).unwrap_or(&"").to_string()))
        .collect();
    let mut groups: Vec<u32> = cols
        .get(6)
        .map(|s| {
            s.split(AGGREGATOR)
                .filter_map(num)
                .map(|v| v as u32)
                .collect()
        })
        .unwrap_or_default();
    groups.resize(expert.len(), 0);
    if cols.get(5).is_some_and(|s| !s.trim().is_empty()) {
        expert.push((severity::ERROR, "Malformed Packet".into()));
        groups.push(group::MALFORMED);
    }
    Some(FrameMeta {
        number,
        stream,
        reset,
        expert,
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
Frame 26: 1114 bytes on wire (8912 bits), 1114 bytes captured (8912 bits) on interface lo, id 0
Ethernet II, Src: 00:00:00_00:00:00 (00:00:00:00:00:00), Dst: 00:00:00_00:00:00 (00:00:00:00:00:00)
Internet Protocol Version 4, Src: 127.0.0.1, Dst: 127.0.0.1
Transmission Control Protocol, Src Port: 37264, Dst Port: 45187, Seq: 1161, Ack: 753, Len: 1048
iWARP Marker Protocol data unit Aligned framing
    FPDU
        ULPDU length: 1039 bytes
        Padding: 000000
        CRC check: 0x6f1e88e9 (Good CRC32)
iWARP Direct Data Placement and Remote Direct Memory Access Protocol
    DDP header
        DDP control field
            1... .... = Tagged flag: True
            .1.. .... = Last flag: True
            ..00 00.. = Reserved: 0x0
        Tagged buffer model
            (Data Sink) Steering Tag: 0x26316da7
            (Data Sink) Tagged offset: 0x0000000000000000
    RDMAP header
        RDMAP control field
            01.. .... = Version: 1
            ..00 .... = Reserved: 0x0
            .... 0010 = OpCode: Read Response (0x2)
[3 Reassembled RPCoRDMA fragments (1072 bytes): #24(44), #26(1025), #26(3)]
Remote Procedure Call, Type:Call XID:0xf85acac3
    XID: 0xf85acac3 (4166699715)

Frame 27: 150 bytes on wire (1200 bits), 150 bytes captured (1200 bits) on interface lo, id 0
Transmission Control Protocol, Src Port: 45187, Dst Port: 37264, Seq: 753, Ack: 2209, Len: 84
iWARP Marker Protocol data unit Aligned framing
    FPDU
        ULPDU length: 78 bytes
        CRC check: 0x6175886f (Bad CRC32)
iWARP Direct Data Placement and Remote Direct Memory Access Protocol
    DDP header
        DDP control field
            0... .... = Tagged flag: False
            .1.. .... = Last flag: True
        Untagged buffer model
            Queue number: 0
            Message sequence number: 9
            Message offset: 0
    RDMAP header
        RDMAP control field
            .... 0100 = OpCode: Send with Invalidate (0x4)
RPC over RDMA
    XID: 0xf85acac3
    Message Type: RDMA_NOMSG (1)
    Read list (count: 1)
        Read chunk: (position 0)
            Position in XDR: 0
            RDMA handle: 0x93fece05
            RDMA length: 1025
    Write list (count: 0)
    Reply chunk (count: 1)
        Reply chunk (count: 1)
            RDMA handle: 0x00000501
";

    /// tshark 4.0's view of a Linux nfsd NFS READ reply of 33 bytes whose
    /// data went into an unpadded Write chunk.
    const UNPADDED_READ_REPLY: &str = "\
Frame 1822: 270 bytes on wire (2160 bits), 270 bytes captured (2160 bits)
Ethernet II, Src: RealtekU_77:00:02 (52:54:00:77:00:02), Dst: ee:3f:fb:d7:3e:a5 (ee:3f:fb:d7:3e:a5)
Internet Protocol Version 4, Src: 10.77.0.2, Dst: 10.77.0.1
Transmission Control Protocol, Src Port: 20049, Dst Port: 47232, Seq: 1065397, Ack: 1165, Len: 204
iWARP Marker Protocol data unit Aligned framing
    FPDU
        ULPDU length: 198 bytes
        CRC check: 0x55e17b41 (Good CRC32)
iWARP Direct Data Placement and Remote Direct Memory Access Protocol
    DDP header
        DDP control field
            0... .... = Tagged flag: False
            .1.. .... = Last flag: True
            ..00 00.. = Reserved: 0x0
            .... ..01 = DDP protocol version: 1
        Reserved for use by the ULP: 445dde5bea
        Untagged buffer model
            Queue number: 0
            Message sequence number: 7
            Message offset: 0
    RDMAP header
        RDMAP control field
            01.. .... = Version: 1
            ..00 .... = Reserved: 0x0
            .... 0100 = OpCode: Send with Invalidate (0x4)
        Invalidate STag: 1574853610
RPC over RDMA
    XID: 0x91366ff8
    Version: 1
    Flow Control: 64
    Message Type: RDMA_MSG (0)
    Read list (count: 0)
    Write list (count: 1)
        Write chunk (1 segment)
            Write chunk segment count: 1
            RDMA segment 0
                RDMA handle: 0x5dde5bea
                RDMA length: 33
                RDMA offset: 0x0000000000000000
    Reply chunk (count: 0)
[2 Reassembled RPCoRDMA fragments (161 bytes): #1822(128), #1821(33)]
Remote Procedure Call, Type:Reply XID:0x91366ff8
    XID: 0x91366ff8 (2436263928)
    Message Type: Reply (1)
    [Program: NFS (100003)]
    [Program Version: 3]
    [Procedure: READ (6)]
    Reply State: accepted (0)
    [This is a reply to a request in frame 1820]
    [Time from request: 0.006483000 seconds]
    Verifier
        Flavor: AUTH_NULL (0)
        Length: 0
    Accept State: RPC executed successfully (0)
Network File System, READ Reply Len: 33
[Malformed Packet: NFS]

";

    #[test]
    fn write_chunk_lengths_and_nfs_read_reply() {
        let mut frames = Vec::new();
        let n = parse_verbose(UNPADDED_READ_REPLY.as_bytes(), |f| frames.push(f)).unwrap();
        assert_eq!(n, 1);
        let f = &frames[0];
        let Some(Item::Rpcordma(r)) = f.items.iter().find(|i| matches!(i, Item::Rpcordma(_)))
        else {
            panic!("{f:?}")
        };
        assert_eq!((r.xid, r.writes), (0x91366ff8, 1));
        assert_eq!(r.write_handles, vec![0x5dde5bea]);
        assert_eq!(r.write_chunk_lengths, vec![33]);
        let n = f.items.len();
        assert_eq!(
            f.items[n - 2],
            Item::Nfs3 {
                procedure: 6,
                read_len: Some(33)
            }
        );
        assert_eq!(
            f.items[n - 1],
            Item::Malformed("[Malformed Packet: NFS]".into())
        );
    }

    #[test]
    fn verbose_sample() {
        let mut frames = Vec::new();
        let n = parse_verbose(SAMPLE.as_bytes(), |f| frames.push(f)).unwrap();
        assert_eq!(n, 2);
        let f = &frames[0];
        assert_eq!((f.number, f.src_port, f.dst_port), (26, 37264, 45187));
        let Item::Fpdu(p) = &f.items[0] else {
            panic!("{f:?}")
        };
        assert_eq!(p.crc, CrcStatus::Good);
        assert_eq!(p.payload_len(), Some(1025));
        let d = p.ddp.as_ref().unwrap();
        assert!(d.tagged && d.last);
        assert_eq!(d.stag, Some(0x26316da7));
        assert_eq!(d.opcode, Some(opcode::READ_RESPONSE));
        assert_eq!(
            f.items[1],
            Item::Reassembled {
                fragments: 3,
                bytes: 1072
            }
        );
        assert_eq!(
            f.items[2],
            Item::Rpc(Rpc {
                xid: 0xf85acac3,
                call: true
            })
        );
        let g = &frames[1];
        let Item::Fpdu(p) = &g.items[0] else { panic!() };
        assert_eq!(p.crc, CrcStatus::Bad);
        let d = p.ddp.as_ref().unwrap();
        assert_eq!((d.qn, d.msn, d.mo), (Some(0), Some(9), Some(0)));
        assert_eq!(d.opcode, Some(opcode::SEND_INVALIDATE));
        let Item::Rpcordma(r) = &g.items[1] else {
            panic!()
        };
        assert_eq!(
            (r.xid, r.msg_type, r.reads, r.writes, r.reply),
            (0xf85acac3, 1, 1, 0, 1)
        );
        assert_eq!(r.read_handles, vec![0x93fece05]);
        assert_eq!(r.reply_handles, vec![0x501]);
    }

    #[test]
    fn fields_line() {
        let m = parse_fields_line(
            "57\t0\t0\t6291456\x1f2097152\tTCP Zero Window segment\x1fTCP window update\t",
        )
        .unwrap();
        assert_eq!(m.number, 57);
        assert_eq!(m.stream, Some(0));
        assert!(!m.reset);
        assert_eq!(m.expert.len(), 2);
        assert_eq!(
            m.expert[0],
            (severity::WARN, "TCP Zero Window segment".into())
        );
        let m = parse_fields_line("3\t\t\t\t\t").unwrap();
        assert_eq!(m.stream, None);
        assert!(m.expert.is_empty());
    }
}
