//! Changes made to a share outside the SMB server (a shell on the appliance, another
//! service, a restore), reported to CHANGE_NOTIFY watches.
//!
//! A fanotify group per share marks exactly the directories clients watch (and, for a
//! recursive watch, every directory beneath, up to [`MAX_MARKED_DIRS`]); events carry the
//! directory's file handle and the entry's name (`FAN_REPORT_DFID_NAME`), which the
//! handle-to-path map of the marked directories turns into a share-relative path. Events
//! caused by this process are dropped by pid: the SMB server records its own changes
//! itself, exactly, when it makes them. fanotify rather than inotify for that pid: inotify
//! cannot tell the server's changes from anyone else's.
//!
//! Writes are reported when the writer closes the file (FAN_CLOSE_WRITE), not per write.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use quarry_smb::notify::{self, OutsideChangeSink, OutsideWatcher};

use super::fanotify::{self, Role};
use super::{resolve, sys, ShareInner};

/// Most directories one share's watcher marks (a recursive watch over a larger tree
/// reports changes in the first ones found, breadth first).
pub const MAX_MARKED_DIRS: usize = 4096;
/// How often the reading thread checks whether its watcher was dropped.
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// Bytes read from the group at once.
const READ_BUFFER: usize = 64 * 1024;

/// The events asked for on every marked directory.
const MASK: u64 = libc::FAN_CREATE
    | libc::FAN_DELETE
    | libc::FAN_RENAME
    | libc::FAN_ATTRIB
    | libc::FAN_CLOSE_WRITE
    | libc::FAN_ONDIR
    | libc::FAN_EVENT_ON_CHILD;

/// One marked directory.
#[derive(Debug, Clone)]
struct Marked {
    /// Share-relative path, `\`-separated, as stored on disk ("" for the root).
    path: String,
    /// Its subdirectories are marked too (it lies in a recursive watch).
    subtree: bool,
}

/// The marks of one group and what they mean.
#[derive(Default)]
struct Marks {
    /// The watch set last asked for.
    wanted: Vec<(String, bool)>,
    /// Marked directories by file handle (handle_type then handle bytes).
    by_handle: HashMap<Vec<u8>, Marked>,
}

struct Shared {
    group: OwnedFd,
    share: Arc<ShareInner>,
    marks: Mutex<Marks>,
    sink: OutsideChangeSink,
    stop: AtomicBool,
}

/// Watches one share's directories with fanotify; dropping it stops its thread.
pub struct FanotifyWatcher {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FanotifyWatcher {
    /// Creates the group and its reading thread. Fails where fanotify with directory
    /// handles is unavailable (kernel before 5.17, no privilege).
    pub fn start(share: Arc<ShareInner>, sink: OutsideChangeSink) -> std::io::Result<Self> {
        let flags = libc::FAN_CLASS_NOTIF
            | libc::FAN_CLOEXEC
            | libc::FAN_NONBLOCK
            | libc::FAN_REPORT_DFID_NAME;
        // SAFETY: plain system call with integer arguments.
        let fd = unsafe { libc::fanotify_init(flags, libc::O_RDONLY as libc::c_uint) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fanotify_init returned a new descriptor we own.
        let group = unsafe { OwnedFd::from_raw_fd(fd) };
        let shared = Arc::new(Shared {
            group,
            share,
            marks: Mutex::new(Marks::default()),
            sink,
            stop: AtomicBool::new(false),
        });
        let reader = shared.clone();
        let thread = std::thread::Builder::new()
            .name("quarry-fanotify".into())
            .spawn(move || reader.run())?;
        Ok(FanotifyWatcher {
            shared,
            thread: Some(thread),
        })
    }
}

impl Drop for FanotifyWatcher {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl OutsideWatcher for FanotifyWatcher {
    fn watch(&self, dirs: &[(String, bool)]) {
        let mut marks = self.shared.lock_marks();
        marks.wanted = dirs.to_vec();
        self.shared.remark(&mut marks);
    }
}

impl Shared {
    fn lock_marks(&self) -> MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops every mark and marks `marks.wanted` afresh.
    fn remark(&self, marks: &mut Marks) {
        // SAFETY: plain system call; a null path with FAN_MARK_FLUSH names no object.
        let rc = unsafe {
            libc::fanotify_mark(
                self.group.as_raw_fd(),
                libc::FAN_MARK_FLUSH,
                0,
                libc::AT_FDCWD,
                std::ptr::null(),
            )
        };
        if rc < 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "fanotify flush failed");
        }
        marks.by_handle.clear();
        let wanted = marks.wanted.clone();
        for (dir, recursive) in wanted {
            let comps: Vec<&str> = dir.split('\\').filter(|c| !c.is_empty()).collect();
            let stored = match self.stored_components(&comps) {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(dir = %dir, error = %e, "watched directory not found");
                    continue;
                }
            };
            self.mark_tree(marks, stored, recursive, None);
        }
    }

