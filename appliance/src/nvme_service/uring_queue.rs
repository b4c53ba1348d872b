//! One NVMe/TCP queue's own io_uring ring, driven from the queue's task.
//!
//! Why: through the shared ring thread ([`super::uring::UringExecutor::submit`]) every
//! request costs an eventfd write to wake that thread, and every completion a channel
//! send and a wake-up of the queue's task from another thread; at 4 KiB that hand-off
//! is most of a request's CPU (tests/bench/nvme.md). Here the queue pushes a turn's
//! requests into its ring and submits them with one `io_uring_enter`, and the queue's
//! task waits for completions in tokio's reactor like its socket, on the ring's own
//! descriptor: it polls readable while the completion queue holds entries, and each
//! completion posted wakes its pollers, so no eventfd has to be signalled by the kernel
//! and read back by the queue on every turn. A completion the kernel posted at
//! submission (a read from the page cache) is reaped on the next turn without waiting.
//!
//! Teardown: a queue that ends with operations in flight hands its ring to a blocking
//! thread ([`Drain`]) that waits up to [`DRAIN_LIMIT`] for them before freeing their
//! buffers, and leaks what is still in flight after that, so the kernel never writes
//! into freed memory and the queue's task never waits on a device.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use io_uring::{types, IoUring};
use quarry_nvmeof::target::{IoFinished, IoRequest, QueueIo};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::mpsc;

use super::uring::{plan, run_blocking, Planned, Ring, RING_ENTRIES};

/// How long a torn-down queue's ring waits for its operations in flight before it
/// leaks their buffers instead.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// A queue's ring, its descriptor in tokio's reactor and the blocking pool for what the
/// ring does not take.
pub struct UringQueue {
    /// `None` once the ring failed (everything then goes to the blocking pool), and
    /// while being dropped.
    ring: Option<Ring<()>>,
    /// A duplicate of the ring's descriptor, registered with the reactor. A duplicate,
    /// not the ring's own number, so that it stays valid (and registered) while the ring
    /// is handed to [`Drain`] or dropped after a failure.
    ring_fd: AsyncFd<OwnedFd>,
    blocking: tokio::runtime::Handle,
    from_pool_tx: mpsc::UnboundedSender<IoFinished>,
    from_pool: mpsc::UnboundedReceiver<IoFinished>,
}

impl UringQueue {
    /// A ring whose descriptor the reactor watches. Must be called inside a tokio
    /// runtime with I/O enabled.
    pub fn new(blocking: tokio::runtime::Handle, completed: Arc<AtomicU64>) -> io::Result<Self> {
        let ring = IoUring::new(RING_ENTRIES)?;
        // SAFETY: the ring's descriptor is open for as long as `ring`, which outlives
        // this borrow; the duplicate made from it is owned on its own.
        let dup = unsafe { BorrowedFd::borrow_raw(ring.as_raw_fd()) }.try_clone_to_owned()?;
        // SAFETY: the AsyncFd owns the duplicate, which stays open (and the same
        // descriptor) until the AsyncFd is dropped.
        let ring_fd = unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) }
            .map_err(|e| io::Error::other(e.to_string()))?;
        let (from_pool_tx, from_pool) = mpsc::unbounded_channel();
        Ok(UringQueue {
            ring: Some(Ring::new(ring, 0, completed)),
            ring_fd,
            blocking,
            from_pool_tx,
            from_pool,
        })
    }

    fn to_pool(&self, req: IoRequest) {
        let tx = self.from_pool_tx.clone();
        run_blocking(&self.blocking, req, move |req, res| {
            // The queue may be gone; then the result is moot.
            let _ = tx.send((req, res));
        });
    }

    /// Takes what the completion queue holds into `out`; true if any request ended.
    fn reap_into(&mut self, out: &mut VecDeque<IoFinished>) -> bool {
        let Some(ring) = self.ring.as_mut() else {
            return false;
        };
        let mut any = false;
        let reaped = ring.reap();
        let room = !reaped.is_empty();
        for (key, res) in reaped {
            if let Some((req, (), res)) = ring.complete(key, res) {
                out.push_back((req, res));
                any = true;
            }
        }
        // Completions made room (and short transfers went back to the backlog): what
        // waits goes in now rather than at the queue's next turn.
        if room && ring.waiting() {
            self.flush();
        }
        any
    }

    /// The ring failed: its operations in flight fail (their buffers leak), the rest
    /// and everything after go to the blocking pool.
    fn break_ring(&mut self, e: &io::Error, out: &mut VecDeque<IoFinished>) {
        tracing::error!(error = %e, "io_uring submit failed; this queue's I/O falls back to threads");
        if let Some(mut ring) = self.ring.take() {
            let (failed, waiting) = ring.fail_all(e);
            out.extend(failed.into_iter().map(|(req, (), res)| (req, res)));
            for (req, ()) in waiting {
                self.to_pool(req);
            }
            // The kernel may still hold the failed operations' (leaked) buffers; the
            // ring itself can go.
        }
    }
}

