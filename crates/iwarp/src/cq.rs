//! Completion queue: a locked FIFO plus an async notification.

use rdma_verbs::WorkCompletion;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

#[derive(Debug)]
struct Inner {
    queue: Mutex<VecDeque<WorkCompletion>>,
    notify: Notify,
    capacity: usize,
    overrun: AtomicBool,
}

/// A completion queue handle (cheap to clone).
#[derive(Debug, Clone)]
pub struct Cq {
    inner: Arc<Inner>,
}

impl Cq {
    /// A queue meant to hold up to `capacity` completions.
    pub fn new(capacity: usize) -> Self {
        Cq {
            inner: Arc::new(Inner {
                queue: Mutex::new(VecDeque::with_capacity(capacity.min(4096))),
                notify: Notify::new(),
                capacity,
                overrun: AtomicBool::new(false),
            }),
        }
    }

    /// Appends completions and wakes a waiter. A queue filled beyond its
    /// capacity keeps the completions (nothing is lost) but records an
    /// overrun, visible through [`Cq::overrun`].
    pub(crate) fn push_all(&self, wcs: impl IntoIterator<Item = WorkCompletion>) {
        let mut q = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
        let before = q.len();
        q.extend(wcs);
        if q.len() > self.inner.capacity {
            self.inner.overrun.store(true, Ordering::Relaxed);
            tracing::warn!(
                len = q.len(),
                cap = self.inner.capacity,
                "completion queue overrun"
            );
        }
        let added = q.len() > before;
        drop(q);
        if added {
            self.inner.notify.notify_one();
        }
    }

    /// Appends one completion.
    pub(crate) fn push(&self, wc: WorkCompletion) {
        self.push_all(std::iter::once(wc));
    }

    /// True if more completions than the capacity were ever queued.
    pub fn overrun(&self) -> bool {
        self.inner.overrun.load(Ordering::Relaxed)
    }

    /// Completions currently queued.
    pub fn len(&self) -> usize {
        self.inner
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// True if no completion is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl rdma_verbs::CompletionQueue for Cq {
    fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        let mut q = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
        let n = q.len().min(max);
        out.extend(q.drain(..n));
        n
    }

    fn poll_one(&self) -> Option<WorkCompletion> {
        self.inner
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }

    async fn wait(&self) {
        let notified = self.inner.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !self.is_empty() {
            return;
        }
        notified.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_verbs::{CompletionQueue, WcOpcode, WcStatus};

    fn wc(id: u64) -> WorkCompletion {
        WorkCompletion {
            wr_id: id,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            invalidated_rkey: None,
            solicited: false,
            qp_num: 1,
        }
    }

    #[tokio::test]
    async fn fifo_and_notify() {
        let cq = Cq::new(2);
        let c2 = cq.clone();
        let h = tokio::spawn(async move { c2.next().await.wr_id });
        tokio::task::yield_now().await;
        cq.push(wc(7));
        assert_eq!(h.await.unwrap(), 7);
        cq.push_all([wc(1), wc(2), wc(3)]);
        assert!(cq.overrun());
        let mut v = Vec::new();
        assert_eq!(cq.poll(&mut v, 2), 2);
        assert_eq!(cq.poll_one().unwrap().wr_id, 3);
        assert!(cq.poll_one().is_none());
    }
}
