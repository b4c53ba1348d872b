//! Reusable response buffers for READ: an 8 MiB read otherwise allocates, zeroes and
//! page-faults a fresh buffer per request and copies the data once more behind the header.
//! A pooled buffer is read into at [`HEADROOM`], so the SMB2 header (and the transform
//! header when sealing) is written in front of the data in place, and the writer hands the
//! buffer back once it is on the socket.
//!
//! Large received messages (WRITEs) come from the same pool as [`Received`] buffers: a
//! fresh 8 MiB allocation per WRITE page-faults every page of it (7% of a signed
//! checkpoint write's samples), and its data, at an arbitrary address, had to be copied
//! into an aligned bounce buffer before an `O_DIRECT` write (15%). A pooled buffer stays
//! faulted in, and the message is placed in it so that a WRITE's data sits at an address
//! aligned as its file offset is
//! ([`crate::proto::io::write_data_placement`]).
//!
//! Buffers of [`HUGE_CLASS_MIN`] and more are mappings of their own on transparent huge
//! pages ([`quarry_hugemem`]), placed so that a large message's data starts a huge page:
//! its `O_DIRECT` read or write then pins a few huge pages instead of thousands of small
//! ones. Those beyond [`KEPT_ALWAYS`] that lie idle for [`IDLE_FREE`] are released to the
//! kernel (`MADV_FREE`) and stay in the pool, rather than unmapped: a burst after an idle
//! spell then writes into pages that are still there, where a fresh mapping is faulted in
//! and cleared page by page. On a virtual machine whose host takes back freed memory that
//! clearing traps to the host: 3.2 s of CPU per burst of 16 sessions four 8 MiB READs deep
//! (tests/bench/RESULTS.md, "Step 35").

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::proto::framing::MAX_FRAME_LEN;
use crate::proto::transform::TRANSFORM_LEN;
use crate::proto::HEADER_LEN;
use crate::vfs::SharedData;
use quarry_hugemem::{HugeBuf, HUGE_PAGE};

/// Free bytes kept in front of a response body: a transform header and an SMB2 header.
pub const HEADROOM: usize = TRANSFORM_LEN + HEADER_LEN;
/// Alignment of a READ's data in its buffer: the data's address is congruent to its
/// file offset modulo this, so a storage backend can read a large READ's block-aligned
/// middle with `O_DIRECT` straight into the response (see [`BufPool::take_read`]).
pub const DATA_ALIGN: usize = 4096;
/// Buffers kept for reuse however long they lie unused: what a few connections with one
/// large READ or WRITE in flight each keep using.
pub const KEPT_ALWAYS: usize = 16;
/// The most buffers the pool keeps at once on any machine (1 GiB of full-size buffers).
pub const MAX_POOLED: usize = 128;
/// The pool keeps at most this fraction of physical memory (3%): 95 full-size buffers on
/// 24 GiB. Clients that keep several 8 MiB READs in flight on many sessions (a kernel
/// client's readahead) have more buffers out at once than [`KEPT_ALWAYS`]; each buffer the
/// pool cannot keep is mapped, faulted in and zeroed anew for the next request.
pub const MEMORY_SHARE: u64 = 32;
/// Buffers beyond [`KEPT_ALWAYS`] are let go once they have lain unused this long, so a
/// burst's buffers do not stay with an idle server: a heap buffer is freed, a huge-page
/// buffer is released (`MADV_FREE`, [`HugeBuf::release`]) and stays in the pool for the
/// next burst, its memory the kernel's to take whenever it needs it.
pub const IDLE_FREE: Duration = Duration::from_secs(10);
/// Largest buffer kept: a full-size READ response with its headroom, or the largest
/// received frame, with the room [`aligned_start`] may shift either by.
const MAX_POOLED_LEN: usize =
    max(HEADROOM + 16 + super::MAX_IO_SIZE as usize, MAX_FRAME_LEN) + DATA_ALIGN;
