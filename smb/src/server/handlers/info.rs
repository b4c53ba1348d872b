//! QUERY_INFO and SET_INFO (MS-SMB2 3.3.5.20, 3.3.5.21): file and file-system classes through
//! the storage trait.

use crate::notify;
use crate::proto::ea::{decode_full_ea_list, ea_size, encode_full_ea_list, Ea};
use crate::proto::fsinfo::{encode_fs_info, fs_min_output_len, FsFacts, FsSize};
use crate::proto::info::{
    class, decode_disposition, decode_disposition_ex, decode_u64_info, encode_file_info,
    encode_set_info_response, min_output_len, BasicInfo, OpenFacts, QueryInfoRequest, RenameInfo,
    SetInfoRequest, DISPOSITION_EX_DELETE, INFO_FILE, INFO_FILESYSTEM, INFO_SECURITY,
    MAX_QUERY_INFO_OUTPUT,
};
use crate::proto::io::encode_buffer_response;
use crate::proto::negotiate::DIALECT_311;
use crate::proto::status;
use crate::share_mode::access::check_may_delete;
use crate::vfs::BasicInfoChange;

use super::create::{DELETE, FILE_APPEND_DATA, FILE_WRITE_DATA};
use super::{attrs_of, blocking, file_of};
use crate::server::conn::Connection;
use crate::server::dispatch::{Ctx, HResult, Reply};
use crate::server::state::TreeKind;

/// FILE_WRITE_ATTRIBUTES.
const FILE_WRITE_ATTRIBUTES: u32 = 0x0000_0100;

/// FILE_READ_ATTRIBUTES.
const FILE_READ_ATTRIBUTES: u32 = 0x0000_0080;
/// FILE_WRITE_EA.
const FILE_WRITE_EA: u32 = 0x0000_0010;
/// STATUS_NO_EAS_ON_FILE.
const NO_EAS_ON_FILE: u32 = 0xC000_0052;
/// QUERY_INFO Flags: return only one entry.
const SL_RETURN_SINGLE_ENTRY: u32 = 0x0000_0002;

/// Storage EAs in their wire form.
fn to_wire(eas: Vec<(String, Vec<u8>)>) -> Vec<Ea> {
    eas.into_iter()
        .map(|(name, value)| Ea {
            name,
            value,
            flags: 0,
        })
        .collect()
}

/// Decodes a FILE_GET_EA_INFORMATION list (the names a FullEa query asks for).
fn decode_get_ea_names(buf: &[u8]) -> Result<Vec<String>, u32> {
    let mut names = Vec::new();
    let mut pos = 0usize;
    while pos < buf.len() {
        let head = buf
            .get(pos..)
            .and_then(|b| b.first_chunk::<5>())
            .ok_or(status::INVALID_PARAMETER)?;
        let next = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let len = usize::from(head[4]);
        let name = buf
            .get(pos + 5..pos + 5 + len)
            .ok_or(status::INVALID_PARAMETER)?;
        names.push(String::from_utf8_lossy(name).into_owned());
        if next == 0 || names.len() >= crate::proto::ea::MAX_EAS {
            break;
        }
        if next < 5 + len {
            return Err(status::INVALID_PARAMETER);
        }
        pos += next;
    }
    Ok(names)
}

/// QUERY_INFO FileFullEaInformation: every EA, or those the input names (absent ones
/// with an empty value); NO_EAS_ON_FILE when the file has none, BUFFER_TOO_SMALL when
/// not even one entry fits, BUFFER_OVERFLOW with the entries that fit.
async fn query_full_ea(
    f: std::sync::Arc<dyn crate::vfs::FsFile>,
    req: &QueryInfoRequest<'_>,
) -> HResult {
    let names = decode_get_ea_names(req.input)?;
    let stored = to_wire(blocking(move || f.eas()).await?);
    let mut eas = if names.is_empty() {
        stored
    } else {
        names
            .into_iter()
            .map(|n| {
                stored
                    .iter()
                    .find(|e| e.name.eq_ignore_ascii_case(&n))
                    .cloned()
                    .unwrap_or(Ea {
                        name: n.to_ascii_uppercase(),
                        value: Vec::new(),
                        flags: 0,
                    })
            })
            .collect()
    };
    if eas.is_empty() {
        return Err(NO_EAS_ON_FILE);
    }
    if req.flags & SL_RETURN_SINGLE_ENTRY != 0 {
        eas.truncate(1);
    }
    let max = usize::try_from(req.output_buffer_length.min(MAX_QUERY_INFO_OUTPUT)).unwrap_or(0);
    let (data, count) = encode_full_ea_list(&eas, max);
    if count == 0 {
        return Err(status::BUFFER_TOO_SMALL);
    }
    let mut body = Vec::with_capacity(data.len() + 8);
    encode_buffer_response(&mut body, &data);
    if count < eas.len() {
        return Ok(Reply::with_status(status::BUFFER_OVERFLOW, body));
    }
    Ok(Reply::ok(body))
}
/// FILE_READ_EA.
const FILE_READ_EA: u32 = 0x0000_0008;

