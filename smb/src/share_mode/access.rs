//! Access masks, share access and the sharing check between opens of one file (MS-FSA
//! 2.1.5.1.2), plus the delete-pending / delete-on-close state of open files.

use std::collections::HashMap;

use crate::proto::status;

/// File access rights (MS-SMB2 2.2.13.1.1) the sharing rules and the server look at.
pub mod rights {
    /// FILE_READ_DATA (FILE_LIST_DIRECTORY on a directory).
    pub const FILE_READ_DATA: u32 = 0x0000_0001;
    /// FILE_WRITE_DATA (FILE_ADD_FILE).
    pub const FILE_WRITE_DATA: u32 = 0x0000_0002;
    /// FILE_APPEND_DATA (FILE_ADD_SUBDIRECTORY).
    pub const FILE_APPEND_DATA: u32 = 0x0000_0004;
    /// FILE_READ_EA.
    pub const FILE_READ_EA: u32 = 0x0000_0008;
    /// FILE_WRITE_EA.
    pub const FILE_WRITE_EA: u32 = 0x0000_0010;
    /// FILE_EXECUTE (FILE_TRAVERSE).
    pub const FILE_EXECUTE: u32 = 0x0000_0020;
    /// FILE_DELETE_CHILD.
    pub const FILE_DELETE_CHILD: u32 = 0x0000_0040;
    /// FILE_READ_ATTRIBUTES.
    pub const FILE_READ_ATTRIBUTES: u32 = 0x0000_0080;
    /// FILE_WRITE_ATTRIBUTES.
    pub const FILE_WRITE_ATTRIBUTES: u32 = 0x0000_0100;
    /// DELETE.
    pub const DELETE: u32 = 0x0001_0000;
    /// READ_CONTROL.
    pub const READ_CONTROL: u32 = 0x0002_0000;
    /// WRITE_DAC.
    pub const WRITE_DAC: u32 = 0x0004_0000;
    /// WRITE_OWNER.
    pub const WRITE_OWNER: u32 = 0x0008_0000;
    /// SYNCHRONIZE.
    pub const SYNCHRONIZE: u32 = 0x0010_0000;
    /// ACCESS_SYSTEM_SECURITY.
    pub const ACCESS_SYSTEM_SECURITY: u32 = 0x0100_0000;
    /// MAXIMUM_ALLOWED.
    pub const MAXIMUM_ALLOWED: u32 = 0x0200_0000;
    /// GENERIC_ALL.
    pub const GENERIC_ALL: u32 = 0x1000_0000;
    /// GENERIC_EXECUTE.
    pub const GENERIC_EXECUTE: u32 = 0x2000_0000;
    /// GENERIC_WRITE.
    pub const GENERIC_WRITE: u32 = 0x4000_0000;
    /// GENERIC_READ.
    pub const GENERIC_READ: u32 = 0x8000_0000;
    /// FILE_GENERIC_READ: what GENERIC_READ maps to on a file.
    pub const FILE_GENERIC_READ: u32 =
        READ_CONTROL | SYNCHRONIZE | FILE_READ_DATA | FILE_READ_ATTRIBUTES | FILE_READ_EA;
    /// FILE_GENERIC_WRITE: what GENERIC_WRITE maps to.
    pub const FILE_GENERIC_WRITE: u32 = READ_CONTROL
        | SYNCHRONIZE
        | FILE_WRITE_DATA
        | FILE_WRITE_ATTRIBUTES
        | FILE_WRITE_EA
        | FILE_APPEND_DATA;
    /// FILE_GENERIC_EXECUTE: what GENERIC_EXECUTE maps to.
    pub const FILE_GENERIC_EXECUTE: u32 =
        READ_CONTROL | SYNCHRONIZE | FILE_READ_ATTRIBUTES | FILE_EXECUTE;
    /// FILE_ALL_ACCESS: what GENERIC_ALL (and MAXIMUM_ALLOWED, for the owner) maps to.
    pub const FILE_ALL_ACCESS: u32 = 0x001F_01FF;
    /// Rights that take part in the sharing check; an open with none of them ("stat open")
    /// never conflicts.
    pub const SHARING_RELEVANT: u32 =
        FILE_READ_DATA | FILE_WRITE_DATA | FILE_APPEND_DATA | FILE_EXECUTE | DELETE;
}

