//! Byte-range locks (SMB2 LOCK, MS-SMB2 3.3.5.14, MS-FSA 2.1.5.7) with Windows semantics:
//!
//! - shared locks coexist; an exclusive lock conflicts with any overlapping lock of another
//!   open, and with the same open's locks too, except that an open may stack a shared lock
//!   on its own exclusive one;
//! - ranges overlap as Windows decides: a zero-length lock only conflicts when it lies
//!   strictly inside another lock, and two identical non-empty ranges always overlap;
//! - an unlock must name exactly a range the open holds (`RANGE_NOT_LOCKED` otherwise);
//! - a multi-element LOCK is all or nothing;
//! - a blocking lock that cannot be granted waits in FIFO order per file and is granted by
//!   the unlock or close that frees its range; the server learns it from
//!   [`LockManager::poll_granted`] (quinn-style: state changes in, events out).
//!
//! Reads and writes are checked with [`LockManager::check_io`]: reads conflict with other
//! opens' exclusive locks, writes with any other open's lock and with the writer's own
//! shared locks.

use std::collections::{HashMap, VecDeque};

use crate::proto::status;

use super::access::{FileKey, OpenId};

/// Most locks held on one file; beyond it LOCK fails with INSUFFICIENT_RESOURCES.
pub const MAX_LOCKS_PER_FILE: usize = 8192;
/// Most blocking lock requests waiting on one file.
pub const MAX_WAITERS_PER_FILE: usize = 1024;
/// Most elements in one LOCK request (MS-SMB2 puts no limit; the codec's message size does).
pub const MAX_LOCK_ELEMENTS: usize = 4096;

/// SMB2_LOCKFLAG_SHARED_LOCK.
pub const LOCKFLAG_SHARED: u32 = 0x1;
/// SMB2_LOCKFLAG_EXCLUSIVE_LOCK.
pub const LOCKFLAG_EXCLUSIVE: u32 = 0x2;
/// SMB2_LOCKFLAG_UNLOCK.
pub const LOCKFLAG_UNLOCK: u32 = 0x4;
/// SMB2_LOCKFLAG_FAIL_IMMEDIATELY.
pub const LOCKFLAG_FAIL_IMMEDIATELY: u32 = 0x10;

/// Why a lock operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    /// The range is locked by someone else → LOCK_NOT_GRANTED.
    #[error("lock not granted")]
    NotGranted,
    /// The unlock names a range the open does not hold → RANGE_NOT_LOCKED.
    #[error("range not locked")]
    RangeNotLocked,
    /// offset + length - 1 overflows 64 bits → INVALID_LOCK_RANGE.
    #[error("invalid lock range")]
    InvalidRange,
    /// The request's flags are inconsistent → INVALID_PARAMETER.
    #[error("invalid lock flags")]
    InvalidFlags,
    /// Too many locks or waiters → INSUFFICIENT_RESOURCES.
    #[error("too many locks")]
    TooMany,
    /// A read or write hits another open's lock → FILE_LOCK_CONFLICT.
    #[error("I/O conflicts with a byte-range lock")]
    IoConflict,
}

impl LockError {
    /// The NTSTATUS to answer with.
    pub fn nt_status(self) -> u32 {
        match self {
            LockError::NotGranted => status::LOCK_NOT_GRANTED,
            LockError::RangeNotLocked => status::RANGE_NOT_LOCKED,
            LockError::InvalidRange => crate::vfs::nt::INVALID_LOCK_RANGE,
            LockError::InvalidFlags => status::INVALID_PARAMETER,
            LockError::TooMany => status::INSUFFICIENT_RESOURCES,
            LockError::IoConflict => status::FILE_LOCK_CONFLICT,
        }
    }
}

/// A byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRange {
    /// First byte.
    pub offset: u64,
    /// Length (0 is a valid, special, range).
    pub length: u64,
}

impl LockRange {
    /// Checks that the last byte fits in 64 bits.
    fn validate(self) -> Result<LockRange, LockError> {
        if self.length > 0 && self.offset.checked_add(self.length - 1).is_none() {
            return Err(LockError::InvalidRange);
        }
        Ok(self)
    }

