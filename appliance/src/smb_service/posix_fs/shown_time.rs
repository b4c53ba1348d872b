//! The write time a file shows in place of its mtime while a delayed write-time update is
//! pending ([`super::write_time`]).
//!
//! POSIX moves mtime on every write; SMB clients expect the first write through an open to
//! leave the visible write time alone for a while. Putting mtime back after each write, and
//! stamping it again at the close, are metadata writes (a journal or a btrfs transaction may
//! make them wait), which kept those calls off the request's task. Instead, the time the
//! file is to show is kept here, in memory, beside the file's other shared state, and every
//! answer the share gives about the file (queries through any open, new opens, directory
//! listings) shows it in place of mtime. mtime itself keeps the kernel's time of the last
//! write, which is what the update shows when it becomes visible right after that write
//! (the usual write-then-close); later, the current time is shown. Only a time still shown
//! when the file's last open ends is written to mtime (an explicit write time that later
//! writes moved, an update shown long after the write, or one a coarse kernel clock could
//! not show), so that nothing shown is lost once no open holds it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use quarry_smb::vfs::{filetime_from_unix, FileInfo};

use super::write_time::UnixTime;

/// One file's shown write time, and how many opens the file has; counted in its share's
/// [`ShownCount`] while set, so that a directory listing looks entries up only while some
/// file of the share shows one.
#[derive(Debug, Default)]
pub struct ShownWriteTime {
    state: Mutex<State>,
    count: ShownCount,
}

#[derive(Debug, Default)]
struct State {
    time: Option<UnixTime>,
    opens: usize,
}

/// How many files of a share show a write time other than their mtime.
#[derive(Debug, Default, Clone)]
pub struct ShownCount(Arc<AtomicUsize>);

impl ShownCount {
    /// Whether any file of the share shows a write time of its own.
    pub fn any(&self) -> bool {
        self.0.load(Ordering::Acquire) > 0
    }
}

impl ShownWriteTime {
    /// A file's entry, counted in `count` while it shows a time.
    pub fn new(count: ShownCount) -> ShownWriteTime {
        ShownWriteTime {
            state: Mutex::new(State::default()),
            count,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The time shown instead of mtime, if any.
    pub fn get(&self) -> Option<UnixTime> {
        self.state().time
    }

    /// Shows `time` instead of mtime (`None`: mtime again).
    pub fn set(&self, time: Option<UnixTime>) {
        let mut state = self.state();
        self.replace(&mut state, time);
    }

    fn replace(&self, state: &mut State, time: Option<UnixTime>) {
        match (state.time.is_some(), time.is_some()) {
            (false, true) => {
                self.count.0.fetch_add(1, Ordering::AcqRel);
            }
            (true, false) => {
                self.count.0.fetch_sub(1, Ordering::AcqRel);
            }
            _ => {}
        }
        state.time = time;
    }

    /// Shows mtime again if the time shown is still `time` (what was written to mtime;
    /// an open since may have shown another).
    pub fn clear_if(&self, time: UnixTime) {
        let mut state = self.state();
        if state.time == Some(time) {
            self.replace(&mut state, None);
        }
    }

    /// An open of the file begins.
    pub fn opened(&self) {
        self.state().opens += 1;
    }

    /// An open of the file ends. When it was the last one and a time is still shown, that
    /// time is returned: the caller writes it to mtime and then calls
    /// [`ShownWriteTime::clear_if`], so it stays once nothing holds it in memory.
    pub fn closed(&self) -> Option<UnixTime> {
        let mut state = self.state();
        state.opens = state.opens.saturating_sub(1);
        if state.opens == 0 {
            state.time
        } else {
            None
        }
    }

    /// `mtime`, or the time shown instead of it.
    pub fn or(&self, mtime: UnixTime) -> UnixTime {
        self.get().unwrap_or(mtime)
    }

    /// Puts the shown time, if any, into `info` (the write and change times, which the
    /// share reports from mtime).
    pub fn apply(&self, info: &mut FileInfo) {
        if let Some(t) = self.get() {
            show(info, t);
        }
    }
}

impl Drop for ShownWriteTime {
    fn drop(&mut self) {
        if self.get().is_some() {
            self.count.0.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Puts `t` into `info` as its write and change time.
pub fn show(info: &mut FileInfo, t: UnixTime) {
    let ft = filetime_from_unix(t.0, t.1);
    info.last_write_time = ft;
    info.change_time = ft;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_counts_files_showing_a_time_until_they_stop_or_go() {
        let count = ShownCount::default();
        let a = ShownWriteTime::new(count.clone());
        let b = ShownWriteTime::new(count.clone());
        assert!(!count.any());
        a.set(Some((10, 0)));
        a.set(Some((11, 0)));
        assert!(count.any());
        assert_eq!(a.or((20, 0)), (11, 0));
        assert_eq!(b.or((20, 0)), (20, 0));
        b.set(Some((12, 0)));
        a.set(None);
        assert!(count.any());
        drop(b);
        assert!(!count.any(), "a dropped entry stops counting");
    }

    #[test]
    fn only_the_last_open_to_end_is_handed_a_time_still_shown() {
        let t = ShownWriteTime::new(ShownCount::default());
        t.opened();
        t.opened();
        t.set(Some((5, 0)));
        assert_eq!(t.closed(), None, "another open still holds it");
        assert_eq!(t.closed(), Some((5, 0)));
        // Written to mtime; an open that showed another time meanwhile keeps it.
        t.set(Some((6, 0)));
        t.clear_if((5, 0));
        assert_eq!(t.get(), Some((6, 0)));
        t.clear_if((6, 0));
        assert_eq!(t.get(), None);
        t.opened();
        assert_eq!(t.closed(), None, "nothing shown, nothing to write");
    }

    #[test]
    fn a_shown_time_replaces_the_write_and_change_times_only() {
        let t = ShownWriteTime::new(ShownCount::default());
        let mut info = FileInfo {
            last_write_time: 1,
            change_time: 2,
            last_access_time: 3,
            creation_time: 4,
            ..FileInfo::default()
        };
        t.apply(&mut info);
        assert_eq!((info.last_write_time, info.change_time), (1, 2));
        t.set(Some((1_700_000_000, 5)));
        t.apply(&mut info);
        let ft = filetime_from_unix(1_700_000_000, 5);
        assert_eq!((info.last_write_time, info.change_time), (ft, ft));
        assert_eq!((info.last_access_time, info.creation_time), (3, 4));
    }
}
