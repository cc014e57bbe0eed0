//! A deterministic two-peer fixture for the connection engine: two
//! `Connection`s, a wire queue each way (deliver, drop, duplicate, reorder
//! on demand), fake registered memory for the chunk operations, and a
//! virtual clock.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rpcrdma_engine::{
    CallError, CallId, CallSpec, ChunkRef, Config, Connection, Direction, Event, LostReason,
    MessageRef, Phase, Side, Thresholds, Transmit,
};
use rpcrdma_proto::marshal::{RegionSource, ReplyShape};
use rpcrdma_proto::stream::{gather, Item, Span};

/// RDMATEST program numbers (any program works for the engine).
pub const PROG: u32 = rpcrdma_proto::binding::rdmatest::PROGRAM;
/// RDMATEST version.
pub const VERS: u32 = rpcrdma_proto::binding::rdmatest::VERSION;
/// Length of an RPC call header with AUTH_NONE credentials and verifier.
pub const CALL_HEADER: usize = 40;
/// Length of an accepted RPC reply header with an AUTH_NONE verifier.
pub const REPLY_HEADER: usize = 24;

/// The RPC call header (RFC 5531 §9, AUTH_NONE).
pub fn rpc_call_header(xid: u32, proc_: u32) -> Vec<u8> {
    words(&[xid, 0, 2, PROG, VERS, proc_, 0, 0, 0, 0])
}

/// An accepted SUCCESS RPC reply header.
pub fn rpc_reply_header(xid: u32) -> Vec<u8> {
    words(&[xid, 1, 0, 0, 0, 0])
}

/// Big-endian words.
pub fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// Registered memory of one peer: regions by handle (STag).
#[derive(Default, Debug)]
pub struct Memory {
    regions: HashMap<u32, Vec<u8>>,
    next: u32,
}

impl Memory {
    /// Registers `bytes`; returns the handle.
    pub fn register(&mut self, bytes: Vec<u8>) -> u32 {
        self.next += 1;
        let h = 0x100 + self.next;
        self.regions.insert(h, bytes);
        h
    }

    /// Invalidates a handle; returns its contents.
    pub fn deregister(&mut self, h: u32) -> Option<Vec<u8>> {
        self.regions.remove(&h)
    }

    /// Remote RDMA Read.
    pub fn read(&self, h: u32, off: u64, len: u32) -> Option<Vec<u8>> {
        let r = self.regions.get(&h)?;
        let s = usize::try_from(off).ok()?;
        r.get(s..s.checked_add(len as usize)?).map(|b| b.to_vec())
    }

    /// Remote RDMA Write.
    pub fn write(&mut self, h: u32, off: u64, data: &[u8]) -> bool {
        let Some(r) = self.regions.get_mut(&h) else {
            return false;
        };
        let s = off as usize;
        match r.get_mut(s..s + data.len()) {
            Some(d) => {
                d.copy_from_slice(data);
                true
            }
            None => false,
        }
    }

    /// A registered region's bytes, to tamper with.
    pub fn region_mut(&mut self, h: u32) -> Option<&mut Vec<u8>> {
        self.regions.get_mut(&h)
    }

    /// The handles registered, lowest first.
    pub fn handles(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.regions.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Registered regions.
    pub fn len(&self) -> usize {
        self.regions.len()
    }
}

/// A finished call as the upper layer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completed {
    /// The reduced reply (inline, or from the Reply chunk).
    pub payload: Vec<u8>,
    /// The data of each returned Write chunk.
    pub writes: Vec<Vec<u8>>,
}

/// A call received, rebuilt.
#[derive(Clone, Debug)]
pub struct Received {
    /// Its id at the receiver.
    pub id: CallId,
    /// Its XID.
    pub xid: u32,
    /// Its direction.
    pub direction: Direction,
    /// The unreduced RPC call message.
    pub call: Vec<u8>,
}

