//! Delayed LastWriteTime updates, per open, as Windows servers and Samba present them (and
//! smbtorture's `smb2.timestamps.delayed-*` tests check):
//!
//! - the first write through an open does not change the visible write time at once; the
//!   update becomes visible [`WRITE_TIME_DELAY`] later, or earlier at a FLUSH, a SET_INFO
//!   (end of file, allocation, basic information) or the close;
//! - after that update, further writes through the same open leave the write time alone
//!   until the close, which then stamps it;
//! - a write time set explicitly through an open sticks: writes through that open never
//!   move it, and pending updates of other opens of the file are dropped.
//!
//! POSIX moves mtime on every write, so the caller puts mtime back as told ([`Fix`]). This
//! module is pure: the caller passes the clock in.

use std::time::{Duration, Instant};

/// How long after the first write its write-time update becomes visible.
pub const WRITE_TIME_DELAY: Duration = Duration::from_secs(2);

/// A Unix time (seconds, nanoseconds): what mtime is set to.
pub type UnixTime = (i64, u32);

/// `t` in nanoseconds since the epoch, for comparing and subtracting times.
pub fn unix_nanos(t: UnixTime) -> i128 {
    i128::from(t.0) * 1_000_000_000 + i128::from(t.1)
}

/// What the caller must do to the file's mtime after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fix {
    /// Leave mtime as the kernel left it.
    Keep,
    /// Put mtime back to this value.
    Restore(UnixTime),
    /// Stamp mtime with the current time.
    Now,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    /// No write through this open yet.
    #[default]
    Idle,
    /// Written; the update shows at `since + WRITE_TIME_DELAY` (meanwhile `show` is shown).
    Pending { since: Instant, show: UnixTime },
    /// The update is visible; `dirty` if written again since (stamped at close).
    Updated { dirty: bool },
}

/// The write-time state of one open.
#[derive(Debug, Default, Clone)]
pub struct WriteTimeState {
    phase: Phase,
    /// A write time set explicitly through this open.
    sticky: Option<UnixTime>,
    /// The file's explicit-set epoch when this open last wrote.
    seen_epoch: u64,
}

impl WriteTimeState {
    /// After a write (or zeroing) through this open; `before` is mtime before it, `epoch`
    /// the file's explicit-set epoch.
    pub fn after_write(&mut self, before: UnixTime, now: Instant, epoch: u64) -> Fix {
        if let Some(t) = self.sticky {
            return Fix::Restore(t);
        }
        self.seen_epoch = epoch;
        match self.phase {
            Phase::Idle => {
                self.phase = Phase::Pending {
                    since: now,
                    show: before,
                };
                Fix::Restore(before)
            }
            Phase::Pending { since, show } => {
                if now.saturating_duration_since(since) >= WRITE_TIME_DELAY {
                    self.phase = Phase::Updated { dirty: false };
                    Fix::Keep
                } else {
                    Fix::Restore(show)
                }
            }
            Phase::Updated { .. } => {
                self.phase = Phase::Updated { dirty: true };
                Fix::Restore(before)
            }
        }
    }

    /// At a FLUSH or a SET_INFO through this open: a pending update shows now.
    pub fn flush(&mut self) -> Fix {
        if let Some(t) = self.sticky {
            return Fix::Restore(t);
        }
        match self.phase {
            Phase::Pending { .. } => {
                self.phase = Phase::Updated { dirty: false };
                Fix::Now
            }
            _ => Fix::Keep,
        }
    }

    /// Before answering a query through this open: a pending update whose delay has passed
    /// shows now.
    pub fn on_query(&mut self, now: Instant) -> Fix {
        match self.phase {
            Phase::Pending { since, .. }
                if self.sticky.is_none()
                    && now.saturating_duration_since(since) >= WRITE_TIME_DELAY =>
            {
                self.phase = Phase::Updated { dirty: false };
                Fix::Now
            }
            _ => Fix::Keep,
        }
    }

