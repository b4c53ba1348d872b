//! Small buffered WRITEs through io_uring instead of the blocking pool.
//!
//! Why: a WRITE's storage call on tokio's blocking pool costs two thread wake-ups (the
//! pool thread, then the worker with the answer) with a mutex, a condition variable and
//! their system calls around them. Submitted to io_uring, the write runs in the kernel:
//! at once where the file system can write without waiting (btrfs, XFS), else on one of
//! the kernel's own io-wq threads, which never return to user space (ext4's buffered
//! writes). `handoff_bench` measured the pool's hand-off at three to four times the cost
//! of io_uring's for a small file's create and write (tests/bench/RESULTS.md,
//! 2026-12-01); the reactor still never waits for the disk.
//!
//! Each runtime worker thread has a ring of its own, made on first use and registered
//! with that thread's runtime ([`WriteRing::current`]): a task submits to the ring of
//! the thread it runs on, and a reaper task on the same runtime waits for the ring's
//! descriptor to turn readable, takes the completions and runs each write's own
//! continuation with its result. Everything a write needs until the kernel is done
//! with it (the file, the data, its locks) is owned by that continuation, so a request
//! dropped meanwhile (a connection gone) leaves it intact; a ring dropped with writes in
//! flight (its runtime shut down) leaks them rather than free memory the kernel may
//! still read.
//!
//! Limits: at most [`IN_FLIGHT_MAX`] writes per ring; more, and writes submitted while
//! the ring cannot take them (a submission error, a ring that could not be made), run on
//! the blocking pool with the same continuation.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use io_uring::{opcode, types, IoUring};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::runtime::Handle;

/// Writes a ring keeps in flight at most (its submission queue holds as many; the
/// completion queue twice that, so it never overflows).
pub(crate) const IN_FLIGHT_MAX: usize = 128;

/// What runs with a write's result: the number of bytes written (possibly fewer than
/// asked) or the error. It owns whatever the write's buffer and descriptor live in.
pub(crate) type Done = Box<dyn FnOnce(io::Result<usize>) + Send>;

/// One thread's ring.
pub(crate) struct WriteRing {
    inner: Arc<Inner>,
    runtime: Handle,
}

struct Inner {
    state: Mutex<State>,
    /// A duplicate of the ring's descriptor, registered with the runtime's reactor.
    fd: AsyncFd<OwnedFd>,
    /// Cleared when the reaper stops (its runtime shut down): the ring takes no more.
    reaping: AtomicBool,
}

struct State {
    ring: IoUring,
    in_flight: HashMap<u64, Done>,
    next_key: u64,
}

impl Drop for State {
    fn drop(&mut self) {
        // The kernel may still read these writes' buffers: leak what owns them.
        for (_, done) in self.in_flight.drain() {
            std::mem::forget(done);
        }
    }
}

thread_local! {
    /// This thread's ring: `None` until first asked for, `Some(None)` if it could not be
    /// made (io_uring refused), so that failure is not paid again on every write.
    static THREAD_RING: RefCell<Option<Option<Arc<WriteRing>>>> = const { RefCell::new(None) };
}

impl WriteRing {
    /// The ring of the calling thread, made on first use. `None` outside a tokio runtime or
    /// where io_uring is not available (the caller then uses the blocking pool).
    pub(crate) fn current() -> Option<Arc<WriteRing>> {
        let runtime = Handle::try_current().ok()?;
        THREAD_RING.with(|slot| {
            let mut slot = slot.borrow_mut();
            // A ring whose reaper stopped belongs to a runtime that is gone (a thread
            // that ran several runtimes one after the other, as tests do): make anew.
            if let Some(Some(ring)) = slot.as_ref() {
                if !ring.inner.reaping.load(Ordering::Acquire) {
                    *slot = None;
                }
            }
            slot.get_or_insert_with(|| match WriteRing::new(runtime) {
                Ok(ring) => Some(Arc::new(ring)),
                Err(e) => {
                    tracing::info!(error = %e, "no io_uring for writes on this thread; they use the blocking pool");
                    None
                }
            })
            .clone()
        })
    }

