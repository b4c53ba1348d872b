//! Per-share space accounting shared by every writer of a share. Lock-free: the SMB data
//! path charges before it extends a file, so a write either fits or fails with DISK_FULL
//! before any byte lands.

use std::sync::atomic::{AtomicU64, Ordering};

/// `limit` value meaning "no quota".
const UNLIMITED: u64 = u64::MAX;

/// A write would take the share past its quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("quota exceeded: {used} of {limit} bytes used, {requested} more requested")]
pub struct QuotaExceeded {
    /// The quota.
    pub limit: u64,
    /// Bytes in use.
    pub used: u64,
    /// Bytes the write wanted.
    pub requested: u64,
}

/// Usage and limit of one share.
#[derive(Debug)]
pub struct ShareQuota {
    limit: AtomicU64,
    used: AtomicU64,
}

impl ShareQuota {
    /// A tracker with the given limit and current usage.
    pub fn new(limit: Option<u64>, used: u64) -> ShareQuota {
        ShareQuota {
            limit: AtomicU64::new(limit.unwrap_or(UNLIMITED)),
            used: AtomicU64::new(used),
        }
    }

    /// The quota, if any.
    pub fn limit(&self) -> Option<u64> {
        match self.limit.load(Ordering::Relaxed) {
            UNLIMITED => None,
            l => Some(l),
        }
    }

    /// Changes the quota (an admin PATCH). Lowering it below usage is allowed: further
    /// growth fails, nothing is deleted.
    pub fn set_limit(&self, limit: Option<u64>) {
        self.limit
            .store(limit.unwrap_or(UNLIMITED), Ordering::Relaxed);
    }

    /// Bytes in use.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Replaces the usage with a freshly scanned figure.
    pub fn set_used(&self, used: u64) {
        self.used.store(used, Ordering::Relaxed);
    }

    /// Reserves `bytes` before a file grows. Fails without side effects when the quota
    /// would be exceeded.
    pub fn try_charge(&self, bytes: u64) -> Result<(), QuotaExceeded> {
        let limit = self.limit.load(Ordering::Relaxed);
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let new = used.saturating_add(bytes);
            if new > limit {
                return Err(QuotaExceeded {
                    limit,
                    used,
                    requested: bytes,
                });
            }
            match self
                .used
                .compare_exchange_weak(used, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(actual) => used = actual,
            }
        }
    }

    /// Returns `bytes` after a file shrank or was deleted (saturating at zero).
    pub fn release(&self, bytes: u64) {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let new = used.saturating_sub(bytes);
            match self
                .used
                .compare_exchange_weak(used, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(actual) => used = actual,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn charges_up_to_the_limit_and_no_further() {
        let q = ShareQuota::new(Some(100), 0);
        q.try_charge(60).unwrap();
        let err = q.try_charge(41).unwrap_err();
        assert_eq!(
            err,
            QuotaExceeded {
                limit: 100,
                used: 60,
                requested: 41
            }
        );
        q.try_charge(40).unwrap();
        assert_eq!(q.used(), 100);
        q.release(150);
        assert_eq!(q.used(), 0);
    }

    #[test]
    fn unlimited_and_concurrent() {
        let q = Arc::new(ShareQuota::new(Some(10_000), 0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let q = q.clone();
                std::thread::spawn(move || (0..5000).filter(|_| q.try_charge(1).is_ok()).count())
            })
            .collect();
        let ok: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(ok, 10_000);
        assert_eq!(q.used(), 10_000);
        q.set_limit(None);
        assert_eq!(q.limit(), None);
        q.try_charge(u64::MAX / 2).unwrap();
    }
}