    /// The on-disk spelling of client components (names are case-insensitive).
    fn stored_components(&self, comps: &[&str]) -> Result<Vec<String>, quarry_smb::vfs::FsError> {
        if comps.is_empty() {
            return Ok(Vec::new());
        }
        let loc = resolve::locate(&self.share.names, self.share.root.as_fd(), comps)?;
        if !loc.exists {
            return Err(quarry_smb::vfs::FsError::NotFound(comps.join("\\")));
        }
        Ok(loc.components())
    }

    /// Marks directory `start` and, when `subtree`, the directories beneath it, breadth
    /// first, within [`MAX_MARKED_DIRS`]. With `found`, every entry beneath `start` is
    /// also reported there as added: for a directory just created, what was made in it
    /// before its mark took effect would otherwise go unseen.
    fn mark_tree(
        &self,
        marks: &mut Marks,
        start: Vec<String>,
        subtree: bool,
        mut found: Option<&mut Vec<(String, u32, u32)>>,
    ) {
        let mut queue = std::collections::VecDeque::from([start]);
        while let Some(comps) = queue.pop_front() {
            if marks.by_handle.len() >= MAX_MARKED_DIRS {
                tracing::warn!(
                    limit = MAX_MARKED_DIRS,
                    "too many directories to watch for outside changes; the rest are not"
                );
                return;
            }
            let Ok(fd) = resolve::open_beneath(
                self.share.root.as_fd(),
                &comps,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                true,
            ) else {
                continue;
            };
            if let Err(e) = self.mark(marks, fd.as_fd(), &comps, subtree) {
                tracing::debug!(dir = %comps.join("\\"), error = %e, "fanotify mark failed");
                continue;
            }
            if !subtree {
                continue;
            }
            let Ok(mut stream) = sys::DirStream::open(fd.as_fd()) else {
                continue;
            };
            while let Ok(Some(entry)) = stream.next_entry() {
                let is_dir = entry.d_type == libc::DT_DIR;
                let Ok(name) = entry.name.into_string() else {
                    continue;
                };
                if super::stream_store::is_reserved(&name) {
                    continue;
                }
                let mut child = comps.clone();
                child.push(name);
                if let Some(found) = found.as_deref_mut() {
                    let filter = if is_dir {
                        notify::FILTER_DIR_NAME
                    } else {
                        notify::FILTER_FILE_NAME
                    };
                    found.push((child.join("\\"), notify::ACTION_ADDED, filter));
                }
                if is_dir {
                    queue.push_back(child);
                }
            }
        }
    }

