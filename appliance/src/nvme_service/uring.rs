//! NVMe reads and writes of volume files through io_uring. I/O at 4 KiB-aligned
//! offsets and lengths goes to the volume's `O_DIRECT` descriptor, the rest (and every
//! I/O on file systems without `O_DIRECT`, such as tmpfs) to its buffered descriptor.
//! Either way writes go straight from the command's own buffer and reads land in the
//! buffer that becomes the answer: the target's buffers are 4 KiB-aligned ([`IoBuf`]),
//! so no bounce copy. Anything else (flush, zeroing, deallocation, devices that are not
//! volume files) runs on the blocking pool.
//!
//! Two ways in, sharing `Ring` (planning, buffers in flight, short transfers):
//! - each NVMe/TCP queue gets a ring of its own (`uring_queue`), submitted and
//!   reaped on the queue's task: a request costs no thread hand-off at all;
//! - [`UringExecutor::submit`] (NVMe/RDMA, and TCP queues whose ring could not be made)
//!   hands requests to one ring thread: a channel send and an eventfd write each.
//!
//! Every ring registers the target's buffer arena ([`quarry_nvmeof::target::iobuf`]) as
//! fixed buffers, chunk by chunk as the arena grows, and runs I/O on an arena buffer as a
//! fixed read or write: the kernel then takes the buffer's pages from the registration
//! instead of pinning them for every operation. Where registration fails (a memlock
//! limit below the arena, for a process without `CAP_IPC_LOCK`), the ring goes on with
//! plain reads and writes.
//!
//! Limits: at most [`RING_ENTRIES`] operations in a ring; more wait in its backlog
//! (their memory is already bounded by the NVMe queues' own limits).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use io_uring::{opcode, types, IoUring};
use quarry_nvmeof::target::iobuf::{arena_chunks, ARENA_CHUNKS};
use quarry_nvmeof::target::{BlockOp, IoBuf, IoDone, IoExecutor, IoOutcome, IoRequest, QueueIo};
use rustc_hash::FxHashMap;

use super::device::{memory_aligned, FileDevice};

/// Submission queue size of a ring (and most operations in it at once).
pub const RING_ENTRIES: u32 = 256;
/// `user_data` of the ring thread's own eventfd read.
const WAKE_KEY: u64 = u64::MAX;

/// A request handed to the ring thread.
struct Job {
    req: IoRequest,
    done: IoDone,
}

/// The executor: a channel to the ring thread and the eventfd that wakes it; it also
/// makes the per-queue rings.
pub struct UringExecutor {
    tx: mpsc::Sender<Job>,
    wake: File,
    blocking: tokio::runtime::Handle,
    completed: Arc<AtomicU64>,
    /// The shared ring's use of fixed buffers (tests: NVMe/RDMA's I/O runs on this ring).
    #[cfg(test)]
    fixed: FixedUse,
}

/// A ring's use of fixed buffers: whether it registered any, and how many operations ran
/// on them. Tests only: it tells which path the I/O took.
#[cfg(test)]
#[derive(Debug, Clone)]
pub(super) struct FixedUse {
    ops: Arc<AtomicU64>,
    registered: bool,
}

#[cfg(test)]
impl FixedUse {
    /// Asserts that `expected` operations ran on fixed buffers. Root has no memlock limit,
    /// so there the ring must have registered them; elsewhere registration may fail, and
    /// then no operation ran on them.
    pub(super) fn assert_ran(&self, expected: u64) {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert!(self.registered, "as root the ring registers fixed buffers");
        }
        let want = if self.registered { expected } else { 0 };
        assert_eq!(self.ops.load(Ordering::Relaxed), want);
    }
}