    /// Windows overlap: identical non-empty ranges overlap; otherwise half-open intervals
    /// intersect (so a zero-length range overlaps only when strictly inside another).
    fn overlaps(self, other: LockRange) -> bool {
        if self.length != 0 && self == other {
            return true;
        }
        let (a0, a1) = (
            u128::from(self.offset),
            u128::from(self.offset) + u128::from(self.length),
        );
        let (b0, b1) = (
            u128::from(other.offset),
            u128::from(other.offset) + u128::from(other.length),
        );
        !(a0 >= b1 || b0 >= a1)
    }
}

/// One lock to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRequest {
    /// The range.
    pub range: LockRange,
    /// Exclusive (write) or shared (read).
    pub exclusive: bool,
}

/// What a LOCK request asks, after its flags were checked (MS-SMB2 3.3.5.14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockPlan {
    /// Release these ranges, in order.
    Unlock(Vec<LockRange>),
    /// Take these locks, all or nothing; `blocking` if the request may wait.
    Lock {
        /// The locks.
        locks: Vec<LockRequest>,
        /// Whether the request waits (a single element without FAIL_IMMEDIATELY).
        blocking: bool,
    },
}

impl LockPlan {
    /// Classifies the elements of a LOCK request, given as (offset, length, flags):
    /// all unlocks or all locks (INVALID_PARAMETER when mixed or when flags are not one of
    /// the valid combinations); a request of several locks must fail immediately; ranges
    /// must fit in 64 bits (INVALID_LOCK_RANGE).
    pub fn from_elements(
        elements: impl IntoIterator<Item = (u64, u64, u32)>,
    ) -> Result<LockPlan, LockError> {
        let elements: Vec<(u64, u64, u32)> =
            elements.into_iter().take(MAX_LOCK_ELEMENTS + 1).collect();
        if elements.is_empty() || elements.len() > MAX_LOCK_ELEMENTS {
            return Err(LockError::InvalidFlags);
        }
        let unlock = elements
            .first()
            .is_some_and(|(_, _, f)| *f == LOCKFLAG_UNLOCK);
        if unlock {
            let mut ranges = Vec::with_capacity(elements.len());
            for (offset, length, flags) in elements {
                if flags != LOCKFLAG_UNLOCK {
                    return Err(LockError::InvalidFlags);
                }
                ranges.push(LockRange { offset, length });
            }
            return Ok(LockPlan::Unlock(ranges));
        }
        let count = elements.len();
        let mut locks = Vec::with_capacity(count);
        let mut blocking = false;
        for (offset, length, flags) in elements {
            let exclusive = match flags & !LOCKFLAG_FAIL_IMMEDIATELY {
                LOCKFLAG_SHARED => false,
                LOCKFLAG_EXCLUSIVE => true,
                _ => return Err(LockError::InvalidFlags),
            };
            if flags & LOCKFLAG_FAIL_IMMEDIATELY == 0 {
                if count > 1 {
                    return Err(LockError::InvalidFlags);
                }
                blocking = true;
            }
            locks.push(LockRequest {
                range: LockRange { offset, length }.validate()?,
                exclusive,
            });
        }
        Ok(LockPlan::Lock { locks, blocking })
    }
}

impl LockPlan {
    /// For a request whose first element is a plain UNLOCK, MS-SMB2 3.3.5.14.1 processes the
    /// elements in order and stops at the first failure, keeping the earlier unlocks: this
    /// returns the unlock ranges before the first element that is not an UNLOCK, and the
    /// error that element earns (INVALID_PARAMETER). The caller unlocks the ranges (an
    /// unlock failure, e.g. RANGE_NOT_LOCKED, wins) and then returns the error, if any.
    /// `None` when the first element is not an UNLOCK (use [`LockPlan::from_elements`]).
    pub fn unlock_prefix(
        elements: impl IntoIterator<Item = (u64, u64, u32)>,
    ) -> Option<(Vec<LockRange>, Option<LockError>)> {
        let mut it = elements.into_iter().peekable();
        if it.peek().map(|e| e.2) != Some(LOCKFLAG_UNLOCK) {
            return None;
        }
        let mut ranges = Vec::new();
        for (offset, length, flags) in it {
            if flags != LOCKFLAG_UNLOCK || ranges.len() == MAX_LOCK_ELEMENTS {
                return Some((ranges, Some(LockError::InvalidFlags)));
            }
            ranges.push(LockRange { offset, length });
        }
        Some((ranges, None))
    }
}

