//! Bookkeeping for registered memory, kept pure so it is unit-tested without RDMA
//! hardware: a process-wide byte budget every queue pair reserves from before it
//! registers anything, and the per-queue pool of fixed-size staging chunks that RDMA
//! READ and WRITE transfers borrow.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A bound on registered memory shared by every RDMA queue of a process.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    used: AtomicUsize,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(MemoryBudget {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// Reserves `bytes`, or `None` when that would exceed the limit. The reservation
    /// is returned when dropped, so a torn-down queue cannot leak budget.
    pub fn reserve(self: &Arc<Self>, bytes: usize) -> Option<Reservation> {
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            let next = cur.checked_add(bytes).filter(|&n| n <= self.limit)?;
            match self
                .used
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    return Some(Reservation {
                        budget: self.clone(),
                        bytes,
                    })
                }
                Err(v) => cur = v,
            }
        }
    }

    /// Bytes reserved now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// Bytes held from a [`MemoryBudget`] until dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The budget this reservation is held from.
    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Free list of equally sized chunks of one registered region. A transfer of `len`
/// bytes borrows `ceil(len / chunk)` chunks (each becomes one scatter/gather entry).
#[derive(Debug)]
pub struct ChunkPool {
    chunk: usize,
    count: usize,
    max_per_transfer: usize,
    free: Vec<u32>,
}

impl ChunkPool {
    /// `count` chunks of `chunk` bytes; a transfer may use at most `max_per_transfer`.
    pub fn new(chunk: usize, count: u32, max_per_transfer: usize) -> Self {
        ChunkPool {
            chunk: chunk.max(1),
            count: count as usize,
            max_per_transfer,
            free: (0..count).rev().collect(),
        }
    }

    /// Chunk size in bytes.
    pub fn chunk_size(&self) -> usize {
        self.chunk
    }

    /// Chunks a transfer of `len` bytes needs.
    pub fn chunks_for(&self, len: usize) -> usize {
        len.div_ceil(self.chunk)
    }

    /// Whether a transfer of `len` bytes can ever be served by this pool.
    pub fn fits(&self, len: usize) -> bool {
        let n = self.chunks_for(len);
        n <= self.max_per_transfer && n <= self.count
    }

    /// Borrows the chunks for `len` bytes (`Some(empty)` for 0), or `None` when not
    /// enough are free now (or ever: check [`ChunkPool::fits`]).
    pub fn alloc(&mut self, len: usize) -> Option<Vec<u32>> {
        let n = self.chunks_for(len);
        if !self.fits(len) || n > self.free.len() {
            return None;
        }
        let at = self.free.len() - n;
        Some(self.free.split_off(at))
    }

    /// Returns chunks; indexes out of range or already free are ignored (a bug, but
    /// never a double hand-out).
    pub fn release(&mut self, chunks: &[u32]) {
        for &c in chunks {
            if (c as usize) < self.count && !self.free.contains(&c) {
                self.free.push(c);
            }
        }
    }

    /// Free chunks.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// (offset, length) in the region of each chunk a `len`-byte transfer uses.
    pub fn segments(&self, chunks: &[u32], len: usize) -> Vec<(usize, usize)> {
        let mut left = len;
        chunks
            .iter()
            .map(|&c| {
                let n = left.min(self.chunk);
                left -= n;
                (c as usize * self.chunk, n)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_bounded_and_returned_on_drop() {
        let b = MemoryBudget::new(100);
        let r1 = b.reserve(60).unwrap();
        assert!(b.reserve(41).is_none());
        let r2 = b.reserve(40).unwrap();
        assert_eq!(b.used(), 100);
        drop(r1);
        assert_eq!(b.used(), 40);
        assert_eq!(r2.bytes(), 40);
        drop(r2);
        assert_eq!(b.used(), 0);
        assert!(b.reserve(usize::MAX).is_none());
    }

    #[test]
    fn chunks_are_lent_and_returned() {
        let mut p = ChunkPool::new(4096, 4, 3);
        assert_eq!(p.chunks_for(0), 0);
        assert_eq!(p.chunks_for(1), 1);
        assert_eq!(p.chunks_for(8192), 2);
        assert!(!p.fits(4 * 4096), "more than max_per_transfer");
        assert_eq!(p.alloc(0), Some(vec![]));
        let a = p.alloc(8193).unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(p.available(), 1);
        assert!(p.alloc(4097).is_none());
        let segs = p.segments(&a, 8193);
        assert_eq!(segs.iter().map(|s| s.1).sum::<usize>(), 8193);
        assert_eq!(segs[2].1, 1);
        p.release(&a);
        p.release(&a);
        p.release(&[99]);
        assert_eq!(p.available(), 4);
    }
}