impl UringExecutor {
    /// Creates the ring and starts its thread. Fails when the kernel refuses io_uring
    /// (disabled by sysctl or a seccomp filter); the caller then uses the blocking pool.
    /// Must be called inside a tokio runtime (fallback work goes to its blocking pool).
    pub fn start() -> io::Result<UringExecutor> {
        let ring = IoUring::new(RING_ENTRIES)?;
        let owned = eventfd(0)?;
        let wake = File::from(owned.try_clone()?);
        let (tx, rx) = mpsc::channel();
        let blocking = tokio::runtime::Handle::try_current()
            .map_err(|e| io::Error::other(format!("no tokio runtime: {e}")))?;
        let fallback = blocking.clone();
        let completed = Arc::new(AtomicU64::new(0));
        let ring = Ring::new(ring, 1, completed.clone());
        #[cfg(test)]
        let fixed = ring.fixed_use();
        std::thread::Builder::new()
            .name("quarry-uring".into())
            .spawn(move || RingThread::new(ring, owned, rx, fallback).run())?;
        Ok(UringExecutor {
            tx,
            wake,
            blocking,
            completed,
            #[cfg(test)]
            fixed,
        })
    }

    /// Reads and writes the rings completed successfully (not those handed to the
    /// blocking pool): tells which path requests took.
    pub fn ring_completions(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }
}

