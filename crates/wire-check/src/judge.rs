//! Judging decoded frames per iWARP connection.

use crate::parse::{msg_type, opcode, severity, CrcStatus, Frame, FrameMeta, Item, MpaHandshake};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// TCP expert warnings that are flow control, not defects: the receiver
/// was slower than the sender (window full / zero window and its probes)
/// or the stack resent a segment (D-SACK). Loopback bursts produce them;
/// they say nothing about the bytes of the stream. Every other warning or
/// error (e.g. "previous segment not captured", malformed) fails.
pub const TCP_FLOW_CONTROL: &[&str] = &[
    "TCP window specified by the receiver is now completely full",
    "TCP Zero Window segment",
    "TCP Zero Window Probe",
    "TCP ZeroWindowProbe",
    "D-SACK Sequence",
    "Zero window probe",
];

/// TCP warnings about segments missing from the capture or arriving out
/// of order. On loopback, segments a sender queues from several CPUs can
/// reach the wire (and the capture) reordered; when every byte stream is
/// verified complete (see [`Verdict::streams_complete`]) these warnings
/// are reordering, not loss, and are counted instead of failed.
pub const TCP_CAPTURE_GAPS: &[&str] = &[
    "Previous segment(s) not captured",
    "This frame is a (suspected) out-of-order segment",
    "ACKed segment that wasn't captured",
];

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Frame number.
    pub frame: u64,
    /// What is wrong.
    pub what: String,
}

/// How a connection is judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    /// MPA Request and Reply (accepted) seen, no Terminate: every check applies.
    Healthy,
    /// Carries an RDMAP Terminate (a negative test, or a peer reacting to a
    /// defect): judged fully up to the Terminate, except that failures in
    /// FPDUs the terminating peer *received* just before it (the fault it
    /// reacted to) are listed as excused, not failed.
    Terminated {
        /// Frame of the first Terminate.
        frame: u64,
        /// Source port of its sender.
        by_port: u16,
    },
    /// MPA Request without an accepting Reply (rejected or never
    /// answered): only the MPA frames are judged.
    MpaIncomplete,
}

/// Counters and verdict of one connection.
#[derive(Debug, Clone)]
pub struct Connection {
    /// tcp.stream.
    pub stream: u64,
    /// Initiator's port.
    pub initiator: u16,
    /// Responder's port.
    pub responder: u16,
    /// First frame (the MPA Request).
    pub first_frame: u64,
    /// Class.
    pub class: Class,
    /// CRC in use.
    pub crc: bool,
    /// FPDUs judged.
    pub fpdus: u64,
    /// RPC-over-RDMA messages by type name.
    pub rpcordma: BTreeMap<&'static str, u64>,
    /// RPC messages tshark decoded.
    pub rpcs: u64,
    /// RPC messages reassembled from chunks (Read/Reply chunks, multi-FPDU Sends).
    pub reassembled: u64,
    /// Replies with Write chunks (reduced message checked; chunk data not reinserted by tshark).
    pub write_chunk_replies: u64,
    /// Calls with a Read chunk, or RDMA_NOMSG replies, whose chunk handle
    /// an earlier, already answered call on the same connection offered
    /// (Linux reuses its registrations): tshark 4.0 files chunk segments
    /// per connection by handle (and offset), finds the stale segment and
    /// cannot reassemble them, so they are judged by the judge's own
    /// checks (Read chunk read in full before the reply; an RDMA Write to
    /// the Reply chunk), and counted. A handle offered again while the
    /// call that offered it is unanswered fails.
    pub reused_handle_chunks: u64,
    /// Calls whose RPC message did not decode that the responder answered
    /// with RDMA_ERROR (their failures are excused).
    pub error_answered_calls: u64,
    /// Operations (Read Requests, chunk reassemblies) still outstanding
    /// when a peer closed or reset the connection (excused, listed).
    pub closed_with_outstanding: u64,
    /// RSTs (TCP "Connection reset" warnings; not failures).
    pub resets: u64,
    /// RDMA Sends shorter than an RPC-over-RDMA header on connections that
    /// do not carry RPC-over-RDMA, which tshark 4.0 reports as malformed
    /// RPCoRDMA packets (its heuristic reads before checking the length).
    pub short_sends: u64,
    /// NFS READ (and READLINK) replies (RDMA_MSG/RDMA_MSGP from the
    /// responder) whose data went into a Write chunk of a length that is not a multiple of
    /// 4: RFC 8166 §3.4.6 forbids XDR roundup padding in a Write chunk,
    /// but tshark 4.0's NFS dissector expects the pad after the data it
    /// re-inserted and reports the reply as malformed. Only that
    /// malformed report, last in such a reply, is excused (listed).
    pub unpadded_read_replies: u64,
    /// TCP flow-control warnings (not failures).
    pub flow_control_warnings: u64,
    /// TCP reordering warnings excused because every byte stream was
    /// verified complete ([`TCP_CAPTURE_GAPS`]).
    pub reordering_warnings: u64,
    /// Failed checks.
    pub failures: Vec<Failure>,
    /// Failures excused as the fault a Terminate reacted to.
    pub excused: Vec<Failure>,
}

/// The judgement of a whole capture.
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    /// iWARP connections (an MPA Request seen), by stream.
    pub connections: Vec<Connection>,
    /// TCP connections without MPA (ignored).
    pub other_tcp_streams: u64,
    /// Frames tshark decoded.
    pub frames: u64,
    /// What re-segmenting the capture did (zero when judged as it was).
    pub resegment: crate::resegment::Stats,
}

impl Verdict {
    /// All failures.
    pub fn failures(&self) -> impl Iterator<Item = (&Connection, &Failure)> {
        self.connections
            .iter()
            .flat_map(|c| c.failures.iter().map(move |f| (c, f)))
    }
    /// Replaces every frame number `n` (1-based) by `map[n - 1]`: the
    /// numbers of the capture a re-segmented one was made from.
    pub fn remap(&mut self, map: &[u64]) {
        let m = |n: &mut u64| {
            if let Some(o) = usize::try_from(*n)
                .ok()
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| map.get(i))
            {
                *n = *o;
            }
        };
        for c in &mut self.connections {
            m(&mut c.first_frame);
            if let Class::Terminated { frame, .. } = &mut c.class {
                m(frame);
            }
            for f in c.failures.iter_mut().chain(c.excused.iter_mut()) {
                m(&mut f.frame);
                f.what = remap_text(&f.what, map);
            }
        }
    }
    /// Called when every MPA byte stream of the capture was rebuilt without
    /// a hole: TCP's warnings about uncaptured or out-of-order segments
    /// are then reordering on the wire, not loss, and are counted.
    pub fn streams_complete(&mut self) {
        for c in &mut self.connections {
            let before = c.failures.len();
            c.failures.retain(|f| {
                !(f.what.starts_with("expert warning: ")
                    && TCP_CAPTURE_GAPS.iter().any(|g| f.what[16..].starts_with(g)))
            });
            c.reordering_warnings += (before - c.failures.len()) as u64;
        }
    }
    /// True when nothing failed.
    pub fn passed(&self) -> bool {
        self.failures().next().is_none()
            && !self.connections.is_empty()
            && self.resegment.incomplete_directions.is_empty()
    }
}

#[derive(Default)]
struct QueueState {
    msn: u32,
    mo: u64,
}

struct PendingRead {
    sink_stag: u32,
    src_stag: u32,
    remaining: u64,
    frame: u64,
}