/// The right a handle needs to query a file information class (MS-FSA 2.1.5.12): times
/// and attributes need FILE_READ_ATTRIBUTES, extended attributes FILE_READ_EA; names,
/// sizes, positions and the like need nothing.
fn query_access(class: u8) -> u32 {
    match class {
        class::BASIC | class::ALL | class::NETWORK_OPEN | class::ATTRIBUTE_TAG => {
            FILE_READ_ATTRIBUTES
        }
        class::FULL_EA => FILE_READ_EA,
        _ => 0,
    }
}

fn finish_output(data: Vec<u8>, max: u32, min: usize) -> HResult {
    let max = usize::try_from(max.min(MAX_QUERY_INFO_OUTPUT)).unwrap_or(0);
    if max < min {
        return Err(status::INFO_LENGTH_MISMATCH);
    }
    let mut body = Vec::with_capacity(data.len().min(max) + 8);
    if let Some(fits) = data.get(..max).filter(|_| data.len() > max) {
        encode_buffer_response(&mut body, fits);
        return Ok(Reply::with_status(status::BUFFER_OVERFLOW, body));
    }
    encode_buffer_response(&mut body, &data);
    Ok(Reply::ok(body))
}

/// Handles QUERY_INFO.
pub async fn query_info(
    conn: &mut Connection,
    ctx: &mut Ctx<'_>,
    req: QueryInfoRequest<'_>,
) -> HResult {
    match req.info_type {
        INFO_FILE => {
            let open = super::open(conn, ctx, req.file_id)?;
            let needed = query_access(req.class);
            if open.pipe.is_none() && open.access & needed != needed {
                return Err(status::ACCESS_DENIED);
            }
            let f = file_of(open)?;
            let delete_pending = match open.pipe {
                Some(_) => false,
                None => open_delete_pending(open),
            };
            let mut facts = OpenFacts {
                delete_pending,
                directory: open.is_dir,
                access: open.access,
                position: open.position.load(std::sync::atomic::Ordering::Relaxed),
                mode: open.mode,
                ..Default::default()
            };
            // FileNormalizedNameInformation came with SMB 3.1.1 (MS-SMB2 3.3.5.20.1).
            if req.class == class::NORMALIZED_NAME
                && conn
                    .state
                    .negotiated
                    .as_ref()
                    .is_none_or(|n| n.dialect < DIALECT_311)
            {
                return Err(status::NOT_SUPPORTED);
            }
            if req.class == class::FULL_EA {
                return query_full_ea(f, &req).await;
            }
            let want_streams = req.class == class::STREAM;
            let want_eas = matches!(req.class, class::EA | class::ALL);
            // Streams and EAs are read from xattrs or side files: only the plain classes
            // are tried from the open inode in memory.
            let try_cached = !want_streams && !want_eas;
            let want_name = crate::proto::info::class_reports_name(req.class);
            let (info, path, streams, eas) = super::cached_first(try_cached, move |cached| {
                let path = || if want_name { f.path() } else { String::new() };
                if cached {
                    return Ok((f.info_cached()?, path(), Vec::new(), Vec::new()));
                }
                let streams = if want_streams {
                    f.streams()?
                } else {
                    Vec::new()
                };
                let eas = if want_eas { f.eas()? } else { Vec::new() };
                Ok((f.info()?, path(), streams, eas))
            })
            .await?;
            facts.ea_size = ea_size(&to_wire(eas));
            facts.streams = streams
                .into_iter()
                .map(|s| (s.name, s.size, s.allocation))
                .collect();
            facts.file_index = super::aapl::client_file_id(conn.state.aapl, info.file_id);
            facts.links = info.nlink;
            facts.name = format!("\\{path}");
            let data = match encode_file_info(req.class, &attrs_of(&info), &facts) {
                Some(d) => d,
                None if req.class == class::ALTERNATE_NAME => {
                    return Err(status::OBJECT_NAME_NOT_FOUND)
                }
                None => return Err(status::INVALID_INFO_CLASS),
            };
            finish_output(data, req.output_buffer_length, min_output_len(req.class))
        }
        INFO_FILESYSTEM => {
            super::open(conn, ctx, req.file_id)?;
            let fs = match &super::tree(conn, ctx)?.kind {
                TreeKind::Disk { fs, .. } => fs.clone(),
                TreeKind::Ipc => return Err(status::INVALID_DEVICE_REQUEST),
            };
            let i = blocking(move || fs.fs_info()).await?;
            let facts = FsFacts {
                size: FsSize {
                    total_bytes: i.total_bytes,
                    free_bytes: i.free_bytes,
                    block_size: i.bytes_per_sector.saturating_mul(i.sectors_per_unit),
                },
                label: i.label,
                serial: i.serial,
                created: i.created,
                fs_attributes: i.fs_attributes,
                max_name_len: i.max_name_len,
                fs_name: i.fs_name,
            };
            let data = encode_fs_info(req.class, &facts).ok_or(status::INVALID_INFO_CLASS)?;
            finish_output(data, req.output_buffer_length, fs_min_output_len(req.class))
        }
        INFO_SECURITY => {
            let len = req.output_buffer_length.min(MAX_QUERY_INFO_OUTPUT);
            super::security::query(conn, ctx, req.file_id, req.additional_information, len).await
        }
        _ => Err(status::NOT_SUPPORTED),
    }
}