/// A fresh eventfd (`flags` besides `EFD_CLOEXEC`).
pub(super) fn eventfd(flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: eventfd has no memory-safety preconditions; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs `req` on the blocking pool and hands its result to `done`.
pub(super) fn run_blocking(
    handle: &tokio::runtime::Handle,
    req: IoRequest,
    done: impl FnOnce(IoRequest, io::Result<IoOutcome>) + Send + 'static,
) {
    handle.spawn_blocking(move || {
        let res = req.execute();
        done(req, res);
    });
}

impl IoExecutor for UringExecutor {
    fn submit(&self, req: IoRequest, done: IoDone) {
        let job = Job { req, done };
        match self.tx.send(job) {
            Ok(()) => {
                if let Err(e) = (&self.wake).write_all(&1u64.to_ne_bytes()) {
                    tracing::error!(error = %e, "waking the io_uring thread failed");
                }
            }
            // The ring thread is gone (it only ends on a ring failure): keep serving.
            Err(mpsc::SendError(Job { req, done })) => run_blocking(&self.blocking, req, done),
        }
    }

    fn queue_io(&self) -> Option<Box<dyn QueueIo>> {
        match super::uring_queue::UringQueue::new(self.blocking.clone(), self.completed.clone()) {
            Ok(q) => Some(Box::new(q)),
            Err(e) => {
                tracing::debug!(error = %e, "no io_uring ring for this queue; using the shared one");
                None
            }
        }
    }
}

/// Read or write as a ring runs it, with where its bytes live while the kernel holds
/// them.
enum RingOp {
    /// Into the buffer that becomes the answer.
    Read(IoBuf),
    /// From the command's own data (`copy: None`), or from an aligned copy of it when
    /// O_DIRECT cannot take its memory (only a buffer not made by the target).
    Write { fua: bool, copy: Option<IoBuf> },
}

/// An operation in a ring: the buffer lives here until its completion arrives. `T` is
/// what the submitter needs back with the result.
pub(super) struct InFlight<T> {
    req: IoRequest,
    token: T,
    op: RingOp,
    fd: RawFd,
    offset: u64,
    /// Bytes done so far (short transfers are resubmitted for the rest).
    progress: usize,
}

impl<T> InFlight<T> {
    /// The buffer the kernel reads from or writes into: the read's, the aligned copy,
    /// or the command's own data (`None` only for a request that is not a write).
    fn buffer(&mut self) -> Option<&mut IoBuf> {
        match &mut self.op {
            RingOp::Read(b) | RingOp::Write { copy: Some(b), .. } => Some(b),
            RingOp::Write { copy: None, .. } => match &mut self.req.op {
                BlockOp::Write { data, .. } => Some(data),
                _ => None,
            },
        }
    }

    /// The operation's whole buffer (start and length); reads may write through it.
    fn window(&mut self) -> (*mut u8, usize) {
        match self.buffer() {
            Some(b) => (b.as_mut_ptr(), b.len()),
            None => (std::ptr::NonNull::dangling().as_ptr(), 0),
        }
    }

    /// Gives up the operation without freeing memory the kernel may still write: its
    /// buffers are leaked. For rings that failed or were torn down with it in flight.
    fn abandon(self) -> (IoRequest, T) {
        let InFlight {
            mut req, token, op, ..
        } = self;
        std::mem::forget(op);
        if let BlockOp::Write { data, .. } = &mut req.op {
            std::mem::forget(std::mem::take(data));
        }
        (req, token)
    }
}

/// How a request will run.
pub(super) enum Planned<T> {
    /// In a ring.
    Ring(InFlight<T>),
    /// On the blocking pool (not a read or write of a volume file).
    Blocking(IoRequest, T),
}

/// Decides where `req` runs and, for the ring, on which descriptor and buffer.
pub(super) fn plan<T>(req: IoRequest, token: T) -> Planned<T> {
    let Some(dev) = req
        .device
        .as_any()
        .and_then(|a| a.downcast_ref::<FileDevice>())
    else {
        return Planned::Blocking(req, token);
    };
    let (direct, buffered) = (dev.direct_fd(), dev.buffered_fd());
    // The descriptor for I/O at `offset` of `len` bytes: direct when aligned.
    let fd_for = |offset: u64, len: usize| match direct {
        Some(fd) if is_aligned(offset, len) => fd,
        _ => buffered,
    };
    let plan = match &req.op {
        BlockOp::Read { offset, len } if *len > 0 => {
            // Every byte is overwritten: by the read, or zeroed at end of file.
            let op = RingOp::Read(IoBuf::for_overwrite(*len as usize));
            Some((op, fd_for(*offset, *len as usize), *offset))
        }
        BlockOp::Write { offset, data, fua } if !data.is_empty() => {
            let fd = fd_for(*offset, data.len());
            let copy = (fd != buffered && !memory_aligned(data)).then(|| IoBuf::copy_from(data));
            Some((RingOp::Write { fua: *fua, copy }, fd, *offset))
        }
        _ => None,
    };
    match plan {
        Some((op, fd, offset)) => Planned::Ring(InFlight {
            req,
            token,
            op,
            fd,
            offset,
            progress: 0,
        }),
        None => Planned::Blocking(req, token),
    }
}

/// A request's end: the request, its token and its result.
pub(super) type Ended<T> = (IoRequest, T, io::Result<IoOutcome>);

/// One io_uring ring and the operations in it.
pub(super) struct Ring<T> {
    pub(super) ring: IoUring,
    /// Operations in the ring by key. FxHash: the keys are this ring's own counter, so
    /// no peer chooses them, and SipHash was the larger part of each insert and remove.
    inflight: FxHashMap<u64, InFlight<T>>,
    backlog: VecDeque<InFlight<T>>,
    next_key: u64,
    /// Slots kept free for the owner's own operations (the thread's wake-up read).
    reserved: usize,
    completed: Arc<AtomicU64>,
    /// Arena chunks registered as this ring's fixed buffers (chunk `n` is buffer `n`);
    /// `None` when the ring has no fixed buffers (registration failed).
    registered: Option<usize>,
    /// Operations run on fixed buffers (tests: [`FixedUse`]).
    #[cfg(test)]
    fixed_ops: Arc<AtomicU64>,
}

impl<T> Ring<T> {
    pub(super) fn new(ring: IoUring, reserved: usize, completed: Arc<AtomicU64>) -> Self {
        let slots = u32::try_from(ARENA_CHUNKS).unwrap_or(u32::MAX);
        let registered = match ring.submitter().register_buffers_sparse(slots) {
            Ok(()) => Some(0),
            Err(e) => {
                tracing::debug!(error = %e, "io_uring: no fixed buffers for this ring");
                None
            }
        };
        Ring {
            ring,
            inflight: FxHashMap::default(),
            backlog: VecDeque::new(),
            next_key: 0,
            reserved,
            completed,
            registered,
            #[cfg(test)]
            fixed_ops: Arc::new(AtomicU64::new(0)),
        }
    }

    /// This ring's use of fixed buffers.
    #[cfg(test)]
    pub(super) fn fixed_use(&self) -> FixedUse {
        FixedUse {
            ops: self.fixed_ops.clone(),
            registered: self.registered.is_some(),
        }
    }

    /// Whether arena chunk `chunk` is one of this ring's fixed buffers, registering the
    /// chunks made since the last registration first. A failed registration leaves the
    /// ring without fixed buffers from then on.
    fn fixed(&mut self, chunk: u16) -> bool {
        let Some(done) = self.registered else {
            return false;
        };
        let chunk = usize::from(chunk);
        if chunk < done {
            return true;
        }
        let iovecs: Vec<libc::iovec> = arena_chunks(done)
            .into_iter()
            .map(|(start, len)| libc::iovec {
                iov_base: start as *mut libc::c_void,
                iov_len: len,
            })
            .collect();
        let at = u32::try_from(done).unwrap_or(u32::MAX);
        // SAFETY: arena chunks are leaked memory, never freed or moved, so the
        // registration stays valid for the life of the process.
        match unsafe {
            self.ring
                .submitter()
                .register_buffers_update(at, &iovecs, None)
        } {
            Ok(()) => {
                let now = done + iovecs.len();
                self.registered = Some(now);
                chunk < now
            }
            Err(e) => {
                tracing::debug!(error = %e, "io_uring: registering buffers failed; plain I/O from now on");
                self.registered = None;
                false
            }
        }
    }

    /// Whether operations wait for room in the ring.
    pub(super) fn waiting(&self) -> bool {
        !self.backlog.is_empty()
    }

    /// Whether operations the kernel holds are outstanding.
    pub(super) fn in_flight(&self) -> bool {
        !self.inflight.is_empty()
    }

    /// Queues an operation for the ring.
    pub(super) fn enqueue(&mut self, op: InFlight<T>) {
        self.backlog.push_back(op);
    }

    /// Pushes backlog operations into the submission queue while the ring has room
    /// (the caller submits).
    pub(super) fn fill(&mut self) {
        while self.inflight.len() + self.reserved < RING_ENTRIES as usize {
            let Some(op) = self.backlog.pop_front() else {
                return;
            };
            self.push(op);
        }
    }

    fn push(&mut self, mut op: InFlight<T>) {
        let key = self.next_key;
        self.next_key = (self.next_key + 1) % WAKE_KEY;
        let (start, total) = op.window();
        let done = op.progress.min(total);
        // SAFETY: `done` is within the buffer, so the pointer stays inside it.
        let ptr = unsafe { start.add(done) };
        let len = u32::try_from(total - done).unwrap_or(u32::MAX);
        let at = op.offset + op.progress as u64;
        let fd = types::Fd(op.fd);
        let fixed = op
            .buffer()
            .and_then(|b| b.arena_chunk())
            .filter(|&c| self.fixed(c));
        let flags = |fua: bool| if fua { libc::RWF_DSYNC } else { 0 };
        let sqe = match (&op.op, fixed) {
            (RingOp::Read(_), Some(i)) => {
                opcode::ReadFixed::new(fd, ptr, len, i).offset(at).build()
            }
            (RingOp::Read(_), None) => opcode::Read::new(fd, ptr, len).offset(at).build(),
            (RingOp::Write { fua, .. }, Some(i)) => {
                opcode::WriteFixed::new(fd, ptr.cast_const(), len, i)
                    .offset(at)
                    .rw_flags(flags(*fua))
                    .build()
            }
            (RingOp::Write { fua, .. }, None) => opcode::Write::new(fd, ptr.cast_const(), len)
                .offset(at)
                .rw_flags(flags(*fua))
                .build(),
        }
        .user_data(key);
        // SAFETY: the buffer is owned by `op`, which stays in `inflight` (memory that
        // does not move when the map grows: every buffer is an `IoBuf`, whose bytes are
        // on the heap or in the arena, and the request's is not touched while in flight)
        // until this operation's completion is reaped, or is leaked (`abandon`); the
        // descriptor belongs to the device the request holds an `Arc` of, so it stays
        // open as long as `op`.
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        if pushed.is_err() {
            self.backlog.push_front(op);
            return;
        }
        #[cfg(test)]
        if fixed.is_some() {
            self.fixed_ops.fetch_add(1, Ordering::Relaxed);
        }
        self.inflight.insert(key, op);
    }

    /// The completions waiting in the completion queue (keys and results).
    pub(super) fn reap(&mut self) -> Vec<(u64, i32)> {
        self.ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect()
    }

    /// Settles the completion of `key`: the request's end, or `None` when the key is
    /// not one of this ring's operations or the operation goes on (a short transfer or
    /// EAGAIN, back in the backlog).
    pub(super) fn complete(&mut self, key: u64, res: i32) -> Option<Ended<T>> {
        let mut op = self.inflight.remove(&key)?;
        if res == -libc::EAGAIN || res == -libc::EINTR {
            self.backlog.push_front(op);
            return None;
        }
        if res < 0 {
            let InFlight { req, token, .. } = op;
            return Some((req, token, Err(io::Error::from_raw_os_error(-res))));
        }
        let n = res as usize;
        let total = op.window().1;
        if n == 0 && op.progress < total {
            match op.op {
                // End of file: the rest of a volume reads as zeroes (a file shorter
                // than its volume, e.g. after a crash during a resize).
                // The buffer is recycled: what the file lacks is zeroed here, never
                // left showing an earlier read's data.
                RingOp::Read(ref mut b) => {
                    if let Some(rest) = b.get_mut(op.progress..) {
                        rest.fill(0);
                    }
                    op.progress = total;
                }
                RingOp::Write { .. } => {
                    let InFlight { req, token, .. } = op;
                    return Some((req, token, Err(io::Error::from(io::ErrorKind::WriteZero))));
                }
            }
        }
        op.progress = (op.progress + n).min(total);
        if op.progress < total {
            self.backlog.push_front(op);
            return None;
        }
        let InFlight { req, token, op, .. } = op;
        let outcome = match op {
            RingOp::Read(b) => IoOutcome::Read(b),
            RingOp::Write { .. } => IoOutcome::Done,
        };
        self.completed.fetch_add(1, Ordering::Relaxed);
        Some((req, token, Ok(outcome)))
    }

    /// Fails every operation the kernel holds (the ring broke), leaking their buffers,
    /// and returns them with the error; the backlog is returned untouched.
    pub(super) fn fail_all(&mut self, e: &io::Error) -> (Vec<Ended<T>>, Vec<(IoRequest, T)>) {
        let failed = self
            .inflight
            .drain()
            .map(|(_, op)| {
                let (req, token) = op.abandon();
                (req, token, Err(io::Error::new(e.kind(), e.to_string())))
            })
            .collect();
        let waiting = self
            .backlog
            .drain(..)
            .map(|op| (op.req, op.token))
            .collect();
        (failed, waiting)
    }
}

struct RingThread {
    ring: Ring<IoDone>,
    wake: OwnedFd,
    wake_buf: Box<[u8; 8]>,
    rx: mpsc::Receiver<Job>,
    fallback: tokio::runtime::Handle,
    closed: bool,
}

impl RingThread {
    fn new(
        ring: Ring<IoDone>,
        wake: OwnedFd,
        rx: mpsc::Receiver<Job>,
        fallback: tokio::runtime::Handle,
    ) -> Self {
        RingThread {
            ring,
            wake,
            wake_buf: Box::new([0; 8]),
            rx,
            fallback,
            closed: false,
        }
    }

    fn run(mut self) {
        if let Err(e) = self.arm_wake() {
            tracing::error!(error = %e, "io_uring: cannot arm the wake-up read; NVMe I/O falls back to threads");
            self.drain_to_fallback(Vec::new());
            return;
        }
        loop {
            self.take_jobs();
            self.ring.fill();
            if self.closed && !self.ring.in_flight() && !self.ring.waiting() {
                return;
            }
            if let Err(e) = self.ring.ring.submit_and_wait(1) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!(error = %e, "io_uring submit failed; NVMe I/O falls back to threads");
                let (failed, waiting) = self.ring.fail_all(&e);
                for (req, done, res) in failed {
                    done(req, res);
                }
                self.drain_to_fallback(waiting);
                return;
            }
            for (key, res) in self.ring.reap() {
                if key == WAKE_KEY {
                    if let Err(e) = self.arm_wake() {
                        tracing::error!(error = %e, "io_uring: re-arming the wake-up read failed");
                    }
                    continue;
                }
                if let Some((req, done, res)) = self.ring.complete(key, res) {
                    done(req, res);
                }
            }
        }
    }

    /// Queues a read of the eventfd, so a submitter's write ends `submit_and_wait`.
    fn arm_wake(&mut self) -> io::Result<()> {
        let sqe = opcode::Read::new(
            types::Fd(self.wake.as_raw_fd()),
            self.wake_buf.as_mut_ptr(),
            8,
        )
        .build()
        .user_data(WAKE_KEY);
        // SAFETY: the buffer is owned by `self` (boxed, so it does not move) and
        // outlives the ring; the descriptor stays open as long as `self`.
        unsafe { self.ring.ring.submission().push(&sqe) }
            .map_err(|_| io::Error::other("submission queue full"))?;
        Ok(())
    }

    /// Moves new jobs from the channel into the ring's backlog (or the blocking pool).
    fn take_jobs(&mut self) {
        loop {
            match self.rx.try_recv() {
                Ok(Job { req, done }) => match plan(req, done) {
                    Planned::Ring(op) => self.ring.enqueue(op),
                    Planned::Blocking(req, done) => run_blocking(&self.fallback, req, done),
                },
                Err(mpsc::TryRecvError::Empty) => return,
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.closed = true;
                    return;
                }
            }
        }
    }

    fn drain_to_fallback(&mut self, waiting: Vec<(IoRequest, IoDone)>) {
        for (req, done) in waiting {
            run_blocking(&self.fallback, req, done);
        }
        while let Ok(Job { req, done }) = self.rx.recv() {
            run_blocking(&self.fallback, req, done);
        }
    }
}