/// What a peer's service does with incoming calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// Keep them for the test to answer.
    Hold,
    /// Answer at once: the RPC reply header, then the call's arguments
    /// echoed; for RDMATEST GET (args: count, fill) the result is `count`
    /// bytes of `fill` as a DDP-eligible item.
    Echo,
}

/// One endpoint: its engine and what its driver and upper layer hold.
pub struct Peer {
    /// The engine.
    pub conn: Connection,
    /// Registered memory.
    pub mem: Memory,
    call_items: HashMap<CallId, Vec<Bytes>>,
    reply_items: HashMap<CallId, Vec<Bytes>>,
    regions: HashMap<CallId, Vec<(RegionSource, u32)>>,
    sinks: HashMap<(CallId, ChunkRef), Vec<u8>>,
    /// Finished calls, in order.
    pub done: Vec<(CallId, u32, Result<Completed, CallError>)>,
    done_ids: HashSet<CallId>,
    /// Received calls not yet answered (with [`Service::Hold`]).
    pub incoming: VecDeque<Received>,
    /// Every call received, in order.
    pub received: Vec<Received>,
    /// Retired abandoned calls.
    pub retired: Vec<CallId>,
    /// Connection losses the engine reported.
    pub lost: Vec<LostReason>,
    /// Bytes of every Send, in order.
    pub sent: Vec<Bytes>,
    /// The service.
    pub service: Service,
    /// Highest in-use Requester and Responder credits seen.
    pub peak_requester: u32,
    /// Highest received calls in process seen.
    pub peak_responder: u32,
    /// Calls whose credit was checked as they went out.
    pub calls_sent_checked: u64,
    /// The chunks this side pulled, in the order it was asked to.
    pub reads: Vec<ChunkRef>,
}

impl Peer {
    /// A peer with this configuration.
    pub fn new(config: Config, service: Service) -> Peer {
        Peer {
            conn: Connection::new(config),
            mem: Memory::default(),
            call_items: HashMap::new(),
            reply_items: HashMap::new(),
            regions: HashMap::new(),
            sinks: HashMap::new(),
            done: Vec::new(),
            done_ids: HashSet::new(),
            incoming: VecDeque::new(),
            received: Vec::new(),
            retired: Vec::new(),
            lost: Vec::new(),
            sent: Vec::new(),
            service,
            peak_requester: 0,
            peak_responder: 0,
            calls_sent_checked: 0,
            reads: Vec::new(),
        }
    }

    /// Submits a call of `proc_` with `args` inline (no DDP item) whose
    /// reply (the echo) is expected inline.
    pub fn call(&mut self, now: Instant, proc_: u32, args: &[u8]) -> CallId {
        let reply = ReplyShape {
            max_reduced_len: (REPLY_HEADER + args.len()) as u64,
            ..Default::default()
        };
        self.call_with(now, proc_, args, None, reply, None)
            .expect("submit")
    }

    /// Submits a call: `args` inline, then `ddp` as a DDP-eligible item
    /// (its length word last in `args`).
    pub fn call_with(
        &mut self,
        now: Instant,
        proc_: u32,
        args: &[u8],
        ddp: Option<&[u8]>,
        reply: ReplyShape,
        timeout: Option<Duration>,
    ) -> Result<CallId, rpcrdma_engine::SubmitError> {
        let head_len = (CALL_HEADER + args.len()) as u32;
        let mut items = vec![Item::Xdr(head_len)];
        if let Some(d) = ddp {
            items.push(Item::Ddp(d.len() as u32));
        }
        let id = self.conn.submit(
            now,
            CallSpec {
                items,
                reply,
                timeout,
            },
        )?;
        let xid = self.conn.xid(id).expect("xid");
        let mut head = rpc_call_header(xid, proc_);
        head.extend_from_slice(args);
        let mut bytes = vec![Bytes::from(head)];
        if let Some(d) = ddp {
            bytes.push(Bytes::copy_from_slice(d));
        }
        self.call_items.insert(id, bytes);
        Ok(id)
    }