/// Received messages at least this long are read into pooled buffers; shorter ones are
/// cheap to allocate and would only crowd large buffers out of the pool.
pub const POOLED_RECEIVE_MIN: usize = 64 << 10;
const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

/// New buffers of this size class and more are on huge pages ([`HugeBuf`]): a smaller
/// buffer would not fill one.
pub const HUGE_CLASS_MIN: usize = HUGE_PAGE;
/// Bytes in front of a huge-page buffer's first huge page: room for a message's headers
/// (and [`aligned_start`]'s shift), so that data at an aligned file offset starts the
/// huge page.
const HUGE_LEAD: usize = DATA_ALIGN;

/// A pooled buffer's memory: the heap for small ones, a mapping on huge pages for large
/// ones. Either way a plain byte slice to its users.
#[derive(Debug)]
pub enum PoolBuf {
    /// A vector on the heap (any buffer that is not from a huge-page mapping).
    Heap(Vec<u8>),
    /// A large buffer on huge pages.
    Huge(HugeBuf),
}

impl PoolBuf {
    /// Whether the pool may keep this buffer: not larger than the largest pooled length,
    /// and long enough to hold the headers.
    fn keepable(&self) -> bool {
        let size = match self {
            PoolBuf::Heap(v) => v.capacity(),
            PoolBuf::Huge(h) => h.len().saturating_sub(HUGE_LEAD),
        };
        size <= MAX_POOLED_LEN && self.len() >= HEADROOM
    }
}

impl Default for PoolBuf {
    fn default() -> PoolBuf {
        PoolBuf::Heap(Vec::new())
    }
}

impl From<Vec<u8>> for PoolBuf {
    fn from(v: Vec<u8>) -> PoolBuf {
        PoolBuf::Heap(v)
    }
}

impl Deref for PoolBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            PoolBuf::Heap(v) => v,
            PoolBuf::Huge(h) => h,
        }
    }
}

impl DerefMut for PoolBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            PoolBuf::Heap(v) => v,
            PoolBuf::Huge(h) => h,
        }
    }
}

/// Where a message starts in `buf`: at least `front` bytes in, shifted (by less than
/// [`DATA_ALIGN`]) so that the byte `lead` bytes after the start sits at an address
/// congruent to `file_offset` modulo [`DATA_ALIGN`]. The buffer needs `DATA_ALIGN - 1`
/// bytes of room beyond the message for the shift.
fn aligned_start(buf: &[u8], front: usize, lead: usize, file_offset: u64) -> usize {
    let natural = (buf.as_ptr() as usize).wrapping_add(front + lead) % DATA_ALIGN;
    let wanted = (file_offset % DATA_ALIGN as u64) as usize;
    front + (wanted + DATA_ALIGN - natural) % DATA_ALIGN
}

/// A received message: `buf[start..end]`. A pooled buffer goes back to its pool when
/// the message is dropped (after the deferred WRITE that holds it has written).
#[derive(Debug)]
pub struct Received {
    buf: PoolBuf,
    start: usize,
    end: usize,
    pool: Option<Arc<BufPool>>,
}

impl Received {
    /// A message `len` bytes long in a buffer from `pool`, placed so that the byte `lead`
    /// bytes in sits at an address aligned as `file_offset` is; its bytes are unspecified
    /// until the caller fills them.
    pub fn pooled(pool: &Arc<BufPool>, len: usize, lead: usize, file_offset: u64) -> Received {
        let buf = pool.take(len + DATA_ALIGN - 1);
        let start = aligned_start(&buf, 0, lead, file_offset);
        Received {
            buf,
            start,
            end: start + len,
            pool: Some(pool.clone()),
        }
    }

    /// Drops the first `n` bytes (a transform header) from the message.
    pub fn skip_front(&mut self, n: usize) {
        self.start = self.start.saturating_add(n).min(self.end);
    }
}

