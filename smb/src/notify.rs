//! CHANGE_NOTIFY watches (MS-SMB2 3.3.5.19, MS-FSCC 2.4.42 / 2.7.1): the changes the
//! server makes to a share (creates, deletes, renames, writes, attribute changes) are
//! recorded for every directory open that watches the changed entry's directory (or an
//! ancestor, when recursive), filtered by its completion filter, until a CHANGE_NOTIFY
//! collects them. Pure state; the server records changes and completes pending requests.
//!
//! Changes made to a share behind the server's back (a shell on the appliance, another
//! service) reach the watches through an [`OutsideWatcher`] that the backend provides for
//! the directories watched (see [`NotifyHub::watched_dirs`]); the backend must leave out
//! the server's own changes, which are recorded here already.

use std::collections::HashMap;

use crate::proto::wire::Put;
use crate::share_mode::OpenId;

/// FILE_ACTION_ADDED.
pub const ACTION_ADDED: u32 = 1;
/// FILE_ACTION_REMOVED.
pub const ACTION_REMOVED: u32 = 2;
/// FILE_ACTION_MODIFIED.
pub const ACTION_MODIFIED: u32 = 3;
/// FILE_ACTION_RENAMED_OLD_NAME.
pub const ACTION_RENAMED_OLD_NAME: u32 = 4;
/// FILE_ACTION_RENAMED_NEW_NAME.
pub const ACTION_RENAMED_NEW_NAME: u32 = 5;

/// CompletionFilter: file name changes (create, delete, rename of files).
pub const FILTER_FILE_NAME: u32 = 0x0001;
/// CompletionFilter: directory name changes.
pub const FILTER_DIR_NAME: u32 = 0x0002;
/// CompletionFilter: attribute changes.
pub const FILTER_ATTRIBUTES: u32 = 0x0004;
/// CompletionFilter: size changes.
pub const FILTER_SIZE: u32 = 0x0008;
/// CompletionFilter: last-write time changes.
pub const FILTER_LAST_WRITE: u32 = 0x0010;
/// CompletionFilter: creation time changes.
pub const FILTER_CREATION: u32 = 0x0040;
/// CompletionFilter: extended attribute changes.
pub const FILTER_EA: u32 = 0x0080;

/// Bytes of change records buffered per watch; beyond it the watch overflows and the
/// client is told to enumerate the directory (STATUS_NOTIFY_ENUM_DIR).
pub const MAX_BUFFERED_BYTES: usize = 64 * 1024;
/// Most watches per share.
pub const MAX_WATCHES: usize = 4096;

/// Most changes made outside the server that wait to be recorded; beyond it every watch
/// overflows (its client re-enumerates).
pub const MAX_PENDING_OUTSIDE_CHANGES: usize = 16 * 1024;

/// Takes one change made outside the server: the entry's share-relative path
/// (`\`-separated), its action (`ACTION_*`) and the filter bits (`FILTER_*`) it matches.
/// Called from the backend's watching thread; must not block.
pub type OutsideChangeSink = std::sync::Arc<dyn Fn(&str, u32, u32) + Send + Sync>;

/// A backend's watch over a share's directories for changes made outside the server.
pub trait OutsideWatcher: Send + Sync {
    /// Watches exactly `dirs` from now on: share-relative directories as clients opened
    /// them, each with whether its subtree is watched too. Replaces the previous set; an
    /// empty set stops watching.
    fn watch(&self, dirs: &[(String, bool)]);
}

/// What a watch has collected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Collected {
    /// Change records (action, name relative to the watched directory).
    Changes(Vec<(u32, String)>),
    /// Too many to report (or more than the client's buffer): re-enumerate.
    Overflow,
    /// The watched directory is being deleted (STATUS_DELETE_PENDING).
    DeletePending,
}

#[derive(Debug, Clone)]
struct Watch {
    /// Watched directory, share-relative, lower case, no leading or trailing `\`.
    dir: String,
    /// The directory as the client opened it (for an [`OutsideWatcher`]).
    opened_as: String,
    recursive: bool,
    filter: u32,
    /// The first request's OutputBufferLength: the handle's buffer (Windows keeps it, so a
    /// handle first watched with a tiny buffer always overflows).
    capacity: u32,
    changes: Vec<(u32, String)>,
    bytes: usize,
    overflow: bool,
    deleted: bool,
}

/// Share-relative path in the form watches compare: `\`-separated, lower case, trimmed.
fn key(path: &str) -> String {
    path.trim_matches('\\').replace('/', "\\").to_lowercase()
}

/// Size of one FILE_NOTIFY_INFORMATION record, aligned to 4 bytes.
fn record_len(name: &str) -> usize {
    (12 + name.encode_utf16().count() * 2).next_multiple_of(4)
}

