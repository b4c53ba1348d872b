//! READ, WRITE, FLUSH and LOCK (MS-SMB2 3.3.5.11 – 3.3.5.14): access and credit checks, then
//! the storage call on the blocking pool.

use crate::proto::io::{
    encode_write_response, read_response_fixed, LockRequest, ReadRequest, WriteRequest,
    READ_RESPONSE_FIXED_LEN, WRITEFLAG_WRITE_THROUGH,
};
use crate::proto::session::encode_empty_response;
use crate::proto::{status, FileId};
use crate::server::bufpool::{BufPool, OutBuf, Received, HEADROOM};
use crate::server::pending::Wait;
use crate::share_mode::{LockError, LockPlan};
use std::sync::atomic::Ordering;

use super::create::{FILE_APPEND_DATA, FILE_EXECUTE, FILE_READ_DATA, FILE_WRITE_DATA};
use super::{blocking, file_of};
use crate::server::conn::Connection;
use crate::server::dispatch::{Ctx, HResult, Reply};
use crate::server::MAX_IO_SIZE;

fn check_credits(conn: &Connection, ctx: &Ctx<'_>, payload: u64) -> Result<(), u32> {
    if payload > u64::from(MAX_IO_SIZE) {
        return Err(status::INVALID_PARAMETER);
    }
    conn.state
        .credits
        .check_charge(ctx.hdr.credit_charge, payload)
        .map_err(|_| status::INVALID_PARAMETER)
}

/// Handles READ.
pub async fn read(conn: &mut Connection, ctx: &mut Ctx<'_>, req: ReadRequest) -> HResult {
    check_credits(conn, ctx, u64::from(req.length))?;
    let open = super::open(conn, ctx, req.file_id)?;
    if let Some(pipe) = open.pipe.as_mut() {
        return super::pipe::read(pipe, req.length);
    }
    if open.access & (FILE_READ_DATA | FILE_EXECUTE) == 0 {
        return Err(status::ACCESS_DENIED);
    }
    if open.is_dir {
        return Err(status::INVALID_DEVICE_REQUEST);
    }
    check_io(open, req.offset, u64::from(req.length), false)?;
    let f = file_of(open)?;
    let position = open.position.clone();
    let observer = super::session(conn, ctx)?.observer.clone();
    let len = usize::try_from(req.length).map_err(|_| status::INVALID_PARAMETER)?;
    let (offset, minimum) = (req.offset, req.minimum_count);
    let bufs = conn.shared.bufs().clone();
    // A response that is signed or plain may send data other READs share; a sealed one
    // encrypts its own copy, and a compound's answer is joined into one message anyway.
    let may_share = ctx.deferrable && !ctx.encrypted && len >= SHARED_READ_MIN;
    let work = async move {
        let shared_read = if may_share {
            read_shared(&f, offset, len).await?
        } else {
            None
        };
        let (out, n) = match shared_read {
            Some(read) => read,
            None => read_pooled(&bufs, f, offset, len).await?,
        };
        if (n == 0 && len > 0) || n < usize::try_from(minimum).unwrap_or(usize::MAX) {
            if out.pooled {
                bufs.give(out.buf);
            }
            return Err(status::END_OF_FILE);
        }
        position.store(offset.saturating_add(n as u64), Ordering::Relaxed);
        if let Some(o) = observer {
            o.add_read(n as u64);
        }
        Ok(out)
    };
    Reply::deferred_or_now(ctx, Box::pin(work)).await
}