/// ShareAccess bits (MS-SMB2 2.2.13).
pub mod share {
    /// FILE_SHARE_READ.
    pub const READ: u32 = 0x1;
    /// FILE_SHARE_WRITE.
    pub const WRITE: u32 = 0x2;
    /// FILE_SHARE_DELETE.
    pub const DELETE: u32 = 0x4;
    /// All three.
    pub const ALL: u32 = READ | WRITE | DELETE;
}

use rights::*;

/// Maps GENERIC_* and MAXIMUM_ALLOWED bits to the specific file rights they stand for
/// (MS-SMB2 3.3.5.9 / MS-DTYP 2.4.3), leaving the others as they are. The appliance has no
/// per-file ACLs: MAXIMUM_ALLOWED grants everything the share allows (the server masks a
/// read-only share afterwards).
pub fn map_generic(access: u32) -> u32 {
    let mut out =
        access & !(GENERIC_ALL | GENERIC_EXECUTE | GENERIC_WRITE | GENERIC_READ | MAXIMUM_ALLOWED);
    if access & GENERIC_READ != 0 {
        out |= FILE_GENERIC_READ;
    }
    if access & GENERIC_WRITE != 0 {
        out |= FILE_GENERIC_WRITE;
    }
    if access & GENERIC_EXECUTE != 0 {
        out |= FILE_GENERIC_EXECUTE;
    }
    if access & (GENERIC_ALL | MAXIMUM_ALLOWED) != 0 {
        out |= FILE_ALL_ACCESS;
    }
    out
}

/// The granted access and share access of one open: what the sharing check compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenMode {
    /// Granted access, already mapped ([`map_generic`]).
    pub access: u32,
    /// ShareAccess ([`share`]).
    pub share: u32,
}

/// Why an open or a delete request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ShareModeError {
    /// The share modes of the opens conflict → STATUS_SHARING_VIOLATION.
    #[error("sharing violation")]
    SharingViolation,
    /// The file is marked for deletion → STATUS_DELETE_PENDING.
    #[error("delete pending")]
    DeletePending,
    /// The open lacks the DELETE right for delete-on-close / disposition → ACCESS_DENIED.
    #[error("delete access required")]
    AccessDenied,
    /// The file has the read-only attribute → STATUS_CANNOT_DELETE.
    #[error("read-only file cannot be deleted")]
    CannotDelete,
}

impl ShareModeError {
    /// The NTSTATUS to answer with.
    pub fn nt_status(self) -> u32 {
        match self {
            ShareModeError::SharingViolation => status::SHARING_VIOLATION,
            ShareModeError::DeletePending => status::DELETE_PENDING,
            ShareModeError::AccessDenied => status::ACCESS_DENIED,
            ShareModeError::CannotDelete => status::CANNOT_DELETE,
        }
    }
}

/// Whether `new` may join `existing` opens of the same file (MS-FSA 2.1.5.1.2.1):
/// each side's data/delete access must be allowed by the other side's share access. Opens
/// without any data or delete right (attribute-only "stat" opens) are ignored on both sides.
pub fn check_share_access<'a>(
    existing: impl IntoIterator<Item = &'a OpenMode>,
    new: OpenMode,
) -> Result<(), ShareModeError> {
    if new.access & SHARING_RELEVANT == 0 {
        return Ok(());
    }
    let conflict = |holder_share: u32, access: u32| {
        (holder_share & share::READ == 0 && access & (FILE_READ_DATA | FILE_EXECUTE) != 0)
            || (holder_share & share::WRITE == 0
                && access & (FILE_WRITE_DATA | FILE_APPEND_DATA) != 0)
            || (holder_share & share::DELETE == 0 && access & DELETE != 0)
    };
    for e in existing {
        if e.access & SHARING_RELEVANT == 0 {
            continue;
        }
        if conflict(e.share, new.access) || conflict(new.share, e.access) {
            return Err(ShareModeError::SharingViolation);
        }
    }
    Ok(())
}

