//! Large reads of a file that several opens read at once, kept for a moment so that the same
//! range read through another open is answered with the bytes already read.
//!
//! When many clients load the same model weights (inference fan-out), every READ response
//! used to copy its range out of the page cache into its own buffer: a third of the server's
//! CPU in that workload (tests/bench/RESULTS.md). With this, the first READ of a range reads
//! it into a buffer the response shares ([`quarry_smb::vfs::FsFile::read_shared`]); the
//! next READs of that range, through other opens, send the same buffer.
//!
//! An entry answers only while the file is unchanged:
//! - every change of the file's data made through Quarry (writes, size changes, zeroing)
//!   counts itself in [`SharedReads::changing`] before and after it runs; a read is kept only
//!   if no change began or ended while it ran, and an entry answers only while the count is
//!   what it was;
//! - a change made outside Quarry is seen through the file's size and its modification and
//!   status-change times, compared at every answer with those stated before the read. File
//!   systems stamp those times from a coarse clock (a tick, unless the kernel has
//!   multigrain timestamps, Linux 6.13+) or in whole seconds (ext4 with small inodes, FAT
//!   in two), so a change in the same tick or second as the one before it may leave them as
//!   they were. A read is therefore kept only once the file's status-change time lies
//!   [`SETTLE`] in the past: any change after that gets a time of its own. Entries also stop
//!   answering [`FRESH_FOR`] after their read.
//!
//! Memory: at most [`ENTRIES_PER_FILE`] entries per file and [`BUDGET`] bytes in all files'
//! entries together. Entries go when the last open of their file closes, when a newer entry
//! pushes them out, or when they are found stale; a read that would pass the budget first
//! drops every file's expired entries (a file still open but no longer read keeps none past
//! [`FRESH_FOR`] then), and is shared with no one if that is not enough.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quarry_smb::vfs::{SharedBytes, SharedData};

use super::sys::Stat;

/// Entries kept per file: how many reads apart two readers may be and still share.
pub const ENTRIES_PER_FILE: usize = 16;
/// Bytes held by all files' entries together.
pub const BUDGET: usize = 256 << 20;
/// How long after its read an entry may answer.
pub const FRESH_FOR: Duration = Duration::from_secs(1);
/// How long a file's last status change must lie in the past before its reads are kept:
/// longer than the coarsest time granularity of the file systems a share may sit on (FAT's
/// two seconds) plus a clock tick, so that every later change moves the status-change time.
pub const SETTLE: Duration = Duration::from_secs(3);
/// Buffers that no entry or response holds any more, kept for the next reads: a fresh one
/// costs a page fault and a zeroed page per 4 KiB the read fills.
const SPARES: usize = 8;

/// Bytes held by entries, all files together.
static HELD: AtomicUsize = AtomicUsize::new(0);
/// Buffers that no entry or response holds any more ([`shared`]).
static SPARE: Spares = Spares(Mutex::new(Vec::new()));
/// Every file that has kept an entry, while it is open: swept of expired entries when the
/// budget runs out. Locked before any file's entries, never while holding one.
static FILES: Mutex<Vec<Weak<Entries>>> = Mutex::new(Vec::new());

/// One file's entries, oldest first.
type Entries = Mutex<VecDeque<Entry>>;

/// What a file looked like just before a read: an entry answers only while its file still
/// looks the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Looks {
    size: u64,
    mtime: (i64, u32),
    ctime: (i64, u32),
}

impl From<&Stat> for Looks {
    fn from(st: &Stat) -> Looks {
        Looks {
            size: st.size,
            mtime: st.mtime,
            ctime: st.ctime,
        }
    }
}

impl Looks {
    /// Whether the file's last status change lies [`SETTLE`] or more before `now` (the wall
    /// clock the file system stamps from). A time ahead of `now`, or before 1970, is never
    /// settled.
    pub fn settled(&self, now: SystemTime) -> bool {
        let (secs, nanos) = self.ctime;
        let (Ok(secs), Ok(since_epoch)) = (u64::try_from(secs), now.duration_since(UNIX_EPOCH))
        else {
            return false;
        };
        let ctime = Duration::from_secs(secs).saturating_add(Duration::from_nanos(nanos.into()));
        since_epoch
            .checked_sub(ctime)
            .is_some_and(|age| age >= settle())
    }
}