    /// The client set the write time explicitly through this open (the caller bumps the
    /// file's epoch).
    pub fn explicit_set(&mut self, t: UnixTime) {
        self.sticky = Some(t);
        self.phase = Phase::Idle;
    }

    /// FILETIME -1: writes through this open stop moving the write time, which stays `t`.
    pub fn freeze(&mut self, t: UnixTime) {
        self.sticky = Some(t);
        self.phase = Phase::Idle;
    }

    /// FILETIME -2: writes through this open move the write time again.
    pub fn thaw(&mut self) {
        self.sticky = None;
        self.phase = Phase::Idle;
    }

    /// At close: pending or later writes are stamped, unless the time was set explicitly
    /// (through this open, or through another since this one wrote: `epoch` moved).
    pub fn on_close(&mut self, epoch: u64) -> Fix {
        let phase = std::mem::take(&mut self.phase);
        if self.sticky.is_some() || epoch != self.seen_epoch {
            return Fix::Keep;
        }
        match phase {
            Phase::Pending { .. } | Phase::Updated { dirty: true } => Fix::Now,
            _ => Fix::Keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: UnixTime = (1_000, 0);
    const T1: UnixTime = (1_001, 0);

    #[test]
    fn first_write_shows_after_the_delay_and_later_writes_at_close() {
        let start = Instant::now();
        let mut s = WriteTimeState::default();
        assert_eq!(s.after_write(T0, start, 0), Fix::Restore(T0));
        assert_eq!(s.on_query(start + Duration::from_secs(1)), Fix::Keep);
        assert_eq!(
            s.after_write(T0, start + Duration::from_secs(1), 0),
            Fix::Restore(T0)
        );
        assert_eq!(s.on_query(start + WRITE_TIME_DELAY), Fix::Now);
        // A second write keeps the updated time (delayed-2write) ...
        assert_eq!(
            s.after_write(T1, start + Duration::from_secs(4), 0),
            Fix::Restore(T1)
        );
        // ... and the close stamps it.
        assert_eq!(s.on_close(0), Fix::Now);
    }

    #[test]
    fn one_write_is_not_stamped_again_at_close() {
        let start = Instant::now();
        let mut s = WriteTimeState::default();
        s.after_write(T0, start, 0);
        assert_eq!(s.on_query(start + Duration::from_secs(3)), Fix::Now);
        assert_eq!(s.on_close(0), Fix::Keep);
    }

    #[test]
    fn flush_points_show_a_pending_update() {
        let start = Instant::now();
        let mut s = WriteTimeState::default();
        assert_eq!(s.flush(), Fix::Keep);
        s.after_write(T0, start, 0);
        assert_eq!(s.flush(), Fix::Now);
        assert_eq!(s.on_close(0), Fix::Keep);
        // Pending at close is stamped.
        let mut s = WriteTimeState::default();
        s.after_write(T0, start, 0);
        assert_eq!(s.on_close(0), Fix::Now);
    }

    #[test]
    fn freeze_and_thaw() {
        let start = Instant::now();
        let mut s = WriteTimeState::default();
        s.freeze(T0);
        assert_eq!(s.after_write(T1, start, 0), Fix::Restore(T0));
        s.thaw();
        assert_eq!(s.after_write(T0, start, 0), Fix::Restore(T0));
        assert_eq!(s.on_close(0), Fix::Now);
    }

    #[test]
    fn explicit_times_stick() {
        let start = Instant::now();
        let mut s = WriteTimeState::default();
        s.after_write(T0, start, 0);
        s.explicit_set(T1);
        assert_eq!(s.after_write(T0, start, 1), Fix::Restore(T1));
        assert_eq!(s.flush(), Fix::Restore(T1));
        assert_eq!(s.on_query(start + Duration::from_secs(10)), Fix::Keep);
        assert_eq!(s.on_close(1), Fix::Keep);
        // Another open's explicit set (epoch moved) drops this open's pending update.
        let mut other = WriteTimeState::default();
        other.after_write(T0, start, 0);
        assert_eq!(other.on_close(1), Fix::Keep);
    }
}