#[derive(Debug, Clone, Copy)]
struct Held {
    open: OpenId,
    range: LockRange,
    exclusive: bool,
}

#[derive(Debug, Clone)]
struct Waiter {
    id: u64,
    open: OpenId,
    locks: Vec<LockRequest>,
}

#[derive(Debug, Default)]
struct FileLocks {
    held: Vec<Held>,
    waiters: VecDeque<Waiter>,
}

impl FileLocks {
    /// Whether `req` by `open` conflicts with a held lock (or one of `extra` being granted
    /// in the same request).
    fn conflicts(&self, open: OpenId, req: &LockRequest, extra: &[Held]) -> bool {
        self.held.iter().chain(extra).any(|h| {
            if !h.exclusive && !req.exclusive {
                return false;
            }
            // An open may stack a shared lock on its own exclusive lock.
            if h.open == open && h.exclusive && !req.exclusive {
                return false;
            }
            h.range.overlaps(req.range)
        })
    }

    /// Grants all of `locks` or none.
    fn try_grant(&mut self, open: OpenId, locks: &[LockRequest]) -> Result<(), LockError> {
        if self.held.len().saturating_add(locks.len()) > MAX_LOCKS_PER_FILE {
            return Err(LockError::TooMany);
        }
        let mut granted: Vec<Held> = Vec::with_capacity(locks.len());
        for req in locks {
            if self.conflicts(open, req, &granted) {
                return Err(LockError::NotGranted);
            }
            granted.push(Held {
                open,
                range: req.range,
                exclusive: req.exclusive,
            });
        }
        self.held.extend(granted);
        Ok(())
    }

    /// Grants every waiter that now fits, in FIFO order; returns their ids.
    fn wake(&mut self) -> Vec<u64> {
        let mut woken = Vec::new();
        let mut still = VecDeque::with_capacity(self.waiters.len());
        while let Some(w) = self.waiters.pop_front() {
            if self.try_grant(w.open, &w.locks).is_ok() {
                woken.push(w.id);
            } else {
                still.push_back(w);
            }
        }
        self.waiters = still;
        woken
    }

    fn is_empty(&self) -> bool {
        self.held.is_empty() && self.waiters.is_empty()
    }
}

/// Whether a lock request was taken now or waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockOutcome {
    /// All locks are held.
    Granted,
    /// The request waits; its id will come out of [`LockManager::poll_granted`] when granted.
    Waiting,
}

/// The byte-range locks of one share's files.
#[derive(Debug, Default)]
pub struct LockManager {
    files: HashMap<FileKey, FileLocks>,
    /// Waiter id → file, to cancel by id.
    waiter_files: HashMap<u64, FileKey>,
    granted: VecDeque<u64>,
}

impl LockManager {
    /// An empty manager.
    pub fn new() -> LockManager {
        LockManager::default()
    }

    fn tidy(&mut self, file: FileKey) {
        if self.files.get(&file).is_some_and(FileLocks::is_empty) {
            self.files.remove(&file);
        }
    }

    fn wake(&mut self, file: FileKey) {
        if let Some(f) = self.files.get_mut(&file) {
            for id in f.wake() {
                self.waiter_files.remove(&id);
                self.granted.push_back(id);
            }
        }
        self.tidy(file);
    }

    /// Takes `locks` for `open` at once, all or nothing (LOCK_NOT_GRANTED on conflict).
    pub fn lock(
        &mut self,
        file: FileKey,
        open: OpenId,
        locks: &[LockRequest],
    ) -> Result<(), LockError> {
        for l in locks {
            l.range.validate()?;
        }
        let result = self.files.entry(file).or_default().try_grant(open, locks);
        self.tidy(file);
        result
    }

