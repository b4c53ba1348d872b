//! Memory for large I/O buffers: anonymous mappings of their own whose middle lies on
//! 2 MiB transparent huge pages. Both protocol crates take their large buffers from here:
//! the SMB buffer pool's 2 MiB-and-larger buffers, which the pool releases when they lie
//! idle and unmaps when it drops them, and the NVMe/TCP I/O buffer arena's chunks, which
//! are never freed ([`HugeBuf::leak`]).
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
//! A buffer its owner wants to keep for later but not hold meanwhile can be released
//! ([`HugeBuf::release`], `MADV_FREE`): the kernel takes its pages only when it needs the
//! memory, and a later write to a page it did not take costs nothing. Unmapping and mapping
//! again costs a fault and a clearing per page, and on a virtual machine whose host takes
//! back the guest's free memory, a trap to the host per 4 KiB page: 3.9 s of CPU to touch
//! 640 MiB again after 12 s unmapped, 0.00 s after 12 s released (RESULTS.md, "Step 35").
//!
//! Where the kernel has huge pages off, or none free, a buffer is on ordinary 4 KiB pages
//! and works the same. The mapping is `memmap2`'s; this crate's one `unsafe` is the
//! release's advice.

use std::ops::{Deref, DerefMut};

use memmap2::{Advice, MmapMut, MmapOptions, UncheckedAdvice};

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

    /// Lets the kernel take the buffer's memory when it needs it (`MADV_FREE`), while the
    /// mapping stays: until then the pages stay the process's, and writing to one keeps
    /// it, with no fault. From here on the buffer's contents are unspecified: each byte
    /// reads as it was or as zero. A kernel without `MADV_FREE` refuses the advice and the
    /// buffer stays as it was.
    pub fn release(&mut self) {
        // SAFETY: `&mut self` means no other reference into the mapping is alive, so no
        // reference sees bytes change under it; afterwards every byte reads as its old
        // value or as zero, both valid `u8`s, and the mapping itself stays valid.
        let _ = unsafe { self.map.unchecked_advise(UncheckedAdvice::Free) };
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
    smaps_field(addr, "THPeligible:").map(|v| v.trim() == "1")
}

/// The value of `field` (with its colon) in `/proc/self/smaps` for the mapping that holds
/// `addr`.
fn smaps_field(addr: usize, field: &str) -> Option<String> {
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
        } else if let Some(v) = line.strip_prefix(field).filter(|_| inside) {
            return Some(v.to_string());
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

    /// A released buffer keeps its mapping and stays usable; its pages are marked for the
    /// kernel to take (smaps' LazyFree) until they are written again.
    #[test]
    fn a_released_buffer_stays_mapped_and_is_taken_back_by_writing() {
        let lazy_kib = |addr: usize| {
            smaps_field(addr, "LazyFree:")
                .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        };
        let mut b = HugeBuf::new(HUGE_PAGE + 4096, 4096).unwrap();
        b.fill(0x5a);
        let at = b.as_ptr() as usize;
        let Some(before) = lazy_kib(at) else {
            eprintln!("this kernel's smaps has no LazyFree: nothing to check");
            return;
        };
        assert_eq!(before, 0);
        b.release();
        assert_eq!(b.as_ptr() as usize, at, "the mapping stays");
        assert!(
            lazy_kib(at).unwrap() > 0,
            "released pages are marked lazily free"
        );
        assert!(
            b.iter().all(|&x| x == 0x5a || x == 0),
            "old bytes or zeroes"
        );
        b.fill(0x33);
        assert_eq!(lazy_kib(at), Some(0), "writing takes every page back");
        assert!(b.iter().all(|&x| x == 0x33));
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