/// `text` with every "frame N" naming frame `map[N - 1]`.
fn remap_text(text: &str, map: &[u64]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("frame ") {
        out.push_str(&rest[..i + 6]);
        rest = &rest[i + 6..];
        let n = rest.bytes().take_while(u8::is_ascii_digit).count();
        if n > 0 {
            let orig = rest[..n]
                .parse::<usize>()
                .ok()
                .and_then(|v| v.checked_sub(1))
                .and_then(|i| map.get(i));
            match orig {
                Some(o) => out.push_str(&o.to_string()),
                None => out.push_str(&rest[..n]),
            }
            rest = &rest[n..];
        }
    }
    out.push_str(rest);
    out
}

/// Judges `frames` (all frames with decoded iWARP/RPC items, in order)
/// with the per-frame `meta` (stream, expert items).
pub fn judge(frames: &[Frame], meta: &HashMap<u64, FrameMeta>) -> Verdict {
    let mut by_stream: BTreeMap<u64, Vec<&Frame>> = BTreeMap::new();
    let mut streams: HashSet<u64> = HashSet::new();
    for m in meta.values() {
        if let Some(s) = m.stream {
            streams.insert(s);
        }
    }
    for f in frames {
        if let Some(s) = meta.get(&f.number).and_then(|m| m.stream) {
            by_stream.entry(s).or_default().push(f);
        }
    }
    let mut expert_by_stream: HashMap<u64, Vec<(u64, u32, &str)>> = HashMap::new();
    for m in meta.values() {
        if let Some(s) = m.stream {
            for (sev, msg) in &m.expert {
                if *sev >= severity::WARN {
                    expert_by_stream
                        .entry(s)
                        .or_default()
                        .push((m.number, *sev, msg.as_str()));
                }
            }
        }
    }
    // First FIN or RST of every stream.
    let mut closed: HashMap<u64, u64> = HashMap::new();
    for m in meta.values() {
        if let Some(s) = m.stream {
            let fin = m
                .expert
                .iter()
                .any(|(_, msg)| msg.starts_with("Connection finish (FIN)"));
            if m.reset || fin {
                let e = closed.entry(s).or_insert(m.number);
                *e = (*e).min(m.number);
            }
        }
    }
    let mut v = Verdict {
        frames: frames.len() as u64,
        ..Verdict::default()
    };
    for (stream, fs) in by_stream {
        let has_mpa = fs
            .iter()
            .any(|f| f.items.iter().any(|i| matches!(i, Item::MpaRequest(_))));
        if !has_mpa {
            continue;
        }
        let mut ex = expert_by_stream.remove(&stream).unwrap_or_default();
        ex.sort();
        v.connections.push(judge_connection(
            stream,
            &fs,
            &ex,
            closed.get(&stream).copied(),
        ));
    }
    v.other_tcp_streams = streams.len() as u64 - v.connections.len() as u64;
    v
}