    /// Answers a held call with the echo (see [`Service::Echo`]).
    pub fn answer(&mut self, r: &Received) {
        let (items, bytes) = echo_reply(r);
        self.reply_items.insert(r.id, bytes);
        self.conn.reply(r.id, &items).expect("reply");
    }

    /// Answers the oldest held call.
    pub fn answer_next(&mut self) -> Option<Received> {
        let r = self.incoming.pop_front()?;
        self.answer(&r);
        Some(r)
    }

    /// The reply to call `id`, if it completed successfully.
    pub fn result(&self, id: CallId) -> Option<&Result<Completed, CallError>> {
        self.done.iter().find(|d| d.0 == id).map(|d| &d.2)
    }

    fn release_regions(&mut self, id: CallId) -> Vec<(RegionSource, Vec<u8>)> {
        let mut out = Vec::new();
        for (src, h) in self.regions.remove(&id).unwrap_or_default() {
            if let Some(b) = self.mem.deregister(h) {
                out.push((src, b));
            }
        }
        out
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::CallDone { id, xid, result } => {
                assert!(self.done_ids.insert(id), "call {id:?} completed twice");
                let regions = self.release_regions(id);
                self.call_items.remove(&id);
                let result = result.map(|reply| {
                    let region = |want: RegionSource| -> Vec<u8> {
                        regions
                            .iter()
                            .filter(|(s, _)| *s == want)
                            .flat_map(|(_, b)| b.iter().copied())
                            .collect()
                    };
                    let payload = if reply.nomsg {
                        let n = reply
                            .returned
                            .reply_chunk
                            .as_ref()
                            .map_or(0, |c| c.total_len()) as usize;
                        let mut b = region(RegionSource::ReplyChunk);
                        b.truncate(n);
                        b
                    } else {
                        reply.msg[reply.header_len..].to_vec()
                    };
                    let writes = reply
                        .returned
                        .write_list
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            let mut b = region(RegionSource::ReplyWriteChunk { chunk: i });
                            b.truncate(c.total_len() as usize);
                            b
                        })
                        .collect();
                    Completed { payload, writes }
                });
                self.done.push((id, xid, result));
            }
            Event::IncomingCall(ic) => {
                let reduced: Vec<u8> = match ic.reassembly.position_zero {
                    Some(_) => self
                        .sinks
                        .remove(&(ic.id, ChunkRef::PositionZero))
                        .unwrap_or_default(),
                    None => ic.msg[ic.header_len..].to_vec(),
                };
                let data: Vec<Vec<u8>> = (0..ic.reassembly.chunks.len())
                    .map(|i| {
                        self.sinks
                            .remove(&(ic.id, ChunkRef::Data(i)))
                            .unwrap_or_default()
                    })
                    .collect();
                let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
                let call = ic
                    .reassembly
                    .to_contiguous(&reduced, &refs)
                    .expect("reassembly");
                let r = Received {
                    id: ic.id,
                    xid: ic.xid,
                    direction: ic.direction,
                    call,
                };
                self.received.push(r.clone());
                match self.service {
                    Service::Hold => self.incoming.push_back(r),
                    Service::Echo => self.answer(&r),
                }
            }
            Event::Retired { id } => {
                self.release_regions(id);
                self.call_items.remove(&id);
                self.retired.push(id);
            }
            Event::ConnectionLost { reason } => {
                self.lost.push(reason);
                self.incoming.clear();
            }
        }
    }

    /// A call is going out: with it, no more outstanding than granted
    /// (RFC 8166 §3.3.1). (A grant lowered later may leave more
    /// outstanding than the new limit; none is sent until they drop.)
    fn check_send_credit(&mut self) {
        let r = self.conn.requester_credits();
        assert!(
            r.in_use <= r.limit,
            "a call went out with {} outstanding and a limit of {}",
            r.in_use,
            r.limit
        );
        self.calls_sent_checked += 1;
    }

    fn note_credits(&mut self) {
        let r = self.conn.requester_credits();
        let s = self.conn.responder_credits();
        assert!(
            s.in_use <= s.limit,
            "responder has {} in process with a grant of {}",
            s.in_use,
            s.limit
        );
        self.peak_requester = self.peak_requester.max(r.in_use);
        self.peak_responder = self.peak_responder.max(s.in_use);
    }
}