    /// Takes `locks` now or, if they conflict, queues them as waiter `waiter` (an id unique
    /// among this manager's waiters, e.g. the request's async id).
    pub fn lock_or_wait(
        &mut self,
        file: FileKey,
        open: OpenId,
        locks: &[LockRequest],
        waiter: u64,
    ) -> Result<LockOutcome, LockError> {
        match self.lock(file, open, locks) {
            Ok(()) => Ok(LockOutcome::Granted),
            Err(LockError::NotGranted) => {
                let f = self.files.entry(file).or_default();
                if f.waiters.len() >= MAX_WAITERS_PER_FILE {
                    self.tidy(file);
                    return Err(LockError::TooMany);
                }
                f.waiters.push_back(Waiter {
                    id: waiter,
                    open,
                    locks: locks.to_vec(),
                });
                self.waiter_files.insert(waiter, file);
                Ok(LockOutcome::Waiting)
            }
            Err(e) => Err(e),
        }
    }

    /// Releases `ranges` held by `open`, in order; each must match a held lock exactly
    /// (RANGE_NOT_LOCKED otherwise; ranges before the failing one stay released, as on
    /// Windows). Waiters that now fit are granted.
    pub fn unlock(
        &mut self,
        file: FileKey,
        open: OpenId,
        ranges: &[LockRange],
    ) -> Result<(), LockError> {
        let mut result = Ok(());
        if let Some(f) = self.files.get_mut(&file) {
            for r in ranges {
                match f.held.iter().position(|h| h.open == open && h.range == *r) {
                    Some(pos) => {
                        f.held.remove(pos);
                    }
                    None => {
                        result = Err(LockError::RangeNotLocked);
                        break;
                    }
                }
            }
        } else if !ranges.is_empty() {
            result = Err(LockError::RangeNotLocked);
        }
        self.wake(file);
        result
    }

    /// Drops every lock and waiter of `open` (CLOSE); returns the ids of its waiters, which
    /// the server completes with STATUS_RANGE_NOT_LOCKED / CANCELLED as it sees fit.
    pub fn release_open(&mut self, file: FileKey, open: OpenId) -> Vec<u64> {
        let mut dropped = Vec::new();
        if let Some(f) = self.files.get_mut(&file) {
            f.held.retain(|h| h.open != open);
            f.waiters.retain(|w| {
                if w.open == open {
                    dropped.push(w.id);
                    false
                } else {
                    true
                }
            });
        }
        for id in &dropped {
            self.waiter_files.remove(id);
        }
        self.wake(file);
        dropped
    }

    /// Cancels a waiting request (CANCEL); false if it is not waiting (already granted or
    /// unknown).
    pub fn cancel(&mut self, waiter: u64) -> bool {
        let Some(file) = self.waiter_files.remove(&waiter) else {
            return false;
        };
        let mut found = false;
        if let Some(f) = self.files.get_mut(&file) {
            let before = f.waiters.len();
            f.waiters.retain(|w| w.id != waiter);
            found = f.waiters.len() != before;
        }
        self.tidy(file);
        found
    }

    /// The next waiter granted since the last call (its locks are held now).
    pub fn poll_granted(&mut self) -> Option<u64> {
        self.granted.pop_front()
    }

    /// Whether a read (`write == false`) or write of `[offset, offset+length)` by `open`
    /// may proceed (FILE_LOCK_CONFLICT otherwise). Zero-length I/O never conflicts.
    pub fn check_io(
        &self,
        file: FileKey,
        open: OpenId,
        offset: u64,
        length: u64,
        write: bool,
    ) -> Result<(), LockError> {
        if length == 0 {
            return Ok(());
        }
        let Some(f) = self.files.get(&file) else {
            return Ok(());
        };
        let io = LockRange { offset, length };
        let conflict = f.held.iter().any(|h| {
            if !h.exclusive && !write {
                return false;
            }
            // Own locks never block own I/O, except a write over one's own shared lock.
            if h.open == open && (h.exclusive || !write) {
                return false;
            }
            h.range.overlaps(io)
        });
        if conflict {
            Err(LockError::IoConflict)
        } else {
            Ok(())
        }
    }

    /// The locks `open` holds on `file`, oldest first (kept with persistent handles).
    pub fn held_by(&self, file: FileKey, open: OpenId) -> Vec<LockRequest> {
        self.files.get(&file).map_or_else(Vec::new, |f| {
            f.held
                .iter()
                .filter(|h| h.open == open)
                .map(|h| LockRequest {
                    range: h.range,
                    exclusive: h.exclusive,
                })
                .collect()
        })
    }

