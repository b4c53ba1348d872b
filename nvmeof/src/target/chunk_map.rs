//! Memory for the I/O buffer arena's chunks ([`super::iobuf`]): each chunk is an
//! anonymous mapping of its own, starting on a 2 MiB boundary. A chunk of large buffers
//! is advised `MADV_HUGEPAGE`, so the kernel backs it with a transparent huge page where
//! it can.
//!
//! Why: a 128 KiB buffer on 4 KiB pages is 32 pieces of memory to every layer that maps
//! it (the ring's fixed-buffer table, the block layer's segments, the device's
//! descriptors); on a huge page it is one. Quarry's CPU per 128 KiB NVMe/TCP read fell by
//! 17-24% with huge-page chunks (tests/bench/nvme.md, "Huge pages for the I/O
//! buffer arena"). Debian's transparent-huge-page mode is `madvise`, so no page is huge
//! without the advice. Chunks of small buffers are advised against huge pages: a 4 KiB
//! buffer has nothing to join, and 4 KiB I/O measured no gain from them.
//!
//! Huge pages suit this arena because its chunks are never freed: a huge page that was
//! given back would be faulted in and cleared again whole on its next use. Heap buffers
//! of the SMB pool advised in place lost more to that than they gained, until they became
//! mappings of their own (tests/bench/RESULTS.md, "Transparent huge pages for the pooled
//! buffers" and "Step 25").
//! Where the kernel has huge pages off, or none free, the chunk is ordinary 4 KiB pages.

use std::ptr::null_mut;

/// Size and alignment of a transparent huge page (x86_64, and aarch64 with 4 KiB pages).
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// A fresh mapping of `len` bytes that is never unmapped: zero-filled, starting on a
/// [`HUGE_PAGE`] boundary, faulted in only where touched, and advised for huge pages if
/// `huge`, against them otherwise (so the choice holds under the kernel's `always` mode
/// too). `None` when the kernel refuses the mapping (out of address space or memory).
pub(crate) fn map_chunk(len: usize, huge: bool) -> Option<&'static mut [u8]> {
    // Room to slide the start to a huge-page boundary; the slack is unmapped again.
    let span = len.checked_add(HUGE_PAGE)?;
    // SAFETY: a new anonymous private mapping, placed where the kernel chooses, overlaps
    // no memory this process uses.
    let base = unsafe {
        libc::mmap(
            null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    let base = base as usize;
    let start = base.next_multiple_of(HUGE_PAGE);
    let head = start - base;
    let tail = span - head - len;
    // SAFETY: the head and tail lie inside the mapping just made and outside
    // `start..start + len`; nothing refers to them. A failed unmap leaves unused address
    // space behind, nothing worse. The advice changes no contents: a kernel without huge
    // pages refuses or ignores it and the chunk is on 4 KiB pages.
    unsafe {
        if head > 0 {
            libc::munmap(base as *mut libc::c_void, head);
        }
        if tail > 0 {
            libc::munmap((start + len) as *mut libc::c_void, tail);
        }
        let advice = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        libc::madvise(start as *mut libc::c_void, len, advice);
    }
    // SAFETY: `start..start + len` is mapped readable and writable, holds zeroes, is never
    // unmapped, and this is the only reference to it.
    Some(unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `THPeligible` field of the mapping that holds `addr`, from /proc/self/smaps.
    fn thp_eligible(addr: usize) -> Option<bool> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line
                .split_whitespace()
                .next()
                .and_then(|r| r.split_once('-'));
            if let Some((lo, hi)) = range {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = (lo..hi).contains(&addr);
                    continue;
                }
            }
            if inside {
                if let Some(v) = line.strip_prefix("THPeligible:") {
                    return Some(v.trim() == "1");
                }
            }
        }
        None
    }

    #[test]
    fn a_chunk_starts_on_a_huge_page_and_holds_zeroes_it_can_overwrite() {
        let chunk = map_chunk(2 * HUGE_PAGE, true).unwrap_or_default();
        assert_eq!(chunk.len(), 2 * HUGE_PAGE);
        assert_eq!(chunk.as_ptr() as usize % HUGE_PAGE, 0);
        assert!(chunk.iter().step_by(4096).all(|&b| b == 0));
        chunk.fill(0xa5);
        assert!(chunk.iter().all(|&b| b == 0xa5));
    }

    #[test]
    fn only_chunks_asked_to_be_huge_may_be_backed_by_huge_pages() {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if !mode.contains("[madvise]") && !mode.contains("[always]") {
            eprintln!("transparent huge pages are off here ({mode:?}): nothing to check");
            return;
        }
        let huge = map_chunk(HUGE_PAGE, true).unwrap_or_default();
        let small = map_chunk(HUGE_PAGE, false).unwrap_or_default();
        assert!(!huge.is_empty() && !small.is_empty());
        assert_eq!(thp_eligible(huge.as_ptr() as usize), Some(true));
        assert_eq!(thp_eligible(small.as_ptr() as usize), Some(false));
    }
}
