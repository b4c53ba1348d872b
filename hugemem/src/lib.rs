//! Memory for large I/O buffers: anonymous mappings of their own whose middle lies on
//! 2 MiB transparent huge pages. Both protocol crates take their large buffers from here:
//! the SMB buffer pool's 2 MiB-and-larger buffers, which are unmapped when the pool lets
//! go of them, and the NVMe/TCP I/O buffer arena's chunks, which are never freed
//! ([`HugeBuf::leak`]).
//!
//! Why: a large buffer on 4 KiB pages is hundreds of pieces of memory to every layer that
//! touches it. An `O_DIRECT` read or write pins each page for every call and hands the
//! block layer one segment per page; the io_uring fixed-buffer table and a device's
//! descriptors hold one entry per page. On a huge page each of them sees one piece.
//! Measured: the kernel's pinning fell from 4-13% of an SMB checkpoint's server CPU to
//! 1-2% (tests/bench/RESULTS.md, "Step 25"), and Quarry's CPU per 128 KiB NVMe/TCP read by
//! 17-24% (tests/bench/nvme.md, "Huge pages for the I/O buffer arena"). Debian's
//! transparent-huge-page mode is `madvise`, so no page is huge without the advice.
//!
//! Huge pages pay only where they are not given back: a huge page faulted in again is
//! cleared whole. Heap buffers advised in place lost more to that clearing than they saved
//! (RESULTS.md, "Transparent huge pages for the pooled buffers"), because the allocator
//! reused and trimmed the advised ranges. A mapping of its own holds nothing else and
//! goes back to the kernel only when its owner drops it.
//!
//! Where the kernel has huge pages off, or none free, a buffer is on ordinary 4 KiB pages
//! and works the same. This crate has no `unsafe`: the mapping is `memmap2`'s.

use std::ops::{Deref, DerefMut};

use memmap2::{Advice, MmapMut, MmapOptions};

/// Size and alignment of a transparent huge page (x86_64, and aarch64 with 4 KiB pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// Size of a base page; `lead` must be a multiple of it.
const PAGE: usize = 4096;

/// A zero-filled buffer in an anonymous mapping of its own, faulted in only where touched
/// and unmapped when dropped (see the crate docs).
#[derive(Debug)]
pub struct HugeBuf {
    map: MmapMut,
    start: usize,
    len: usize,
}

impl HugeBuf {
    /// A buffer of `len` bytes whose byte at `lead` (a multiple of 4 KiB) starts a huge
    /// page, so data placed behind `lead` bytes of headers starts on one. Whole huge pages
    /// from there on are advised `MADV_HUGEPAGE`; the pages in front and the tail behind
    /// the last whole huge page are advised `MADV_NOHUGEPAGE`, so touching a header does
    /// not fault in 2 MiB, and the choice holds under the kernel's `always` mode too.
    /// `None` when the kernel refuses the mapping or `lead` is out of range.
    pub fn new(len: usize, lead: usize) -> Option<HugeBuf> {
        Self::map(len, lead, true)
    }

    /// A buffer of `len` bytes starting on a huge-page boundary, all of it advised
    /// `MADV_NOHUGEPAGE`: for memory that sits beside huge buffers (one arena, one
    /// registration) but holds small ones, which have nothing to gain from a huge page.
    /// `None` when the kernel refuses the mapping.
    pub fn without_huge_pages(len: usize) -> Option<HugeBuf> {
        Self::map(len, 0, false)
    }

    /// Makes the buffer live as long as the process, for arenas that never give memory
    /// back (a huge page given back would be cleared again whole on its next use).
    pub fn leak(self) -> &'static mut [u8] {
        let buf: &'static mut HugeBuf = Box::leak(Box::new(self));
        buf
    }

    fn map(len: usize, lead: usize, huge: bool) -> Option<HugeBuf> {
        if lead > len || !lead.is_multiple_of(PAGE) {
            return None;
        }
        // Room to slide the buffer so that its byte at `lead` starts a huge page.
        let span = len.checked_add(HUGE_PAGE)?;
        let map = MmapOptions::new().len(span).map_anon().ok()?;
        let base = map.as_ptr() as usize;
        let huge_at = base.checked_add(lead)?.next_multiple_of(HUGE_PAGE) - base;
        let start = huge_at - lead;
        // Refused advice (a kernel without transparent huge pages) changes nothing else.
        let _ = map.advise_range(Advice::NoHugePage, 0, span);
        let huge_len = (len - lead) / HUGE_PAGE * HUGE_PAGE;
        if huge && huge_len > 0 {
            let _ = map.advise_range(Advice::HugePage, huge_at, huge_len);
        }
        Some(HugeBuf { map, start, len })
    }
}