/// A READ's response read into a pooled buffer behind room for the headers, so it is
/// finished in place (see `bufpool`), and the data's length. The data sits at an address
/// aligned as its file offset is (`take_read`), so the storage may read a large READ's
/// middle with O_DIRECT in place. From the page cache on this task when all of it is
/// there (see `cached_first`), else on the blocking pool.
async fn read_pooled(
    bufs: &std::sync::Arc<BufPool>,
    f: std::sync::Arc<dyn crate::vfs::FsFile>,
    offset: u64,
    len: usize,
) -> Result<(OutBuf, usize), u32> {
    let (mut buf, start) = bufs.take_read(READ_RESPONSE_FIXED_LEN, len, offset);
    let data_at = start + READ_RESPONSE_FIXED_LEN;
    let data = data_at..data_at + len;
    // `take_read` sized the buffer for the fixed part and the data after `start`: the
    // ranges below are always there (a miss would be this server's bug, not the client's).
    let dst = buf.get_mut(data.clone()).ok_or(status::INTERNAL_ERROR)?;
    let cached = f.read_cached(offset, dst);
    let (mut buf, n) = match cached {
        Ok(n) => (buf, n),
        Err(_) => {
            blocking(move || {
                let dst = buf.get_mut(data).ok_or_else(no_room)?;
                let n = f.read_at(offset, dst)?;
                Ok((buf, n))
            })
            .await?
        }
    };
    let fixed = buf
        .get_mut(start..)
        .and_then(|b| b.first_chunk_mut::<READ_RESPONSE_FIXED_LEN>())
        .ok_or(status::INTERNAL_ERROR)?;
    *fixed = read_response_fixed(u32::try_from(n).unwrap_or(u32::MAX));
    let out = OutBuf {
        buf,
        start,
        end: data_at + n,
        pooled: true,
        tail: None,
    };
    Ok((out, n))
}

/// The error for a READ buffer without room for the data: never happens (the same range
/// was found in the same buffer just before), but is a logged server error, not a panic.
fn no_room() -> crate::vfs::FsError {
    crate::vfs::FsError::Io {
        context: "READ response buffer".into(),
        source: std::io::Error::other("no room for the data"),
    }
}

/// READs of at least this many bytes ask the storage for data it may share with other
/// responses ([`crate::vfs::FsFile::read_shared`]); smaller ones cost less to copy than to
/// look up.
pub const SHARED_READ_MIN: usize = 256 * 1024;

/// A READ answered with shared data: the response's fixed part in a buffer with headroom
/// for the headers, the data as its tail, and the data's length. `None` when the storage
/// does not share this read. From the page cache on this task when all of it is there,
/// else on the blocking pool.
async fn read_shared(
    f: &std::sync::Arc<dyn crate::vfs::FsFile>,
    offset: u64,
    len: usize,
) -> Result<Option<(OutBuf, usize)>, u32> {
    let data = match f.read_shared(offset, len, true) {
        Ok(d) => d,
        Err(_) => {
            let f = f.clone();
            blocking(move || f.read_shared(offset, len, false)).await?
        }
    };
    // Never more than asked for (a storage that read more shares it with no one here).
    let Some(data) = data.filter(|d| d.len() <= len) else {
        return Ok(None);
    };
    let n = data.len();
    let mut buf = Vec::with_capacity(HEADROOM + READ_RESPONSE_FIXED_LEN);
    buf.resize(HEADROOM, 0);
    buf.extend_from_slice(&read_response_fixed(u32::try_from(n).unwrap_or(u32::MAX)));
    let end = buf.len();
    let out = OutBuf {
        buf: buf.into(),
        start: HEADROOM,
        end,
        pooled: false,
        tail: Some(data),
    };
    Ok(Some((out, n)))
}

/// Handles WRITE.
pub async fn write(conn: &mut Connection, ctx: &mut Ctx<'_>, req: WriteRequest<'_>) -> HResult {
    check_credits(conn, ctx, req.data.len() as u64)?;
    let open = super::open(conn, ctx, req.file_id)?;
    if let Some(pipe) = open.pipe.as_mut() {
        return super::pipe::write(pipe, req.data);
    }
    if open.access & (FILE_WRITE_DATA | FILE_APPEND_DATA) == 0 {
        return Err(status::ACCESS_DENIED);
    }
    if open.is_dir {
        return Err(status::INVALID_DEVICE_REQUEST);
    }
    check_io(open, req.offset, req.data.len() as u64, true)?;
    open.modified = true;
    if let Some(share) = &open.share {
        share.break_for_write(open.inode, open.file_id.volatile, open.lease_key.as_ref());
        share.record_change(
            &open.path,
            crate::notify::ACTION_MODIFIED,
            crate::notify::FILTER_SIZE | crate::notify::FILTER_LAST_WRITE,
        );
    }
    let f = file_of(open)?;
    let write_through = req.flags & WRITEFLAG_WRITE_THROUGH != 0 || open.mode & 0x2 != 0;
    let position = open.position.clone();
    let observer = super::session(conn, ctx)?.observer.clone();
    let data = WriteData::new(ctx.frame.as_ref(), req.data);
    let offset = req.offset;
    let work = async move {
        let n = blocking(move || f.write_at(offset, data.bytes(), write_through)).await?;
        position.store(offset.saturating_add(n as u64), Ordering::Relaxed);
        if let Some(o) = observer {
            o.add_written(n as u64);
        }
        let mut body = Vec::with_capacity(16);
        encode_write_response(&mut body, u32::try_from(n).unwrap_or(u32::MAX));
        Ok(OutBuf::from_vec(body))
    };
    Reply::deferred_or_now(ctx, Box::pin(work)).await
}