/// Whether an open may be marked delete-on-close or set a delete disposition: it needs the
/// DELETE right (ACCESS_DENIED otherwise) and the file must not be read-only
/// (CANNOT_DELETE). Emptiness of a directory is the storage layer's check
/// (`FsFile::check_deletable`).
pub fn check_may_delete(granted: u32, file_attributes: u32) -> Result<(), ShareModeError> {
    /// FILE_ATTRIBUTE_READONLY.
    const READONLY: u32 = 0x1;
    if granted & DELETE == 0 {
        return Err(ShareModeError::AccessDenied);
    }
    if file_attributes & READONLY != 0 {
        return Err(ShareModeError::CannotDelete);
    }
    Ok(())
}

/// The server's id of a file (its stable `file_id`).
pub type FileKey = u64;
/// The server's id of an open (e.g. its volatile file id).
pub type OpenId = u64;

#[derive(Debug, Clone)]
struct OpenEntry {
    id: OpenId,
    mode: OpenMode,
    delete_on_close: bool,
    /// Share-relative path, lowercased, without a leading separator (set after the open;
    /// a directory rename is refused while anything beneath it is open).
    path: String,
}

/// The form paths are compared in: lowercase, `\` separated, no leading or trailing one.
fn normal_path(p: &str) -> String {
    p.trim_matches('\\').to_lowercase()
}

#[derive(Debug, Default)]
struct FileEntry {
    opens: Vec<OpenEntry>,
    delete_pending: bool,
    /// For a named stream, the key of its file (whose deletion and DELETE opens it
    /// takes part in).
    base: Option<FileKey>,
}

/// The key of a file's named stream in the share-mode, lock and oplock tables: the
/// file's key and the stream's case-folded name hashed (FNV-1a), with the top bit set
/// so that it never equals a file's own key (an inode number).
pub fn stream_key(file: FileKey, stream: &str) -> FileKey {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let h = stream
        .to_lowercase()
        .bytes()
        .chain(file.to_le_bytes())
        .fold(FNV_OFFSET, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
        });
    h | (1 << 63)
}

/// What closing an open means for its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseOutcome {
    /// Opens of the file still remaining.
    pub remaining: usize,
    /// The last open closed on a delete-pending file: the server deletes it now
    /// (`FsFile::unlink`).
    pub delete_now: bool,
    /// The last open of a stream closed on a file whose own last open closed with its
    /// delete pending: the server deletes the file now (`FsFile::unlink_file`).
    pub delete_file_now: bool,
}

/// Open files of one share with their share modes and delete state (MS-FSA Open/Stream
/// state reduced to what SMB2 needs). Every registered open must be closed with
/// [`ShareModeTable::close`].
#[derive(Debug, Default)]
pub struct ShareModeTable {
    files: HashMap<FileKey, FileEntry>,
}

impl ShareModeTable {
    /// An empty table.
    pub fn new() -> ShareModeTable {
        ShareModeTable::default()
    }

    /// Registers a new open after the sharing check: DELETE_PENDING if the file is being
    /// deleted, SHARING_VIOLATION on a share-mode conflict. `delete_on_close` is the
    /// CREATE option (the caller checked [`check_may_delete`] first).
    pub fn try_open(
        &mut self,
        file: FileKey,
        open: OpenId,
        mode: OpenMode,
        delete_on_close: bool,
    ) -> Result<(), ShareModeError> {
        if let Some(entry) = self.files.get(&file) {
            if entry.delete_pending {
                return Err(ShareModeError::DeletePending);
            }
            check_share_access(entry.opens.iter().map(|o| &o.mode), mode)?;
        }
        if mode.access & rights::DELETE != 0 {
            // DELETE on a file needs every open of its streams to share delete.
            let streams = self
                .files
                .values()
                .filter(|e| e.base == Some(file))
                .flat_map(|e| e.opens.iter());
            if streams
                .into_iter()
                .any(|o| o.mode.share & share::DELETE == 0)
            {
                return Err(ShareModeError::SharingViolation);
            }
        }
        self.files.entry(file).or_default().opens.push(OpenEntry {
            id: open,
            mode,
            delete_on_close,
            path: String::new(),
        });
        Ok(())
    }