    /// Number of locks held on a file (for tests and diagnostics).
    pub fn held_count(&self, file: FileKey) -> usize {
        self.files.get(&file).map_or(0, |f| f.held.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(offset: u64, length: u64) -> LockRequest {
        LockRequest {
            range: LockRange { offset, length },
            exclusive: true,
        }
    }
    fn sh(offset: u64, length: u64) -> LockRequest {
        LockRequest {
            range: LockRange { offset, length },
            exclusive: false,
        }
    }
    fn r(offset: u64, length: u64) -> LockRange {
        LockRange { offset, length }
    }

    #[test]
    fn shared_coexist_exclusive_conflicts() {
        let mut m = LockManager::new();
        m.lock(1, 10, &[sh(0, 100)]).unwrap();
        m.lock(1, 20, &[sh(50, 100)]).unwrap();
        assert_eq!(m.lock(1, 20, &[ex(90, 5)]), Err(LockError::NotGranted));
        assert_eq!(m.lock(1, 30, &[ex(99, 1)]), Err(LockError::NotGranted));
        m.lock(1, 30, &[ex(150, 10)]).unwrap();
        // Adjacent ranges do not overlap.
        m.lock(1, 40, &[ex(160, 10)]).unwrap();
        // Same open: exclusive over own exclusive conflicts; shared on own exclusive stacks.
        assert_eq!(m.lock(1, 40, &[ex(165, 1)]), Err(LockError::NotGranted));
        m.lock(1, 40, &[sh(165, 1)]).unwrap();
        // Exclusive over own shared lock conflicts.
        assert_eq!(m.lock(1, 10, &[ex(0, 10)]), Err(LockError::NotGranted));
    }

    #[test]
    fn zero_length_and_identical_ranges() {
        let mut m = LockManager::new();
        m.lock(1, 1, &[ex(100, 10)]).unwrap();
        // Zero-length at the start of a lock does not overlap; strictly inside it does.
        m.lock(1, 2, &[ex(100, 0)]).unwrap();
        assert_eq!(m.lock(1, 2, &[ex(105, 0)]), Err(LockError::NotGranted));
        m.lock(1, 2, &[ex(110, 0)]).unwrap();
        // Zero-length locks never conflict with each other.
        m.lock(1, 3, &[ex(100, 0)]).unwrap();
        // The top of the 64-bit space.
        m.lock(2, 1, &[ex(u64::MAX, 1)]).unwrap();
        assert_eq!(m.lock(2, 2, &[ex(u64::MAX, 1)]), Err(LockError::NotGranted));
        assert_eq!(
            m.lock(2, 2, &[ex(u64::MAX, 2)]),
            Err(LockError::InvalidRange)
        );
    }

    #[test]
    fn multi_element_locks_are_all_or_nothing() {
        let mut m = LockManager::new();
        m.lock(1, 1, &[ex(50, 10)]).unwrap();
        assert_eq!(
            m.lock(1, 2, &[ex(0, 10), ex(20, 10), ex(55, 1)]),
            Err(LockError::NotGranted)
        );
        assert_eq!(m.held_count(1), 1);
        // Elements of one request conflict with each other too.
        assert_eq!(
            m.lock(1, 2, &[ex(0, 10), ex(5, 10)]),
            Err(LockError::NotGranted)
        );
        m.lock(1, 2, &[ex(0, 10), ex(20, 10)]).unwrap();
        assert_eq!(m.held_count(1), 3);
    }

    #[test]
    fn unlock_must_match_exactly() {
        let mut m = LockManager::new();
        m.lock(1, 1, &[ex(0, 100)]).unwrap();
        assert_eq!(m.unlock(1, 1, &[r(0, 50)]), Err(LockError::RangeNotLocked));
        assert_eq!(m.unlock(1, 2, &[r(0, 100)]), Err(LockError::RangeNotLocked));
        assert_eq!(m.unlock(9, 1, &[r(0, 100)]), Err(LockError::RangeNotLocked));
        m.unlock(1, 1, &[r(0, 100)]).unwrap();
        assert_eq!(m.unlock(1, 1, &[r(0, 100)]), Err(LockError::RangeNotLocked));
        // Stacked shared locks are released one at a time.
        m.lock(1, 1, &[sh(0, 10)]).unwrap();
        m.lock(1, 1, &[sh(0, 10)]).unwrap();
        m.unlock(1, 1, &[r(0, 10)]).unwrap();
        assert_eq!(m.lock(1, 2, &[ex(0, 10)]), Err(LockError::NotGranted));
        m.unlock(1, 1, &[r(0, 10)]).unwrap();
        m.lock(1, 2, &[ex(0, 10)]).unwrap();
    }

    #[test]
    fn blocking_locks_wait_and_are_granted_in_order() {
        let mut m = LockManager::new();
        m.lock(1, 1, &[ex(0, 10)]).unwrap();
        assert_eq!(
            m.lock_or_wait(1, 2, &[ex(0, 10)], 100),
            Ok(LockOutcome::Waiting)
        );
        assert_eq!(
            m.lock_or_wait(1, 3, &[ex(5, 10)], 101),
            Ok(LockOutcome::Waiting)
        );
        assert_eq!(
            m.lock_or_wait(1, 4, &[sh(50, 1)], 102),
            Ok(LockOutcome::Granted)
        );
        assert_eq!(m.poll_granted(), None);
        m.unlock(1, 1, &[r(0, 10)]).unwrap();
        // The first waiter gets it; the second still conflicts with the first.
        assert_eq!(m.poll_granted(), Some(100));
        assert_eq!(m.poll_granted(), None);
        // Closing the first waiter's open grants the second.
        assert!(m.release_open(1, 2).is_empty());
        assert_eq!(m.poll_granted(), Some(101));
        assert_eq!(m.lock(1, 5, &[ex(5, 1)]), Err(LockError::NotGranted));
    }

    #[test]
    fn waiters_can_be_cancelled_or_dropped_with_their_open() {
        let mut m = LockManager::new();
        m.lock(1, 1, &[ex(0, 10)]).unwrap();
        m.lock_or_wait(1, 2, &[ex(0, 10)], 7).unwrap();
        m.lock_or_wait(1, 3, &[ex(0, 10)], 8).unwrap();
        assert!(m.cancel(7));
        assert!(!m.cancel(7));
        assert_eq!(m.release_open(1, 3), vec![8]);
        m.unlock(1, 1, &[r(0, 10)]).unwrap();
        assert_eq!(m.poll_granted(), None);
        assert_eq!(m.held_count(1), 0);
        assert!(m.files.is_empty() && m.waiter_files.is_empty());
    }

    #[test]
    fn io_checks_follow_lock_types() {
        let mut m = LockManager::new();
        m.lock(1, 1, &[ex(0, 10)]).unwrap();
        m.lock(1, 2, &[sh(100, 10)]).unwrap();
        // Another open's exclusive lock blocks both reads and writes.
        assert_eq!(m.check_io(1, 9, 5, 1, false), Err(LockError::IoConflict));
        assert_eq!(m.check_io(1, 9, 5, 1, true), Err(LockError::IoConflict));
        // The owner of an exclusive lock may read and write it.
        assert_eq!(m.check_io(1, 1, 0, 10, true), Ok(()));
        // Shared locks allow reads by anyone, writes by no one (not even the holder).
        assert_eq!(m.check_io(1, 9, 100, 10, false), Ok(()));
        assert_eq!(m.check_io(1, 9, 100, 10, true), Err(LockError::IoConflict));
        assert_eq!(m.check_io(1, 2, 100, 10, true), Err(LockError::IoConflict));
        assert_eq!(m.check_io(1, 2, 100, 10, false), Ok(()));
        // Outside any lock, and zero-length I/O.
        assert_eq!(m.check_io(1, 9, 10, 90, true), Ok(()));
        assert_eq!(m.check_io(1, 9, 5, 0, true), Ok(()));
    }

    #[test]
    fn lock_plans_from_wire_flags() {
        let plan =
            LockPlan::from_elements([(0, 10, LOCKFLAG_UNLOCK), (20, 5, LOCKFLAG_UNLOCK)]).unwrap();
        assert_eq!(plan, LockPlan::Unlock(vec![r(0, 10), r(20, 5)]));
        let plan = LockPlan::from_elements([(0, 10, LOCKFLAG_EXCLUSIVE)]).unwrap();
        assert_eq!(
            plan,
            LockPlan::Lock {
                locks: vec![ex(0, 10)],
                blocking: true
            }
        );
        let plan = LockPlan::from_elements([
            (0, 10, LOCKFLAG_SHARED | LOCKFLAG_FAIL_IMMEDIATELY),
            (20, 1, LOCKFLAG_EXCLUSIVE | LOCKFLAG_FAIL_IMMEDIATELY),
        ])
        .unwrap();
        assert_eq!(
            plan,
            LockPlan::Lock {
                locks: vec![sh(0, 10), ex(20, 1)],
                blocking: false
            }
        );
        for bad in [
            vec![(0, 1, LOCKFLAG_UNLOCK), (0, 1, LOCKFLAG_EXCLUSIVE)],
            vec![
                (0, 1, LOCKFLAG_EXCLUSIVE | LOCKFLAG_FAIL_IMMEDIATELY),
                (0, 1, LOCKFLAG_UNLOCK),
            ],
            vec![(0, 1, LOCKFLAG_SHARED | LOCKFLAG_EXCLUSIVE)],
            vec![(0, 1, 0)],
            vec![(0, 1, LOCKFLAG_EXCLUSIVE), (5, 1, LOCKFLAG_EXCLUSIVE)],
            vec![],
        ] {
            assert_eq!(
                LockPlan::from_elements(bad.clone()),
                Err(LockError::InvalidFlags),
                "{bad:?}"
            );
        }
        assert_eq!(
            LockPlan::from_elements([(u64::MAX, 2, LOCKFLAG_EXCLUSIVE)]),
            Err(LockError::InvalidRange)
        );
        assert_eq!(LockError::NotGranted.nt_status(), status::LOCK_NOT_GRANTED);
        assert_eq!(LockError::InvalidRange.nt_status(), 0xC000_01A1);
    }

    #[test]
    fn unlock_first_requests_are_processed_in_order() {
        assert_eq!(LockPlan::unlock_prefix([(0, 1, LOCKFLAG_EXCLUSIVE)]), None);
        assert_eq!(
            LockPlan::unlock_prefix([(0, 1, LOCKFLAG_UNLOCK), (5, 1, LOCKFLAG_UNLOCK)]),
            Some((vec![r(0, 1), r(5, 1)], None))
        );
        let (ranges, err) = LockPlan::unlock_prefix([
            (0, 1, LOCKFLAG_UNLOCK),
            (5, 1, LOCKFLAG_EXCLUSIVE | LOCKFLAG_FAIL_IMMEDIATELY),
            (9, 1, LOCKFLAG_UNLOCK),
        ])
        .unwrap();
        assert_eq!(
            (ranges, err),
            (vec![r(0, 1)], Some(LockError::InvalidFlags))
        );
        // smbtorture smb2.lock.multiple-unlock: the unlock before the bad element sticks.
        let mut m = LockManager::new();
        m.lock(1, 1, &[ex(0, 1), ex(5, 1)]).unwrap();
        let (ranges, err) =
            LockPlan::unlock_prefix([(0, 1, LOCKFLAG_UNLOCK), (5, 1, LOCKFLAG_EXCLUSIVE)]).unwrap();
        m.unlock(1, 1, &ranges).unwrap();
        assert_eq!(err, Some(LockError::InvalidFlags));
        m.lock(1, 1, &[ex(0, 1)]).unwrap();
    }

    #[test]
    fn limits_are_enforced() {
        let mut m = LockManager::new();
        for i in 0..MAX_LOCKS_PER_FILE as u64 {
            m.lock(1, 1, &[sh(i, 1)]).unwrap();
        }
        assert_eq!(m.lock(1, 1, &[sh(0, 1)]), Err(LockError::TooMany));
        let mut m = LockManager::new();
        m.lock(1, 1, &[ex(0, 1)]).unwrap();
        for i in 0..MAX_WAITERS_PER_FILE as u64 {
            m.lock_or_wait(1, 2, &[ex(0, 1)], i).unwrap();
        }
        assert_eq!(
            m.lock_or_wait(1, 2, &[ex(0, 1)], 99_999),
            Err(LockError::TooMany)
        );
    }
}