/// The watches of one share.
#[derive(Debug, Default)]
pub struct NotifyHub {
    watches: HashMap<OpenId, Watch>,
    /// Bumped whenever the set of watched directories (or their recursion) changes.
    version: u64,
}

impl NotifyHub {
    /// Whether nothing is watched (the data path skips recording then).
    pub fn is_empty(&self) -> bool {
        self.watches.is_empty()
    }

    /// Starts (or re-arms, keeping what was collected) the watch of directory open `open`
    /// on `dir`, whose buffer is `capacity` bytes from the first request on. Returns false
    /// when the share has too many watches.
    pub fn watch(
        &mut self,
        open: OpenId,
        dir: &str,
        recursive: bool,
        filter: u32,
        capacity: u32,
    ) -> bool {
        if let Some(w) = self.watches.get_mut(&open) {
            if w.recursive != recursive {
                self.version += 1;
            }
            w.recursive = recursive;
            w.filter = filter;
            return true;
        }
        if self.watches.len() >= MAX_WATCHES {
            return false;
        }
        self.watches.insert(
            open,
            Watch {
                dir: key(dir),
                opened_as: dir.trim_matches('\\').replace('/', "\\"),
                recursive,
                filter,
                capacity,
                changes: Vec::new(),
                bytes: 0,
                overflow: false,
                deleted: false,
            },
        );
        self.version += 1;
        true
    }

    /// A number that changes whenever [`Self::watched_dirs`] would answer differently.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The directories watched (as first opened, deduplicated case-insensitively), each
    /// with whether any watch of it covers its subtree.
    pub fn watched_dirs(&self) -> Vec<(String, bool)> {
        let mut by_key: HashMap<&str, (String, bool)> = HashMap::new();
        for w in self.watches.values() {
            let e = by_key
                .entry(w.dir.as_str())
                .or_insert_with(|| (w.opened_as.clone(), false));
            e.1 |= w.recursive;
        }
        let mut dirs: Vec<(String, bool)> = by_key.into_values().collect();
        dirs.sort();
        dirs
    }

    /// Every watch overflows: changes were lost (its client re-enumerates).
    pub fn overflow_all(&mut self) {
        for w in self.watches.values_mut() {
            w.overflow = true;
            w.changes.clear();
            w.bytes = 0;
        }
    }

    /// Records that the entry at share-relative `path` changed (`action`), matching the
    /// completion-filter bits `filter`.
    pub fn record(&mut self, path: &str, action: u32, filter: u32) {
        let trimmed = path.trim_matches('\\').replace('/', "\\");
        let lower = trimmed.to_lowercase();
        let parent = lower.rfind('\\').map_or("", |i| &lower[..i]);
        for w in self.watches.values_mut() {
            if w.filter & filter == 0 || w.overflow {
                continue;
            }
            let inside = if w.dir.is_empty() {
                w.recursive || parent.is_empty()
            } else if parent == w.dir {
                true
            } else {
                w.recursive && parent.starts_with(&w.dir) && parent[w.dir.len()..].starts_with('\\')
            };
            if !inside {
                continue;
            }
            let skip = if w.dir.is_empty() { 0 } else { w.dir.len() + 1 };
            let rel = trimmed.get(skip..).unwrap_or_default().to_string();
            if w.changes
                .last()
                .is_some_and(|(a, n)| *a == action && *n == rel)
            {
                continue;
            }
            w.bytes += record_len(&rel);
            if w.bytes > MAX_BUFFERED_BYTES {
                w.overflow = true;
                w.changes.clear();
                w.bytes = 0;
            } else {
                w.changes.push((action, rel));
            }
        }
    }

    /// What `open`'s watch collected, if anything, emptying it; `Overflow` when it does
    /// not fit `max_output` bytes.
    pub fn take(&mut self, open: OpenId, max_output: u32) -> Option<Collected> {
        let w = self.watches.get_mut(&open)?;
        if w.deleted {
            return Some(Collected::DeletePending);
        }
        if w.overflow {
            w.overflow = false;
            return Some(Collected::Overflow);
        }
        if w.changes.is_empty() {
            return None;
        }
        let changes = std::mem::take(&mut w.changes);
        let bytes = std::mem::replace(&mut w.bytes, 0);
        if bytes > max_output.min(w.capacity) as usize {
            return Some(Collected::Overflow);
        }
        Some(Collected::Changes(changes))
    }

    /// Marks the watches of directory `dir` (share-relative) as watching a directory that
    /// is being deleted: their notifies complete with STATUS_DELETE_PENDING.
    pub fn directory_deleted(&mut self, dir: &str) {
        let k = key(dir);
        for w in self.watches.values_mut() {
            if w.dir == k {
                w.deleted = true;
            }
        }
    }