impl From<Vec<u8>> for Received {
    fn from(buf: Vec<u8>) -> Received {
        let end = buf.len();
        Received {
            buf: PoolBuf::Heap(buf),
            start: 0,
            end,
            pool: None,
        }
    }
}

impl Deref for Received {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or(&[])
    }
}

impl DerefMut for Received {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf.get_mut(self.start..self.end).unwrap_or(&mut [])
    }
}

impl Drop for Received {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.give(std::mem::take(&mut self.buf));
        }
    }
}

/// A response being built in a buffer: the message occupies `buf[start..end]`, with at
/// least `start` bytes free in front of it.
#[derive(Debug)]
pub struct OutBuf {
    /// The buffer (from the pool, or any `Vec`).
    pub buf: PoolBuf,
    /// First byte of the message.
    pub start: usize,
    /// One past its last byte.
    pub end: usize,
    /// Taken from a [`BufPool`]: give it back once sent.
    pub pooled: bool,
    /// The rest of the message, shared with other responses (a READ's data from
    /// [`crate::vfs::FsFile::read_shared`]): sent after `buf[start..end]`, never copied
    /// unless the message must be sealed.
    pub tail: Option<SharedData>,
}

impl OutBuf {
    /// A message in a plain vector (no headroom).
    pub fn from_vec(v: Vec<u8>) -> OutBuf {
        let end = v.len();
        OutBuf {
            buf: PoolBuf::Heap(v),
            start: 0,
            end,
            pooled: false,
            tail: None,
        }
    }

    /// The message's bytes in `buf`: all of it unless it has a [`OutBuf::tail`].
    pub fn bytes(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or(&[])
    }

    /// The shared rest of the message (empty without one).
    pub fn tail_bytes(&self) -> &[u8] {
        self.tail.as_deref().map_or(&[], |t| t.as_slice())
    }

    /// The whole message's length.
    pub fn len(&self) -> usize {
        self.bytes().len() + self.tail_bytes().len()
    }

    /// Whether the message is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the shared tail behind the bytes in `buf`, so the whole message lies in one
    /// buffer (sealing encrypts it in place).
    pub fn flatten(&mut self) {
        let Some(tail) = self.tail.take() else {
            return;
        };
        match &mut self.buf {
            PoolBuf::Heap(v) => {
                v.truncate(self.end);
                v.extend_from_slice(&tail);
            }
            PoolBuf::Huge(h) => {
                // Shared tails follow small heap buffers, so this is not expected; the
                // message moves to the heap and the huge buffer is let go.
                let mut v = Vec::with_capacity(self.end + tail.len());
                v.extend_from_slice(h.get(..self.end).unwrap_or_default());
                v.extend_from_slice(&tail);
                self.buf = PoolBuf::Heap(v);
                self.pooled = false;
            }
        }
        self.end = self.buf.len();
    }

    /// The message as its own vector (copies unless it already is one).
    pub fn into_vec(mut self) -> Vec<u8> {
        self.flatten();
        match &mut self.buf {
            PoolBuf::Heap(v) if self.start == 0 => {
                v.truncate(self.end);
                std::mem::take(v)
            }
            _ => self.bytes().to_vec(),
        }
    }
}

/// The server's pool of response buffers.
#[derive(Debug)]
pub struct BufPool {
    free: Mutex<Vec<FreeBuf>>,
    /// The most buffers kept at once (at least [`KEPT_ALWAYS`]).
    capacity: usize,
}

/// A buffer in the pool and when it was given back.
#[derive(Debug)]
struct FreeBuf {
    buf: PoolBuf,
    since: Instant,
    /// Released to the kernel after lying idle ([`IDLE_FREE`]): kept for reuse, but not
    /// one of the buffers the pool holds on to.
    released: bool,
}

impl FreeBuf {
    /// A buffer given back at `since`, in use.
    fn new(buf: PoolBuf, since: Instant) -> FreeBuf {
        FreeBuf {
            buf,
            since,
            released: false,
        }
    }
}