    /// Registers an open of the named stream `stream` (its [`stream_key`]) of file `file`:
    /// DELETE_PENDING while the file is being deleted, else the sharing check against
    /// the stream's own opens only (streams share independently of each other and of the
    /// file's data).
    pub fn try_open_stream(
        &mut self,
        file: FileKey,
        stream: FileKey,
        open: OpenId,
        mode: OpenMode,
        delete_on_close: bool,
    ) -> Result<(), ShareModeError> {
        if self.files.get(&file).is_some_and(|e| e.delete_pending) {
            return Err(ShareModeError::DeletePending);
        }
        self.try_open(stream, open, mode, delete_on_close)?;
        if let Some(e) = self.files.get_mut(&stream) {
            e.base = Some(file);
        }
        Ok(())
    }

    /// Whether a new open with `mode` would fail the sharing check against the opens of
    /// `file` now present (nothing is registered).
    pub fn conflicts(&self, file: FileKey, mode: OpenMode) -> bool {
        self.files.get(&file).is_some_and(|e| {
            e.delete_pending || check_share_access(e.opens.iter().map(|o| &o.mode), mode).is_err()
        })
    }

    /// Sets or clears the file's delete-pending state (SET_INFO FileDispositionInformation).
    /// Returns false if the open is unknown.
    pub fn set_delete_pending(&mut self, file: FileKey, open: OpenId, pending: bool) -> bool {
        match self.files.get_mut(&file) {
            Some(entry) if entry.opens.iter().any(|o| o.id == open) => {
                entry.delete_pending = pending;
                true
            }
            _ => false,
        }
    }

    /// Sets or clears one open's delete-on-close flag (FileDispositionInformationEx with
    /// ON_CLOSE). Returns false if the open is unknown.
    pub fn set_delete_on_close(&mut self, file: FileKey, open: OpenId, on: bool) -> bool {
        match self
            .files
            .get_mut(&file)
            .and_then(|e| e.opens.iter_mut().find(|o| o.id == open))
        {
            Some(o) => {
                o.delete_on_close = on;
                true
            }
            None => false,
        }
    }

    /// Whether the file is marked for deletion (FileStandardInformation.DeletePending).
    pub fn is_delete_pending(&self, file: FileKey) -> bool {
        self.files.get(&file).is_some_and(|e| e.delete_pending)
    }

    /// Records the share-relative path of an open (after CREATE and after a rename).
    pub fn set_path(&mut self, file: FileKey, open: OpenId, path: &str) {
        if let Some(o) = self
            .files
            .get_mut(&file)
            .and_then(|e| e.opens.iter_mut().find(|o| o.id == open))
        {
            o.path = normal_path(path);
        }
    }