/// The echo reply of a received call: items and bytes.
pub fn echo_reply(r: &Received) -> (Vec<Item>, Vec<Bytes>) {
    let args = &r.call[CALL_HEADER.min(r.call.len())..];
    let proc_ = r
        .call
        .get(20..24)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let head = rpc_reply_header(r.xid);
    if proc_ == Some(rpcrdma_proto::binding::rdmatest::procs::GET) && args.len() >= 8 {
        let count = u32::from_be_bytes([args[0], args[1], args[2], args[3]]);
        let fill = args[7];
        let mut h = head;
        h.extend_from_slice(&count.to_be_bytes());
        let data = vec![fill; count as usize];
        (
            vec![Item::Xdr(h.len() as u32), Item::Ddp(count)],
            vec![Bytes::from(h), Bytes::from(data)],
        )
    } else {
        let mut h = head;
        h.extend_from_slice(args);
        (vec![Item::Xdr(h.len() as u32)], vec![Bytes::from(h)])
    }
}

/// A message on the wire: the link (connection instance) it belongs to.
#[derive(Clone, Debug)]
pub struct Wire {
    /// Connection instance, 1 then one more per reconnect.
    pub link: u64,
    /// The bytes of the Send.
    pub bytes: Bytes,
}

/// Which way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Active to passive.
    AtoB,
    /// Passive to active.
    BtoA,
}

/// Two engines, two wire queues, a virtual clock.
pub struct Pair {
    /// The active side (client).
    pub a: Peer,
    /// The passive side (server) of the current link.
    pub b: Peer,
    /// Passive sides of earlier links.
    pub old_b: Vec<Peer>,
    /// Configuration for the next passive side.
    pub b_config: Config,
    /// Whether the next passive side enables reverse operation.
    pub b_reverse: bool,
    /// Virtual time.
    pub now: Instant,
    /// Queued messages from a to b.
    pub a_to_b: VecDeque<Wire>,
    /// Queued messages from b to a.
    pub b_to_a: VecDeque<Wire>,
    /// The current link.
    pub link: u64,
}

/// A test configuration: small thresholds and credits as given.
pub fn config(side: Side, credits: u32, backward: u32) -> Config {
    let mut c = Config::new(side);
    c.credits = credits;
    c.backward_credits = backward;
    c.call_timeout = Duration::from_secs(10);
    c.bindings = std::sync::Arc::new(rpcrdma_proto::binding::rdmatest::RdmatestBinding);
    c.first_xid = match side {
        Side::Active => 0x1000,
        Side::Passive => 0x1000,
    };
    c
}

impl Pair {
    /// A pair with these configurations and services.
    pub fn new(a: Config, b: Config, a_service: Service, b_service: Service) -> Pair {
        Pair {
            a: Peer::new(a, a_service),
            b: Peer::new(b.clone(), b_service),
            old_b: Vec::new(),
            b_config: b,
            b_reverse: false,
            now: Instant::now(),
            a_to_b: VecDeque::new(),
            b_to_a: VecDeque::new(),
            link: 1,
        }
    }