impl Default for BufPool {
    /// A pool sized for this machine's memory ([`capacity_for_memory`]).
    fn default() -> BufPool {
        BufPool::with_capacity(capacity_for_memory(physical_memory()))
    }
}

impl BufPool {
    /// A pool that keeps at most `capacity` buffers (at least [`KEPT_ALWAYS`]).
    pub fn with_capacity(capacity: usize) -> BufPool {
        BufPool {
            free: Mutex::new(Vec::new()),
            capacity: capacity.max(KEPT_ALWAYS),
        }
    }

    /// A buffer of at least `len` initialised bytes (contents unspecified): the smallest
    /// free one that is long enough, else a new one of `len`'s size class. A free buffer is
    /// never grown: growing reallocates, which copies the old contents and zeroes the rest
    /// (an 8 MiB `memmove` per READ in a profile of mixed-size reads).
    pub fn take(&self, len: usize) -> PoolBuf {
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            // Of equal lengths, one still in use before one released.
            let fit = free
                .iter()
                .enumerate()
                .filter(|(_, f)| f.buf.len() >= len)
                .min_by_key(|(_, f)| (f.buf.len(), f.released))
                .map(|(i, _)| i);
            fit.map(|i| free.swap_remove(i).buf)
        };
        reused.unwrap_or_else(|| new_buffer(size_class(len)))
    }

    /// A buffer for a READ response of `fixed` bytes plus `len` bytes of data read at
    /// `file_offset`, and where the response starts in it: the data sits at an address
    /// aligned as its file offset is (`aligned_start`), with [`HEADROOM`] in front.
    pub fn take_read(&self, fixed: usize, len: usize, file_offset: u64) -> (PoolBuf, usize) {
        let buf = self.take(HEADROOM + fixed + len + DATA_ALIGN - 1);
        let start = aligned_start(&buf, HEADROOM, fixed, file_offset);
        (buf, start)
    }

    /// Returns a buffer for reuse. Oversized buffers are dropped; when the pool is full, a
    /// longer buffer takes the place of the shortest one (large READs keep finding room).
    /// Lets go of the buffers that have lain unused too long ([`BufPool::trim`]) on the way.
    pub fn give(&self, buf: PoolBuf) {
        if !buf.keepable() {
            return;
        }
        let now = Instant::now();
        let (expired, refused) = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            let expired = take_expired(&mut free, now);
            let refused = self.keep(&mut free, FreeBuf::new(buf, now));
            (expired, refused)
        };
        // Unmapping an 8 MiB buffer takes a while: never under the lock.
        drop(refused);
        self.let_go(expired);
    }

    /// Puts `f` in `free`, or in place of the shortest buffer when the pool is full and
    /// that one is shorter; returns what did not fit, for the caller to drop outside the
    /// lock.
    fn keep(&self, free: &mut Vec<FreeBuf>, f: FreeBuf) -> Option<FreeBuf> {
        if free.len() < self.capacity {
            free.push(f);
            return None;
        }
        match free.iter_mut().min_by_key(|s| s.buf.len()) {
            Some(shortest) if shortest.buf.len() < f.buf.len() => {
                Some(std::mem::replace(shortest, f))
            }
            _ => Some(f),
        }
    }

    /// Lets go of buffers that lay idle too long: frees heap buffers, and releases
    /// huge-page ones ([`HugeBuf::release`]) back into the pool, where the next burst finds
    /// them mapped, with no fault or clearing for the pages the kernel did not take.
    fn let_go(&self, expired: Vec<FreeBuf>) {
        let mut released = Vec::new();
        for mut f in expired {
            if let PoolBuf::Huge(h) = &mut f.buf {
                h.release();
                f.released = true;
                released.push(f);
            }
        }
        if released.is_empty() {
            return;
        }
        let refused: Vec<FreeBuf> = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            released
                .into_iter()
                .filter_map(|f| self.keep(&mut free, f))
                .collect()
        };
        drop(refused);
    }

    /// Lets go of the buffers beyond [`KEPT_ALWAYS`] that have lain unused for
    /// [`IDLE_FREE`] by `now`: frees heap ones, and releases huge-page ones
    /// ([`HugeBuf::release`]), which stay in the pool. The server calls this every
    /// [`IDLE_FREE`], so a burst's buffers go even when no further request comes.
    pub fn trim(&self, now: Instant) {
        let expired = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            take_expired(&mut free, now)
        };
        self.let_go(expired);
    }

    /// How many buffers the pool holds now (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// How many of them are released (for tests).
    #[cfg(test)]
    fn released(&self) -> usize {
        let free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        free.iter().filter(|f| f.released).count()
    }
}