fn judge_connection(
    stream: u64,
    fs: &[&Frame],
    expert: &[(u64, u32, &str)],
    closed: Option<u64>,
) -> Connection {
    let mut c = Connection {
        stream,
        initiator: 0,
        responder: 0,
        first_frame: fs[0].number,
        class: Class::Healthy,
        crc: false,
        fpdus: 0,
        rpcordma: BTreeMap::new(),
        rpcs: 0,
        reassembled: 0,
        write_chunk_replies: 0,
        reused_handle_chunks: 0,
        error_answered_calls: 0,
        closed_with_outstanding: 0,
        resets: 0,
        short_sends: 0,
        unpadded_read_replies: 0,
        flow_control_warnings: 0,
        reordering_warnings: 0,
        failures: Vec::new(),
        excused: Vec::new(),
    };
    let fail =
        |c: &mut Connection, frame: u64, what: String| c.failures.push(Failure { frame, what });

    // MPA negotiation.
    let mut req: Option<(u64, u16, MpaHandshake)> = None;
    let mut rep: Option<(u64, MpaHandshake)> = None;
    for f in fs {
        for it in &f.items {
            match it {
                Item::MpaRequest(h) if req.is_none() => {
                    req = Some((f.number, f.src_port, h.clone()))
                }
                Item::MpaReply(h) if rep.is_none() => rep = Some((f.number, h.clone())),
                Item::MpaRequest(_) | Item::MpaReply(_) => fail(
                    &mut c,
                    f.number,
                    "second MPA Request/Reply on one connection".into(),
                ),
                _ => {}
            }
        }
    }
    let Some((req_frame, ini_port, req_h)) = req else {
        unreachable!("only connections with an MPA Request are judged")
    };
    c.first_frame = req_frame;
    c.initiator = ini_port;
    c.responder = fs
        .iter()
        .find(|f| f.src_port == ini_port)
        .map(|f| f.dst_port)
        .unwrap_or(0);
    let Some((rep_frame, rep_h)) = rep.filter(|(_, h)| !h.reject) else {
        c.class = Class::MpaIncomplete;
        // Nothing after a rejected/unanswered Request may be an FPDU.
        for f in fs {
            if f.items.iter().any(|i| matches!(i, Item::Fpdu(_))) {
                fail(
                    &mut c,
                    f.number,
                    "FPDU on a connection whose MPA exchange did not complete".into(),
                );
            }
        }
        return c;
    };
    if req_h.markers || rep_h.markers {
        fail(
            &mut c,
            rep_frame,
            "MPA markers negotiated (not supported by this project)".into(),
        );
    }
    // RFC 5044 §7.1: CRC is used unless both sides set C = 0.
    c.crc = req_h.crc || rep_h.crc;

    // Terminate: the first one classifies the connection.
    let term = fs.iter().find_map(|f| {
        f.items.iter().find_map(|i| match i {
            Item::Fpdu(p) if p.ddp.as_ref().and_then(|d| d.opcode) == Some(opcode::TERMINATE) => {
                Some((f.number, f.src_port))
            }
            _ => None,
        })
    });
    if let Some((frame, by_port)) = term {
        c.class = Class::Terminated { frame, by_port };
    }
    let cut = term.map(|(f, _)| f).unwrap_or(u64::MAX);

    let mut queues: HashMap<(u16, u32), QueueState> = HashMap::new();
    let mut reads: HashMap<u16, VecDeque<PendingRead>> = HashMap::new();
    // XIDs whose RPC message tshark must produce by reassembly later.
    let mut pending_rpc: HashMap<(u32, bool), u64> = HashMap::new();
    // Chunk handles offered by the requester and the chunks' progress.
    let mut chunks = Chunks::default();
    // Calls whose RPC message did not decode (XID -> frame), and the frames
    // of those the responder answered with RDMA_ERROR.
    let mut calls_without_rpc: HashMap<u32, u64> = HashMap::new();
    let mut answered: HashSet<u64> = HashSet::new();
    // Frames with a short Send tshark takes for malformed RPCoRDMA.
    let mut short_sends: HashSet<u64> = HashSet::new();
    // Frames with an NFS READ reply whose unpadded Write chunk tshark
    // takes for a malformed NFS packet.
    let mut unpadded: HashSet<u64> = HashSet::new();
    for f in fs {
        if f.number > cut {
            break;
        }
        let dir = f.src_port;
        let items = &f.items;
        let mut i = 0;
        while i < items.len() {
            let it = &items[i];
            i += 1;
            match it {
                Item::Malformed(t) => fail(&mut c, f.number, format!("malformed: {t}")),
                Item::Fpdu(p) => {
                    c.fpdus += 1;
                    match (c.crc, p.crc) {
                        // Without CRC the field is still there (RFC 5044 §4.1), unchecked.
                        (true, CrcStatus::Good)
                        | (false, CrcStatus::Absent | CrcStatus::Unverified) => {}
                        (true, CrcStatus::Bad) => fail(&mut c, f.number, "Bad CRC32".into()),
                        (crc, s) => fail(
                            &mut c,
                            f.number,
                            format!("CRC status {s:?} with CRC negotiated={crc}"),
                        ),
                    }
                    let Some(d) = &p.ddp else {
                        fail(&mut c, f.number, "FPDU without a DDP header".into());
                        continue;
                    };
                    let Some(op) = d.opcode else {
                        fail(&mut c, f.number, "FPDU without an RDMAP opcode".into());
                        continue;
                    };
                    let Some(len) = p.payload_len() else {
                        fail(
                            &mut c,
                            f.number,
                            "FPDU length unknown or shorter than its header".into(),
                        );
                        continue;
                    };
                    if !d.tagged {
                        let (Some(qn), Some(msn), Some(mo)) = (d.qn, d.msn, d.mo) else {
                            fail(&mut c, f.number, "untagged FPDU without QN/MSN/MO".into());
                            continue;
                        };
                        let q = queues
                            .entry((dir, qn))
                            .or_insert(QueueState { msn: 1, mo: 0 });
                        if (msn, mo) != (q.msn, q.mo) {
                            let w = format!(
                                "QN {qn} from port {dir}: MSN/MO {msn}/{mo}, expected {}/{}",
                                q.msn, q.mo
                            );
                            fail(&mut c, f.number, w);
                        }
                        if d.last {
                            *q = QueueState {
                                msn: msn.wrapping_add(1),
                                mo: 0,
                            };
                        } else {
                            *q = QueueState { msn, mo: mo + len };
                        }
                    }
                    if op == opcode::WRITE {
                        if let Some(stag) = d.stag {
                            chunks.written.insert(stag);
                        }
                    }
                    if op == opcode::READ_REQUEST {
                        match d.read_request {
                            Some(r) => {
                                let q = reads.entry(dir).or_default();
                                // tshark maps Read Responses to their Read
                                // Request by the sink STag alone: two
                                // outstanding at once with one sink STag
                                // cannot be told apart (RFC 5040 allows it;
                                // our responder must not do it).
                                let rpc = !c.rpcordma.is_empty();
                                if let Some(o) =
                                    q.iter().find(|o| rpc && o.sink_stag == r.sink_stag)
                                {
                                    let w = format!(
                                        "Read Request names Data Sink STag {:#010x} like the outstanding Read Request of frame {} (tshark cannot map their Read Responses)",
                                        r.sink_stag, o.frame
                                    );
                                    fail(&mut c, f.number, w);
                                }
                                q.push_back(PendingRead {
                                    sink_stag: r.sink_stag,
                                    src_stag: r.src_stag,
                                    remaining: r.size,
                                    frame: f.number,
                                });
                            }
                            None => fail(&mut c, f.number, "Read Request without a body".into()),
                        }
                    }
                    if op == opcode::READ_RESPONSE {
                        let q = reads.iter_mut().find(|(p, _)| **p != dir).map(|(_, q)| q);
                        match q.and_then(|q| q.front_mut().map(|r| (r, 0usize))) {
                            None => fail(
                                &mut c,
                                f.number,
                                "Read Response without an outstanding Read Request".into(),
                            ),
                            Some((r, _)) => {
                                if Some(r.sink_stag) != d.stag {
                                    let w = format!(
                                        "Read Response to STag {:#010x}, the oldest Read Request (frame {}) names {:#010x}",
                                        d.stag.unwrap_or(0), r.frame, r.sink_stag
                                    );
                                    fail(&mut c, f.number, w);
                                }
                                if len > r.remaining {
                                    fail(
                                        &mut c,
                                        f.number,
                                        format!(
                                            "Read Response longer than requested ({} > {})",
                                            len, r.remaining
                                        ),
                                    );
                                    r.remaining = 0;
                                } else {
                                    r.remaining -= len;
                                }
                                if d.last {
                                    chunks.read_done.insert(r.src_stag);
                                    if r.remaining != 0 {
                                        let w = format!("Read Response ended {} bytes short of the Read Request (frame {})", r.remaining, r.frame);
                                        fail(&mut c, f.number, w);
                                    }
                                    if let Some(q) =
                                        reads.iter_mut().find(|(p, _)| **p != dir).map(|(_, q)| q)
                                    {
                                        q.pop_front();
                                    }
                                }
                            }
                        }
                    }
                    // Layers tshark decoded inside this FPDU's payload.
                    let mut j = i;
                    let mut inner: Vec<&Item> = Vec::new();
                    while j < items.len()
                        && !matches!(
                            items[j],
                            Item::Fpdu(_) | Item::MpaRequest(_) | Item::MpaReply(_)
                        )
                    {
                        inner.push(&items[j]);
                        j += 1;
                    }
                    i = j;
                    // See `short_sends`.
                    if opcode::is_send(op)
                        && len < 16
                        && c.rpcordma.is_empty()
                        && inner.len() == 1
                        && matches!(inner[0], Item::Malformed(t) if t.contains("RPCoRDMA"))
                        && f.items
                            .iter()
                            .filter(|i| matches!(i, Item::Malformed(_)))
                            .count()
                            == 1
                    {
                        c.short_sends += 1;
                        short_sends.insert(f.number);
                    }
                    let from_requester = dir == c.initiator;
                    // See `unpadded_read_replies`.
                    if !from_requester
                        && unpadded_read_reply(&inner)
                        && f.items
                            .iter()
                            .filter(|i| matches!(i, Item::Malformed(_)))
                            .count()
                            == 1
                    {
                        unpadded.insert(f.number);
                    }
                    judge_payload(
                        &mut c,
                        f.number,
                        op,
                        d.last,
                        from_requester,
                        &inner,
                        &mut pending_rpc,
                        &mut chunks,
                        &mut calls_without_rpc,
                        &mut answered,
                    );
                }
                Item::Rpcordma(_) | Item::Rpc(_) | Item::Reassembled { .. } | Item::Nfs3 { .. } => {
                    fail(&mut c, f.number, "RPC layer outside an FPDU".into())
                }
                Item::MpaRequest(_) | Item::MpaReply(_) => {}
            }
        }
    }
    let is_rpc = !c.rpcordma.is_empty();
    if is_rpc {
        // Every complete Send of an RPC-over-RDMA connection must have
        // decoded as rpcordma: checked in judge_payload via `sends`.
    }
    // Work still outstanding when the connection ended. With a complete
    // capture that only happens when a peer closed (FIN) or reset (RST)
    // the connection with it in flight, as tests of closing, dropping and
    // cutting connections do: then it is listed as excused (the operation
    // was cut by the close, the bytes before it were all judged); without
    // a close it fails.
    let mut outstanding: Vec<Failure> = Vec::new();
    if term.is_none() {
        for (dir, q) in &reads {
            for r in q {
                outstanding.push(Failure {
                    frame: r.frame,
                    what: format!("Read Request from port {dir} never answered"),
                });
            }
        }
        let mut p: Vec<_> = pending_rpc.iter().collect();
        p.sort_by_key(|(_, f)| **f);
        for ((xid, call), frame) in p {
            // Cut by a close only if some segment of its Read chunk was
            // never read in full; read in full and not reassembled fails.
            let read = chunks
                .pending_handles
                .get(xid)
                .is_some_and(|h| h.iter().all(|h| chunks.read_done.contains(h)));
            let w =
                format!(
                "RPC {} XID {xid:#010x} announced with chunks was never reassembled by tshark{}",
                if *call { "call" } else { "reply" },
                if read { " although its chunk was read in full" } else { "" }
            );
            let f = Failure {
                frame: *frame,
                what: w,
            };
            if read {
                c.failures.push(f);
            } else {
                outstanding.push(f);
            }
        }
        // Calls with a reused Read chunk handle, judged without tshark:
        // never answered and their chunk not read in full.
        let mut own: Vec<_> = chunks.own_reads.iter().collect();
        own.sort_by_key(|(_, (f, _))| *f);
        for (xid, (frame, h)) in own {
            if !h.iter().all(|h| chunks.read_done.contains(h)) {
                outstanding.push(Failure {
                    frame: *frame,
                    what: format!(
                        "RPC call XID {xid:#010x} with a reused Read chunk handle: its chunk was never read in full"
                    ),
                });
            }
        }
    }
    match closed {
        Some(_) if !outstanding.is_empty() => {
            c.closed_with_outstanding = outstanding.len() as u64;
            c.excused.extend(outstanding.into_iter().map(|f| Failure {
                frame: f.frame,
                what: format!("cut by the close (FIN/RST) of the connection: {}", f.what),
            }));
        }
        _ => c.failures.extend(outstanding),
    }
    // Expert items.
    for (frame, sev, msg) in expert {
        if *frame > cut {
            continue;
        }
        if TCP_FLOW_CONTROL.iter().any(|m| msg.contains(m)) && *sev < severity::ERROR {
            c.flow_control_warnings += 1;
            continue;
        }
        // An abortive close is a way to end a connection (a socket closed
        // with unread data resets it); what was cut is judged above.
        if msg.starts_with("Connection reset (RST)") && *sev < severity::ERROR {
            c.resets += 1;
            continue;
        }
        // tshark 4.0 bug: the rpcordma heuristic (packet_is_rpcordma) reads
        // the 16-byte header before checking the length, so every RDMA
        // Send shorter than that shows as a malformed RPCoRDMA packet.
        if short_sends.contains(frame) && msg.starts_with("Malformed Packet") {
            continue;
        }
        // See `unpadded_read_replies`: excused and listed.
        if unpadded.contains(frame) && msg.starts_with("Malformed Packet") {
            c.excused.push(Failure {
                frame: *frame,
                what: format!(
                    "NFS READ/READLINK reply data in a Write chunk without XDR roundup padding (RFC 8166 §3.4.6), which tshark 4.0's NFS dissector reads past: expert error: {msg}"
                ),
            });
            continue;
        }
        let kind = if *sev >= severity::ERROR {
            "error"
        } else {
            "warning"
        };
        fail(&mut c, *frame, format!("expert {kind}: {msg}"));
    }
    c.unpadded_read_replies = unpadded.len() as u64;
    // Calls whose RPC message did not decode and that the responder
    // answered with RDMA_ERROR (RFC 8166 §4.5): the fault was seen and
    // answered as the protocol requires; their failures (the call's
    // decode, expert items of its frame) are excused, not dropped.
    c.error_answered_calls = answered.len() as u64;
    let (excused, kept): (Vec<_>, Vec<_>) = c
        .failures
        .drain(..)
        .partition(|x| answered.contains(&x.frame));
    c.excused.extend(excused.into_iter().map(|f| Failure {
        frame: f.frame,
        what: format!("answered by RDMA_ERROR: {}", f.what),
    }));
    c.failures = kept;
    // A Terminate excuses failures in what its sender received just
    // before it (the fault it reacted to): FPDUs from the other peer after
    // the last frame that its sender sent before the Terminate... kept
    // simple and strict: only failures in frames travelling towards the
    // terminating peer, within the Terminate's own connection, strictly
    // before it, and only the last run of such frames.
    if let Class::Terminated { frame, by_port } = c.class {
        let toward: HashSet<u64> = fs
            .iter()
            .filter(|f| f.number < frame && f.dst_port == by_port)
            .map(|f| f.number)
            .collect();
        // The last frame the terminating peer sent before its Terminate.
        let last_own = fs
            .iter()
            .filter(|f| {
                f.number < frame
                    && f.src_port == by_port
                    && f.items.iter().any(|i| matches!(i, Item::Fpdu(_)))
            })
            .map(|f| f.number)
            .max()
            .unwrap_or(0);
        let (excused, kept): (Vec<_>, Vec<_>) = c
            .failures
            .drain(..)
            .partition(|x| toward.contains(&x.frame) && x.frame > last_own.min(frame));
        c.excused.extend(excused.into_iter().map(|f| Failure {
            frame: f.frame,
            what: format!("answered by a Terminate: {}", f.what),
        }));
        c.failures = kept;
    }
    c
}