/// [`SETTLE`], or a test's own on its thread.
fn settle() -> Duration {
    #[cfg(test)]
    if let Some(d) = SETTLE_ON_THIS_THREAD.with(std::cell::Cell::get) {
        return d;
    }
    SETTLE
}

#[cfg(test)]
thread_local! {
    /// A settle time for the tests on this thread that change files and read them back
    /// through shared reads at once (the rule itself has tests of its own at [`SETTLE`]).
    pub(crate) static SETTLE_ON_THIS_THREAD: std::cell::Cell<Option<Duration>> =
        const { std::cell::Cell::new(None) };
}

/// One file's recent shared reads, and the count of changes to its data.
#[derive(Default)]
pub struct SharedReads {
    changes: AtomicU64,
    entries: Arc<Entries>,
    /// Listed in [`FILES`].
    listed: AtomicBool,
    /// The opens that read last, and when: sharing starts once a second open reads.
    readers: Mutex<[Option<(usize, Instant)>; 2]>,
}

impl std::fmt::Debug for SharedReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReads")
            .field("changes", &self.changes.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A range read, the bytes it gave, and what stood when it was read.
struct Entry {
    offset: u64,
    len: usize,
    data: SharedData,
    changes: u64,
    looks: Looks,
    read_at: Instant,
    held: usize,
}

impl Drop for Entry {
    fn drop(&mut self) {
        // The buffer returns to the spares when its last holder lets go, here or when the
        // last response sending the bytes is done ([`shared`]).
        HELD.fetch_sub(self.held, Ordering::Relaxed);
    }
}

/// A change of a file's data in progress ([`SharedReads::changing`]).
#[must_use = "the change counts as done when this is dropped"]
pub struct Changing<'a>(&'a SharedReads);

impl Drop for Changing<'_> {
    fn drop(&mut self) {
        self.0.changes.fetch_add(1, Ordering::SeqCst);
    }
}

impl SharedReads {
    /// Counts a change of the file's data as begun; it counts as done when the guard drops.
    /// Hold it across the change.
    pub fn changing(&self) -> Changing<'_> {
        self.changes.fetch_add(1, Ordering::SeqCst);
        Changing(self)
    }

    /// Notes that open `reader` (any number unique among the file's live opens) reads at
    /// `now`, and tells whether another open read within [`FRESH_FOR`]: only then is
    /// there anyone to share with. A lone reader (a file also held open by a handle that
    /// does not read) keeps reading into the server's own reused buffers, which stay in
    /// the CPU's caches, where kept reads would cycle through fresh memory.
    pub fn others_reading(&self, reader: usize, now: Instant) -> bool {
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        // Remember this reader and the most recent other one: if any other read recently,
        // that one did.
        let other = readers
            .iter()
            .flatten()
            .filter(|(id, _)| *id != reader)
            .max_by_key(|(_, at)| *at)
            .copied();
        *readers = [Some((reader, now)), other];
        other.is_some_and(|(_, at)| fresh(at, now))
    }

    /// The change count a read starts from: take it before stating and reading the file.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// The bytes of an earlier read of `len` bytes at `offset`, if that read is fresh, no
    /// change has touched the file since and the file still `looks` as it did.
    pub fn find(&self, offset: u64, len: usize, looks: &Looks, now: Instant) -> Option<SharedData> {
        let changes = self.changes();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|e| e.changes == changes && fresh(e.read_at, now));
        let hit = entries
            .iter()
            .find(|e| e.offset == offset && e.len == len && e.looks == *looks)
            .map(|e| e.data.clone());
        drop(entries);
        if let Some(data) = &hit {
            crate::telemetry::smb_shared_read_bytes(data.len() as u64);
        }
        hit
    }

    /// Keeps `data`, read as `len` bytes at `offset` after the change count was `before` and
    /// the file looked as `looks`, unless a change began or ended since, the file changed
    /// too recently for its times to show the next change (not [`Looks::settled`]), the
    /// range is kept already, or the budget is spent.
    pub fn keep(
        &self,
        offset: u64,
        len: usize,
        data: SharedData,
        before: u64,
        looks: Looks,
        read_at: Instant,
    ) {
        if self.changes() != before || !looks.settled(SystemTime::now()) {
            return;
        }
        let held = data.capacity();
        if !self.listed.swap(true, Ordering::Relaxed) {
            let mut files = FILES.lock().unwrap_or_else(|p| p.into_inner());
            files.retain(|f| f.strong_count() > 0);
            files.push(Arc::downgrade(&self.entries));
        }
        if HELD.load(Ordering::Relaxed) + held > BUDGET {
            drop_expired(read_at);
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.iter().any(|e| e.offset == offset && e.len == len) {
            return;
        }
        if entries.len() >= ENTRIES_PER_FILE {
            entries.pop_front();
        }
        let fits = HELD.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
            h.checked_add(held).filter(|total| *total <= BUDGET)
        });
        if fits.is_err() {
            return;
        }
        entries.push_back(Entry {
            offset,
            len,
            data,
            changes: before,
            looks,
            read_at,
            held,
        });
    }
}