impl QueueIo for UringQueue {
    fn submit(&mut self, req: IoRequest) {
        let Some(ring) = self.ring.as_mut() else {
            return self.to_pool(req);
        };
        match plan(req, ()) {
            Planned::Ring(op) => ring.enqueue(op),
            Planned::Blocking(req, ()) => self.to_pool(req),
        }
    }

    fn flush(&mut self) {
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        ring.fill();
        // A turn that started nothing (answers only) costs no system call.
        if ring.ring.submission().is_empty() {
            return;
        }
        if let Err(e) = ring.ring.submit() {
            if e.kind() != io::ErrorKind::Interrupted && e.raw_os_error() != Some(libc::EBUSY) {
                // Reported (and the operations failed) on the next poll.
                let mut lost = VecDeque::new();
                self.break_ring(&e, &mut lost);
                for (req, res) in lost {
                    let _ = self.from_pool_tx.send((req, res));
                }
            }
        }
    }

    fn poll_done(&mut self, cx: &mut Context<'_>, out: &mut VecDeque<IoFinished>) -> Poll<()> {
        let mut any = false;
        while let Poll::Ready(Some(done)) = self.from_pool.poll_recv(cx) {
            out.push_back(done);
            any = true;
        }
        loop {
            if self.reap_into(out) {
                any = true;
            }
            if any {
                return Poll::Ready(());
            }
            // Nothing reaped: wait until the ring's descriptor polls readable. Readiness
            // still set from an earlier wake-up is cleared and the queue reaped again; a
            // completion posted after that reap wakes the reactor anew, so none is
            // missed, and each pass either returns or clears readiness, so this ends.
            let mut ready = match self.ring_fd.poll_read_ready(cx) {
                Poll::Ready(Ok(r)) => r,
                Poll::Ready(Err(e)) => {
                    self.break_ring(&e, out);
                    return if out.is_empty() {
                        Poll::Pending
                    } else {
                        Poll::Ready(())
                    };
                }
                Poll::Pending => return Poll::Pending,
            };
            ready.clear_ready();
        }
    }
}

impl Drop for UringQueue {
    fn drop(&mut self) {
        let Some(ring) = self.ring.take() else {
            return;
        };
        if !ring.in_flight() {
            return;
        }
        // Waiting is the blocking pool's job; during runtime shutdown the task may
        // never run, and then `Drain`'s own drop does the same wait on this thread.
        let drain = Drain { ring: Some(ring) };
        self.blocking.spawn_blocking(move || drop(drain));
    }
}

/// A torn-down queue's ring with operations still in flight; dropping it waits for
/// them (at most [`DRAIN_LIMIT`]) and leaks the buffers of any that do not finish.
struct Drain {
    ring: Option<Ring<()>>,
}