/// A WRITE's data, owned by the task that writes it: a range of the received frame when
/// the request stood alone (no copy), else a copy.
enum WriteData {
    Frame(std::sync::Arc<Received>, std::ops::Range<usize>),
    Copy(Vec<u8>),
}

impl WriteData {
    fn new(frame: Option<&std::sync::Arc<Received>>, data: &[u8]) -> WriteData {
        if let Some(frame) = frame {
            // `data` is a slice of the frame's message: the same address inside the same
            // allocation is the same bytes. Checked arithmetic, no unsafe.
            let at = (data.as_ptr() as usize).checked_sub(frame.as_ptr() as usize);
            if let Some(at) = at.filter(|at| at + data.len() <= frame.len()) {
                return WriteData::Frame(frame.clone(), at..at + data.len());
            }
        }
        WriteData::Copy(data.to_vec())
    }

    fn bytes(&self) -> &[u8] {
        match self {
            WriteData::Frame(f, r) => f.get(r.clone()).unwrap_or(&[]),
            WriteData::Copy(v) => v,
        }
    }
}

/// Handles FLUSH: makes written data durable.
pub async fn flush(conn: &mut Connection, ctx: &mut Ctx<'_>, id: FileId) -> HResult {
    let open = super::open(conn, ctx, id)?;
    if open.pipe.is_none() {
        if open.access & (FILE_WRITE_DATA | FILE_APPEND_DATA) == 0 {
            return Err(status::ACCESS_DENIED);
        }
        let f = file_of(open)?;
        blocking(move || f.flush()).await?;
    }
    let mut body = Vec::new();
    encode_empty_response(&mut body);
    Ok(Reply::ok(body))
}

/// Handles LOCK, with SMB 3 lock replay detection (MS-SMB2 3.3.5.14): a request whose
/// LockSequence names a bucket (1..=64) that already holds its sequence number was done
/// before (a client resending after a lost connection or channel) and succeeds without
/// doing anything again; otherwise the bucket is cleared, and set once the request
/// succeeds.
pub async fn lock(conn: &mut Connection, ctx: &mut Ctx<'_>, req: LockRequest) -> HResult {
    let smb3 = conn
        .state
        .negotiated
        .as_ref()
        .is_some_and(|n| n.dialect >= crate::proto::negotiate::DIALECT_300);
    let bucket = lock_bucket(req.lock_sequence).filter(|_| smb3);
    if let Some((index, number)) = bucket {
        let open = super::open(conn, ctx, req.file_id)?;
        // `lock_bucket` gives indexes below 64, the array's length: `get_mut` finds them
        // (were one missing, its bucket would be ignored like an invalid index).
        if let Some(slot) = open.lock_sequences.get_mut(index) {
            if *slot == number {
                let mut body = Vec::new();
                encode_empty_response(&mut body);
                return Ok(Reply::ok(body));
            }
            *slot = LOCK_SEQUENCE_UNSET;
        }
    }
    let file_id = req.file_id;
    let reply = lock_ranges(conn, ctx, req).await?;
    if let Some((index, number)) = bucket {
        if reply.status == status::SUCCESS && reply.wait.is_none() {
            if let Some(slot) = super::open(conn, ctx, file_id)
                .ok()
                .and_then(|open| open.lock_sequences.get_mut(index))
            {
                *slot = number;
            }
        }
    }
    Ok(reply)
}

