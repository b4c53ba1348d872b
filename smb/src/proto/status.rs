//! NTSTATUS values the server sends (MS-ERREF 2.3.1). Plain `u32` constants so the codec,
//! the VFS error mapping and the handlers share one vocabulary without conversions.

/// The operation succeeded.
pub const SUCCESS: u32 = 0x0000_0000;
/// An async operation was accepted; the final response follows (interim response status).
pub const PENDING: u32 = 0x0000_0103;
/// Directory change notification: the buffer overflowed, rescan (MS-SMB2 3.3.4.4).
pub const NOTIFY_ENUM_DIR: u32 = 0x0000_010C;
/// STATUS_NOTIFY_CLEANUP: the watched handle was closed (or its session ended).
pub const NOTIFY_CLEANUP: u32 = 0x0000_010B;
/// The read or directory enumeration returned only part of the data.
pub const BUFFER_OVERFLOW: u32 = 0x8000_0005;
/// QUERY_DIRECTORY: no more entries.
pub const NO_MORE_FILES: u32 = 0x8000_0006;
/// Generic failure.
pub const UNSUCCESSFUL: u32 = 0xC000_0001;
/// The request is not implemented.
pub const NOT_IMPLEMENTED: u32 = 0xC000_0002;
/// The information class is not valid for this object.
pub const INVALID_INFO_CLASS: u32 = 0xC000_0003;
/// The output buffer is too small for the fixed part of the answer.
pub const INFO_LENGTH_MISMATCH: u32 = 0xC000_0004;
/// The handle does not name an open.
pub const INVALID_HANDLE: u32 = 0xC000_0008;
/// A parameter is invalid (also the answer to credit abuse, MS-SMB2 3.3.5.2.5).
pub const INVALID_PARAMETER: u32 = 0xC000_000D;
/// The path does not exist (final component).
pub const NO_SUCH_FILE: u32 = 0xC000_000F;
/// The device request is not valid (unknown IOCTL, MS-SMB2 3.3.5.15).
pub const INVALID_DEVICE_REQUEST: u32 = 0xC000_0010;
/// Read at or past end of file.
pub const END_OF_FILE: u32 = 0xC000_0011;
/// More processing is required: SESSION_SETUP continues.
pub const MORE_PROCESSING_REQUIRED: u32 = 0xC000_0016;
/// Access denied.
pub const ACCESS_DENIED: u32 = 0xC000_0022;
/// The buffer is too small for the data.
pub const BUFFER_TOO_SMALL: u32 = 0xC000_0023;
/// The name is not valid.
pub const OBJECT_NAME_INVALID: u32 = 0xC000_0033;
/// The name does not exist.
pub const OBJECT_NAME_NOT_FOUND: u32 = 0xC000_0034;
/// The name exists and the disposition forbids it.
pub const OBJECT_NAME_COLLISION: u32 = 0xC000_0035;
/// An intermediate directory does not exist.
pub const OBJECT_PATH_NOT_FOUND: u32 = 0xC000_003A;
/// The path syntax is invalid.
pub const OBJECT_PATH_SYNTAX_BAD: u32 = 0xC000_003B;
/// The open conflicts with another open's share access.
pub const SHARING_VIOLATION: u32 = 0xC000_0043;
/// The file is being deleted.
pub const DELETE_PENDING: u32 = 0xC000_0056;
/// A byte-range lock conflict.
pub const LOCK_NOT_GRANTED: u32 = 0xC000_0055;
/// Unlock of a range that is not locked.
pub const RANGE_NOT_LOCKED: u32 = 0xC000_007E;
/// The user name or password is wrong.
pub const LOGON_FAILURE: u32 = 0xC000_006D;
/// The disk (or the share's quota) is full.
pub const DISK_FULL: u32 = 0xC000_007F;
/// The server cannot allocate what the request needs.
pub const INSUFFICIENT_RESOURCES: u32 = 0xC000_009A;
/// A file-level lock conflict on I/O.
pub const FILE_LOCK_CONFLICT: u32 = 0xC000_0054;
/// The media is write protected (write to a read-only share).
pub const MEDIA_WRITE_PROTECTED: u32 = 0xC000_00A2;
/// The operation is not supported.
pub const NOT_SUPPORTED: u32 = 0xC000_00BB;
/// The share name does not exist.
pub const BAD_NETWORK_NAME: u32 = 0xC000_00CC;
/// The request is not supported by this server.
pub const REQUEST_NOT_ACCEPTED: u32 = 0xC000_00D0;
/// STATUS_REQUEST_OUT_OF_SEQUENCE: a channel cannot bind to a session signed another way.
pub const REQUEST_OUT_OF_SEQUENCE: u32 = 0xC000_042A;
/// STATUS_INVALID_OPLOCK_PROTOCOL: an oplock acknowledgment without a break in progress.
pub const INVALID_OPLOCK_PROTOCOL: u32 = 0xC000_00E3;
/// An internal error.
pub const INTERNAL_ERROR: u32 = 0xC000_00E5;
/// The target is a directory but a file was required.
pub const FILE_IS_A_DIRECTORY: u32 = 0xC000_00BA;
/// The target is not a directory.
pub const NOT_A_DIRECTORY: u32 = 0xC000_0103;
/// The directory is not empty.
pub const DIRECTORY_NOT_EMPTY: u32 = 0xC000_0101;
/// The request was cancelled.
pub const CANCELLED: u32 = 0xC000_0120;
/// The file was closed (operations on a handle after CLOSE).
pub const FILE_CLOSED: u32 = 0xC000_0128;
/// The user session was deleted (bad SessionId).
pub const USER_SESSION_DELETED: u32 = 0xC000_0203;
/// The network session expired; the client must re-authenticate.
pub const NETWORK_SESSION_EXPIRED: u32 = 0xC000_035C;
/// The tree id is not valid.
pub const NETWORK_NAME_DELETED: u32 = 0xC000_00C9;
/// The file system object cannot be deleted (e.g. read-only attribute).
pub const CANNOT_DELETE: u32 = 0xC000_0121;
/// The name is too long.
pub const NAME_TOO_LONG: u32 = 0xC000_0106;
/// A quota limit was exceeded.
pub const QUOTA_EXCEEDED: u32 = 0xC000_0044;
/// The message is not signed correctly / the connection requires it.
pub const ACCESS_DENIED_SIGNING: u32 = ACCESS_DENIED;
/// The file's end is invalid for the request.
pub const INVALID_VIEW_SIZE: u32 = 0xC000_001F;
/// The operation is not valid on a directory.
pub const INVALID_DEVICE_STATE: u32 = 0xC000_0184;
/// The file is not a reparse point / the object is not the expected type.
pub const OBJECT_TYPE_MISMATCH: u32 = 0xC000_0024;
/// No EAs on this file.
pub const NO_EAS_ON_FILE: u32 = 0xC000_0052;
/// A pipe read found the pipe empty / broken.
pub const PIPE_BROKEN: u32 = 0xC000_014B;
/// A pipe read found nothing to read.
pub const PIPE_EMPTY: u32 = 0xC000_00D9;
/// The pipe is not in a state for this operation.
pub const PIPE_DISCONNECTED: u32 = 0xC000_00B0;
/// An IOCTL output buffer too small.
pub const INVALID_USER_BUFFER: u32 = 0xC000_00E8;
/// A file is not a valid name for this operation.
pub const FILE_INVALID: u32 = 0xC000_0098;
/// The network name is not available (e.g. encryption required and the session cannot).
pub const NOT_FOUND: u32 = 0xC000_0225;
/// Too many opens on this session.
pub const TOO_MANY_OPENED_FILES: u32 = 0xC000_011F;
/// The path is not in the expected form.
pub const OBJECT_PATH_INVALID: u32 = 0xC000_0039;
/// Directory was not empty / the client asked for a directory that is a file.
pub const FILE_NOT_AVAILABLE: u32 = 0xC000_0467;
/// A CREATE reused the CreateGuid of an open without saying it replays that CREATE.
pub const DUPLICATE_OBJECTID: u32 = 0xC000_022A;
/// The client's account may not use this share or the server (guest refused, etc.).
pub const ACCOUNT_RESTRICTION: u32 = 0xC000_006E;
/// The impersonation level in CREATE is invalid.
pub const BAD_IMPERSONATION_LEVEL: u32 = 0xC000_00A5;

/// Whether `status` is an error (severity bits 11), not a success, warning or
/// informational status such as STATUS_PENDING or STATUS_NOTIFY_ENUM_DIR.
pub fn is_error(status: u32) -> bool {
    status >> 30 == 3
}