    /// Posts every transmit of both sides and handles every event, until
    /// neither has anything more; messages stay on the wire.
    pub fn step(&mut self) {
        loop {
            let mut busy = false;
            busy |= Self::pump(
                self.now,
                self.link,
                &mut self.a,
                &mut self.b,
                &mut self.a_to_b,
            );
            busy |= Self::pump(
                self.now,
                self.link,
                &mut self.b,
                &mut self.a,
                &mut self.b_to_a,
            );
            for p in [&mut self.a, &mut self.b] {
                while let Some(ev) = p.conn.poll_event() {
                    busy = true;
                    p.on_event(ev);
                }
                p.note_credits();
            }
            // An engine that gives its connection up disconnects the queue
            // pair: the peer sees the loss too, and nothing more arrives.
            let (pa, pb) = (self.a.conn.phase(), self.b.conn.phase());
            if (pa == Phase::Connected) != (pb == Phase::Connected) {
                let link = self.link;
                self.a_to_b.retain(|w| w.link != link);
                self.b_to_a.retain(|w| w.link != link);
                if pa == Phase::Connected {
                    self.a.conn.handle_connection_lost(self.now);
                } else {
                    self.b.conn.handle_connection_lost(self.now);
                }
                busy = true;
            }
            if !busy {
                return;
            }
        }
    }

    /// Steps and delivers everything, both ways, until quiet.
    pub fn run(&mut self) {
        loop {
            self.step();
            if self.a_to_b.is_empty() && self.b_to_a.is_empty() {
                return;
            }
            while !self.a_to_b.is_empty() || !self.b_to_a.is_empty() {
                self.deliver(Dir::AtoB);
                self.deliver(Dir::BtoA);
            }
        }
    }

    fn queue(&mut self, d: Dir) -> &mut VecDeque<Wire> {
        match d {
            Dir::AtoB => &mut self.a_to_b,
            Dir::BtoA => &mut self.b_to_a,
        }
    }

    /// Delivers the first message queued `d`, if any; true if one was.
    pub fn deliver(&mut self, d: Dir) -> bool {
        let Some(w) = self.queue(d).pop_front() else {
            return false;
        };
        let now = self.now;
        match d {
            Dir::AtoB => {
                // The passive side of each link is a connection of its own.
                let g = if w.link == self.link {
                    self.b.conn.generation()
                } else {
                    0
                };
                self.b.conn.handle_recv(now, g, w.bytes, None);
            }
            Dir::BtoA => self.a.conn.handle_recv(now, w.link, w.bytes, None),
        }
        true
    }

    /// Drops the first message queued `d`.
    pub fn drop_next(&mut self, d: Dir) -> Option<Wire> {
        self.queue(d).pop_front()
    }

    /// Duplicates the first message queued `d`.
    pub fn duplicate_next(&mut self, d: Dir) {
        let q = self.queue(d);
        if let Some(w) = q.front().cloned() {
            q.push_front(w);
        }
    }

    /// Swaps the first two messages queued `d`.
    pub fn swap_next(&mut self, d: Dir) {
        let q = self.queue(d);
        if q.len() >= 2 {
            q.swap(0, 1);
        }
    }

    /// Advances the virtual clock and runs both engines' timers.
    pub fn advance(&mut self, by: Duration) {
        self.now += by;
        self.a.conn.handle_timeout(self.now);
        self.b.conn.handle_timeout(self.now);
        self.step();
    }

    /// The connection breaks. With `keep_wire`, messages already on the
    /// wire stay queued (to be delivered late, from the old link).
    pub fn disconnect(&mut self, keep_wire: bool) {
        if !keep_wire {
            self.a_to_b.clear();
            self.b_to_a.clear();
        }
        self.a.conn.handle_connection_lost(self.now);
        self.b.conn.handle_connection_lost(self.now);
        self.step();
    }

