//! Transport counters, in the spirit of the `xprt: rdma ...` line of Linux's
//! `/proc/self/mountstats`. Plain relaxed atomics so one instance can be
//! shared by a connection's tasks.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::marshal::CallKind;
use crate::reply::ReplyKind;
use crate::validate::Action;
use crate::wire::{ChunkListsRepr, Header};

macro_rules! counters {
    ($( $(#[$m:meta])* $name:ident ),* $(,)?) => {
        /// Counters a transport exposes.
        #[derive(Debug, Default)]
        pub struct Counters {
            $( $(#[$m])* pub $name: AtomicU64, )*
        }

        /// A plain copy of [`Counters`].
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct CountersSnapshot {
            $( $(#[$m])* pub $name: u64, )*
        }

        impl Counters {
            /// Reads every counter.
            pub fn snapshot(&self) -> CountersSnapshot {
                CountersSnapshot { $( $name: self.$name.load(Relaxed), )* }
            }
        }
    };
}

counters! {
    /// Calls sent Short (RDMA_MSG, no Read chunk).
    calls_short,
    /// Calls sent Chunked (RDMA_MSG with Read chunks).
    calls_chunked,
    /// Long Calls (RDMA_NOMSG with a Position-Zero Read chunk).
    calls_long,
    /// Replies sent or received Short (RDMA_MSG).
    replies_short,
    /// Long Replies (RDMA_NOMSG via the Reply chunk).
    replies_long,
    /// Read chunks (non-zero Position) sent or received.
    read_chunks,
    /// Position-Zero Read chunks.
    position_zero_chunks,
    /// Write chunks offered or received.
    write_chunks,
    /// Reply chunks offered or received.
    reply_chunks,
    /// Bytes moved by RDMA Read or Write for chunks.
    chunk_bytes,
    /// RDMA_ERROR / ERR_VERS sent or received.
    err_vers,
    /// RDMA_ERROR / ERR_CHUNK sent or received.
    err_chunk,
    /// GARBAGE_ARGS answers caused by chunk mismatches.
    garbage_args,
    /// Messages discarded silently.
    discarded,
    /// Connections closed for protocol violations.
    closed,
}

impl Counters {
    /// Counts one planned or received call.
    pub fn add_call(&self, kind: CallKind) {
        match kind {
            CallKind::Short => &self.calls_short,
            CallKind::Chunked => &self.calls_chunked,
            CallKind::Long => &self.calls_long,
        }
        .fetch_add(1, Relaxed);
    }

    /// Counts one reply.
    pub fn add_reply(&self, kind: ReplyKind) {
        match kind {
            ReplyKind::Short => &self.replies_short,
            ReplyKind::Long => &self.replies_long,
        }
        .fetch_add(1, Relaxed);
    }

    /// Counts the chunks of an outgoing header.
    pub fn add_chunks(&self, c: &ChunkListsRepr) {
        let mut last = None;
        for r in &c.read_list {
            if last != Some(r.position) {
                if r.position == 0 {
                    self.position_zero_chunks.fetch_add(1, Relaxed);
                } else {
                    self.read_chunks.fetch_add(1, Relaxed);
                }
            }
            last = Some(r.position);
        }
        self.write_chunks
            .fetch_add(c.write_list.len() as u64, Relaxed);
        self.reply_chunks
            .fetch_add(c.reply_chunk.is_some() as u64, Relaxed);
    }

    /// Counts the chunks of a received header.
    pub fn add_received_chunks(&self, h: &Header<'_>) {
        if let Some(c) = h.chunks() {
            for r in c.read_list.chunks() {
                if r.position() == 0 {
                    self.position_zero_chunks.fetch_add(1, Relaxed);
                } else {
                    self.read_chunks.fetch_add(1, Relaxed);
                }
            }
            self.write_chunks
                .fetch_add(c.write_list.len() as u64, Relaxed);
            self.reply_chunks
                .fetch_add(c.reply_chunk.is_some() as u64, Relaxed);
        }
    }

    /// Counts bytes moved by RDMA Read/Write.
    pub fn add_chunk_bytes(&self, n: u64) {
        self.chunk_bytes.fetch_add(n, Relaxed);
    }

    /// Counts the outcome of a validation.
    pub fn add_action(&self, a: Action) {
        let c = match a {
            Action::Deliver => return,
            Action::ReplyErrVers => &self.err_vers,
            Action::ReplyErrChunk => &self.err_chunk,
            Action::GarbageArgs => &self.garbage_args,
            Action::Discard => &self.discarded,
            Action::Close => &self.closed,
        };
        c.fetch_add(1, Relaxed);
    }
}

impl fmt::Display for CountersSnapshot {
    /// One line: `rdma calls S C L replies S L chunks R P0 W RC bytes B errors V C G discard D close X`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rdma calls {} {} {} replies {} {} chunks {} {} {} {} bytes {} errors {} {} {} discard {} close {}",
            self.calls_short,
            self.calls_chunked,
            self.calls_long,
            self.replies_short,
            self.replies_long,
            self.read_chunks,
            self.position_zero_chunks,
            self.write_chunks,
            self.reply_chunks,
            self.chunk_bytes,
            self.err_vers,
            self.err_chunk,
            self.garbage_args,
            self.discarded,
            self.closed,
        )
    }
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.snapshot().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ReadSegment, Segment, WriteChunkRepr};

    #[test]
    fn counts_and_displays() {
        let c = Counters::default();
        c.add_call(CallKind::Short);
        c.add_call(CallKind::Long);
        c.add_call(CallKind::Long);
        c.add_reply(ReplyKind::Short);
        let seg = Segment::default();
        c.add_chunks(&ChunkListsRepr {
            read_list: vec![
                ReadSegment {
                    position: 0,
                    segment: seg,
                },
                ReadSegment {
                    position: 0,
                    segment: seg,
                },
                ReadSegment {
                    position: 64,
                    segment: seg,
                },
            ],
            write_list: vec![WriteChunkRepr::default(); 2],
            reply_chunk: Some(WriteChunkRepr::default()),
        });
        c.add_action(Action::ReplyErrChunk);
        c.add_action(Action::Discard);
        c.add_action(Action::Deliver);
        c.add_chunk_bytes(4096);
        assert_eq!(
            c.to_string(),
            "rdma calls 1 0 2 replies 1 0 chunks 1 1 2 1 bytes 4096 errors 0 1 0 discard 1 close 0"
        );
    }
}
