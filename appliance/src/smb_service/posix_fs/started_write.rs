//! A WRITE started through the thread's io_uring ring ([`super::super::write_ring`]): the same
//! locking, quota charge and bookkeeping as [`PosixFile::write_at`]'s, with the write
//! itself in the kernel and the rest done when it completes.
//!
//! Only writes that `write_at` would make buffered and without a sync (shorter than
//! [`DIRECT_MIN`], no write-through) start here, and only when the size lock's half they
//! need is free at once: the request's task never waits for the lock, so the completion
//! that releases it can always run. Everything else goes to the blocking pool as before.
//! A completion that needs a blocking call (the rest of a short write, cutting back a
//! failed extending write) makes it on the blocking pool, still holding the locks.

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use quarry_smb::vfs::{FsError, WriteBuf, WriteStarted};

use super::super::size_lock::{OwnedSizeRead, OwnedSizeWrite, SizeLock};
use super::super::write_ring::WriteRing;
use super::super::write_time::UnixTime;
use super::super::OwnedChanging;
use super::{PosixFile, DIRECT_MIN, MAX_FILE_SIZE};

/// The size-lock half a started write holds until it completes.
enum Held {
    /// In place: the file already reaches past the write's end.
    Read { _g: OwnedSizeRead },
    /// Extending: the size before, and the growth charged to the quota.
    Write {
        _g: OwnedSizeWrite,
        old: u64,
        grow: u64,
    },
}

/// A write in flight: what its completion needs, all owned.
struct InFlight {
    file: Arc<PosixFile>,
    data: WriteBuf,
    offset: u64,
    end: u64,
    held: Held,
    _changing: OwnedChanging,
    /// The write time shown before the write, for the write-time step.
    before: UnixTime,
}

impl PosixFile {
    /// [`quarry_smb::vfs::FsFile::write_started`] for this open.
    pub(super) fn start_write(
        self: Arc<Self>,
        offset: u64,
        data: WriteBuf,
        write_through: bool,
    ) -> Result<WriteStarted, WriteBuf> {
        let len = (*data).as_ref().len();
        if write_through || self.write_through || len == 0 || len >= DIRECT_MIN {
            return Err(data);
        }
        if let Err(e) = self.check_writable() {
            return Ok(Box::pin(std::future::ready(Err(e))));
        }
        let Some(end) = offset
            .checked_add(len as u64)
            .filter(|e| *e <= MAX_FILE_SIZE)
        else {
            return Ok(Box::pin(std::future::ready(Err(
                FsError::InvalidParameter("write beyond 2^63".into()),
            ))));
        };
        let Some(ring) = WriteRing::current() else {
            return Err(data);
        };
        let (held, before) = match self.hold_for(end) {
            Ok(Some(held)) => held,
            // The lock is taken: the pool waits for it.
            Ok(None) => return Err(data),
            Err(e) => return Ok(Box::pin(std::future::ready(Err(e)))),
        };
        let changing = OwnedChanging::new(&self.shared);
        let fd = self.file.as_raw_fd();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let flight = InFlight {
            file: self,
            data,
            offset,
            end,
            held,
            _changing: changing,
            before,
        };
        let buf = (*flight.data).as_ref().as_ptr();
        let blocking = ring.runtime().clone();
        let done = Box::new(move |res: std::io::Result<usize>| match res {
            Ok(n) if n == len => {
                let _ = tx.send(flight.finish(Ok(())));
            }
            // Short (or failed): the rest, or the clean-up, is blocking work.
            other => {
                blocking.spawn_blocking(move || {
                    let res = other.and_then(|n| {
                        let rest = (*flight.data).as_ref().get(n..).unwrap_or(&[]);
                        flight
                            .file
                            .file
                            .write_all_at(rest, flight.offset + n as u64)
                    });
                    let _ = tx.send(flight.finish(res));
                });
            }
        });
        // SAFETY: `done` owns `flight`, which owns the file (its descriptor) and the data
        // (whose heap bytes do not move while it lives).
        unsafe { ring.write(fd, buf, len as u32, offset, done) };
        Ok(Box::pin(async move {
            rx.await.unwrap_or_else(|_| {
                Err(FsError::Io {
                    context: "write".into(),
                    source: std::io::Error::other("the write's completion was lost (shutdown)"),
                })
            })
        }))
    }

    /// The size-lock half a write ending at `end` needs, if it is free now, charging the
    /// quota for an extending write's growth, with the write time shown before the write;
    /// `Ok(None)` when the half is taken. The same halves, in the same order, as
    /// `write_at`'s.
    fn hold_for(self: &Arc<Self>, end: u64) -> Result<Option<(Held, UnixTime)>, FsError> {
        if end <= self.shared.size_hint.load(Ordering::Relaxed) {
            let Some(g) = SizeLock::try_read_owned(&self.shared) else {
                return Ok(None);
            };
            let st = self.stat()?;
            self.shared.size_hint.store(st.size, Ordering::Relaxed);
            if end <= st.size {
                return Ok(Some((Held::Read { _g: g }, self.shared.shown.or(st.mtime))));
            }
        }
        let Some(g) = SizeLock::try_write_owned(&self.shared) else {
            return Ok(None);
        };
        let st = self.stat()?;
        let grow = end.saturating_sub(st.size);
        if grow > 0 {
            self.share
                .quota
                .try_charge(grow)
                .map_err(|e| FsError::DiskFull(e.to_string()))?;
        }
        let held = Held::Write {
            _g: g,
            old: st.size,
            grow,
        };
        Ok(Some((held, self.shared.shown.or(st.mtime))))
    }
}

impl InFlight {
    /// The write's end, as `write_at`'s: on success the size hint and the write-time step,
    /// on failure an extending write cut back to the old size and its charge released.
    /// Blocking only on failure.
    fn finish(self, res: std::io::Result<()>) -> Result<usize, FsError> {
        let file = &self.file;
        let len = (*self.data).as_ref().len();
        match (&self.held, res) {
            (Held::Write { old, .. }, Ok(())) => {
                file.shared
                    .size_hint
                    .store((*old).max(self.end), Ordering::Relaxed);
            }
            (Held::Read { .. }, Ok(())) => {}
            (Held::Write { old, grow, .. }, Err(e)) => {
                file.shared.size_hint.store(*old, Ordering::Relaxed);
                if *grow > 0 {
                    // Bytes past the old end belong to this failed write only: drop them.
                    if let Err(cut) = file.file.set_len(*old) {
                        tracing::warn!(error = %cut, "could not cut back a failed extending write");
                    }
                    file.share.quota.release(*grow);
                }
                return Err(FsError::from_io("write", e));
            }
            (Held::Read { .. }, Err(e)) => return Err(FsError::from_io("write", e)),
        }
        let InFlight {
            file,
            held,
            _changing,
            before,
            ..
        } = self;
        drop((held, _changing));
        let epoch = file.epoch();
        file.write_time_step_after_write(|w| w.after_write(before, Instant::now(), epoch));
        Ok(len)
    }
}
