//! The lock that orders a file's size changes (extending writes, truncates: exclusive)
//! against in-place writes (shared), so the quota is charged exactly once for each byte
//! of growth ([`super::InodeShared::size`]).
//!
//! Why not `std::sync::RwLock`: a WRITE that goes through io_uring
//! ([`super::write_ring`]) holds the lock from before its submission until its completion,
//! and the completion is handled on whatever thread the runtime picks. So besides the
//! blocking guards of the storage calls on the pool, this lock gives guards that own a
//! reference to the file's shared state and may be released on another thread. Those
//! are only ever tried, never waited for, on a runtime worker: a worker never blocks on
//! the lock, so the completion that releases it can always run. (parking_lot's raw lock
//! is not tied to the thread that took it.)

use std::sync::Arc;

use parking_lot::lock_api::RawRwLock as _;

use super::InodeShared;

/// A readers-writer lock without data.
pub(crate) struct SizeLock(parking_lot::RawRwLock);

impl Default for SizeLock {
    fn default() -> Self {
        SizeLock(parking_lot::RawRwLock::INIT)
    }
}

impl std::fmt::Debug for SizeLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SizeLock")
    }
}

/// The shared half, held (blocking storage calls).
pub(crate) struct SizeRead<'a>(&'a SizeLock);

/// The exclusive half, held (blocking storage calls).
pub(crate) struct SizeWrite<'a>(&'a SizeLock);

/// The exclusive half, held by an owner that may release it on another thread.
pub(crate) struct OwnedSizeWrite(Arc<InodeShared>);

/// The shared half, held by an owner that may release it on another thread.
pub(crate) struct OwnedSizeRead(Arc<InodeShared>);

impl SizeLock {
    /// Waits for the shared half. Blocking: storage calls on the pool only.
    pub(crate) fn read(&self) -> SizeRead<'_> {
        self.0.lock_shared();
        SizeRead(self)
    }

    /// Waits for the exclusive half. Blocking: storage calls on the pool only.
    pub(crate) fn write(&self) -> SizeWrite<'_> {
        self.0.lock_exclusive();
        SizeWrite(self)
    }

    /// The exclusive half of `shared`'s lock if it is free now.
    pub(crate) fn try_write_owned(shared: &Arc<InodeShared>) -> Option<OwnedSizeWrite> {
        shared
            .size
            .0
            .try_lock_exclusive()
            .then(|| OwnedSizeWrite(shared.clone()))
    }

    /// The shared half of `shared`'s lock if no one holds the exclusive half now.
    pub(crate) fn try_read_owned(shared: &Arc<InodeShared>) -> Option<OwnedSizeRead> {
        shared
            .size
            .0
            .try_lock_shared()
            .then(|| OwnedSizeRead(shared.clone()))
    }
}

impl Drop for SizeRead<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard took the shared half and releases it once.
        unsafe { (self.0).0.unlock_shared() }
    }
}

impl Drop for SizeWrite<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard took the exclusive half and releases it once.
        unsafe { (self.0).0.unlock_exclusive() }
    }
}

impl Drop for OwnedSizeWrite {
    fn drop(&mut self) {
        // SAFETY: this guard took the exclusive half and releases it once; parking_lot's
        // raw lock may be released by another thread than the one that took it.
        unsafe { self.0.size.0.unlock_exclusive() }
    }
}

impl Drop for OwnedSizeRead {
    fn drop(&mut self) {
        // SAFETY: as for `OwnedSizeWrite`, for the shared half.
        unsafe { self.0.size.0.unlock_shared() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_halves_exclude_as_the_blocking_ones_do() {
        let shared = Arc::new(InodeShared::default());
        let w = SizeLock::try_write_owned(&shared).expect("free");
        assert!(SizeLock::try_write_owned(&shared).is_none());
        assert!(SizeLock::try_read_owned(&shared).is_none());
        // Released on another thread, as a completion may be.
        std::thread::spawn(move || drop(w)).join().expect("thread");
        let r1 = SizeLock::try_read_owned(&shared).expect("free");
        let r2 = SizeLock::try_read_owned(&shared).expect("shared");
        assert!(SizeLock::try_write_owned(&shared).is_none());
        drop((r1, r2));
        let g = shared.size.write();
        assert!(SizeLock::try_read_owned(&shared).is_none());
        drop(g);
        let _r = shared.size.read();
        assert!(SizeLock::try_write_owned(&shared).is_none());
        assert!(SizeLock::try_read_owned(&shared).is_some());
    }
}