    /// Ends the watch of `open` (its CLOSE).
    pub fn remove(&mut self, open: OpenId) {
        if self.watches.remove(&open).is_some() {
            self.version += 1;
        }
    }
}

/// The FILE_NOTIFY_INFORMATION records of `changes` (MS-FSCC 2.7.1), each 4-aligned.
pub fn encode_changes(changes: &[(u32, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, (action, name)) in changes.iter().enumerate() {
        let start = out.len();
        let units: Vec<u16> = name.encode_utf16().collect();
        let len = units.len() * 2;
        let next = if i + 1 == changes.len() {
            0
        } else {
            record_len(name)
        };
        out.put_u32(u32::try_from(next).unwrap_or(0));
        out.put_u32(*action);
        out.put_u32(u32::try_from(len).unwrap_or(0));
        for u in units {
            out.put_u16(u);
        }
        if next != 0 {
            out.resize(start + next, 0);
        }
    }
    out
}

/// A CHANGE_NOTIFY response body (MS-SMB2 2.2.36) around `data`.
pub fn encode_notify_response(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + data.len());
    out.put_u16(9);
    out.put_u16(if data.is_empty() {
        0
    } else {
        (crate::proto::HEADER_LEN + 8) as u16
    });
    out.put_u32(u32::try_from(data.len()).unwrap_or(0));
    if data.is_empty() {
        out.put_u8(0);
    } else {
        out.extend_from_slice(data);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_reach_watches_of_the_parent_and_recursive_ancestors_only() {
        let mut h = NotifyHub::default();
        assert!(h.watch(1, "", false, FILTER_FILE_NAME, 4096));
        assert!(h.watch(2, "Dir", true, FILTER_FILE_NAME | FILTER_DIR_NAME, 4096));
        assert!(h.watch(3, "dir\\sub", false, FILTER_SIZE, 4096));
        h.record("top.txt", ACTION_ADDED, FILTER_FILE_NAME);
        h.record("dir\\Sub\\Deep.txt", ACTION_ADDED, FILTER_FILE_NAME);
        h.record("dir\\sub\\deep.txt", ACTION_MODIFIED, FILTER_SIZE);
        h.record("dirx\\no.txt", ACTION_ADDED, FILTER_FILE_NAME);
        assert_eq!(
            h.take(1, 4096),
            Some(Collected::Changes(vec![(ACTION_ADDED, "top.txt".into())]))
        );
        assert_eq!(
            h.take(2, 4096),
            Some(Collected::Changes(vec![(
                ACTION_ADDED,
                "Sub\\Deep.txt".into()
            )]))
        );
        assert_eq!(
            h.take(3, 4096),
            Some(Collected::Changes(vec![(
                ACTION_MODIFIED,
                "deep.txt".into()
            )]))
        );
        assert_eq!(h.take(1, 4096), None);
        h.directory_deleted("DIR");
        assert_eq!(h.take(2, 4096), Some(Collected::DeletePending));
        h.remove(1);
        assert_eq!(h.take(1, 4096), None);
    }

    #[test]
    fn too_much_overflows_to_enumerate_dir() {
        let mut h = NotifyHub::default();
        h.watch(1, "", false, FILTER_FILE_NAME, 1 << 20);
        for i in 0..5000 {
            h.record(
                &format!("file-number-{i}.txt"),
                ACTION_ADDED,
                FILTER_FILE_NAME,
            );
        }
        assert_eq!(h.take(1, 65536), Some(Collected::Overflow));
        h.record("a", ACTION_ADDED, FILTER_FILE_NAME);
        h.record("b", ACTION_ADDED, FILTER_FILE_NAME);
        assert_eq!(
            h.take(1, 16),
            Some(Collected::Overflow),
            "larger than the buffer"
        );
        h.watch(2, "", false, FILTER_FILE_NAME, 1);
        h.record("a", ACTION_ADDED, FILTER_FILE_NAME);
        h.watch(2, "", false, FILTER_FILE_NAME, 65536);
        assert_eq!(
            h.take(2, 65536),
            Some(Collected::Overflow),
            "the first buffer stays"
        );
    }

    #[test]
    fn records_are_aligned_and_chained() {
        let b = encode_changes(&[(ACTION_ADDED, "a".into()), (ACTION_REMOVED, "bc".into())]);
        assert_eq!(u32::from_le_bytes(b[0..4].try_into().unwrap()), 16);
        assert_eq!(
            u32::from_le_bytes(b[4..8].try_into().unwrap()),
            ACTION_ADDED
        );
        assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 2);
        assert_eq!(u32::from_le_bytes(b[16..20].try_into().unwrap()), 0);
        assert_eq!(b.len(), 16 + 12 + 4);
        assert_eq!(encode_notify_response(&[]).len(), 9);
    }
}