    /// The active side connects again: a new passive connection (the old
    /// one is kept in `old_b`), a new link.
    pub fn reconnect(&mut self) {
        self.link += 1;
        let th = self.b_config.thresholds;
        self.a
            .conn
            .handle_reconnected(
                self.now,
                Thresholds {
                    send: th.recv,
                    recv: th.send,
                },
            )
            .expect("active side reconnects");
        let service = self.b.service;
        let mut fresh = Peer::new(self.b_config.clone(), service);
        if self.b_reverse {
            fresh.conn.enable_reverse();
        }
        let old = std::mem::replace(&mut self.b, fresh);
        self.old_b.push(old);
        self.step();
    }

    /// Every Send of one peer's driver: gathers, places, moves data.
    fn pump(
        now: Instant,
        link: u64,
        me: &mut Peer,
        other: &mut Peer,
        out: &mut VecDeque<Wire>,
    ) -> bool {
        let mut busy = false;
        while let Some(t) = me.conn.poll_transmit(now) {
            busy = true;
            match t {
                Transmit::Prepare { id, plan, .. } => {
                    me.check_send_credit();
                    let mut plan = plan;
                    let items = me.call_items.get(&id).cloned().unwrap_or_default();
                    let refs: Vec<&[u8]> = items.iter().map(|b| b.as_ref()).collect();
                    let mut regs = Vec::new();
                    for i in 0..plan.regions.len() {
                        let r = &plan.regions[i];
                        let bytes = match r.source {
                            RegionSource::CallItem { item } => refs[item].to_vec(),
                            RegionSource::CallPayload => gather(&plan.payload, &refs),
                            _ => vec![0u8; r.len as usize],
                        };
                        let source = r.source;
                        let h = me.mem.register(bytes);
                        plan.set_region(i, h, 0);
                        regs.push((source, h));
                    }
                    me.regions.insert(id, regs);
                    if !me.conn.call_ready(now, id, &plan) {
                        me.release_regions(id);
                    }
                }
                Transmit::Read {
                    token,
                    id,
                    chunk,
                    segments,
                } => {
                    me.reads.push(chunk);
                    let mut sink = Vec::new();
                    let mut ok = true;
                    for s in segments {
                        match other.mem.read(s.handle, s.offset, s.length) {
                            Some(b) => sink.extend_from_slice(&b),
                            None => ok = false,
                        }
                    }
                    me.conn.handle_read(token, ok.then_some(&sink[..]));
                    me.sinks.insert((id, chunk), sink);
                }
                Transmit::Write { token, id, writes } => {
                    let items = me.reply_items.get(&id).cloned().unwrap_or_default();
                    let refs: Vec<&[u8]> = items.iter().map(|b| b.as_ref()).collect();
                    let mut ok = true;
                    for w in writes {
                        let data = gather(&[w.source], &refs);
                        ok &= other.mem.write(w.handle, w.remote_offset, &data);
                    }
                    me.conn.handle_completion(token, ok);
                }
                Transmit::Send {
                    token,
                    message,
                    head,
                    inline,
                } => {
                    if matches!(message, MessageRef::Call(_)) && me.conn.side() == Side::Passive {
                        me.check_send_credit();
                    }
                    let items = match message {
                        MessageRef::Call(id) => me.call_items.get(&id).cloned(),
                        MessageRef::Reply(id) => me.reply_items.remove(&id),
                        MessageRef::Engine => None,
                    }
                    .unwrap_or_default();
                    let refs: Vec<&[u8]> = items.iter().map(|b| b.as_ref()).collect();
                    let mut bytes = head.to_vec();
                    bytes.extend_from_slice(&gather(&inline, &refs));
                    let bytes = Bytes::from(bytes);
                    me.sent.push(bytes.clone());
                    out.push_back(Wire { link, bytes });
                    me.conn.handle_completion(token, true);
                }
            }
        }
        busy
    }
}

/// Spans of a list of items, for tests that build sends by hand.
pub fn spans(items: &[Item]) -> Vec<Span> {
    items
        .iter()
        .enumerate()
        .map(|(i, it)| Span::Item {
            item: i,
            offset: 0,
            len: it.unreduced_len() as u32,
        })
        .collect()
}
