//! Memory for the buffer pool's large buffers ([`super::bufpool`]): each is an anonymous
//! mapping of its own whose middle lies on 2 MiB transparent huge pages.
//!
//! Why: a large WRITE's data is read from the socket into its buffer and written from
//! there with `O_DIRECT`, and a large READ's data is read with `O_DIRECT` into the buffer
//! it is sent from. On 4 KiB pages the kernel pins every page of the buffer for every such
//! call (4-9% of a checkpoint write's server CPU) and hands the block layer one segment per
//! page; on a huge page it pins one folio and builds one segment. Debian's
//! transparent-huge-page mode is `madvise`, so no page is huge without the advice.
//!
//! Huge pages pay only where they are not given back: a huge page faulted in again is
//! cleared whole. Heap buffers advised in place lost more to that clearing than they saved
//! (tests/bench/RESULTS.md, "Transparent huge pages for the pooled buffers"), because the
//! allocator reused and trimmed the advised ranges. A mapping of its own is returned to the
//! kernel only when the pool lets go of the buffer, and nothing else is ever placed in it.
//!
//! The byte at `lead` starts a huge page, so a message's data placed just behind `lead`
//! bytes of headers starts on one; the pages in front of it and behind the last whole huge
//! page are advised against huge pages, so touching a header does not fault in 2 MiB.

use std::ops::{Deref, DerefMut};

use memmap2::{Advice, MmapMut, MmapOptions};

/// Size and alignment of a transparent huge page (x86_64, and aarch64 with 4 KiB pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// A zero-filled buffer in an anonymous mapping of its own (see the module docs); unmapped
/// when dropped.
#[derive(Debug)]
pub struct HugeBuf {
    map: MmapMut,
    start: usize,
    len: usize,
}

impl HugeBuf {
    /// A buffer of `len` bytes whose byte at `lead` (a multiple of 4 KiB) starts a huge
    /// page; whole huge pages from there on are advised `MADV_HUGEPAGE`, the rest
    /// `MADV_NOHUGEPAGE` (so the choice also holds under the kernel's `always` mode).
    /// `None` when the kernel refuses the mapping or `lead` is out of range. Advice the
    /// kernel refuses (no transparent huge pages) leaves the buffer on 4 KiB pages.
    pub fn new(len: usize, lead: usize) -> Option<HugeBuf> {
        if lead > len || !lead.is_multiple_of(4096) {
            return None;
        }
        // Room to slide the buffer so that its byte at `lead` starts a huge page.
        let span = len.checked_add(HUGE_PAGE)?;
        let map = MmapOptions::new().len(span).map_anon().ok()?;
        let base = map.as_ptr() as usize;
        let huge_at = base.checked_add(lead)?.next_multiple_of(HUGE_PAGE) - base;
        let start = huge_at - lead;
        let huge_len = (len - lead) / HUGE_PAGE * HUGE_PAGE;
        let _ = map.advise_range(Advice::NoHugePage, 0, span);
        if huge_len > 0 {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The `THPeligible` field of the mapping that holds `addr`, from /proc/self/smaps.
    pub(crate) fn thp_eligible(addr: usize) -> Option<bool> {
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

    /// Whether this kernel hands out transparent huge pages to advised memory.
    pub(crate) fn huge_pages_on() -> bool {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        mode.contains("[madvise]") || mode.contains("[always]")
    }

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
}