impl Drop for Drain {
    fn drop(&mut self) {
        let Some(mut ring) = self.ring.take() else {
            return;
        };
        let deadline = Instant::now() + DRAIN_LIMIT;
        let tick = types::Timespec::new().nsec(100_000_000);
        while ring.in_flight() && Instant::now() < deadline {
            let args = types::SubmitArgs::new().timespec(&tick);
            match ring.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!(error = %e, "draining a queue's io_uring ring failed");
                    break;
                }
            }
            for (key, res) in ring.reap() {
                // Results of a queue that is gone are moot; a short transfer is not
                // continued.
                let _ = ring.complete(key, res);
            }
        }
        if ring.in_flight() {
            tracing::warn!(
                "I/O of a closed NVMe queue did not finish in time; its buffers are leaked"
            );
            let _ = ring.fail_all(&io::Error::other("queue closed"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme_service::device::{test_volume, FileDevice};
    use quarry_nvmeof::target::{BlockDevice, BlockOp, IoBuf, IoCounters, IoOutcome};
    use std::sync::atomic::Ordering;

    fn request(cid: u16, device: &Arc<FileDevice>, op: BlockOp) -> IoRequest {
        IoRequest {
            cid,
            device: device.clone(),
            counters: Arc::new(IoCounters::default()),
            op,
            started: Instant::now(),
        }
    }

    /// A queue ring on this runtime and a volume of `size` bytes in a temp dir (kept
    /// alive by the returned guard), with the ring's completion counter.
    fn queue_on_volume(
        size: u64,
    ) -> (
        tempfile::TempDir,
        Arc<FileDevice>,
        Arc<AtomicU64>,
        UringQueue,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (_, dev) = test_volume(dir.path(), size);
        let completed = Arc::new(AtomicU64::new(0));
        let q = UringQueue::new(tokio::runtime::Handle::current(), completed.clone()).unwrap();
        (dir, Arc::new(dev), completed, q)
    }

    /// Flushes, then collects `n` finished requests, as the transport's loop does.
    async fn finish(q: &mut UringQueue, n: usize) -> Vec<IoFinished> {
        q.flush();
        let mut out = VecDeque::new();
        while out.len() < n {
            std::future::poll_fn(|cx| q.poll_done(cx, &mut out)).await;
        }
        out.into_iter().collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queue_ring_reads_and_writes_on_its_own_task_and_sends_the_rest_to_the_pool() {
        let (_dir, dev, completed, mut q) = queue_on_volume(4 << 20);

        // Aligned (direct on ext4) and unaligned (buffered) writes, then a flush, which
        // the ring does not take, all in one turn.
        let data: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
        let w1 = BlockOp::Write {
            offset: 128 * 1024,
            data: IoBuf::copy_from(&data),
            fua: false,
        };
        let w2 = BlockOp::Write {
            offset: 7,
            data: IoBuf::copy_from(b"queue ring"),
            fua: true,
        };
        q.submit(request(1, &dev, w1));
        q.submit(request(2, &dev, w2));
        q.submit(request(3, &dev, BlockOp::Flush));
        let mut done = finish(&mut q, 3).await;
        done.sort_by_key(|(r, _)| r.cid);
        for (req, res) in &done {
            assert_eq!(res.as_ref().unwrap(), &IoOutcome::Done, "cid {}", req.cid);
        }
        assert_eq!(
            completed.load(Ordering::Relaxed),
            2,
            "the flush took the pool"
        );

        let r1 = BlockOp::Read {
            offset: 128 * 1024,
            len: data.len() as u32,
        };
        let r2 = BlockOp::Read {
            offset: 0,
            len: 4096,
        };
        q.submit(request(4, &dev, r1));
        q.submit(request(5, &dev, r2));
        let mut done = finish(&mut q, 2).await;
        done.sort_by_key(|(r, _)| r.cid);
        assert_eq!(
            done[0].1.as_ref().unwrap(),
            &IoOutcome::Read(IoBuf::copy_from(&data))
        );
        let IoOutcome::Read(page) = done[1].1.as_ref().unwrap() else {
            panic!("not a read")
        };
        assert_eq!(&page[7..17], b"queue ring");
        assert_eq!(completed.load(Ordering::Relaxed), 4);
        // The blocking path sees what the ring wrote.
        let mut check = vec![0u8; 10];
        dev.read_at(7, &mut check).unwrap();
        assert_eq!(&check, b"queue ring");
        // Every buffer came from the arena, which the ring registered (root has no
        // memlock limit): all four reads and writes ran on fixed buffers.
        q.ring.as_ref().unwrap().fixed_use().assert_ran(4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn more_requests_than_the_ring_holds_all_complete_and_a_dropped_queue_drains() {
        let (_dir, dev, completed, mut q) = queue_on_volume(8 << 20);
        let n = RING_ENTRIES as usize * 2 + 3;
        for i in 0..n {
            let block = (i % 2048) as u64;
            let w = BlockOp::Write {
                offset: block * 4096,
                data: IoBuf::copy_from(&[(block % 255) as u8 + 1; 4096]),
                fua: false,
            };
            q.submit(request(i as u16, &dev, w));
        }
        let done = finish(&mut q, n).await;
        assert_eq!(done.len(), n);
        assert!(done.iter().all(|(_, r)| r.is_ok()));
        let mut cids: Vec<u16> = done.iter().map(|(r, _)| r.cid).collect();
        cids.sort_unstable();
        cids.dedup();
        assert_eq!(cids.len(), n, "each request ends exactly once");

        // Dropped with reads in flight: the drain waits for them off this task.
        for i in 0..64u16 {
            let r = BlockOp::Read {
                offset: u64::from(i) * 4096,
                len: 4096,
            };
            q.submit(request(i, &dev, r));
        }
        q.flush();
        drop(q);
        // Everything in flight completes well within the drain limit; the count rises
        // as the drain reaps.
        let start = Instant::now();
        while completed.load(Ordering::Relaxed) < (n + 64) as u64 {
            assert!(start.elapsed() < Duration::from_secs(10), "drain stalled");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