/// Takes out of `free` the buffers still in use, beyond [`KEPT_ALWAYS`] of them, given
/// back at least [`IDLE_FREE`] before `now`, for the caller to let go of outside the lock
/// ([`BufPool::let_go`]). Released buffers are not counted and stay.
fn take_expired(free: &mut Vec<FreeBuf>, now: Instant) -> Vec<FreeBuf> {
    let mut expired = Vec::new();
    let mut in_use = free.iter().filter(|f| !f.released).count();
    let mut i = 0;
    while in_use > KEPT_ALWAYS {
        let Some(f) = free.get(i) else { break };
        if !f.released && now.saturating_duration_since(f.since) >= IDLE_FREE {
            expired.push(free.swap_remove(i));
            in_use -= 1;
        } else {
            i += 1;
        }
    }
    expired
}

/// Frees `pool`'s long-unused buffers every [`IDLE_FREE`] until `shutdown`.
pub async fn trim_until(pool: Arc<BufPool>, shutdown: tokio_util::sync::CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(IDLE_FREE) => pool.trim(Instant::now()),
        }
    }
}

/// How many buffers a pool keeps on a machine with `memory` bytes: [`MEMORY_SHARE`] of it
/// in full-size buffers, between [`KEPT_ALWAYS`] and [`MAX_POOLED`].
pub fn capacity_for_memory(memory: Option<u64>) -> usize {
    let Some(memory) = memory else {
        return KEPT_ALWAYS;
    };
    let count = memory / MEMORY_SHARE / MAX_POOLED_LEN as u64;
    usize::try_from(count)
        .unwrap_or(MAX_POOLED)
        .clamp(KEPT_ALWAYS, MAX_POOLED)
}

/// This machine's physical memory in bytes, from `/proc/meminfo` (`None` where it cannot
/// be read).
fn physical_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    kib.checked_mul(1024)
}

/// A new buffer of `class` bytes (a size class): on huge pages from [`HUGE_CLASS_MIN`] up
/// to the largest pooled length, with [`HUGE_LEAD`] bytes more in front of its first huge
/// page; on the heap otherwise, or where the kernel refuses a mapping.
fn new_buffer(class: usize) -> PoolBuf {
    if (HUGE_CLASS_MIN..=MAX_POOLED_LEN).contains(&class) {
        if let Some(h) = class
            .checked_add(HUGE_LEAD)
            .and_then(|len| HugeBuf::new(len, HUGE_LEAD))
        {
            return PoolBuf::Huge(h);
        }
    }
    PoolBuf::Heap(vec![0; class])
}

/// Smallest buffer the pool allocates: small READs share one size instead of each new
/// length allocating anew.
const MIN_CLASS: usize = 64 << 10;