    /// Whether anything beneath directory `dir` is open (a rename of `dir` is then refused
    /// with ACCESS_DENIED, as Windows does). Linear in the share's opens: renames of
    /// directories are rare.
    pub fn has_open_beneath(&self, dir: &str) -> bool {
        let dir = normal_path(dir);
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}\\")
        };
        self.files.values().any(|e| {
            e.opens
                .iter()
                .any(|o| !o.path.is_empty() && o.path != dir && o.path.starts_with(&prefix))
        })
    }

    /// Whether any open of `file` was granted DELETE: a rename of something inside that
    /// directory is then a sharing violation (what Windows and Samba answer).
    pub fn has_delete_access_open(&self, file: FileKey) -> bool {
        self.files
            .get(&file)
            .is_some_and(|e| e.opens.iter().any(|o| o.mode.access & rights::DELETE != 0))
    }

    /// Whether some open of `file` has the share-relative `path` (case-insensitive).
    pub fn is_open_at(&self, file: FileKey, path: &str) -> bool {
        let path = normal_path(path);
        self.files
            .get(&file)
            .is_some_and(|e| e.opens.iter().any(|o| o.path == path))
    }

    /// Number of opens of the file.
    pub fn open_count(&self, file: FileKey) -> usize {
        self.files.get(&file).map_or(0, |e| e.opens.len())
    }

    /// Closes an open: a delete-on-close open marks the file delete-pending; the last close
    /// of a delete-pending file tells the caller to delete it.
    pub fn close(&mut self, file: FileKey, open: OpenId) -> CloseOutcome {
        let mut outcome = CloseOutcome {
            remaining: 0,
            delete_now: false,
            delete_file_now: false,
        };
        let Some(entry) = self.files.get_mut(&file) else {
            return outcome;
        };
        if let Some(pos) = entry.opens.iter().position(|o| o.id == open) {
            let closed = entry.opens.swap_remove(pos);
            if closed.delete_on_close {
                entry.delete_pending = true;
            }
        }
        outcome.remaining = entry.opens.len();
        if outcome.remaining > 0 {
            return outcome;
        }
        let delete_pending = entry.delete_pending;
        let base = entry.base;
        match base {
            None if delete_pending && self.stream_opens(file) => {
                // The file goes when the last open of its streams closes; until then
                // its entry stays, delete pending and without opens.
            }
            None => {
                self.files.remove(&file);
                outcome.delete_now = delete_pending;
            }
            Some(base) => {
                self.files.remove(&file);
                outcome.delete_now = delete_pending;
                let orphan = self
                    .files
                    .get(&base)
                    .is_some_and(|b| b.opens.is_empty() && b.delete_pending);
                if orphan && !self.stream_opens(base) {
                    self.files.remove(&base);
                    outcome.delete_file_now = true;
                }
            }
        }
        outcome
    }

    /// Whether any stream of `file` is open.
    fn stream_opens(&self, file: FileKey) -> bool {
        self.files
            .values()
            .any(|e| e.base == Some(file) && !e.opens.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(access: u32, share: u32) -> OpenMode {
        OpenMode { access, share }
    }

    #[test]
    fn streams_share_apart_but_take_part_in_their_files_deletion() {
        let mut t = ShareModeTable::new();
        let (file, one, two) = (7, stream_key(7, "One"), stream_key(7, "two"));
        assert_eq!(
            one,
            stream_key(7, "ONE"),
            "stream names are case-insensitive"
        );
        assert_ne!(one, two);
        t.try_open_stream(file, one, 1, m(FILE_WRITE_DATA, 0), false)
            .unwrap();
        t.try_open_stream(file, two, 2, m(FILE_WRITE_DATA, 0), false)
            .unwrap();
        assert_eq!(
            t.try_open_stream(file, one, 3, m(FILE_WRITE_DATA, 0), false),
            Err(ShareModeError::SharingViolation)
        );
        assert_eq!(
            t.try_open(file, 4, m(DELETE, share::ALL), true),
            Err(ShareModeError::SharingViolation),
            "a stream open without SHARE_DELETE blocks DELETE on its file"
        );
        t.close(two, 2);
        t.close(one, 1);
        t.try_open_stream(file, one, 5, m(FILE_READ_DATA, share::ALL), false)
            .unwrap();
        t.try_open(file, 6, m(DELETE, share::ALL), true).unwrap();
        let closed = t.close(file, 6);
        assert!(!closed.delete_now, "the file waits for its open stream");
        assert_eq!(
            t.try_open_stream(file, one, 7, m(FILE_READ_DATA, share::ALL), false),
            Err(ShareModeError::DeletePending)
        );
        assert_eq!(
            t.try_open(file, 8, m(FILE_READ_DATA, share::ALL), false),
            Err(ShareModeError::DeletePending)
        );
        let last = t.close(one, 5);
        assert!(last.delete_file_now && !last.delete_now);
        t.try_open(file, 9, m(FILE_READ_DATA, share::ALL), false)
            .unwrap();
    }

    #[test]
    fn opens_beneath_a_directory_are_found_by_path() {
        let mut t = ShareModeTable::new();
        t.try_open(1, 1, m(FILE_READ_DATA, share::ALL), false)
            .unwrap();
        t.set_path(1, 1, "\\Dir\\Sub\\File.txt");
        t.try_open(2, 2, m(FILE_READ_DATA, share::ALL), false)
            .unwrap();
        t.set_path(2, 2, "dir");
        assert!(t.has_open_beneath("DIR"));
        assert!(t.has_open_beneath("dir\\sub"));
        assert!(!t.has_open_beneath("dir\\su"));
        assert!(!t.has_open_beneath("dir\\sub\\file.txt"));
        assert!(!t.has_open_beneath("other"));
    }

    #[test]
    fn generic_rights_map_to_file_rights() {
        assert_eq!(map_generic(GENERIC_READ), FILE_GENERIC_READ);
        assert_eq!(
            map_generic(GENERIC_WRITE | DELETE),
            FILE_GENERIC_WRITE | DELETE
        );
        assert_eq!(map_generic(GENERIC_ALL), FILE_ALL_ACCESS);
        assert_eq!(map_generic(MAXIMUM_ALLOWED), FILE_ALL_ACCESS);
        assert_eq!(map_generic(FILE_READ_ATTRIBUTES), FILE_READ_ATTRIBUTES);
    }

    #[test]
    fn sharing_check_is_symmetric() {
        let reader_sharing_all = m(FILE_READ_DATA, share::ALL);
        let reader_no_share = m(FILE_READ_DATA, 0);
        let writer_share_read = m(FILE_WRITE_DATA, share::READ);
        // Existing open denies sharing: nobody else reads or writes.
        assert_eq!(
            check_share_access(&[reader_no_share], reader_sharing_all),
            Err(ShareModeError::SharingViolation)
        );
        // New open denies sharing what an existing open already has.
        assert_eq!(
            check_share_access(&[reader_sharing_all], m(FILE_READ_DATA, share::WRITE)),
            Err(ShareModeError::SharingViolation)
        );
        assert_eq!(
            check_share_access(&[reader_sharing_all], m(FILE_READ_DATA, share::READ)),
            Ok(())
        );
        // Writer that shares read: readers fine, writers not.
        assert_eq!(
            check_share_access(&[writer_share_read], m(FILE_READ_DATA, share::ALL)),
            Ok(())
        );
        assert_eq!(
            check_share_access(&[writer_share_read], m(FILE_APPEND_DATA, share::ALL)),
            Err(ShareModeError::SharingViolation)
        );
        // DELETE needs FILE_SHARE_DELETE from everyone.
        assert_eq!(
            check_share_access(
                &[m(FILE_READ_DATA, share::READ | share::WRITE)],
                m(DELETE, share::ALL)
            ),
            Err(ShareModeError::SharingViolation)
        );
        assert_eq!(
            check_share_access(&[m(FILE_READ_DATA, share::ALL)], m(DELETE, share::ALL)),
            Ok(())
        );
        // Execute counts as read.
        assert_eq!(
            check_share_access(
                &[m(FILE_EXECUTE, share::WRITE)],
                m(FILE_READ_DATA, share::READ)
            ),
            Err(ShareModeError::SharingViolation)
        );
    }

    #[test]
    fn stat_opens_never_conflict() {
        let stat_no_share = m(FILE_READ_ATTRIBUTES | SYNCHRONIZE, 0);
        assert_eq!(
            check_share_access(&[stat_no_share], m(FILE_READ_DATA | FILE_WRITE_DATA, 0)),
            Ok(())
        );
        assert_eq!(
            check_share_access(&[m(FILE_WRITE_DATA, 0)], stat_no_share),
            Ok(())
        );
    }

    #[test]
    fn delete_permission_rules() {
        assert_eq!(
            check_may_delete(FILE_READ_DATA, 0),
            Err(ShareModeError::AccessDenied)
        );
        assert_eq!(
            check_may_delete(DELETE, 0x1),
            Err(ShareModeError::CannotDelete)
        );
        assert_eq!(check_may_delete(DELETE | FILE_READ_DATA, 0x20), Ok(()));
        assert_eq!(
            ShareModeError::DeletePending.nt_status(),
            status::DELETE_PENDING
        );
        assert_eq!(
            ShareModeError::SharingViolation.nt_status(),
            status::SHARING_VIOLATION
        );
    }

    #[test]
    fn table_tracks_opens_and_delete_on_close() {
        let mut t = ShareModeTable::new();
        t.try_open(7, 1, m(FILE_READ_DATA | DELETE, share::ALL), true)
            .unwrap();
        t.try_open(7, 2, m(FILE_READ_DATA, share::ALL), false)
            .unwrap();
        assert_eq!(
            t.try_open(7, 3, m(FILE_WRITE_DATA, share::ALL), false),
            Ok(())
        );
        assert_eq!(t.open_count(7), 3);
        // Closing the delete-on-close open marks the file; new opens are refused.
        assert_eq!(
            t.close(7, 1),
            CloseOutcome {
                remaining: 2,
                delete_now: false,
                delete_file_now: false
            }
        );
        assert!(t.is_delete_pending(7));
        assert_eq!(
            t.try_open(7, 4, m(FILE_READ_ATTRIBUTES, share::ALL), false),
            Err(ShareModeError::DeletePending)
        );
        assert_eq!(
            t.close(7, 2),
            CloseOutcome {
                remaining: 1,
                delete_now: false,
                delete_file_now: false
            }
        );
        assert_eq!(
            t.close(7, 3),
            CloseOutcome {
                remaining: 0,
                delete_now: true,
                delete_file_now: false
            }
        );
        // The entry is gone: the name can be reused.
        assert!(!t.is_delete_pending(7));
        assert_eq!(t.try_open(7, 5, m(FILE_READ_DATA, 0), false), Ok(()));
    }

    #[test]
    fn disposition_can_be_set_and_cleared() {
        let mut t = ShareModeTable::new();
        t.try_open(1, 10, m(DELETE, share::ALL), false).unwrap();
        assert!(!t.set_delete_pending(1, 99, true));
        assert!(t.set_delete_pending(1, 10, true));
        assert!(t.is_delete_pending(1));
        assert!(t.set_delete_pending(1, 10, false));
        assert_eq!(
            t.close(1, 10),
            CloseOutcome {
                remaining: 0,
                delete_now: false,
                delete_file_now: false
            }
        );
        t.try_open(1, 11, m(DELETE, share::ALL), true).unwrap();
        assert!(t.set_delete_on_close(1, 11, false));
        assert_eq!(
            t.close(1, 11),
            CloseOutcome {
                remaining: 0,
                delete_now: false,
                delete_file_now: false
            }
        );
        assert!(!t.set_delete_on_close(1, 11, true));
    }

    #[test]
    fn sharing_violation_leaves_the_table_unchanged() {
        let mut t = ShareModeTable::new();
        t.try_open(3, 1, m(FILE_WRITE_DATA, 0), false).unwrap();
        assert_eq!(
            t.try_open(3, 2, m(FILE_READ_DATA, share::ALL), false),
            Err(ShareModeError::SharingViolation)
        );
        assert_eq!(t.open_count(3), 1);
        assert_eq!(
            t.close(3, 2),
            CloseOutcome {
                remaining: 1,
                delete_now: false,
                delete_file_now: false
            }
        );
    }
}
