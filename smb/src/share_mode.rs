//! Share-mode (sharing violation) rules between opens of one file, delete-pending state, and
//! byte-range locks. Pure logic: no I/O, no clock, no async; the server keeps one
//! [`ShareModeTable`] and one [`LockManager`] per share (behind its own mutex) and keys them
//! by the file's stable id (`FileInfo::file_id`), so renames do not matter.
//!
//! - [`access`]: access-mask and share-access constants, generic-right mapping, the MS-FSA
//!   2.1.5.1.2 sharing check, and the per-file open/delete-pending table.
//! - [`locks`]: the byte-range lock manager (shared/exclusive, Windows overlap rules, exact
//!   unlock matching, I/O conflict checks, FIFO waiters for blocking locks).

pub mod access;
pub mod locks;

pub use access::{FileKey, OpenId, OpenMode, ShareModeError, ShareModeTable};
pub use locks::{LockError, LockManager, LockPlan, LockRange, LockRequest};