/// Whether an FPDU's layers are an NFS version 3 reply carried in
/// RDMA_MSG/RDMA_MSGP whose DDP-eligible result went into a Write chunk
/// of a length that is not a multiple of 4 (RFC 8166 §3.4.6: no XDR
/// roundup padding), with tshark's malformed NFS report last, right after
/// the NFS layer: a READ reply (RFC 1813 §3.3.6) whose data length is the
/// chunk's length, or a READLINK reply (RFC 1813 §3.3.5; its pathname is
/// DDP-eligible by RFC 8267) whose chunk tshark re-inserted.
fn unpadded_read_reply(inner: &[&Item]) -> bool {
    let Some(r) = inner.iter().find_map(|i| match i {
        Item::Rpcordma(r) => Some(r),
        _ => None,
    }) else {
        return false;
    };
    if !matches!(r.msg_type, msg_type::MSG | msg_type::MSGP) {
        return false;
    }
    let reply = inner
        .iter()
        .any(|i| matches!(i, Item::Rpc(x) if x.xid == r.xid && !x.call));
    let reassembled = inner.iter().any(|i| matches!(i, Item::Reassembled { .. }));
    let Some(at) = inner.iter().position(|i| matches!(i, Item::Nfs3 { .. })) else {
        return false;
    };
    let unpadded = |l: &u64| !l.is_multiple_of(4);
    let eligible = match inner[at] {
        Item::Nfs3 {
            procedure: 6,
            read_len: Some(len),
        } => unpadded(len) && r.write_chunk_lengths.contains(len),
        Item::Nfs3 { procedure: 5, .. } => {
            reassembled && r.write_chunk_lengths.iter().any(unpadded)
        }
        _ => false,
    };
    reply
        && eligible
        && inner.len() == at + 2
        && matches!(inner[at + 1], Item::Malformed(t) if t == "[Malformed Packet: NFS]")
}

/// Chunk handles offered by a connection's requester, and what the judge
/// saw of their chunks.
#[derive(Debug, Default)]
struct Chunks {
    /// Every handle offered so far (any chunk list).
    ever: HashSet<u32>,
    /// Handles of calls not answered yet: handle -> (XID, frame).
    outstanding: HashMap<u32, (u32, u64)>,
    /// Read-chunk handles of calls waiting for tshark's reassembly.
    pending_handles: HashMap<u32, Vec<u32>>,
    /// Source STags whose Read Request was answered in full.
    read_done: HashSet<u32>,
    /// Calls whose Read chunk reuses an earlier call's handle (tshark 4.0
    /// cannot reassemble them), judged by the Read Responses: XID ->
    /// (frame, handles).
    own_reads: HashMap<u32, (u64, Vec<u32>)>,
    /// Calls whose Reply chunk reuses an earlier call's handle: XID ->
    /// handles.
    own_reply: HashMap<u32, Vec<u32>>,
    /// STags RDMA Writes were sent to.
    written: HashSet<u32>,
}