    fn new(runtime: Handle) -> io::Result<WriteRing> {
        let ring = IoUring::new(IN_FLIGHT_MAX as u32)?;
        // SAFETY: the ring's descriptor is open while `ring` lives; the duplicate is owned.
        let dup = unsafe { BorrowedFd::borrow_raw(ring.as_raw_fd()) }.try_clone_to_owned()?;
        let fd = {
            let _entered = runtime.enter();
            // SAFETY: the AsyncFd owns the duplicate, open until the AsyncFd is dropped.
            unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) }
                .map_err(|e| io::Error::other(e.to_string()))?
        };
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                ring,
                in_flight: HashMap::new(),
                next_key: 0,
            }),
            fd,
            reaping: AtomicBool::new(true),
        });
        runtime.spawn(reap(inner.clone()));
        Ok(WriteRing { inner, runtime })
    }

    /// The runtime this ring's reaper runs on (its blocking pool takes what the ring
    /// cannot).
    pub(crate) fn runtime(&self) -> &Handle {
        &self.runtime
    }

    /// Writes `len` bytes from `buf` to `fd` at `offset` and runs `done` with the result,
    /// on the runtime's reaper task (or on the blocking pool, where the ring cannot take
    /// the write). `done` runs exactly once, unless the runtime shuts down first.
    ///
    /// # Safety
    /// `fd` must be an open descriptor and `buf` valid for reads of `len` bytes for as
    /// long as `done` lives: `done` must own what they belong to.
    pub(crate) unsafe fn write(
        &self,
        fd: RawFd,
        buf: *const u8,
        len: u32,
        offset: u64,
        done: Done,
    ) {
        let Err(done) = self.submit(fd, buf, len, offset, done) else {
            return;
        };
        let buf = buf as usize;
        self.runtime.spawn_blocking(move || {
            // SAFETY: `done` owns the buffer and the descriptor (the caller's promise) and
            // is still alive here.
            let n = unsafe {
                libc::pwrite(
                    fd,
                    buf as *const libc::c_void,
                    len as usize,
                    offset as libc::off_t,
                )
            };
            let res = if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            };
            done(res);
        });
    }

    /// Puts the write into the ring; gives `done` back where the ring cannot take it.
    fn submit(
        &self,
        fd: RawFd,
        buf: *const u8,
        len: u32,
        offset: u64,
        done: Done,
    ) -> Result<(), Done> {
        if !self.inner.reaping.load(Ordering::Acquire) {
            return Err(done);
        }
        let mut state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.in_flight.len() >= IN_FLIGHT_MAX {
            return Err(done);
        }
        let key = state.next_key;
        let entry = opcode::Write::new(types::Fd(fd), buf, len)
            .offset(offset)
            .build()
            .flags(io_uring::squeue::Flags::ASYNC)
            .user_data(key);
        // SAFETY: the caller keeps `fd` and `buf` valid while `done` lives, and `done`
        // stays in `in_flight` (or is leaked) until the kernel has completed the entry.
        if unsafe { state.ring.submission().push(&entry) }.is_err() {
            return Err(done);
        }
        if let Err(e) = state.ring.submit() {
            // The entry stays queued in the submission ring and would be submitted by the
            // next call: keep its owner until it completes, and take nothing new.
            tracing::error!(error = %e, "io_uring submit failed; writes use the blocking pool");
            state.in_flight.insert(key, done);
            state.next_key += 1;
            self.inner.reaping.store(false, Ordering::Release);
            return Ok(());
        }
        state.in_flight.insert(key, done);
        state.next_key += 1;
        Ok(())
    }
}