fn is_aligned(offset: u64, len: usize) -> bool {
    len > 0 && offset.is_multiple_of(4096) && len.is_multiple_of(4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme_service::device::test_volume;
    use std::sync::Arc;

    use quarry_nvmeof::target::{BlockDevice, IoCounters};

    async fn run(
        exec: &UringExecutor,
        device: Arc<FileDevice>,
        op: BlockOp,
    ) -> io::Result<IoOutcome> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let req = IoRequest {
            cid: 1,
            device,
            counters: Arc::new(IoCounters::default()),
            op,
            started: std::time::Instant::now(),
        };
        exec.submit(
            req,
            Box::new(move |_, res| {
                let _ = tx.send(res);
            }),
        );
        rx.await.map_err(|_| io::Error::other("dropped"))?
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_and_writes_go_through_the_ring_direct_when_aligned_buffered_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let (_, dev) = test_volume(dir.path(), 1 << 20);
        let dev = Arc::new(dev);
        assert!(
            dev.direct_fd().is_some(),
            "the test needs O_DIRECT (ext4 /tmp)"
        );
        let exec = UringExecutor::start().unwrap();

        let data: Vec<u8> = (0..128 * 1024).map(|i| (i % 251) as u8).collect();
        let w = BlockOp::Write {
            offset: 64 * 1024,
            data: IoBuf::copy_from(&data),
            fua: true,
        };
        assert_eq!(run(&exec, dev.clone(), w).await.unwrap(), IoOutcome::Done);
        let r = BlockOp::Read {
            offset: 64 * 1024,
            len: data.len() as u32,
        };
        assert_eq!(
            run(&exec, dev.clone(), r).await.unwrap(),
            IoOutcome::Read(IoBuf::copy_from(&data))
        );
        // What the ring wrote is what the blocking path reads, and the other way round.
        let mut check = vec![0u8; 4096];
        dev.read_at(64 * 1024, &mut check).unwrap();
        assert_eq!(check, data[..4096]);
        assert_eq!(exec.ring_completions(), 2);
        // Both buffers came from the arena, which the shared ring registered (root has no
        // memlock limit): both ran on fixed buffers, as NVMe/RDMA's I/O does.
        exec.fixed.assert_ran(2);
        // Unaligned I/O takes the ring's buffered descriptor and stays coherent with
        // the direct one; a flush takes the blocking pool.
        let w = BlockOp::Write {
            offset: 10,
            data: IoBuf::copy_from(b"hello"),
            fua: false,
        };
        assert_eq!(run(&exec, dev.clone(), w).await.unwrap(), IoOutcome::Done);
        let r = BlockOp::Read {
            offset: 0,
            len: 4096,
        };
        let IoOutcome::Read(page) = run(&exec, dev.clone(), r).await.unwrap() else {
            panic!("not a read")
        };
        assert_eq!(&page[10..15], b"hello");
        assert_eq!(exec.ring_completions(), 4);
        assert_eq!(
            run(&exec, dev.clone(), BlockOp::Flush).await.unwrap(),
            IoOutcome::Done
        );
        assert_eq!(
            exec.ring_completions(),
            4,
            "a flush is not a ring operation"
        );
        // Past the end of a short file: zeroes, as a hole would read, even in a
        // recycled buffer that held other data. (Here ext4's direct read of a hole
        // zeroes the whole span itself; the buffered test below relies on the ring.)
        leave_junk_in_pool(8192);
        let r = BlockOp::Read {
            offset: (1 << 20) - 4096,
            len: 8192,
        };
        let IoOutcome::Read(tail) = run(&exec, dev.clone(), r).await.unwrap() else {
            panic!("not a read")
        };
        assert!(tail.iter().all(|&b| b == 0));
    }

    /// Returns buffers of `len`'s size class, full of non-zero bytes, to the shared pool,
    /// so that the next read of that size reuses one of them.
    fn leave_junk_in_pool(len: usize) {
        let junk: Vec<IoBuf> = (0..32)
            .map(|_| {
                let mut b = IoBuf::for_overwrite(len);
                b.fill(0xee);
                b
            })
            .collect();
        drop(junk);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_volume_without_o_direct_is_served_by_the_ring_through_its_buffered_descriptor() {
        // tmpfs has no O_DIRECT (Linux 6.1, the guest lab's kernel).
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let (path, dev) = test_volume(dir.path(), 1 << 20);
        let dev = Arc::new(dev);
        let exec = UringExecutor::start().unwrap();
        // Unaligned, with FUA, across a page boundary.
        let data: Vec<u8> = (0..10_000).map(|i| (i % 253) as u8).collect();
        let w = BlockOp::Write {
            offset: 4000,
            data: IoBuf::copy_from(&data),
            fua: true,
        };
        assert_eq!(run(&exec, dev.clone(), w).await.unwrap(), IoOutcome::Done);
        let r = BlockOp::Read {
            offset: 4000,
            len: data.len() as u32,
        };
        assert_eq!(
            run(&exec, dev.clone(), r).await.unwrap(),
            IoOutcome::Read(IoBuf::copy_from(&data))
        );
        let mut check = vec![0u8; data.len()];
        dev.read_at(4000, &mut check).unwrap();
        assert_eq!(check, data, "the blocking path reads what the ring wrote");
        assert_eq!(exec.ring_completions(), 2, "both went through the ring");
        // A file shorter than its volume reads as zeroes past its end.
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(8192)
            .unwrap();
        leave_junk_in_pool(3 * 4096);
        let r = BlockOp::Read {
            offset: 4096,
            len: 3 * 4096,
        };
        let IoOutcome::Read(tail) = run(&exec, dev.clone(), r).await.unwrap() else {
            panic!("not a read")
        };
        assert_eq!(&tail[..4096], &data[96..96 + 4096]);
        assert!(tail[4096..].iter().all(|&b| b == 0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_concurrent_operations_beyond_the_ring_size_all_complete() {
        let dir = tempfile::tempdir().unwrap();
        let (_, dev) = test_volume(dir.path(), 8 << 20);
        let dev = Arc::new(dev);
        let exec = Arc::new(UringExecutor::start().unwrap());
        let mut tasks = Vec::new();
        for i in 0..(RING_ENTRIES as u64 * 2) {
            let (exec, dev) = (exec.clone(), dev.clone());
            tasks.push(tokio::spawn(async move {
                let block = i % 2048;
                let data = vec![(block % 255) as u8 + 1; 4096];
                let w = BlockOp::Write {
                    offset: block * 4096,
                    data: IoBuf::copy_from(&data),
                    fua: false,
                };
                run(&exec, dev.clone(), w).await.unwrap();
                let r = BlockOp::Read {
                    offset: block * 4096,
                    len: 4096,
                };
                assert_eq!(
                    run(&exec, dev, r).await.unwrap(),
                    IoOutcome::Read(IoBuf::copy_from(&data))
                );
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }
}