    /// Marks one directory and remembers its handle.
    fn mark(
        &self,
        marks: &mut Marks,
        dir: BorrowedFd<'_>,
        comps: &[String],
        subtree: bool,
    ) -> std::io::Result<()> {
        // SAFETY: `dir` is a live directory descriptor; a null path marks it.
        let rc = unsafe {
            libc::fanotify_mark(
                self.group.as_raw_fd(),
                libc::FAN_MARK_ADD | libc::FAN_MARK_ONLYDIR,
                MASK,
                dir.as_raw_fd(),
                std::ptr::null(),
            )
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let handle = handle_of(dir)?;
        marks.by_handle.insert(
            handle,
            Marked {
                path: comps.join("\\"),
                subtree,
            },
        );
        Ok(())
    }

    /// Reads events until the watcher is dropped.
    fn run(&self) {
        let mut buf = vec![0u8; READ_BUFFER];
        let own_pid = std::process::id() as i32;
        while !self.stop.load(Ordering::Relaxed) {
            let mut pfd = libc::pollfd {
                fd: self.group.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut pfd, 1, POLL_INTERVAL.as_millis() as i32) };
            if ready <= 0 {
                continue;
            }
            // SAFETY: reads into a buffer we own, of its length.
            let n =
                unsafe { libc::read(self.group.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                continue;
            }
            let Some(got) = buf.get(..n as usize) else {
                continue;
            };
            match fanotify::decode(got) {
                Ok(events) => {
                    for e in events {
                        if e.pid == own_pid {
                            continue;
                        }
                        self.deliver(&e);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "undecodable fanotify events dropped"),
            }
        }
    }

    /// Turns one event into CHANGE_NOTIFY records (and marks a new or moved directory
    /// beneath a recursive watch).
    fn deliver(&self, e: &fanotify::Event<'_>) {
        if e.mask & libc::FAN_Q_OVERFLOW != 0 {
            tracing::warn!("fanotify queue overflowed: outside changes were lost");
            return;
        }
        let is_dir = e.mask & libc::FAN_ONDIR != 0;
        let name_filter = if is_dir {
            notify::FILTER_DIR_NAME
        } else {
            notify::FILTER_FILE_NAME
        };
        let mut out: Vec<(String, u32, u32)> = Vec::new();
        let mut remark = false;
        {
            let mut marks = self.lock_marks();
            let place = |role: Role| {
                e.records.iter().find(|r| r.role == role).and_then(|r| {
                    let m = marks.by_handle.get(r.dir_handle)?;
                    let name = std::str::from_utf8(r.name).ok()?;
                    if name.is_empty() || name == "." || name.contains('\\') {
                        return None;
                    }
                    if super::stream_store::is_reserved(name) {
                        return None;
                    }
                    let path = if m.path.is_empty() {
                        name.to_string()
                    } else {
                        format!("{}\\{name}", m.path)
                    };
                    Some((path, m.subtree, m.path.clone()))
                })
            };
            let entry = place(Role::Entry);
            if e.mask & libc::FAN_RENAME != 0 {
                let from = place(Role::From);
                let to = place(Role::To);
                match (&from, &to) {
                    (Some((f, _, fd)), Some((t, _, td))) if fd == td => {
                        out.push((f.clone(), notify::ACTION_RENAMED_OLD_NAME, name_filter));
                        out.push((t.clone(), notify::ACTION_RENAMED_NEW_NAME, name_filter));
                    }
                    _ => {
                        if let Some((f, _, _)) = &from {
                            out.push((f.clone(), notify::ACTION_REMOVED, name_filter));
                        }
                        if let Some((t, _, _)) = &to {
                            out.push((t.clone(), notify::ACTION_ADDED, name_filter));
                        }
                    }
                }
                // A moved directory's marks name its old path: mark again.
                remark = is_dir
                    && (from.as_ref().is_some_and(|f| f.1) || to.as_ref().is_some_and(|t| t.1));
            }
            if let Some((path, subtree, _)) = entry {
                if e.mask & libc::FAN_CREATE != 0 {
                    out.push((path.clone(), notify::ACTION_ADDED, name_filter));
                    if is_dir && subtree {
                        let comps: Vec<String> = path.split('\\').map(str::to_string).collect();
                        self.mark_tree(&mut marks, comps, true, Some(&mut out));
                    }
                }
                if e.mask & libc::FAN_DELETE != 0 {
                    out.push((path.clone(), notify::ACTION_REMOVED, name_filter));
                }
                if e.mask & libc::FAN_ATTRIB != 0 {
                    out.push((
                        path.clone(),
                        notify::ACTION_MODIFIED,
                        notify::FILTER_ATTRIBUTES | notify::FILTER_LAST_WRITE | notify::FILTER_EA,
                    ));
                }
                if e.mask & libc::FAN_CLOSE_WRITE != 0 {
                    out.push((
                        path,
                        notify::ACTION_MODIFIED,
                        notify::FILTER_SIZE | notify::FILTER_LAST_WRITE,
                    ));
                }
            }
            if remark {
                self.remark(&mut marks);
            }
        }
        for (path, action, filter) in out {
            (self.sink)(&path, action, filter);
        }
    }
}

/// The file handle of directory `dir`: handle_type then the handle (native byte order),
/// the form fanotify reports it in.
fn handle_of(dir: BorrowedFd<'_>) -> std::io::Result<Vec<u8>> {
    // struct file_handle: handle_bytes u32, handle_type i32, then up to MAX_HANDLE_SZ bytes;
    // u32 words keep the header aligned.
    let mut raw = [0u32; (8 + fanotify::MAX_HANDLE_BYTES) / 4];
    raw[0] = fanotify::MAX_HANDLE_BYTES as u32;
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `raw` holds a file_handle with room for MAX_HANDLE_SZ bytes; the empty path
    // with AT_EMPTY_PATH names `dir` itself.
    let rc = unsafe {
        libc::name_to_handle_at(
            dir.as_raw_fd(),
            c"".as_ptr(),
            raw.as_mut_ptr().cast(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let [handle_bytes, ..] = raw;
    let len = (handle_bytes as usize).min(fanotify::MAX_HANDLE_BYTES);
    // handle_type (the second word) then the handle's own bytes.
    Ok(raw
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .skip(4)
        .take(4 + len)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_handle_has_a_type_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::File::open(dir.path()).unwrap();
        let h = handle_of(f.as_fd()).unwrap();
        assert!(h.len() > 4);
        assert_eq!(h, handle_of(f.as_fd()).unwrap(), "stable for one directory");
    }
}