/// Marks the ring as taking no more writes when the reaper stops, for whatever reason.
struct Stopped(Arc<Inner>);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.reaping.store(false, Ordering::Release);
    }
}

/// The ring's reaper: takes completions as the ring's descriptor turns readable and runs
/// each write's continuation.
async fn reap(inner: Arc<Inner>) {
    let _stopped = Stopped(inner.clone());
    let mut finished = Vec::new();
    loop {
        let mut ready = match inner.fd.readable().await {
            Ok(ready) => ready,
            Err(e) => {
                tracing::error!(error = %e, "io_uring completions can no longer be awaited");
                return;
            }
        };
        {
            let mut state = inner.state.lock().unwrap_or_else(|p| p.into_inner());
            let state = &mut *state;
            for cqe in state.ring.completion() {
                if let Some(done) = state.in_flight.remove(&cqe.user_data()) {
                    finished.push((done, cqe.result()));
                }
            }
        }
        if finished.is_empty() {
            // Nothing posted since the last look: wait for the next readiness. A
            // completion posted after the look above moved the readiness on, and then
            // this clears nothing.
            ready.clear_ready();
            continue;
        }
        for (done, res) in finished.drain(..) {
            done(if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else {
                Ok(res as usize)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn write_through(
        ring: &WriteRing,
        file: &Arc<std::fs::File>,
        data: Arc<Vec<u8>>,
        offset: u64,
    ) -> tokio::sync::oneshot::Receiver<io::Result<usize>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let fd = file.as_raw_fd();
        let (ptr, len) = (data.as_ptr(), data.len() as u32);
        let keep = (file.clone(), data);
        // SAFETY: `done` owns the file and the data.
        unsafe {
            ring.write(
                fd,
                ptr,
                len,
                offset,
                Box::new(move |res| {
                    drop(keep);
                    let _ = tx.send(res);
                }),
            )
        };
        rx
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_land_where_asked_and_report_their_length() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("f"));
        let file = Arc::new(file.expect("create"));
        let ring = WriteRing::current().expect("io_uring available");
        let mut waits = Vec::new();
        // More than the ring keeps in flight: the rest take the blocking pool.
        for i in 0..(IN_FLIGHT_MAX as u64 * 3) {
            let data = Arc::new(vec![(i % 251) as u8; 4096]);
            waits.push(write_through(&ring, &file, data, i * 4096));
        }
        for w in waits {
            assert_eq!(w.await.expect("done ran").expect("written"), 4096);
        }
        let mut back = vec![0u8; 4096];
        for i in 0..(IN_FLIGHT_MAX as u64 * 3) {
            file.read_exact_at(&mut back, i * 4096).expect("read");
            assert!(back.iter().all(|b| *b == (i % 251) as u8), "block {i}");
        }
    }

    #[tokio::test]
    async fn errors_come_back_as_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("r"), b"x").expect("write");
        // Opened for reading only: the write fails with EBADF.
        let file = Arc::new(std::fs::File::open(dir.path().join("r")).expect("open"));
        let ring = WriteRing::current().expect("io_uring available");
        let res = write_through(&ring, &file, Arc::new(vec![1u8; 10]), 0)
            .await
            .expect("done ran");
        assert_eq!(
            res.expect_err("read-only").raw_os_error(),
            Some(libc::EBADF)
        );
    }

    #[test]
    fn each_runtime_gets_a_ring_of_its_own() {
        // One thread running two runtimes one after the other: the second must not use
        // the first's ring, whose reaper is gone.
        for _ in 0..2 {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let dir = tempfile::tempdir().expect("tempdir");
                let file = Arc::new(std::fs::File::create(dir.path().join("f")).expect("create"));
                let ring = WriteRing::current().expect("io_uring available");
                let n = write_through(&ring, &file, Arc::new(vec![7u8; 100]), 0)
                    .await
                    .expect("done ran")
                    .expect("written");
                assert_eq!(n, 100);
            });
        }
    }
}
