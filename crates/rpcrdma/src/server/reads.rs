//! The Responder's RDMA Reads: a call's Read chunks (RFC 8166 §3.5.3)
//! pulled into sinks within the read budgets, waited for while the
//! connection's Reads make progress, and the sinks recycled.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use rdma_verbs::{
    Access, Device, MemoryRegion, MrBuffer, ProtectionDomain, QueuePair, RemoteAddr, SendWr, Sge,
    VerbsError,
};
use rpcrdma_proto::reassemble::ReadChunkInfo;
use rpcrdma_proto::respond::{check_read_chunk, ErrChunk};
use rpcrdma_proto::validate::ReceivedCall;
use rpcrdma_proto::wire::{ReadList, Segment};

use super::{SConn, BUDGET_UNIT, SINK_MIN, SINK_POOL};
use crate::endpoint::{lock, wc_error};
use crate::error::TransportError;

/// What [`SConn::pull_chunks`] brings: the reduced stream, the data
/// chunks, their byte count, and the read-budget permits, held until the
/// call is done with the sinks.
pub(super) struct Pulled {
    pub(super) reduced: Bytes,
    pub(super) data: Vec<Bytes>,
    pub(super) read_bytes: u64,
    pub(super) _budget: ReadPermits,
}

/// Read-budget permits of one call: the connection's and the server's
/// (`None` for a call with nothing to read).
pub(super) type ReadPermits = Option<(
    tokio::sync::OwnedSemaphorePermit,
    tokio::sync::OwnedSemaphorePermit,
)>;

/// How waiting for one RDMA Read ended.
enum ReadWait {
    Done(rdma_verbs::WorkCompletion),
    /// The work request was flushed (the connection ended).
    Flushed,
    /// The connection's Reads made no progress for
    /// [`RdmaConfig::read_timeout`]; it is being closed.
    Stalled,
}

struct PendingRead<M> {
    /// One sink region per RDMA Read (per segment), in chunk order.
    mrs: Vec<M>,
    done: Vec<tokio::sync::oneshot::Receiver<rdma_verbs::WorkCompletion>>,
}

impl<D: Device> SConn<D> {
    /// Posts the RDMA Reads of one chunk into a fresh sink: one region (own
    /// STag) per segment, each a zero-copy piece of one buffer, so no two
    /// outstanding Read Requests name the same Data Sink STag (a wire
    /// analyser maps Read Responses to Requests by that STag).
    async fn start_read(
        &self,
        list: &ReadList<'_>,
        chunk: &ReadChunkInfo,
    ) -> Result<PendingRead<D::Mr>, TransportError> {
        let mut sink = self.sink(chunk.len as usize);
        let segs: Vec<Segment> = chunk
            .segments
            .clone()
            .filter_map(|i| list.get(i).map(|r| r.segment))
            .filter(|s| s.length > 0)
            .collect();
        let mut p = PendingRead {
            mrs: Vec::with_capacity(segs.len()),
            done: Vec::with_capacity(segs.len()),
        };
        let n = segs.len();
        for (k, s) in segs.into_iter().enumerate() {
            let piece = if k + 1 == n {
                std::mem::take(&mut sink)
            } else {
                sink.split_to((s.length as usize).min(sink.len()))
            };
            if let Err(e) = self.post_read(&mut p, piece, s).await {
                // Reads already posted still place into their sinks:
                // wait for them before the sinks go.
                self.settle_reads([p]).await;
                return Err(e);
            }
        }
        Ok(p)
    }