impl Chunks {
    /// The call with this XID was answered: its handles may be offered
    /// again.
    fn answer(&mut self, xid: u32) {
        self.outstanding.retain(|_, (x, _)| *x != xid);
    }
}

/// Checks the layers tshark decoded inside one FPDU's payload.
#[allow(clippy::too_many_arguments)] // the per-connection state it updates
fn judge_payload(
    c: &mut Connection,
    frame: u64,
    op: u8,
    last: bool,
    from_requester: bool,
    inner: &[&Item],
    pending: &mut HashMap<(u32, bool), u64>,
    chunks: &mut Chunks,
    calls_without_rpc: &mut HashMap<u32, u64>,
    answered: &mut HashSet<u64>,
) {
    let reassembled = inner.iter().any(|i| matches!(i, Item::Reassembled { .. }));
    let rpcordma = inner.iter().find_map(|i| match i {
        Item::Rpcordma(r) => Some(r),
        _ => None,
    });
    let rpcs: Vec<_> = inner
        .iter()
        .filter_map(|i| match i {
            Item::Rpc(r) => Some(*r),
            _ => None,
        })
        .collect();
    c.rpcs += rpcs.len() as u64;
    if opcode::is_send(op)
        && last
        && rpcordma.is_none()
        && (!c.rpcordma.is_empty() || !rpcs.is_empty())
    {
        c.failures.push(Failure {
            frame,
            what: "RDMA Send on an RPC-over-RDMA connection not decoded as rpcordma".into(),
        });
    }
    if let Some(r) = rpcordma {
        *c.rpcordma.entry(msg_type::name(r.msg_type)).or_default() += 1;
        let rpc_here = rpcs.iter().find(|x| x.xid == r.xid);
        let shared = |h: &[u32]| {
            let s: HashSet<u32> = h.iter().copied().collect();
            s.len() != h.len()
        };
        let no_rpc = |c: &mut Connection, what: &str| {
            c.failures.push(Failure {
                frame,
                what: format!(
                    "{} XID {:#010x}: {what} (RPC messages decoded here: {:?})",
                    msg_type::name(r.msg_type),
                    r.xid,
                    rpcs.iter()
                        .map(|x| format!("{:#010x}", x.xid))
                        .collect::<Vec<_>>()
                ),
            })
        };
        let data = matches!(r.msg_type, msg_type::MSG | msg_type::MSGP | msg_type::NOMSG);
        if data && from_requester {
            // A call (RFC 8166 §3.5): its RPC message is inline, or
            // reassembled from Read chunks in the frame of the last Read
            // Response.
            //
            // A handle names a registration the requester keeps until the
            // call's reply arrives (RFC 8166 §3.4.5), so offering it again
            // while a call that offered it is unanswered fails. Once that
            // reply was seen the requester may register the same handle
            // again (Linux reuses its registrations; the STag key wraps).
            // tshark 4.0 files segments by handle for the whole connection,
            // finds the earlier call's (finished) segment and cannot
            // reassemble the new chunk: such a Read chunk is judged by the
            // judge's own checks instead (every segment read in full before
            // the reply), a Reply chunk by an RDMA Write to it before the
            // RDMA_NOMSG reply.
            let all: Vec<u32> = r
                .read_handles
                .iter()
                .chain(&r.write_handles)
                .chain(&r.reply_handles)
                .copied()
                .collect();
            for h in &all {
                if let Some((xid, f)) = chunks.outstanding.get(h) {
                    if *xid != r.xid {
                        no_rpc(
                            c,
                            &format!(
                                "chunk handle {h:#010x} offered while the call XID {xid:#010x} (frame {f}) that offered it is still unanswered"
                            ),
                        );
                    }
                }
            }
            let reused = |h: &[u32]| h.iter().any(|h| chunks.ever.contains(h));
            if r.reads > 0 {
                if shared(&r.read_handles) {
                    no_rpc(c, "Read list names one handle in several segments");
                } else if reused(&r.read_handles) {
                    c.reused_handle_chunks += 1;
                    for h in &r.read_handles {
                        chunks.read_done.remove(h);
                    }
                    chunks
                        .own_reads
                        .insert(r.xid, (frame, r.read_handles.clone()));
                } else {
                    pending.insert((r.xid, true), frame);
                    chunks.pending_handles.insert(r.xid, r.read_handles.clone());
                }
            } else if r.msg_type == msg_type::NOMSG {
                no_rpc(
                    c,
                    "RDMA_NOMSG call without a Read chunk carrying the RPC call",
                );
            } else if rpc_here.is_none_or(|x| !x.call) {
                calls_without_rpc.insert(r.xid, frame);
                no_rpc(c, "no RPC call with that XID decoded below it");
            }
            if r.reply > 0 && reused(&r.reply_handles) {
                for h in &r.reply_handles {
                    chunks.written.remove(h);
                }
                chunks.own_reply.insert(r.xid, r.reply_handles.clone());
            }
            chunks.ever.extend(all.iter().copied());
            for h in &all {
                chunks.outstanding.insert(*h, (r.xid, frame));
            }
        } else if data {
            // A reply: inline (a reduced message when it has Write
            // chunks), or RDMA_NOMSG through the Reply chunk, reassembled
            // here.
            if r.reads > 0 {
                no_rpc(c, "reply with a Read list");
            }
            chunks.answer(r.xid);
            if let Some((_, h)) = chunks.own_reads.remove(&r.xid) {
                if !h.iter().all(|h| chunks.read_done.contains(h)) {
                    no_rpc(c, "reply sent before the call's Read chunk (a reused handle, judged without tshark's reassembly) was read in full");
                }
            }
            let own_reply = chunks.own_reply.remove(&r.xid);
            match rpc_here {
                Some(x) if !x.call => {
                    if r.writes > 0 {
                        c.write_chunk_replies += 1;
                    }
                }
                _ if r.msg_type == msg_type::NOMSG && own_reply.is_some() => {
                    c.reused_handle_chunks += 1;
                    let h = own_reply.unwrap_or_default();
                    if !h.iter().any(|h| chunks.written.contains(h)) {
                        no_rpc(c, "RDMA_NOMSG reply without an RDMA Write to its Reply chunk (a reused handle, judged without tshark's reassembly)");
                    }
                }
                _ if r.msg_type == msg_type::NOMSG => {
                    no_rpc(c, "Reply chunk not reassembled into an RPC reply")
                }
                _ => no_rpc(c, "no RPC reply with that XID decoded below it"),
            }
        } else if r.msg_type == msg_type::ERROR && !from_requester {
            // RFC 8166 §4.5: the responder could not process the call
            // with this XID; a call it could not parse is answered.
            chunks.answer(r.xid);
            chunks.own_reads.remove(&r.xid);
            chunks.own_reply.remove(&r.xid);
            if let Some(f) = calls_without_rpc.remove(&r.xid) {
                answered.insert(f);
            }
        } else if r.msg_type != msg_type::DONE {
            no_rpc(c, "unexpected message type from this peer");
        }
        if reassembled && rpc_here.is_some() {
            c.reassembled += 1;
        }
    } else if !rpcs.is_empty() {
        // An RPC message produced by reassembly in a Read Response (or the
        // last segment of a multi-FPDU Send).
        for x in &rpcs {
            if reassembled {
                c.reassembled += 1;
            }
            pending.remove(&(x.xid, x.call));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{Ddp, Fpdu, ReadRequest, Rpc, Rpcordma};

    const INI: u16 = 40000;
    const RESP: u16 = 20049;

    fn frame(n: u64, from_ini: bool, items: Vec<Item>) -> Frame {
        let (s, d) = if from_ini { (INI, RESP) } else { (RESP, INI) };
        Frame {
            number: n,
            src_port: s,
            dst_port: d,
            items,
        }
    }
    fn handshake() -> Vec<Frame> {
        let h = MpaHandshake {
            crc: true,
            revision: 2,
            ..Default::default()
        };
        vec![
            frame(1, true, vec![Item::MpaRequest(h.clone())]),
            frame(2, false, vec![Item::MpaReply(h)]),
        ]
    }
    fn send(msn: u32, len: u32, op: u8) -> Fpdu {
        Fpdu {
            ulpdu_len: Some(18 + len),
            crc: CrcStatus::Good,
            ddp: Some(Ddp {
                last: true,
                qn: Some(0),
                msn: Some(msn),
                mo: Some(0),
                opcode: Some(op),
                ..Default::default()
            }),
        }
    }
    fn meta(frames: &[Frame]) -> HashMap<u64, FrameMeta> {
        frames
            .iter()
            .map(|f| {
                (
                    f.number,
                    FrameMeta {
                        number: f.number,
                        stream: Some(0),
                        ..Default::default()
                    },
                )
            })
            .collect()
    }
    fn run(frames: &[Frame]) -> Verdict {
        judge(frames, &meta(frames))
    }

    #[test]
    fn inline_rpc_passes_and_xid_mismatch_fails() {
        let mut fs = handshake();
        let r = Rpcordma {
            xid: 7,
            msg_type: msg_type::MSG,
            ..Default::default()
        };
        fs.push(frame(
            3,
            true,
            vec![
                Item::Fpdu(send(1, 60, opcode::SEND)),
                Item::Rpcordma(r.clone()),
                Item::Rpc(Rpc { xid: 7, call: true }),
            ],
        ));
        assert!(run(&fs).passed(), "{:?}", run(&fs));
        fs.push(frame(
            4,
            true,
            vec![
                Item::Fpdu(send(2, 60, opcode::SEND)),
                Item::Rpcordma(Rpcordma { xid: 8, ..r }),
                Item::Rpc(Rpc { xid: 9, call: true }),
            ],
        ));
        let v = run(&fs);
        assert!(
            v.failures()
                .any(|(_, f)| f.frame == 4 && f.what.contains("no RPC call")),
            "{v:?}"
        );
        // The same undecodable call answered by RDMA_ERROR from the
        // responder is excused (and listed); unanswered, it fails.
        let mut answered = fs.clone();
        answered.push(frame(
            5,
            false,
            vec![
                Item::Fpdu(send(1, 20, opcode::SEND)),
                Item::Rpcordma(Rpcordma {
                    xid: 8,
                    msg_type: msg_type::ERROR,
                    ..Default::default()
                }),
            ],
        ));
        let v = run(&answered);
        assert!(v.passed(), "{v:?}");
        assert_eq!(v.connections[0].error_answered_calls, 1);
        assert!(v.connections[0].excused[0].what.contains("RDMA_ERROR"));
    }

    #[test]
    fn nomsg_reply_must_carry_the_reassembled_reply() {
        let mut fs = handshake();
        let call = Rpcordma {
            xid: 7,
            msg_type: msg_type::MSG,
            reply: 1,
            reply_handles: vec![0x100],
            ..Default::default()
        };
        fs.push(frame(
            3,
            true,
            vec![
                Item::Fpdu(send(1, 60, opcode::SEND)),
                Item::Rpcordma(call.clone()),
                Item::Rpc(Rpc { xid: 7, call: true }),
            ],
        ));
        let reply = Rpcordma {
            msg_type: msg_type::NOMSG,
            ..call.clone()
        };
        let mut bad = fs.clone();
        bad.push(frame(
            4,
            false,
            vec![
                Item::Fpdu(send(1, 40, opcode::SEND)),
                Item::Rpcordma(reply.clone()),
            ],
        ));
        let v = run(&bad);
        assert!(
            v.failures()
                .any(|(_, f)| f.frame == 4 && f.what.contains("Reply chunk not reassembled")),
            "{v:?}"
        );
        fs.push(frame(
            4,
            false,
            vec![
                Item::Fpdu(send(1, 40, opcode::SEND)),
                Item::Rpcordma(reply),
                Item::Reassembled {
                    fragments: 1,
                    bytes: 100,
                },
                Item::Rpc(Rpc {
                    xid: 7,
                    call: false,
                }),
            ],
        ));
        let v = run(&fs);
        assert!(v.passed(), "{v:?}");
        assert_eq!(v.connections[0].reassembled, 1);
        // A later call may offer the handle again once the reply was seen;
        // tshark cannot reassemble its Reply chunk, so the RDMA_NOMSG
        // reply is judged by an RDMA Write to the chunk, and counted.
        let again = Rpcordma { xid: 9, ..call };
        fs.push(frame(
            5,
            true,
            vec![
                Item::Fpdu(send(2, 60, opcode::SEND)),
                Item::Rpcordma(again.clone()),
                Item::Rpc(Rpc { xid: 9, call: true }),
            ],
        ));
        let nomsg = frame(
            7,
            false,
            vec![
                Item::Fpdu(send(2, 40, opcode::SEND)),
                Item::Rpcordma(Rpcordma {
                    msg_type: msg_type::NOMSG,
                    ..again
                }),
            ],
        );
        let mut unwritten = fs.clone();
        unwritten.push(nomsg.clone());
        let v = run(&unwritten);
        assert!(
            v.failures()
                .any(|(_, f)| f.frame == 7 && f.what.contains("without an RDMA Write")),
            "{v:?}"
        );
        fs.push(frame(6, false, vec![Item::Fpdu(write_to(0x100, 100))]));
        fs.push(nomsg);
        let v = run(&fs);
        assert!(v.passed(), "{v:?}");
        assert_eq!(v.connections[0].reused_handle_chunks, 1);
    }

    fn write_to(stag: u32, len: u32) -> Fpdu {
        Fpdu {
            ulpdu_len: Some(14 + len),
            crc: CrcStatus::Good,
            ddp: Some(Ddp {
                tagged: true,
                last: true,
                stag: Some(stag),
                to: Some(0),
                opcode: Some(opcode::WRITE),
                ..Default::default()
            }),
        }
    }

    fn read_response(sink: u32, len: u32) -> Fpdu {
        Fpdu {
            ulpdu_len: Some(14 + len),
            crc: CrcStatus::Good,
            ddp: Some(Ddp {
                tagged: true,
                last: true,
                stag: Some(sink),
                to: Some(0),
                opcode: Some(opcode::READ_RESPONSE),
                ..Default::default()
            }),
        }
    }

    fn read_request(msn: u32, sink: u32, src: u32, size: u64) -> Fpdu {
        let mut rr = send(msn, 28, opcode::READ_REQUEST);
        rr.ddp.as_mut().unwrap().qn = Some(1);
        rr.ddp.as_mut().unwrap().read_request = Some(ReadRequest {
            sink_stag: sink,
            size,
            src_stag: src,
        });
        rr
    }

    fn reply(n: u64, msn: u32, xid: u32) -> Frame {
        frame(
            n,
            false,
            vec![
                Item::Fpdu(send(msn, 60, opcode::SEND)),
                Item::Rpcordma(Rpcordma {
                    xid,
                    msg_type: msg_type::MSG,
                    ..Default::default()
                }),
                Item::Rpc(Rpc { xid, call: false }),
            ],
        )
    }

    /// `call_with_read_chunk` read in full, reassembled by tshark.
    fn read_chunk_call_done() -> Vec<Frame> {
        let mut fs = call_with_read_chunk();
        fs.push(frame(
            5,
            true,
            vec![
                Item::Fpdu(read_response(0x11, 1000)),
                Item::Reassembled {
                    fragments: 3,
                    bytes: 1100,
                },
                Item::Rpc(Rpc { xid: 5, call: true }),
            ],
        ));
        fs
    }

    fn call_reusing_0xaa(n: u64, msn: u32) -> Frame {
        frame(
            n,
            true,
            vec![
                Item::Fpdu(send(msn, 100, opcode::SEND)),
                Item::Rpcordma(Rpcordma {
                    xid: 6,
                    msg_type: msg_type::MSG,
                    reads: 1,
                    read_handles: vec![0xaa],
                    ..Default::default()
                }),
            ],
        )
    }

    #[test]
    fn handle_offered_again_only_after_the_reply() {
        // While the call that offered it is unanswered: fails.
        let mut early = read_chunk_call_done();
        early.push(call_reusing_0xaa(6, 2));
        let v = run(&early);
        assert!(
            v.failures()
                .any(|(_, f)| f.frame == 6 && f.what.contains("still unanswered")),
            "{v:?}"
        );
        // After its reply: the reused Read chunk is judged by its Read
        // Responses (tshark cannot reassemble it) and counted.
        let mut fs = read_chunk_call_done();
        fs.push(reply(6, 1, 5));
        fs.push(call_reusing_0xaa(7, 2));
        let unread = fs.clone();
        fs.push(frame(
            8,
            false,
            vec![Item::Fpdu(read_request(2, 0x12, 0xaa, 500))],
        ));
        let mut early_reply = fs.clone();
        fs.push(frame(9, true, vec![Item::Fpdu(read_response(0x12, 500))]));
        fs.push(reply(10, 2, 6));
        let v = run(&fs);
        assert!(v.passed(), "{v:?}");
        assert_eq!(v.connections[0].reused_handle_chunks, 1);
        // Answered before its Read chunk was read in full: fails.
        early_reply.push(reply(9, 2, 6));
        let v = run(&early_reply);
        assert!(
            v.failures()
                .any(|(_, f)| f.frame == 9 && f.what.contains("before the call's Read chunk")),
            "{v:?}"
        );
        // Never read and never answered, without a close: fails.
        let v = run(&unread);
        assert!(
            v.failures()
                .any(|(_, f)| f.frame == 7 && f.what.contains("never read in full")),
            "{v:?}"
        );
    }

    #[test]
    fn undecoded_send_on_rpc_connection_fails() {
        let mut fs = handshake();
        let r = Rpcordma {
            xid: 7,
            msg_type: msg_type::MSG,
            ..Default::default()
        };
        fs.push(frame(
            3,
            true,
            vec![
                Item::Fpdu(send(1, 60, opcode::SEND)),
                Item::Rpcordma(r),
                Item::Rpc(Rpc { xid: 7, call: true }),
            ],
        ));
        fs.push(frame(4, true, vec![Item::Fpdu(send(2, 60, opcode::SEND))]));
        let v = run(&fs);
        assert!(
            v.failures()
                .any(|(_, f)| f.frame == 4 && f.what.contains("not decoded as rpcordma")),
            "{v:?}"
        );
    }

    /// The handshake, an RDMA_MSG call (XID 5) with a Read chunk of handle
    /// 0xaa in frame 3, and the server's Read Request for it (1000 bytes
    /// into sink STag 0x11) in frame 4.
    fn call_with_read_chunk() -> Vec<Frame> {
        let mut fs = handshake();
        let r = Rpcordma {
            xid: 5,
            msg_type: msg_type::MSG,
            reads: 1,
            read_handles: vec![0xaa],
            ..Default::default()
        };
        fs.push(frame(
            3,
            true,
            vec![Item::Fpdu(send(1, 100, opcode::SEND)), Item::Rpcordma(r)],
        ));
        let mut rr = send(1, 28, opcode::READ_REQUEST);
        rr.ddp.as_mut().unwrap().qn = Some(1);
        rr.ddp.as_mut().unwrap().read_request = Some(ReadRequest {
            sink_stag: 0x11,
            size: 1000,
            src_stag: 0xaa,
        });
        fs.push(frame(4, false, vec![Item::Fpdu(rr)]));
        fs
    }

    #[test]
    fn read_chunk_must_be_reassembled() {
        let mut fs = call_with_read_chunk();
        let resp = Fpdu {
            ulpdu_len: Some(14 + 1000),
            crc: CrcStatus::Good,
            ddp: Some(Ddp {
                tagged: true,
                last: true,
                stag: Some(0x11),
                to: Some(0),
                opcode: Some(opcode::READ_RESPONSE),
                ..Default::default()
            }),
        };
        // Without the reassembled RPC: the pending call fails.
        let mut no = fs.clone();
        no.push(frame(5, true, vec![Item::Fpdu(resp.clone())]));
        let v = run(&no);
        assert!(
            v.failures()
                .any(|(_, f)| f.frame == 3 && f.what.contains("never reassembled")),
            "{v:?}"
        );
        // With it: passes and counts.
        fs.push(frame(
            5,
            true,
            vec![
                Item::Fpdu(resp),
                Item::Reassembled {
                    fragments: 3,
                    bytes: 1100,
                },
                Item::Rpc(Rpc { xid: 5, call: true }),
            ],
        ));
        let v = run(&fs);
        assert!(v.passed(), "{v:?}");
        assert_eq!(v.connections[0].reassembled, 1);
    }

    #[test]
    fn terminate_excuses_only_the_fault_it_answers() {
        let mut fs = handshake();
        fs.push(frame(3, true, vec![Item::Fpdu(send(1, 8, opcode::SEND))]));
        let mut bad = send(2, 8, opcode::SEND);
        bad.crc = CrcStatus::Bad;
        fs.push(frame(4, true, vec![Item::Fpdu(bad.clone())]));
        let mut t = send(1, 28, opcode::TERMINATE);
        t.ddp.as_mut().unwrap().qn = Some(2);
        fs.push(frame(5, false, vec![Item::Fpdu(t)]));
        let v = run(&fs);
        assert!(v.passed(), "{v:?}");
        assert_eq!(v.connections[0].excused.len(), 1);
        assert!(matches!(
            v.connections[0].class,
            Class::Terminated {
                frame: 5,
                by_port: RESP
            }
        ));
        // A bad CRC in the direction of the Terminate's sender... but
        // *before* that sender's own later traffic is not excused.
        let mut fs2 = handshake();
        fs2.push(frame(3, true, vec![Item::Fpdu(bad)]));
        fs2.push(frame(4, false, vec![Item::Fpdu(send(1, 8, opcode::SEND))]));
        let mut t = send(1, 28, opcode::TERMINATE);
        t.ddp.as_mut().unwrap().qn = Some(2);
        t.ddp.as_mut().unwrap().msn = Some(1);
        fs2.push(frame(5, false, vec![Item::Fpdu(t)]));
        let v = run(&fs2);
        assert!(
            v.failures()
                .any(|(_, f)| f.frame == 3 && f.what.contains("Bad CRC32")),
            "{v:?}"
        );
        // Without a Terminate the bad CRC fails.
        let mut fs3 = handshake();
        let mut b = send(1, 8, opcode::SEND);
        b.crc = CrcStatus::Bad;
        fs3.push(frame(3, true, vec![Item::Fpdu(b)]));
        assert!(!run(&fs3).passed());
    }

    #[test]
    fn rejected_mpa_is_not_healthy_and_fpdus_after_it_fail() {
        let h = MpaHandshake {
            crc: true,
            revision: 2,
            ..Default::default()
        };
        let rej = MpaHandshake {
            reject: true,
            ..h.clone()
        };
        let mut fs = vec![
            frame(1, true, vec![Item::MpaRequest(h)]),
            frame(2, false, vec![Item::MpaReply(rej)]),
        ];
        let v = run(&fs);
        assert!(v.passed());
        assert_eq!(v.connections[0].class, Class::MpaIncomplete);
        fs.push(frame(3, true, vec![Item::Fpdu(send(1, 8, opcode::SEND))]));
        assert!(!run(&fs).passed());
    }

    #[test]
    fn tcp_expert_warnings_other_than_flow_control_fail() {
        let fs = handshake();
        let mut m = meta(&fs);
        m.get_mut(&2)
            .unwrap()
            .expert
            .push((severity::WARN, "TCP Zero Window segment".into()));
        assert!(judge(&fs, &m).passed());
        m.get_mut(&2).unwrap().expert.push((
            severity::WARN,
            "Previous segment(s) not captured (common at capture start)".into(),
        ));
        let v = judge(&fs, &m);
        assert!(
            v.failures()
                .any(|(_, f)| f.frame == 2 && f.what.contains("not captured")),
            "{v:?}"
        );
    }

    #[test]
    fn work_cut_by_a_close_is_excused_only_with_the_close() {
        let fs = call_with_read_chunk();
        let v = run(&fs);
        assert!(
            v.failures().any(|(_, f)| f.what.contains("never answered")),
            "{v:?}"
        );
        let mut m = meta(&fs);
        m.insert(
            5,
            FrameMeta {
                number: 5,
                stream: Some(0),
                reset: true,
                expert: vec![(severity::WARN, "Connection reset (RST)".into())],
                groups: vec![crate::parse::group::SEQUENCE],
            },
        );
        let v = judge(&fs, &m);
        assert!(v.passed(), "{v:?}");
        let c = &v.connections[0];
        assert_eq!((c.closed_with_outstanding, c.resets), (2, 1));
        assert!(c
            .excused
            .iter()
            .all(|e| e.what.contains("cut by the close")));
    }

    #[test]
    fn short_send_malformed_only_excused_off_rpc_connections() {
        let mut fs = handshake();
        fs.push(frame(
            3,
            false,
            vec![
                Item::Fpdu(send(1, 5, opcode::SEND)),
                Item::Malformed("[Malformed Packet: RPCoRDMA]".into()),
            ],
        ));
        let mut m = meta(&fs);
        m.get_mut(&3).unwrap().expert.push((
            severity::ERROR,
            "Malformed Packet (Exception occurred)".into(),
        ));
        let v = judge(&fs, &m);
        assert!(v.passed(), "{v:?}");
        assert_eq!(v.connections[0].short_sends, 1);
        // A 20-byte Send flagged malformed is not excused.
        let mut fs2 = handshake();
        fs2.push(frame(
            3,
            false,
            vec![
                Item::Fpdu(send(1, 20, opcode::SEND)),
                Item::Malformed("[Malformed Packet: RPCoRDMA]".into()),
            ],
        ));
        assert!(!judge(&fs2, &m).passed());
    }

    /// An NFS READ reply from the responder with data of `len` bytes in
    /// a Write chunk of `chunk` bytes, and tshark's malformed report of
    /// `layer` after it.
    fn read_reply(
        len: u64,
        chunk: u64,
        layer: &str,
        from_ini: bool,
    ) -> (Vec<Frame>, HashMap<u64, FrameMeta>) {
        let mut fs = handshake();
        fs.push(frame(
            3,
            from_ini,
            vec![
                Item::Fpdu(send(1, 128, opcode::SEND)),
                Item::Rpcordma(Rpcordma {
                    xid: 4,
                    msg_type: msg_type::MSG,
                    writes: 1,
                    write_handles: vec![0x77],
                    write_chunk_lengths: vec![chunk],
                    ..Default::default()
                }),
                Item::Reassembled {
                    fragments: 2,
                    bytes: 128 + len,
                },
                Item::Rpc(Rpc {
                    xid: 4,
                    call: from_ini,
                }),
                Item::Nfs3 {
                    procedure: 6,
                    read_len: Some(len),
                },
                Item::Malformed(format!("[Malformed Packet: {layer}]")),
            ],
        ));
        let mut m = meta(&fs);
        let e = &mut m.get_mut(&3).unwrap().expert;
        e.push((severity::ERROR, "Malformed Packet".into()));
        e.push((
            severity::ERROR,
            "Malformed Packet (Exception occurred)".into(),
        ));
        (fs, m)
    }

    #[test]
    fn unpadded_nfs_read_write_chunk_excused_only_for_that_case() {
        let (fs, m) = read_reply(33, 33, "NFS", false);
        let v = judge(&fs, &m);
        assert!(v.passed(), "{v:?}");
        assert_eq!(v.connections[0].unpadded_read_replies, 1);
        assert_eq!(v.connections[0].excused.len(), 2);
        assert!(crate::report::one_line(&v)
            .contains("2 excused faults (in 1 NFS READ/READLINK replies"));
        // A chunk length that is a multiple of 4, a chunk length other than
        // the READ data's, a report of another layer, or a call: fails.
        for (len, chunk, layer, from_ini) in [
            (36, 36, "NFS", false),
            (33, 36, "NFS", false),
            (33, 33, "RPC", false),
            (33, 33, "NFS", true),
        ] {
            let (fs, m) = read_reply(len, chunk, layer, from_ini);
            let v = judge(&fs, &m);
            assert!(
                v.failures()
                    .any(|(_, f)| f.what.contains("Malformed Packet")),
                "{len} {chunk} {layer} {from_ini}: {v:?}"
            );
            assert_eq!(v.connections[0].unpadded_read_replies, 0);
        }
        // A READLINK reply (no data length in tshark's summary): excused
        // with an unpadded Write chunk only; another procedure fails.
        for (procedure, chunk, ok) in [(5, 5, true), (5, 8, false), (3, 5, false)] {
            let (mut fs, m) = read_reply(5, chunk, "NFS", false);
            fs[2].items[4] = Item::Nfs3 {
                procedure,
                read_len: None,
            };
            let v = judge(&fs, &m);
            assert_eq!(v.passed(), ok, "{procedure} {chunk}: {v:?}");
            assert_eq!(v.connections[0].unpadded_read_replies, u64::from(ok));
        }
        // A second malformed report in the frame: fails.
        let (mut fs, m) = read_reply(33, 33, "NFS", false);
        fs[2]
            .items
            .insert(1, Item::Malformed("[Malformed Packet: RPCoRDMA]".into()));
        assert!(!judge(&fs, &m).passed());
    }

    #[test]
    fn frame_numbers_in_messages_are_remapped() {
        assert_eq!(
            remap_text(
                "short of the Read Request (frame 3), frame 9 and frame x",
                &[10, 20, 30]
            ),
            "short of the Read Request (frame 30), frame 9 and frame x"
        );
    }
}