/// Whether something that happened `at` is within [`FRESH_FOR`] of `now`.
fn fresh(at: Instant, now: Instant) -> bool {
    now.duration_since(at) < FRESH_FOR
}

/// Drops the entries of every open file that are too old at `now` to answer.
fn drop_expired(now: Instant) {
    let files = FILES.lock().unwrap_or_else(|p| p.into_inner());
    for file in files.iter().filter_map(Weak::upgrade) {
        let mut entries = file.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|e| fresh(e.read_at, now));
    }
}

/// A buffer of `len` bytes (contents unspecified) for a read to fill: a spare one that is
/// large enough, else a new one.
pub fn buffer(len: usize) -> Vec<u8> {
    SPARE.take(len)
}

/// Returns a buffer that no longer holds anyone's data, for [`buffer`] to hand out again.
pub fn give_back(buf: Vec<u8>) {
    SPARE.give(buf);
}

/// A read's bytes, to be shared: their buffer comes back to the spares when the last entry
/// or response holding them lets go. A response often outlives its entry (a newer read
/// pushed the entry out while the bytes were still being sent), and a buffer freed then
/// was zeroed anew for a later read: `memset` was 3-5% of the server's samples in a
/// 16-session fan-out (tests/bench/RESULTS.md, step 34).
pub fn shared(bytes: Vec<u8>) -> SharedData {
    Arc::new(SharedBytes::recycled_by(bytes, give_back))
}

/// Buffers kept for reuse, at most [`SPARES`].
struct Spares(Mutex<Vec<Vec<u8>>>);

impl Spares {
    fn take(&self, len: usize) -> Vec<u8> {
        let spare = {
            let mut spares = self.0.lock().unwrap_or_else(|p| p.into_inner());
            let fit = spares.iter().position(|b| b.capacity() >= len);
            fit.map(|i| spares.swap_remove(i))
        };
        match spare {
            Some(mut buf) => {
                // Within capacity: no reallocation; only bytes past the old length are zeroed.
                buf.resize(len, 0);
                buf
            }
            None => vec![0; len],
        }
    }

