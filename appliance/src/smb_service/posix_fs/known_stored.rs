//! A file's stored attributes ([`super::attrs::Stored`]: DOS attributes and creation time,
//! kept in xattrs) as one open last read them, reused while the file's ctime proves them
//! current.
//!
//! Reading them costs a listing of the file's xattr names (and a read of each value
//! present) on every query through an open, the CLOSE's post-query included. An xattr
//! change by anyone (this server, another open, a process outside it) sets the file's
//! ctime to the time of the change, so a ctime equal to the one seen when the values were
//! read says nothing changed since, provided that ctime is older than the read by more
//! than the file system's timestamp granularity: a change after the read then gets a
//! later ctime, however coarse the kernel's clock ([`SETTLED`]). A file changed more
//! recently than that is read every time.

use std::sync::Mutex;
use std::time::Duration;

use super::attrs::Stored;
use super::sys::Stat;
use super::write_time::{unix_nanos, UnixTime};

/// How much older than the read a ctime must be for the values read to be kept: above
/// every Linux file system's timestamp granularity (one second for ext4 with small inodes;
/// file systems with coarser times, such as FAT, keep no user xattrs) and any clock tick.
pub const SETTLED: Duration = Duration::from_secs(2);

/// One open's memo of its file's stored attributes.
#[derive(Debug, Default)]
pub struct KnownStored(Mutex<Option<Known>>);

#[derive(Debug, Clone, Copy)]
struct Known {
    ctime: UnixTime,
    stored: Stored,
}

/// Whether `ctime` is older than `read_at` by at least [`SETTLED`].
fn settled(ctime: UnixTime, read_at: UnixTime) -> bool {
    unix_nanos(read_at) - unix_nanos(ctime) >= SETTLED.as_nanos() as i128
}

impl KnownStored {
    fn known(&self) -> std::sync::MutexGuard<'_, Option<Known>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The values remembered, if `st` (a fresh stat of the file) shows the ctime they
    /// were read under.
    pub fn get(&self, st: &Stat) -> Option<Stored> {
        self.known()
            .filter(|k| k.ctime == st.ctime)
            .map(|k| k.stored)
    }

    /// Remembers `stored`, read from the file at `read_at` (taken before the read) after
    /// `st` was: kept only when `st`'s ctime had settled by then. A value read under a
    /// newer ctime than `st`'s (a change between the stat and the read) is harmless: the
    /// next stat shows that newer ctime, which does not match.
    pub fn remember(&self, st: &Stat, stored: Stored, read_at: UnixTime) {
        *self.known() = settled(st.ctime, read_at).then_some(Known {
            ctime: st.ctime,
            stored,
        });
    }

    /// Forgets the values (this open has just changed them).
    pub fn forget(&self) {
        *self.known() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat_with_ctime(ctime: UnixTime) -> Stat {
        Stat {
            ctime,
            ..Stat::default()
        }
    }

    fn stored(attributes: u32) -> Stored {
        Stored {
            attributes: Some(attributes),
            creation_time: None,
        }
    }

    #[test]
    fn values_read_long_after_the_last_change_are_reused_while_ctime_holds() {
        let memo = KnownStored::default();
        let st = stat_with_ctime((1_000, 5));
        memo.remember(&st, stored(0x20), (1_002, 5));
        assert_eq!(memo.get(&st), Some(stored(0x20)));
        assert_eq!(
            memo.get(&stat_with_ctime((1_000, 6))),
            None,
            "any change misses"
        );
        assert_eq!(memo.get(&stat_with_ctime((999, 5))), None);
    }

    #[test]
    fn values_read_soon_after_a_change_are_not_kept() {
        let memo = KnownStored::default();
        let st = stat_with_ctime((1_000, 5));
        // A change later in the same coarse second could keep this ctime.
        memo.remember(&st, stored(0x20), (1_001, 999_999_999));
        assert_eq!(memo.get(&st), None);
        // And a later unsettled read replaces a settled one.
        memo.remember(&st, stored(0x20), (1_002, 5));
        memo.remember(&st, stored(0x21), (1_001, 0));
        assert_eq!(memo.get(&st), None);
    }

    #[test]
    fn forgetting_drops_the_values() {
        let memo = KnownStored::default();
        let st = stat_with_ctime((1_000, 0));
        memo.remember(&st, stored(0x1), (2_000, 0));
        memo.forget();
        assert_eq!(memo.get(&st), None);
    }
}