/// The length a new buffer for `len` bytes gets: the next power of two (at least
/// [`MIN_CLASS`]), capped at the largest pooled length, so later READs of similar sizes
/// fit in it; longer requests get exactly `len`.
fn size_class(len: usize) -> usize {
    if len >= MAX_POOLED_LEN {
        return len;
    }
    len.checked_next_power_of_two()
        .unwrap_or(MAX_POOLED_LEN)
        .clamp(MIN_CLASS, MAX_POOLED_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::SharedBytes;

    #[test]
    fn read_data_is_aligned_as_its_file_offset() {
        let pool = BufPool::default();
        for (len, offset) in [(100, 0u64), (1 << 20, 4096), (1 << 20, 4095), (8 << 20, 77)] {
            let fixed = 16;
            let (buf, start) = pool.take_read(fixed, len, offset);
            assert!(start >= HEADROOM);
            assert!(start + fixed + len <= buf.len(), "fits: {len} at {offset}");
            let data = buf.as_ptr() as usize + start + fixed;
            assert_eq!(data % DATA_ALIGN, offset as usize % DATA_ALIGN);
            pool.give(buf);
        }
    }

    #[test]
    fn buffers_are_reused_without_shrinking_and_the_pool_is_bounded() {
        let pool = BufPool::default();
        let a = pool.take(HEADROOM + 4096);
        assert!(a.len() >= HEADROOM + 4096);
        let ptr = a.as_ptr();
        pool.give(a);
        let b = pool.take(HEADROOM + 100);
        assert_eq!(b.as_ptr(), ptr, "reused");
        assert!(b.len() >= HEADROOM + 100);
        pool.give(b);
        for _ in 0..pool.capacity + 4 {
            pool.give(vec![0; HEADROOM + 1].into());
        }
        assert_eq!(pool.len(), pool.capacity);
        // Oversized and tiny buffers are not kept.
        let before = pool.len();
        pool.give(vec![0; 8].into());
        assert_eq!(pool.len(), before);
    }

    /// The pool's bound follows the machine's memory, within its limits.
    #[test]
    fn the_pool_keeps_a_share_of_memory() {
        const GIB: u64 = 1 << 30;
        assert_eq!(capacity_for_memory(None), KEPT_ALWAYS);
        assert_eq!(capacity_for_memory(Some(GIB)), KEPT_ALWAYS);
        let on_24_gib = capacity_for_memory(Some(24 * GIB));
        assert_eq!(on_24_gib as u64, 24 * GIB / 32 / MAX_POOLED_LEN as u64);
        assert!((64..MAX_POOLED).contains(&on_24_gib), "{on_24_gib}");
        assert_eq!(capacity_for_memory(Some(1 << 50)), MAX_POOLED);
        assert!(BufPool::default().capacity >= KEPT_ALWAYS);
        assert_eq!(BufPool::with_capacity(3).capacity, KEPT_ALWAYS);
    }

    /// Buffers beyond those always kept go once they have lain unused for `IDLE_FREE`,
    /// whether trimmed or on a later return; those always kept, and recent ones, stay.
    #[test]
    fn a_burst_s_buffers_go_once_idle() {
        let pool = BufPool::with_capacity(KEPT_ALWAYS + 8);
        let bufs: Vec<PoolBuf> = (0..KEPT_ALWAYS + 8).map(|_| pool.take(MIN_CLASS)).collect();
        for b in bufs {
            pool.give(b);
        }
        assert_eq!(pool.len(), KEPT_ALWAYS + 8);
        let now = Instant::now();
        pool.trim(now);
        assert_eq!(pool.len(), KEPT_ALWAYS + 8, "nothing idle yet");
        pool.trim(now + IDLE_FREE);
        assert_eq!(pool.len(), KEPT_ALWAYS, "the burst's buffers are freed");
        pool.trim(now + IDLE_FREE * 100);
        assert_eq!(pool.len(), KEPT_ALWAYS, "the steady ones stay");
        // On a return: an idle buffer beyond those always kept goes, the returned one stays.
        pool.give(vec![0; MIN_CLASS].into());
        pool.give(vec![0; MIN_CLASS].into());
        assert_eq!(pool.len(), KEPT_ALWAYS + 2);
        let long_ago = now.checked_sub(IDLE_FREE).unwrap_or(now);
        pool.free.lock().unwrap()[0].since = long_ago;
        pool.give(vec![0; MIN_CLASS].into());
        assert_eq!(pool.len(), KEPT_ALWAYS + 2);
        assert!(pool.free.lock().unwrap().iter().all(|f| f.since > long_ago));
    }

    /// Huge-page buffers beyond those always kept are released when idle, not unmapped:
    /// they stay in the pool, are not released twice, and the next burst takes the same
    /// mappings back, in use again once given back.
    #[test]
    fn a_burst_s_huge_buffers_are_released_and_taken_again() {
        let pool = BufPool::with_capacity(KEPT_ALWAYS + 4);
        let bufs: Vec<PoolBuf> = (0..KEPT_ALWAYS + 4)
            .map(|_| pool.take(HUGE_CLASS_MIN))
            .collect();
        assert!(bufs.iter().all(|b| matches!(b, PoolBuf::Huge(_))));
        let mut addrs: Vec<usize> = bufs.iter().map(|b| b.as_ptr() as usize).collect();
        for b in bufs {
            pool.give(b);
        }
        let now = Instant::now();
        pool.trim(now + IDLE_FREE);
        assert_eq!(
            pool.len(),
            KEPT_ALWAYS + 4,
            "released buffers stay in the pool"
        );
        assert_eq!(pool.released(), 4);
        pool.trim(now + IDLE_FREE * 100);
        assert_eq!(pool.released(), 4, "the kept ones stay in use");
        let again: Vec<PoolBuf> = (0..KEPT_ALWAYS + 4)
            .map(|_| pool.take(HUGE_CLASS_MIN))
            .collect();
        let mut again_addrs: Vec<usize> = again.iter().map(|b| b.as_ptr() as usize).collect();
        addrs.sort_unstable();
        again_addrs.sort_unstable();
        assert_eq!(addrs, again_addrs, "no new mapping for the next burst");
        for mut b in again {
            b.fill(7);
            pool.give(b);
        }
        assert_eq!(pool.released(), 0);
        // After the next idle spell the burst's share is released again.
        pool.trim(Instant::now() + IDLE_FREE);
        assert_eq!((pool.len(), pool.released()), (KEPT_ALWAYS + 4, 4));
    }

    #[test]
    fn take_picks_the_smallest_fitting_buffer_and_never_grows_one() {
        let pool = BufPool::default();
        let small = pool.take(HEADROOM + 100);
        assert_eq!(small.len(), MIN_CLASS, "size class of a small read");
        let big = pool.take(MAX_POOLED_LEN);
        assert_eq!(big.len(), MAX_POOLED_LEN + HUGE_LEAD);
        let mid = pool.take((1 << 20) + 1);
        assert_eq!(mid.len(), (2 << 20) + HUGE_LEAD);
        let (sp, bp, mp) = (small.as_ptr(), big.as_ptr(), mid.as_ptr());
        pool.give(small);
        pool.give(big);
        pool.give(mid);
        // A 1.5 MiB read takes the 2 MiB buffer, not the 8 MiB one, and no small one grows.
        let a = pool.take(3 << 19);
        assert_eq!(a.as_ptr(), mp);
        let b = pool.take(5 << 20);
        assert_eq!(b.as_ptr(), bp);
        let c = pool.take(100);
        assert_eq!(c.as_ptr(), sp);
        // Nothing free fits: a new buffer, the free ones untouched.
        let d = pool.take(4 << 20);
        assert_eq!(d.len(), (4 << 20) + HUGE_LEAD);
    }

    /// Large buffers are mappings on huge pages, and a full-size READ's or WRITE's data at
    /// an aligned file offset starts a huge page; smaller buffers stay on the heap.
    #[test]
    fn large_messages_put_their_data_on_huge_pages() {
        let pool = Arc::new(BufPool::default());
        assert!(matches!(pool.take(HUGE_CLASS_MIN / 2), PoolBuf::Heap(_)));
        let io = crate::server::MAX_IO_SIZE as usize;
        let (buf, start) = pool.take_read(16, io, 1 << 30);
        assert!(matches!(buf, PoolBuf::Huge(_)));
        let data = buf.as_ptr() as usize + start + 16;
        assert_eq!(data % HUGE_PAGE, 0, "READ data");
        if quarry_hugemem::huge_pages_on() {
            let eligible = quarry_hugemem::thp_eligible;
            assert_eq!(eligible(data), Some(true));
            assert_eq!(eligible(data + io - 1), Some(true));
        }
        pool.give(buf);
        let header_len = HEADER_LEN + 48;
        let w = Received::pooled(&pool, header_len + io, header_len, 8 << 20);
        assert_eq!(
            (w.as_ptr() as usize + header_len) % HUGE_PAGE,
            0,
            "WRITE data"
        );
        assert_eq!(w.len(), header_len + io);
    }

    /// A message in a huge-page buffer becomes a vector by copying, and a shared tail
    /// behind one (not expected: tails follow small heap buffers) still joins the
    /// message, which moves to the heap.
    #[test]
    fn messages_in_huge_buffers_flatten_and_copy_out() {
        let pool = BufPool::default();
        let huge_message = |tail: Option<SharedData>| {
            let mut buf = pool.take(HUGE_CLASS_MIN);
            assert!(matches!(buf, PoolBuf::Huge(_)));
            buf[..4].copy_from_slice(&[0, 1, 2, 3]);
            OutBuf {
                buf,
                start: 1,
                end: 4,
                pooled: true,
                tail,
            }
        };
        assert_eq!(huge_message(None).into_vec(), vec![1, 2, 3]);
        let mut o = huge_message(Some(Arc::new(SharedBytes::from(vec![4, 5]))));
        o.flatten();
        assert!(matches!(o.buf, PoolBuf::Heap(_)) && !o.pooled);
        assert_eq!(o.bytes(), &[1, 2, 3, 4, 5]);
        assert_eq!(o.into_vec(), vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_full_pool_keeps_the_longer_buffers() {
        let pool = BufPool::default();
        for _ in 0..pool.capacity {
            pool.give(vec![0; MIN_CLASS].into());
        }
        pool.give(vec![0; MAX_POOLED_LEN].into());
        let free = pool.free.lock().unwrap();
        assert_eq!(free.len(), pool.capacity);
        assert_eq!(
            free.iter()
                .filter(|f| f.buf.len() == MAX_POOLED_LEN)
                .count(),
            1
        );
    }

    #[test]
    fn out_buf_views() {
        let o = OutBuf::from_vec(vec![1, 2, 3]);
        assert_eq!(o.bytes(), &[1, 2, 3]);
        assert_eq!(o.into_vec(), vec![1, 2, 3]);
        let o = OutBuf {
            buf: vec![0, 0, 7, 8, 9].into(),
            start: 2,
            end: 4,
            pooled: false,
            tail: None,
        };
        assert_eq!(o.bytes(), &[7, 8]);
        assert_eq!(o.into_vec(), vec![7, 8]);
    }

    #[test]
    fn a_shared_tail_follows_the_buffer_and_is_copied_only_when_flattened() {
        let tail = Arc::new(SharedBytes::from(vec![4, 5, 6]));
        let mut o = OutBuf {
            buf: vec![0, 0, 1, 2, 3, 99].into(),
            start: 2,
            end: 5,
            pooled: false,
            tail: Some(tail.clone()),
        };
        assert_eq!(
            (o.bytes(), o.tail_bytes(), o.len()),
            (&[1, 2, 3][..], &[4, 5, 6][..], 6)
        );
        o.flatten();
        assert!(o.tail.is_none());
        // The stale byte past `end` is gone, the tail lies behind the message.
        assert_eq!(o.bytes(), &[1, 2, 3, 4, 5, 6]);
        assert_eq!(
            Arc::strong_count(&tail),
            1,
            "flattening lets go of the shared bytes"
        );
        let o = OutBuf {
            tail: Some(tail),
            ..OutBuf::from_vec(vec![1])
        };
        assert_eq!(o.into_vec(), vec![1, 4, 5, 6]);
    }
}