    fn give(&self, buf: Vec<u8>) {
        if buf.capacity() == 0 {
            return;
        }
        let mut spares = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if spares.len() < SPARES {
            spares.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn looks(size: u64, tick: i64) -> Looks {
        Looks {
            size,
            mtime: (tick, 0),
            ctime: (tick, 0),
        }
    }

    fn data(bytes: &[u8]) -> SharedData {
        Arc::new(SharedBytes::from(bytes.to_vec()))
    }

    /// What a file whose last change was at `t` looks like.
    fn changed_at(t: SystemTime) -> Looks {
        let d = t.duration_since(UNIX_EPOCH).unwrap();
        Looks {
            size: 8,
            mtime: (0, 0),
            ctime: (d.as_secs() as i64, d.subsec_nanos()),
        }
    }

    #[test]
    fn a_file_is_settled_only_once_its_last_change_lies_settle_in_the_past() {
        let now = SystemTime::now();
        let ms = Duration::from_millis(1);
        assert!(!changed_at(now).settled(now));
        assert!(!changed_at(now - SETTLE + ms).settled(now));
        assert!(changed_at(now - SETTLE).settled(now));
        assert!(changed_at(UNIX_EPOCH + ms).settled(now));
        assert!(
            !changed_at(now + SETTLE).settled(now),
            "a time ahead of the clock"
        );
        let before_1970 = Looks {
            ctime: (-1, 0),
            ..changed_at(now)
        };
        assert!(!before_1970.settled(now));
    }

    #[test]
    fn a_read_of_a_file_changed_just_now_is_not_kept() {
        let reads = SharedReads::default();
        let t0 = Instant::now();
        // Changed now: another change in the same tick or second might not move its times.
        let recent = changed_at(SystemTime::now());
        reads.keep(0, 8, data(b"12345678"), reads.changes(), recent, t0);
        assert!(reads.find(0, 8, &recent, t0).is_none());
        // Changed long ago: kept.
        let old = changed_at(SystemTime::now() - SETTLE * 2);
        reads.keep(0, 8, data(b"12345678"), reads.changes(), old, t0);
        assert!(reads.find(0, 8, &old, t0).is_some());
    }

    #[test]
    fn a_kept_read_answers_the_same_range_of_an_unchanged_file_only() {
        let reads = SharedReads::default();
        let now = Instant::now();
        let before = reads.changes();
        reads.keep(4096, 8, data(b"abcdefgh"), before, looks(100, 1), now);
        let hit = reads.find(4096, 8, &looks(100, 1), now).unwrap();
        assert_eq!(hit.as_slice(), b"abcdefgh");
        // Another range, another length, or a file that looks different: no answer.
        assert!(reads.find(0, 8, &looks(100, 1), now).is_none());
        assert!(reads.find(4096, 16, &looks(100, 1), now).is_none());
        assert!(reads.find(4096, 8, &looks(101, 1), now).is_none());
        assert!(reads.find(4096, 8, &looks(100, 2), now).is_none());
        // Too old: gone.
        assert!(reads
            .find(4096, 8, &looks(100, 1), now + FRESH_FOR)
            .is_none());
        assert!(reads.find(4096, 8, &looks(100, 1), now).is_none());
    }

    #[test]
    fn a_change_through_quarry_ends_every_answer_from_before_it() {
        let reads = SharedReads::default();
        let now = Instant::now();
        reads.keep(0, 4, data(b"old!"), reads.changes(), looks(4, 1), now);
        {
            let _change = reads.changing();
            // While a change runs, nothing answers, even if the file still looks the same.
            assert!(reads.find(0, 4, &looks(4, 1), now).is_none());
        }
        assert!(reads.find(0, 4, &looks(4, 1), now).is_none());
    }

    #[test]
    fn a_read_that_a_change_overlapped_is_not_kept() {
        let reads = SharedReads::default();
        let now = Instant::now();
        // Begun before the read's count was taken and still running when it ends.
        let running = reads.changing();
        let before = reads.changes();
        drop(running);
        reads.keep(0, 4, data(b"torn"), before, looks(4, 1), now);
        assert!(reads.find(0, 4, &looks(4, 1), now).is_none());
        // Begun after the read started.
        let before = reads.changes();
        let change = reads.changing();
        reads.keep(0, 4, data(b"torn"), before, looks(4, 1), now);
        drop(change);
        assert!(reads.find(0, 4, &looks(4, 1), now).is_none());
    }

    #[test]
    fn a_file_keeps_its_newest_entries_and_the_first_of_each_range() {
        let reads = SharedReads::default();
        let now = Instant::now();
        let before = reads.changes();
        for i in 0..ENTRIES_PER_FILE as u64 + 2 {
            reads.keep(
                i * 8,
                8,
                data(&i.to_le_bytes()),
                before,
                looks(1 << 20, 1),
                now,
            );
        }
        assert!(
            reads.find(0, 8, &looks(1 << 20, 1), now).is_none(),
            "oldest pushed out"
        );
        assert!(reads.find(8, 8, &looks(1 << 20, 1), now).is_none());
        let last = ENTRIES_PER_FILE as u64 + 1;
        let hit = reads.find(last * 8, 8, &looks(1 << 20, 1), now).unwrap();
        assert_eq!(hit.as_slice(), last.to_le_bytes());
        // A second read of a kept range does not replace the first.
        reads.keep(
            last * 8,
            8,
            data(b"another"),
            before,
            looks(1 << 20, 1),
            now,
        );
        let again = reads.find(last * 8, 8, &looks(1 << 20, 1), now).unwrap();
        assert!(Arc::ptr_eq(&hit, &again));
    }

    #[test]
    fn entries_beyond_the_budget_are_not_kept() {
        let reads = SharedReads::default();
        let now = Instant::now();
        let before = reads.changes();
        // Larger than the whole budget: never kept, and nothing stays counted.
        let huge: SharedData = Arc::new(SharedBytes::from(Vec::with_capacity(BUDGET + 1)));
        reads.keep(0, 1, huge, before, looks(1, 1), now);
        assert!(reads.find(0, 1, &looks(1, 1), now).is_none());
    }

    #[test]
    fn a_read_past_the_budget_first_drops_other_files_expired_entries() {
        let (idle, busy) = (SharedReads::default(), SharedReads::default());
        let t0 = Instant::now();
        // Capacity only: the pages are never touched.
        let big: SharedData = Arc::new(SharedBytes::from(Vec::with_capacity(BUDGET / 4 * 3)));
        idle.keep(0, 1, big.clone(), idle.changes(), looks(1, 1), t0);
        assert!(idle.find(0, 1, &looks(1, 1), t0).is_some());
        drop(big);
        // Too much for what is left of the budget while the idle file's entry is young...
        let later: SharedData = Arc::new(SharedBytes::from(Vec::with_capacity(BUDGET / 2)));
        busy.keep(0, 1, later.clone(), busy.changes(), looks(1, 1), t0);
        assert!(busy.find(0, 1, &looks(1, 1), t0).is_none());
        // ...but not once it has expired, though no one read the idle file since.
        let t1 = t0 + FRESH_FOR;
        busy.keep(0, 1, later, busy.changes(), looks(1, 1), t1);
        assert!(busy.find(0, 1, &looks(1, 1), t1).is_some());
        assert!(idle.entries.lock().unwrap().is_empty());
    }

    #[test]
    fn sharing_starts_when_a_second_open_reads_and_ends_when_it_stops() {
        let reads = SharedReads::default();
        let t0 = Instant::now();
        // One open reading, however often: no one to share with.
        assert!(!reads.others_reading(1, t0));
        assert!(!reads.others_reading(1, t0 + FRESH_FOR / 2));
        // A second open reads: both now see the other.
        assert!(reads.others_reading(2, t0 + FRESH_FOR / 2));
        assert!(reads.others_reading(1, t0 + FRESH_FOR / 2));
        // A third reader still sees the others; the most recent two are remembered.
        assert!(reads.others_reading(3, t0 + FRESH_FOR / 2));
        // Once the others have been quiet for FRESH_FOR, a reader is alone again.
        let later = t0 + FRESH_FOR * 2;
        assert!(!reads.others_reading(3, later));
        assert!(!reads.others_reading(3, later));
    }

    #[test]
    fn a_spare_buffer_is_reused_at_the_length_asked_and_spares_are_bounded() {
        let spares = Spares(Mutex::new(Vec::new()));
        let buf = vec![7u8; 64 << 10];
        let at = buf.as_ptr();
        spares.give(buf);
        // Too small a spare is not taken; a fitting one is, at the length asked.
        let larger = spares.take(128 << 10);
        assert_ne!(larger.as_ptr(), at);
        let b = spares.take(1000);
        assert_eq!((b.as_ptr(), b.len()), (at, 1000));
        for _ in 0..SPARES + 3 {
            spares.give(vec![0; 16]);
        }
        assert_eq!(spares.0.lock().unwrap().len(), SPARES);
    }
}