impl Deref for HugeBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.map
            .get(self.start..self.start + self.len)
            .unwrap_or(&[])
    }
}

impl DerefMut for HugeBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        let (start, len) = (self.start, self.len);
        self.map.get_mut(start..start + len).unwrap_or(&mut [])
    }
}

/// Whether this kernel hands out transparent huge pages to advised memory: lets callers'
/// tests tell "the advice did not take" from "this machine has none".
pub fn huge_pages_on() -> bool {
    let mode =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    mode.contains("[madvise]") || mode.contains("[always]")
}

/// The kernel's `THPeligible` field for the mapping that holds `addr` (from
/// /proc/self/smaps): whether that memory may be backed by huge pages, so tests can check
/// which bytes of a buffer the advice covers. `None` when no mapping holds `addr`.
pub fn thp_eligible(addr: usize) -> Option<bool> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let range = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'))
            .and_then(|(lo, hi)| {
                Some((
                    usize::from_str_radix(lo, 16).ok()?,
                    usize::from_str_radix(hi, 16).ok()?,
                ))
            });
        if let Some((lo, hi)) = range {
            inside = (lo..hi).contains(&addr);
        } else if let Some(v) = line.strip_prefix("THPeligible:").filter(|_| inside) {
            return Some(v.trim() == "1");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_at_lead_starts_a_huge_page_and_the_buffer_is_zeroed_and_writable() {
        let len = 2 * HUGE_PAGE + 5000;
        let mut b = HugeBuf::new(len, 4096).unwrap();
        assert_eq!(b.len(), len);
        assert_eq!((b.as_ptr() as usize + 4096) % HUGE_PAGE, 0);
        assert!(b.iter().step_by(4096).all(|&x| x == 0));
        b.fill(0xa5);
        assert!(b.iter().all(|&x| x == 0xa5));
        assert!(HugeBuf::new(100, 4096).is_none(), "lead beyond the buffer");
        assert!(HugeBuf::new(len, 100).is_none(), "lead not a whole page");
    }

    #[test]
    fn only_whole_huge_pages_behind_lead_may_be_huge() {
        if !huge_pages_on() {
            eprintln!("transparent huge pages are off here: nothing to check");
            return;
        }
        let b = HugeBuf::new(2 * HUGE_PAGE + 8192, 4096).unwrap();
        let at = b.as_ptr() as usize;
        assert_eq!(thp_eligible(at), Some(false), "the page in front");
        assert_eq!(thp_eligible(at + 4096), Some(true));
        assert_eq!(thp_eligible(at + 4096 + 2 * HUGE_PAGE - 1), Some(true));
        assert_eq!(
            thp_eligible(at + 4096 + 2 * HUGE_PAGE),
            Some(false),
            "the tail"
        );
        let small = HugeBuf::new(HUGE_PAGE, 4096).unwrap();
        assert_eq!(thp_eligible(small.as_ptr() as usize + 4096), Some(false));
    }

    #[test]
    fn a_buffer_without_huge_pages_is_aligned_and_never_eligible() {
        let b = HugeBuf::without_huge_pages(2 * HUGE_PAGE).unwrap();
        let at = b.as_ptr() as usize;
        assert_eq!(at % HUGE_PAGE, 0);
        if huge_pages_on() {
            assert_eq!(thp_eligible(at), Some(false));
            assert_eq!(thp_eligible(at + 2 * HUGE_PAGE - 1), Some(false));
        }
    }

    #[test]
    fn a_leaked_buffer_stays_mapped_and_writable() {
        let huge = HugeBuf::new(HUGE_PAGE, 0).unwrap().leak();
        assert_eq!(huge.as_ptr() as usize % HUGE_PAGE, 0);
        huge.fill(7);
        assert!(huge.iter().all(|&x| x == 7));
        if huge_pages_on() {
            assert_eq!(thp_eligible(huge.as_ptr() as usize), Some(true));
        }
    }
}