/// An empty LockSequence bucket (sequence numbers are 4 bits).
pub const LOCK_SEQUENCE_UNSET: u8 = 0xFF;

/// The bucket (0-based) and sequence number a LockSequence names, when its index is valid.
fn lock_bucket(lock_sequence: u32) -> Option<(usize, u8)> {
    let index = (lock_sequence >> 4) as usize;
    let number = (lock_sequence & 0xF) as u8;
    (1..=64).contains(&index).then(|| (index - 1, number))
}

/// Takes or releases byte-range locks in the share's [`crate::share_mode::LockManager`].
async fn lock_ranges(conn: &mut Connection, ctx: &mut Ctx<'_>, req: LockRequest) -> HResult {
    let open = super::open(conn, ctx, req.file_id)?;
    let share = open.share.clone().ok_or(status::INVALID_DEVICE_REQUEST)?;
    let (inode, id, lease_key) = (open.inode, open.file_id.volatile, open.lease_key);
    let persistent = open.durable.is_some_and(|d| d.persistent);
    let elements = || req.locks.iter().map(|l| (l.offset, l.length, l.flags));
    // An unlock-first request is processed element by element (MS-SMB2 3.3.5.14.1): the
    // unlocks before a bad element stay done, and an unlock failure wins over the bad flag.
    if let Some((ranges, bad)) = LockPlan::unlock_prefix(elements()) {
        share
            .locks()
            .unlock(inode, id, &ranges)
            .map_err(|e| e.nt_status())?;
        if persistent {
            save_persistent_locks(&share, inode, id).await;
        }
        if let Some(e) = bad {
            return Err(e.nt_status());
        }
        let mut body = Vec::new();
        encode_empty_response(&mut body);
        return Ok(Reply::ok(body));
    }
    let plan = LockPlan::from_elements(elements()).map_err(|e| e.nt_status())?;
    match plan {
        LockPlan::Unlock(ranges) => share
            .locks()
            .unlock(inode, id, &ranges)
            .map_err(|e| e.nt_status())?,
        LockPlan::Lock { locks, blocking } => {
            // Taking a byte-range lock breaks level II oplocks (the taker's own too) and
            // other clients' read caching, as a write does.
            share.break_for_write(inode, id, lease_key.as_ref());
            let taken = share.locks().lock(inode, id, &locks);
            match taken {
                Ok(()) => {}
                Err(LockError::NotGranted) if blocking => {
                    return Ok(Reply {
                        wait: Some(Wait::Lock {
                            share: share.clone(),
                            inode,
                            open: id,
                            locks,
                            persistent,
                        }),
                        ..Reply::default()
                    });
                }
                Err(e) => return Err(e.nt_status()),
            }
        }
    }
    if persistent {
        save_persistent_locks(&share, inode, id).await;
    }
    let mut body = Vec::new();
    encode_empty_response(&mut body);
    Ok(Reply::ok(body))
}

/// Records a persistent handle's locks before its client hears the LOCK succeeded.
async fn save_persistent_locks(
    share: &std::sync::Arc<crate::server::shared::ShareState>,
    inode: u64,
    id: u64,
) {
    let share = share.clone();
    let _ = blocking(move || {
        crate::server::durable::save_locks(&share, inode, id);
        Ok(())
    })
    .await;
}

/// Checks a read or write against other opens' byte-range locks.
fn check_io(
    open: &crate::server::state::Open,
    offset: u64,
    len: u64,
    write: bool,
) -> Result<(), u32> {
    match &open.share {
        Some(s) => s
            .locks()
            .check_io(open.inode, open.file_id.volatile, offset, len, write)
            .map_err(|e| e.nt_status()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod lock_sequence_tests {
    use super::lock_bucket;

    #[test]
    fn buckets_are_one_to_sixty_four() {
        assert_eq!(lock_bucket(0x011), Some((0, 1)));
        assert_eq!(lock_bucket(0x402), Some((63, 2)));
        assert_eq!(lock_bucket(0x001), None);
        assert_eq!(lock_bucket(0x411), None);
    }
}