    /// Registers `piece` as the sink of segment `s` and posts its RDMA Read
    /// (at most ORD in flight).
    async fn post_read(
        &self,
        p: &mut PendingRead<D::Mr>,
        piece: BytesMut,
        s: Segment,
    ) -> Result<(), TransportError> {
        let mr = self
            .ep
            .pd
            .register(MrBuffer::Mutable(piece), Access::LOCAL_WRITE)
            .map_err(|e| e.error)?;
        let permit = self
            .ord
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| TransportError::ConnectionLost)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let progress = self.read_progress.clone();
        *lock(&progress) = tokio::time::Instant::now();
        let wr = SendWr::read(
            0,
            vec![Sge::new(mr.lkey(), 0, s.length)],
            RemoteAddr {
                rkey: s.handle,
                offset: s.offset,
            },
        );
        p.mrs.push(mr);
        self.ep.post(
            wr,
            Vec::new(),
            Some(Box::new(move |wc| {
                drop(permit);
                *lock(&progress) = tokio::time::Instant::now();
                let _ = tx.send(wc);
            })),
        )?;
        self.srv.stats.rdma_reads.fetch_add(1, Relaxed);
        p.done.push(rx);
        Ok(())
    }

    /// A sink of `len` bytes, from the pool when one fits. Its old contents
    /// are overwritten entirely by the RDMA Reads before anyone sees it.
    fn sink(&self, len: usize) -> BytesMut {
        let mut pool = lock(&self.srv.sinks);
        if let Some(i) = pool.iter().position(|b| b.capacity() >= len) {
            let mut b = pool.swap_remove(i);
            drop(pool);
            if b.len() >= len {
                b.truncate(len);
            } else {
                b.resize(len, 0);
            }
            return b;
        }
        drop(pool);
        BytesMut::zeroed(len)
    }

    /// Takes sinks back once nothing else refers to them. The server's
    /// pool holds at most a quarter of the server-wide read budget in bytes
    /// (pooled sinks are memory the budget no longer counts).
    pub(super) fn recycle(&self, bufs: Vec<Bytes>) {
        let cap = self.srv.config.max_read_bytes / 4;
        let mut pool = lock(&self.srv.sinks);
        let mut held: usize = pool.iter().map(|b| b.capacity()).sum();
        for b in bufs {
            if pool.len() >= SINK_POOL || b.len() < SINK_MIN {
                continue;
            }
            if let Ok(m) = b.try_into_mut() {
                if held.saturating_add(m.capacity()) > cap {
                    continue;
                }
                held += m.capacity();
                pool.push(m);
            }
        }
    }

    /// A call that cannot go on still has RDMA Reads in flight: waits until
    /// they have completed or been flushed before their sinks are released
    /// and the call is answered. A sink released at the next
    /// signaled completion instead could go before its Read's response
    /// (iWARP completes a Send when it is transmitted, a Read only when its
    /// response has arrived), which kills the connection; and an answer
    /// sent while the Reads are out lets the requester invalidate their
    /// sources under them. If the connection's Reads stall (see
    /// [`RdmaConfig::read_timeout`]) it is closed and the sinks are kept
    /// until it ends.
    async fn settle_reads(&self, pending: impl IntoIterator<Item = PendingRead<D::Mr>>) {
        let mut sinks = Vec::new();
        let mut stalled = false;
        for p in pending {
            sinks.extend(p.mrs);
            for rx in p.done {
                // A dropped sender means the work request was flushed.
                if !stalled && matches!(self.read_done(rx).await, ReadWait::Stalled) {
                    stalled = true;
                }
            }
        }
        if stalled {
            self.ep.hold(sinks);
        }
    }

    /// Waits for one RDMA Read's completion while the connection's Reads
    /// make progress: each posted or completed Read restarts the clock, so
    /// a slow transfer is never cut, and a peer that stops answering is
    /// closed [`RdmaConfig::read_timeout`] after the last progress
    /// (a total deadline would let a few such connections hold the
    /// server-wide read budget longer than other clients' calls could wait
    /// for it).
    async fn read_done(
        &self,
        mut rx: tokio::sync::oneshot::Receiver<rdma_verbs::WorkCompletion>,
    ) -> ReadWait {
        let limit = self.srv.config.read_timeout;
        // A limit too long to represent (Duration::MAX) means no deadline,
        // not a panic.
        let deadline = || lock(&self.read_progress).checked_add(limit);
        loop {
            let Some(at) = deadline() else {
                return match (&mut rx).await {
                    Ok(wc) => ReadWait::Done(wc),
                    Err(_) => ReadWait::Flushed,
                };
            };
            match tokio::time::timeout_at(at, &mut rx).await {
                Ok(Ok(wc)) => return ReadWait::Done(wc),
                Ok(Err(_)) => return ReadWait::Flushed,
                Err(_) => {
                    if deadline().is_none_or(|d| d > tokio::time::Instant::now()) {
                        continue; // progress meanwhile
                    }
                    self.srv.stats.read_timeouts.fetch_add(1, Relaxed);
                    tracing::warn!(
                        peer = %self.peer,
                        "RDMA Reads made no progress for {limit:?}; closing"
                    );
                    self.ep.qp.disconnect();
                    return ReadWait::Stalled;
                }
            }
        }
    }

    /// Waits for a chunk's RDMA Reads while the connection's Reads make
    /// progress (see [`read_done`](Self::read_done)); a stalled connection
    /// is closed (a peer that never answers must not hold its sinks).
    async fn finish_read(&self, p: PendingRead<D::Mr>) -> Result<Bytes, TransportError> {
        for rx in p.done {
            let wc = match self.read_done(rx).await {
                ReadWait::Done(wc) => wc,
                ReadWait::Flushed => return Err(TransportError::ConnectionLost),
                ReadWait::Stalled => return Err(VerbsError::Timeout("RDMA Read").into()),
            };
            if !wc.is_success() {
                return Err(wc_error(&wc).into());
            }
        }
        // The pieces back into one buffer (no copy: they are adjacent
        // parts of one allocation).
        let mut data = BytesMut::new();
        for mr in p.mrs {
            if let Some(Ok(b)) = mr.deregister().map(MrBuffer::try_into_bytes_mut) {
                if data.is_empty() {
                    data = b;
                } else {
                    data.unsplit(b);
                }
            }
        }
        Ok(data.freeze())
    }

    /// Pulls a call's Read chunks (RFC 8166 §3.5.3), within the read
    /// budgets: the reduced stream (inline, or the Position-Zero chunk's
    /// data) and each data chunk. `Ok(None)`: the call was answered here
    /// (ERR_CHUNK, or the verdict on a Long Call's payload).
    pub(super) async fn pull_chunks(
        self: &Arc<Self>,
        msg: &Bytes,
        call: &mut ReceivedCall<'_>,
        list: &ReadList<'_>,
        grant: u32,
        slot: &AtomicBool,
    ) -> Result<Option<Pulled>, TransportError> {
        let max = self.srv.config.max_region_len as u64;
        let xid = call.header.xid;
        // Never allocate beyond the read budgets on a peer's say-so.
        let need: u64 = call
            .reassembly
            .position_zero
            .iter()
            .chain(call.reassembly.chunks.iter())
            .map(|c| c.len.div_ceil(BUDGET_UNIT))
            .sum();
        let budget = match self.reserve_read_budget(need, xid).await? {
            Ok(b) => b,
            Err(why) => {
                self.refuse(xid, grant, slot, why);
                return Ok(None);
            }
        };
        // The reduced stream: inline, or the Position-Zero chunk's data.
        let reduced = match call.reassembly.position_zero.clone() {
            Some(pz) => {
                if let Err(why) = check_read_chunk(&pz, max) {
                    self.refuse(xid, grant, slot, why);
                    return Ok(None);
                }
                let p = self.start_read(list, &pz).await?;
                let b = self.finish_read(p).await?;
                if let Err(v) = call.check_payload(&b, &self.srv.bindings, grant) {
                    self.answer_verdict(v, grant, slot);
                    return Ok(None);
                }
                b
            }
            None => msg.slice(call.header.header_len.min(msg.len())..),
        };
        // Data chunks (sizes already checked against the binding).
        let mut data_chunks = call.reassembly.chunks.iter();
        if let Err(why) = data_chunks.try_for_each(|c| check_read_chunk(c, max)) {
            self.refuse(xid, grant, slot, why);
            return Ok(None);
        }
        let data = self.pull_data_chunks(list, &call.reassembly.chunks).await?;
        let position_zero = call.reassembly.position_zero.as_ref();
        let read_bytes = data.iter().map(|b| b.len() as u64).sum::<u64>()
            + position_zero.map_or(0, |_| reduced.len() as u64);
        Ok(Some(Pulled {
            reduced,
            data,
            read_bytes,
            _budget: budget,
        }))
    }

    /// Reserves `need` [`BUDGET_UNIT`]s of read-sink memory, the
    /// connection's share first, then the server's: a connection waits for
    /// its own calls before it competes with the others. Other connections
    /// may hold the server-wide budget for long (slow but progressing Reads
    /// are not cut), so that wait is bounded by
    /// [`RdmaConfig::read_budget_wait`]. `Ok(Err(_))`: refuse the call.
    async fn reserve_read_budget(
        &self,
        need: u64,
        xid: u32,
    ) -> Result<Result<ReadPermits, ErrChunk>, TransportError> {
        let srv = &self.srv;
        if need > self.read_budget_units || need > srv.read_budget_units {
            return Ok(Err(ErrChunk::ReadBudget));
        }
        if need == 0 {
            return Ok(Ok(None));
        }
        let conn = self
            .read_budget
            .clone()
            .acquire_many_owned(need as u32)
            .await
            .map_err(|_| TransportError::ConnectionLost)?;
        let wait = srv.config.read_budget_wait;
        let acquire = srv.read_budget.clone().acquire_many_owned(need as u32);
        match tokio::time::timeout(wait, acquire).await {
            Ok(r) => Ok(Ok(Some((
                conn,
                r.map_err(|_| TransportError::ConnectionLost)?,
            )))),
            Err(_) => {
                srv.stats.read_budget_timeouts.fetch_add(1, Relaxed);
                tracing::debug!(peer = %self.peer, xid, "no room in the server-wide read budget within {wait:?}");
                Ok(Err(ErrChunk::ReadBudget))
            }
        }
    }

    /// Pulls the data Read chunks, all posted before any is waited for.
    async fn pull_data_chunks(
        &self,
        list: &ReadList<'_>,
        chunks: &[ReadChunkInfo],
    ) -> Result<Vec<Bytes>, TransportError> {
        let mut pending = Vec::with_capacity(chunks.len());
        for c in chunks {
            match self.start_read(list, c).await {
                Ok(p) => pending.push(p),
                Err(e) => {
                    // Earlier chunks' Reads are in flight: wait for them.
                    self.settle_reads(pending).await;
                    return Err(e);
                }
            }
        }
        let mut data = Vec::with_capacity(pending.len());
        for p in pending {
            data.push(self.finish_read(p).await?);
        }
        Ok(data)
    }
}