fn time_change(t: u64) -> Option<u64> {
    (t != 0 && t != u64::MAX).then_some(t)
}

/// Handles SET_INFO.
pub async fn set_info(
    conn: &mut Connection,
    ctx: &mut Ctx<'_>,
    req: SetInfoRequest<'_>,
) -> HResult {
    if req.info_type == INFO_SECURITY {
        return super::security::set(
            conn,
            ctx,
            req.file_id,
            req.additional_information,
            req.buffer,
        )
        .await;
    }
    if req.info_type != INFO_FILE {
        return Err(status::NOT_SUPPORTED);
    }
    let open = super::open(conn, ctx, req.file_id)?;
    let f = file_of(open)?;
    let access = open.access;
    let writer = (
        open.share.clone(),
        open.inode,
        open.file_id.volatile,
        open.lease_key,
        open.path.clone(),
        open.parent_lease_key,
    );
    // Size changes make other clients' cached data stale: break their read caching, and
    // the directory's (its listing shows the size).
    let break_readers = || {
        if let (Some(share), inode, id, key, path, parent_key) = &writer {
            share.break_for_write(*inode, *id, key.as_ref());
            share.record_change(path, notify::ACTION_MODIFIED, notify::FILTER_SIZE);
            share.break_parent_leases(path, parent_key.as_ref());
        }
    };
    let changed = |action: u32, filter: u32| {
        if let (Some(share), _, _, _, path, parent_key) = &writer {
            share.record_change(path, action, filter);
            share.break_parent_leases(path, parent_key.as_ref());
        }
    };
    let need = |bits: u32| {
        if access & bits == 0 {
            Err(status::ACCESS_DENIED)
        } else {
            Ok(())
        }
    };
    let bad = |_| status::INVALID_PARAMETER;
    match req.class {
        class::BASIC => {
            need(FILE_WRITE_ATTRIBUTES)?;
            let b = BasicInfo::decode(req.buffer).map_err(bad)?;
            let change = BasicInfoChange {
                creation_time: time_change(b.creation_time),
                last_access_time: time_change(b.last_access_time),
                last_write_time: time_change(b.last_write_time),
                change_time: time_change(b.change_time),
                attributes: (b.attributes != 0).then_some(b.attributes),
            };
            blocking(move || f.set_basic_info(&change)).await?;
            changed(
                notify::ACTION_MODIFIED,
                notify::FILTER_ATTRIBUTES | notify::FILTER_LAST_WRITE | notify::FILTER_CREATION,
            );
        }
        class::RENAME | class::RENAME_EX => {
            need(DELETE)?;
            let (is_dir, inode, id) = (open.is_dir, open.inode, open.file_id.volatile);
            let r = RenameInfo::decode(req.buffer).map_err(bad)?;
            let share = super::tree(conn, ctx)?
                .share_state()
                .ok_or(status::INVALID_DEVICE_REQUEST)?;
            // An open of the parent directory with DELETE access blocks renames inside it;
            // a directory with anything open beneath it cannot be renamed.
            let pf = f.clone();
            let (parent, current) = blocking(move || Ok((pf.parent_file_id()?, pf.path()))).await?;
            if parent.is_some_and(|p| share.modes().has_delete_access_open(p)) {
                return Err(status::SHARING_VIOLATION);
            }
            if is_dir && share.modes().has_open_beneath(&current) {
                return Err(status::ACCESS_DENIED);
            }
            if r.file_name.starts_with(':') {
                // A stream renamed within its file: no name in the directory changes.
                let name = r.file_name.clone();
                blocking(move || f.rename(&name, r.replace_if_exists)).await?;
                let mut body = Vec::with_capacity(2);
                encode_set_info_response(&mut body);
                return Ok(Reply::ok(body));
            }
            // Other leases' cached handles would name the old path: break them first,
            // and wait for the acknowledgments when the request stands alone.
            let key = writer.3;
            let breaks =
                share
                    .oplocks()
                    .break_for_rename(inode, key.as_ref(), std::time::Instant::now());
            crate::server::shared::deliver(breaks.notices);
            if ctx.deferrable && breaks.wait {
                return Ok(Reply {
                    wait: Some(crate::server::pending::Wait::Breaks { share, inode, key }),
                    ..Reply::default()
                });
            }
            let target = r.file_name.trim_start_matches('\\').to_string();
            let t2 = target.clone();
            blocking(move || f.rename(&t2, r.replace_if_exists)).await?;
            share.modes().set_path(inode, id, &target);
            // Both directories' listings changed; a leased directory is found by its new
            // name from now on.
            let parent_key = writer.5;
            share.break_parent_leases(&current, parent_key.as_ref());
            share.break_parent_leases(&target, parent_key.as_ref());
            if is_dir {
                share.oplocks().index_dir(inode, &target);
            }
            let filter = if is_dir {
                notify::FILTER_DIR_NAME
            } else {
                notify::FILTER_FILE_NAME
            };
            let parent = |p: &str| {
                p.rfind('\\')
                    .map_or(String::new(), |i| p[..i].to_lowercase())
            };
            if parent(&current) == parent(&target) {
                share.record_change(&current, notify::ACTION_RENAMED_OLD_NAME, filter);
                share.record_change(&target, notify::ACTION_RENAMED_NEW_NAME, filter);
            } else {
                share.record_change(&current, notify::ACTION_REMOVED, filter);
                share.record_change(&target, notify::ACTION_ADDED, filter);
            }
            if let Ok(o) = super::open(conn, ctx, req.file_id) {
                o.path = target;
            }
        }
        class::DISPOSITION | class::DISPOSITION_EX => {
            let del = if req.class == class::DISPOSITION {
                decode_disposition(req.buffer).map_err(bad)?
            } else {
                decode_disposition_ex(req.buffer).map_err(bad)? & DISPOSITION_EX_DELETE != 0
            };
            let (inode, id) = (open.inode, open.file_id.volatile);
            let (is_dir, dir_path) = (open.is_dir, open.path.clone());
            let share = super::tree(conn, ctx)?
                .share_state()
                .ok_or(status::INVALID_DEVICE_REQUEST)?;
            if del {
                let info = blocking(move || {
                    let i = f.info()?;
                    if i.attributes & crate::proto::ATTR_READONLY == 0 && access & DELETE != 0 {
                        f.check_deletable()?;
                    }
                    Ok(i)
                })
                .await?;
                check_may_delete(access, info.attributes).map_err(|e| e.nt_status())?;
            } else {
                need(DELETE)?;
            }
            share.modes().set_delete_pending(inode, id, del);
            if del && is_dir {
                let path = dir_path.clone();
                share.with_notify(|h| h.directory_deleted(&path));
            }
        }
        class::END_OF_FILE => {
            need(FILE_WRITE_DATA | FILE_APPEND_DATA)?;
            let size = decode_u64_info(req.buffer).map_err(bad)?;
            break_readers();
            blocking(move || f.set_end_of_file(size)).await?;
        }
        class::ALLOCATION => {
            need(FILE_WRITE_DATA | FILE_APPEND_DATA)?;
            let size = decode_u64_info(req.buffer).map_err(bad)?;
            break_readers();
            blocking(move || f.set_allocation_size(size)).await?;
        }
        class::FULL_EA => {
            need(FILE_WRITE_EA)?;
            let eas = decode_full_ea_list(req.buffer).map_err(bad)?;
            let eas: Vec<(String, Vec<u8>)> = eas.into_iter().map(|e| (e.name, e.value)).collect();
            blocking(move || f.set_eas(&eas)).await?;
            changed(notify::ACTION_MODIFIED, notify::FILTER_EA);
        }
        class::POSITION => {
            let pos = decode_u64_info(req.buffer).map_err(bad)?;
            super::open(conn, ctx, req.file_id)?
                .position
                .store(pos, std::sync::atomic::Ordering::Relaxed);
        }
        class::MODE => {
            let mode = crate::proto::wire::Reader::new(req.buffer)
                .u32()
                .map_err(bad)?;
            super::open(conn, ctx, req.file_id)?.mode = mode;
        }
        _ => return Err(status::INVALID_INFO_CLASS),
    }
    let mut body = Vec::new();
    encode_set_info_response(&mut body);
    Ok(Reply::ok(body))
}

/// Delete-pending as FileStandardInformation reports it: this open's own delete-on-close, or
/// the file's state in the share-mode table (set by another open's disposition).
fn open_delete_pending(open: &crate::server::state::Open) -> bool {
    open.delete_on_close
        || open
            .share
            .as_ref()
            .is_some_and(|s| s.modes().is_delete_pending(open.inode))
}
