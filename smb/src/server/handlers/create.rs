//! CREATE and CLOSE (MS-SMB2 3.3.5.9, 3.3.5.10): access mapping, read-only shares,
//! delete-on-close, MxAc/QFid/AAPL create contexts, durable handles (granted here, kept by
//! [`crate::server::durable`], reclaimed by a reconnect context), named pipes on IPC$.

use crate::notify;
use crate::oplock::{Holder, OpenImpact, Want};
use crate::proto::create::{
    encode_close_response, mxac_response, qfid_response, CloseRequest, CreateRequest,
    CreateResponse, CLOSE_FLAG_POSTQUERY_ATTRIB, CTX_EXTA, CTX_MXAC, CTX_QFID, CTX_SECD,
    FILE_CREATED, FILE_DELETE_ON_CLOSE, FILE_DIRECTORY_FILE, FILE_NON_DIRECTORY_FILE, FILE_OPENED,
    FILE_OVERWRITTEN, FILE_SUPERSEDED,
};
use crate::proto::durable::{
    decode_reconnect, durable_response, durable_response_v2, DurableReconnectV2, DurableRequestV2,
    CTX_DURABLE_RECONNECT, CTX_DURABLE_RECONNECT_V2, CTX_DURABLE_REQUEST, CTX_DURABLE_REQUEST_V2,
    DURABLE_FLAG_PERSISTENT,
};
use crate::proto::header::FLAG_REPLAY_OPERATION;
use crate::proto::negotiate::DIALECT_210;
use crate::proto::oplock::{
    lease_response, LeaseRequest, CTX_LEASE, OPLOCK_LEVEL_BATCH, OPLOCK_LEVEL_EXCLUSIVE,
    OPLOCK_LEVEL_II, OPLOCK_LEVEL_LEASE,
};
use crate::proto::{status, FileAttrs, FileId, ATTR_NORMAL};
use crate::server::durable::Durable;
use crate::server::pending::Wait;
use crate::server::previous;
use crate::server::replay::{Lookup, ReplayHolder, ReplayKey};
use crate::server::shared::{deliver, ShareState};
use crate::share_mode::access::{check_may_delete, stream_key};
use crate::share_mode::OpenMode;
use crate::vfs::{self, CreateDisposition};

use super::tree::{ACCESS_ALL, ACCESS_READ};
use super::{attrs_of, blocking};
use crate::server::conn::Connection;
use crate::server::dispatch::{Ctx, HResult, Reply};
use crate::server::state::{Open, TreeKind};
use crate::server::MAX_OPENS_PER_SESSION;

/// FILE_READ_DATA.
pub const FILE_READ_DATA: u32 = 0x0000_0001;
/// FILE_WRITE_DATA.
pub const FILE_WRITE_DATA: u32 = 0x0000_0002;
/// FILE_APPEND_DATA.
pub const FILE_APPEND_DATA: u32 = 0x0000_0004;
/// FILE_EXECUTE.
pub const FILE_EXECUTE: u32 = 0x0000_0020;
/// DELETE.
pub const DELETE: u32 = 0x0001_0000;
/// MAXIMUM_ALLOWED.
pub const MAXIMUM_ALLOWED: u32 = 0x0200_0000;
/// Bits that modify a file or its metadata.
pub const WRITE_BITS: u32 = 0x0000_0002
    | 0x0000_0004
    | 0x0000_0010
    | 0x0000_0040
    | 0x0000_0100
    | DELETE
    | 0x0004_0000
    | 0x0008_0000;
/// Highest ImpersonationLevel (Delegate); larger values are refused (MS-SMB2 3.3.5.9).
const MAX_IMPERSONATION_LEVEL: u32 = 3;
/// Named pipes served on IPC$.
const PIPES: [&str; 1] = ["srvsvc"];

/// Expands GENERIC_* and MAXIMUM_ALLOWED bits (MS-SMB2 3.3.5.9, MS-DTYP 2.4.3).
pub fn map_access(desired: u32, maximal: u32) -> u32 {
    let mut a = desired & 0x01FF_FFFF & !MAXIMUM_ALLOWED;
    if desired & MAXIMUM_ALLOWED != 0 {
        a |= maximal;
    }
    if desired & 0x8000_0000 != 0 {
        a |= 0x0012_0089;
    }
    if desired & 0x4000_0000 != 0 {
        a |= 0x0012_0116;
    }
    if desired & 0x2000_0000 != 0 {
        a |= 0x0012_00A0;
    }
    if desired & 0x1000_0000 != 0 {
        a |= maximal;
    }
    a
}

fn new_file_id(conn: &mut Connection) -> FileId {
    let id = conn.shared.next_file_id();
    FileId {
        persistent: id,
        volatile: id,
    }
}

/// READ_CONTROL.
const READ_CONTROL: u32 = 0x0002_0000;
/// Access bits that neither read nor change data: opens asking only for these break no
/// oplock or lease.
const ATTRIBUTE_ACCESS: u32 = 0x0000_0080 | 0x0000_0100 | 0x0010_0000;

/// The lease request of a CREATE, when it asks for one and the dialect has leases.
fn lease_request(conn: &Connection, req: &CreateRequest<'_>) -> Option<LeaseRequest> {
    let dialect = conn.state.negotiated.as_ref()?.dialect;
    if req.oplock_level != OPLOCK_LEVEL_LEASE || dialect < DIALECT_210 {
        return None;
    }
    LeaseRequest::decode(req.context(CTX_LEASE)?.data).ok()
}

/// The lease request as the lease held answers it: in the held lease's version (a v1
/// request joining a v2 lease is answered in the v2 form).
fn as_held(req: &LeaseRequest, granted: &crate::oplock::Granted) -> LeaseRequest {
    let mut held = *req;
    if granted.lease_version != 0 {
        held.version = granted.lease_version;
    }
    held
}

/// The caching a CREATE asks for.
fn wanted_caching(conn: &Connection, req: &CreateRequest<'_>) -> Want {
    if let Some(l) = lease_request(conn, req) {
        return Want::Lease {
            key: conn.lease_scope(&l.key),
            wire_key: l.key,
            state: l.state,
            version: l.version,
            epoch: l.epoch,
        };
    }
    match req.oplock_level {
        OPLOCK_LEVEL_II | OPLOCK_LEVEL_EXCLUSIVE | OPLOCK_LEVEL_BATCH => {
            Want::Oplock(req.oplock_level)
        }
        _ => Want::Nothing,
    }
}

/// The CreateGuid a CREATE is remembered under for replays: a durable v2 request (not a
/// reconnect) on a disk share.
fn replay_key(conn: &Connection, req: &CreateRequest<'_>) -> Option<ReplayKey> {
    if req.context(CTX_DURABLE_RECONNECT_V2).is_some()
        || req.context(CTX_DURABLE_RECONNECT).is_some()
    {
        return None;
    }
    let q = DurableRequestV2::decode(req.context(CTX_DURABLE_REQUEST_V2)?.data).ok()?;
    Some((conn.client_guid(), q.create_guid))
}

/// Handles CREATE: replay detection around `create_open`.
pub async fn create(conn: &mut Connection, ctx: &mut Ctx<'_>, req: CreateRequest<'_>) -> HResult {
    let share = super::tree(conn, ctx).ok().and_then(|t| t.share_state());
    let (Some(share), Some(key)) = (share, replay_key(conn, &req)) else {
        return create_open(conn, ctx, req).await;
    };
    let holder = ReplayHolder {
        session_id: ctx.session_id,
        message_id: ctx.hdr.message_id,
    };
    let found = share
        .replay()
        .lookup(key, holder, std::time::Instant::now());
    match found {
        Lookup::InProgress => return Err(status::FILE_NOT_AVAILABLE),
        Lookup::Open(volatile) => {
            if ctx.hdr.flags & FLAG_REPLAY_OPERATION == 0 {
                // A CreateGuid names one open: reusing it without saying so is refused.
                return Err(status::DUPLICATE_OBJECTID);
            }
            if let Some(reply) = replay_open(conn, ctx, &req, volatile).await {
                return reply;
            }
            // The open is gone (its session ended): the guid is free again.
            let mut cache = share.replay();
            cache.forget(key, volatile);
            cache.lookup(key, holder, std::time::Instant::now());
        }
        Lookup::Reserved => {}
    }
    let reply = create_open(conn, ctx, req).await;
    match &reply {
        // A CREATE waiting for breaks keeps its reservation: it runs again as the holder.
        Ok(r) if r.wait.is_some() => {}
        Ok(r) => {
            let bound = r
                .file_id
                .filter(|id| share.replay().bind(key, holder, id.volatile));
            if let Some(id) = bound {
                if let Some(o) = super::session(conn, ctx)?.opens.get_mut(&id.volatile) {
                    o.replay = Some(key);
                }
            }
        }
        Err(_) => share.replay().release(key, holder),
    }
    reply
}

/// Answers a replayed CREATE with the open it made (MS-SMB2 3.3.5.9.10), or `None` when
/// that open is no longer in this session. The open is not changed: the reply states the
/// oplock level the replay asks for, and a lease the replay names must be the open's.
async fn replay_open(
    conn: &mut Connection,
    ctx: &Ctx<'_>,
    req: &CreateRequest<'_>,
    volatile: u64,
) -> Option<HResult> {
    let lease = lease_request(conn, req);
    let (file, share, inode, wire_key, durable, file_id, action, access) = {
        let s = super::session(conn, ctx).ok()?;
        let o = s.opens.get(&volatile)?;
        (
            o.file.clone(),
            o.share.clone(),
            o.inode,
            o.lease_wire_key,
            o.durable,
            o.file_id,
            o.create_action,
            o.access,
        )
    };
    if let Some(l) = &lease {
        if wire_key != Some(l.key) {
            return Some(Err(status::ACCESS_DENIED));
        }
    }
    let info = match file {
        Some(f) => blocking(move || f.info()).await,
        None => Err(status::INTERNAL_ERROR),
    };
    let info = match info {
        Ok(i) => i,
        Err(st) => return Some(Err(st)),
    };
    let held = share
        .as_ref()
        .and_then(|s| s.oplocks().held(inode, volatile));
    let mut contexts: Vec<(&'static [u8], Vec<u8>)> = Vec::new();
    if req.context(CTX_MXAC).is_some() {
        // The open's access, not recomputed: it is what this handle may do.
        contexts.push((CTX_MXAC, mxac_response(status::SUCCESS, access)));
    }
    if req.context(CTX_QFID).is_some() {
        let id = super::aapl::client_file_id(conn.state.aapl, info.file_id);
        contexts.push((CTX_QFID, qfid_response(id, 0)));
    }
    let mut oplock_level = req.oplock_level;
    if let (Some(l), Some(g)) = (&lease, held) {
        if let Some((state, epoch)) = g.lease {
            contexts.push((
                CTX_LEASE,
                lease_response(&as_held(l, &g), state, epoch, g.break_in_progress),
            ));
            oplock_level = OPLOCK_LEVEL_LEASE;
        }
    }
    if let Some(d) = durable
        .filter(|d| d.v2 && matches!(req.oplock_level, OPLOCK_LEVEL_BATCH | OPLOCK_LEVEL_LEASE))
    {
        contexts.push((
            CTX_DURABLE_REQUEST_V2,
            durable_response_v2(u32::try_from(d.timeout.as_millis()).unwrap_or(u32::MAX), 0),
        ));
    }
    let resp = CreateResponse {
        oplock_level,
        create_action: action,
        attrs: attrs_of(&info),
        file_id,
        contexts,
    };
    let mut body = Vec::with_capacity(160);
    resp.encode(&mut body);
    Some(Ok(Reply {
        file_id: Some(file_id),
        ..Reply::ok(body)
    }))
}

/// Opens or creates a file or directory (CREATE without replay detection).
async fn create_open(
    conn: &mut Connection,
    ctx: &mut Ctx<'_>,
    mut req: CreateRequest<'_>,
) -> HResult {
    let (fs, token, share_name) = {
        let s = super::session(conn, ctx)?;
        if s.opens.len() >= MAX_OPENS_PER_SESSION {
            return Err(status::INSUFFICIENT_RESOURCES);
        }
        let token = s.token();
        let t = s
            .trees
            .get(&ctx.tree_id)
            .ok_or(status::NETWORK_NAME_DELETED)?;
        let fs = match &t.kind {
            TreeKind::Ipc => None,
            TreeKind::Disk {
                fs,
                read_only,
                state,
            } => Some((fs.clone(), *read_only, state.clone())),
        };
        (fs, token, (t.share.clone(), t.continuously_available))
    };
    let (share_name, continuously_available) = share_name;
    let Some((fs, read_only, share_state)) = fs else {
        return open_pipe(conn, ctx, &req).await;
    };
    if let Some(reclaim) = durable_reconnect(&req)? {
        // Only the reconnect context counts: name, disposition and the rest are ignored.
        return reconnect(conn, ctx, &req, reclaim, share_state).await;
    }
    // A previous version: the snapshot's tree, read-only, with its own table entries.
    let (name, token_at) = previous::strip_gmt_token(&req.name)?;
    req.name = name;
    let snapshot = match req.context(previous::CTX_TWRP) {
        Some(c) => Some(previous::twrp_time(c.data)?),
        None => token_at,
    };
    let persist_share = share_name.clone();
    let (fs, read_only) = match snapshot {
        Some(at) => {
            let backend = conn.backend.clone();
            let fs = blocking(move || backend.snapshot_fs(&share_name, at))
                .await
                .map_err(|_| status::OBJECT_NAME_NOT_FOUND)?;
            (fs, true)
        }
        None => (fs, read_only),
    };
    // Snapshot files keep their inode numbers: their table keys are set apart by time.
    let version_key = move |id: u64| match snapshot {
        Some(at) => id ^ (at as u64 | 1 << 63).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        None => id,
    };
    if req.name.starts_with('\\') {
        return Err(status::INVALID_PARAMETER);
    }
    let aapl = super::aapl::server_query(conn, &req)?;
    if req.impersonation_level > MAX_IMPERSONATION_LEVEL {
        return Err(status::BAD_IMPERSONATION_LEVEL);
    }
    let disposition =
        CreateDisposition::from_wire(req.create_disposition).ok_or(status::INVALID_PARAMETER)?;
    let named = vfs::names::split_stream(&req.name).map_err(|e| e.nt_status())?;
    let stream = named.stream.map(str::to_string);
    let mut create_options = req.create_options;
    if named.stream.is_some() || named.explicit_default {
        // Streams are data: never directories (and `dir::$DATA` names no stream).
        if create_options & FILE_DIRECTORY_FILE != 0 {
            return Err(status::NOT_A_DIRECTORY);
        }
        if named.explicit_default {
            create_options |= FILE_NON_DIRECTORY_FILE;
        }
    }
    let file_path = named.file.to_string();
    let maximal = if read_only { ACCESS_READ } else { ACCESS_ALL };
    let access = map_access(req.desired_access, maximal);
    let initial_eas: Vec<(String, Vec<u8>)> = match req.context(CTX_EXTA) {
        Some(c) => crate::proto::ea::decode_full_ea_list(c.data)
            .map_err(|_| status::INVALID_PARAMETER)?
            .into_iter()
            .map(|e| (e.name, e.value))
            .collect(),
        None => Vec::new(),
    };
    let truncates = matches!(
        disposition,
        CreateDisposition::Overwrite
            | CreateDisposition::OverwriteIf
            | CreateDisposition::Supersede
    );
    let supplied = match req.context(CTX_SECD) {
        Some(c) => Some(super::security::decode_supplied(
            c.data,
            &token,
            crate::security::secinfo::OWNER,
        )?),
        None => None,
    };
    let gate = std::sync::Arc::new(super::security::OpenGate::new(
        token,
        map_access(req.desired_access & !MAXIMUM_ALLOWED, maximal),
        req.desired_access & MAXIMUM_ALLOWED != 0,
        maximal,
        supplied,
        truncates,
    ));
    let delete_on_close = req.create_options & FILE_DELETE_ON_CLOSE != 0;
    if delete_on_close && access & DELETE == 0 {
        return Err(status::ACCESS_DENIED);
    }
    if read_only
        && (access & WRITE_BITS != 0
            || disposition.may_create() && disposition != CreateDisposition::OpenIf
            || truncates
            || delete_on_close)
    {
        return Err(status::ACCESS_DENIED);
    }
    // A stat open reads or changes no data; one that truncates is not one.
    let attributes_only = access & !ATTRIBUTE_ACCESS == 0 && !truncates;
    let want = wanted_caching(conn, &req);
    let lease_key = match want {
        Want::Lease { key, .. } => Some(key),
        _ => None,
    };
    // A lease key names one file: a key held on another path is refused before anything
    // is created or truncated (the check after the open catches other names of a file).
    if let Some(k) = &lease_key {
        let held_on = share_state.oplocks().file_of_lease(k);
        if held_on.is_some_and(|f| !share_state.modes().is_open_at(f, &file_path)) {
            return Err(status::INVALID_PARAMETER);
        }
    }
    let mode = OpenMode {
        access,
        share: req.share_access,
    };
    if !conn.shared.durable().is_empty() {
        // A durable handle left by a lost connection gives way to a new open of its file.
        let shared = conn.shared.clone();
        close_preserved(&shared, &fs, &share_state, &file_path, create_options).await;
    }
    let has_grants = !share_state.oplocks().is_empty();
    let path = file_path.clone();
    let options = create_options;
    // A stream has its own entry in the share-mode, lock and oplock tables.
    let key_of = {
        let stream = stream.clone();
        move |file_id: u64| match &stream {
            Some(s) => stream_key(version_key(file_id), s),
            None => version_key(file_id),
        }
    };
    let attributes = req.file_attributes;
    let write = access & (FILE_WRITE_DATA | FILE_APPEND_DATA) != 0 || truncates;
    let read = access & (FILE_READ_DATA | FILE_EXECUTE) != 0;
    let ro = read_only;
    let open_gate = gate.clone();
    let open_stream = stream.clone();
    // The probe's own handles on the share and the path (the open below takes the originals).
    let probe_target = (truncates || has_grants).then(|| (fs.clone(), path.clone()));
    // The open itself, cached-only or not, with a given disposition: run below, or by the
    // probe when it finds nothing to break (see there).
    let open_call = std::sync::Arc::new(
        move |cached: bool, disposition: CreateDisposition| -> Result<vfs::Opened, vfs::FsError> {
            let disp = if ro && disposition == CreateDisposition::OpenIf {
                CreateDisposition::Open
            } else {
                disposition
            };
            let r = vfs::CreateRequest {
                path: &path,
                disposition: disp,
                options,
                attributes,
                write,
                read,
                allocation_size: 0,
                stream: open_stream.as_deref(),
                security: Some(&*open_gate),
            };
            let o = open_with(&*fs, &r, cached)?;
            // EAs given at create time belong to a new (or replaced) file only.
            if !initial_eas.is_empty() && o.action != vfs::CreateAction::Opened {
                o.file.set_eas(&initial_eas)?;
            }
            if delete_on_close {
                if let Err(e) = o.file.check_deletable() {
                    if !matches!(e, vfs::FsError::NotEmpty) {
                        return Err(e);
                    }
                }
            }
            Ok(o)
        },
    );
    // A new file made by the probe's own storage call.
    let mut created = None;
    if let Some((probe_fs, probe_path)) = probe_target {
        // Oplock and lease breaks, and share modes, are settled before anything is
        // truncated: probe the existing file without the truncating disposition.
        let probe_open = open_call.clone();
        // Where nothing exists there is nothing to break or conflict with, so the probe
        // creates the file in the same storage call, saving a second trip to the pool (a
        // racing creator's file makes it fall back to the ordinary open below). On the
        // pool it tries the create first: a name that is not there is then looked up once,
        // not once to find it missing and again to create it.
        let create_absent = disposition.may_create() && !ro && stream.is_none();
        let probed = super::cached_first(true, move |cached| {
            if !cached && create_absent {
                match probe_open(false, CreateDisposition::Create) {
                    Ok(o) => return Ok(Probed::Created(o)),
                    Err(vfs::FsError::Exists(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            let r = vfs::CreateRequest {
                path: &probe_path,
                disposition: CreateDisposition::Open,
                options: options & !FILE_DELETE_ON_CLOSE,
                attributes,
                write: false,
                read: false,
                allocation_size: 0,
                stream: None,
                security: None,
            };
            match open_with(&*probe_fs, &r, cached) {
                Ok(o) => Ok(Probed::Existing(o.info.file_id)),
                // Nothing by that name (or gone again since the create found it there):
                // the open below decides.
                Err(vfs::FsError::NotFound(_)) if !cached => Ok(Probed::Absent),
                Err(e) => Err(e),
            }
        })
        .await;
        let existing = match probed {
            Ok(Probed::Existing(id)) => Ok(Some(key_of(id))),
            Ok(Probed::Absent) => Ok(None),
            Ok(Probed::Created(o)) => {
                created = Some(o);
                Ok(None)
            }
            Err(e) => Err(e),
        };
        // An open of a file being deleted fails (DELETE_PENDING) and breaks nothing.
        let pending = matches!(&existing, Ok(Some(i)) if share_state.modes().is_delete_pending(*i));
        if let (Ok(Some(inode)), true, false) = (&existing, has_grants, pending) {
            let inode = *inode;
            let impact = OpenImpact {
                truncates,
                share_conflict: share_state.modes().conflicts(inode, mode),
                attributes_only,
                lease_stat_open: access & !(ATTRIBUTE_ACCESS | READ_CONTROL) == 0,
            };
            let now = std::time::Instant::now();
            let breaks =
                share_state
                    .oplocks()
                    .break_for_open(inode, lease_key.as_ref(), impact, now);
            deliver(breaks.notices);
            // A lone CREATE waits (STATUS_PENDING) for the acknowledgments it needs, then
            // runs again from the top; inside a compound it goes on at once.
            if ctx.deferrable && breaks.wait {
                return Ok(Reply {
                    wait: Some(Wait::Breaks {
                        share: share_state.clone(),
                        inode,
                        key: lease_key,
                    }),
                    ..Reply::default()
                });
            }
        }
        if let (Ok(Some(inode)), true) = (existing, truncates) {
            let probe_id = new_file_id(conn).volatile;
            let mut modes = share_state.modes();
            modes
                .try_open(
                    inode,
                    probe_id,
                    // Truncation writes: it conflicts with opens that deny writing.
                    OpenMode {
                        access: access | FILE_WRITE_DATA,
                        share: req.share_access,
                    },
                    false,
                )
                .map_err(|e| e.nt_status())?;
            let _ = modes.close(inode, probe_id);
        }
    }
    // A plain open of an existing file is answered from the kernel's caches when it can be
    // (an OPEN_IF for writing usually creates, so it goes straight to the pool);
    // delete-on-close checks a directory's entries, which may read the device.
    let try_cached = !truncates
        && !delete_on_close
        && (disposition == CreateDisposition::Open
            || (disposition == CreateDisposition::OpenIf && !write));
    let opened = match created {
        Some(o) => o,
        None => {
            super::cached_first(try_cached, move |cached| open_call(cached, disposition)).await?
        }
    };
    let file_id = new_file_id(conn);
    // The descriptor may grant less than a MAXIMUM_ALLOWED open first assumed.
    let access = gate.granted();
    let mode = OpenMode {
        access,
        share: req.share_access,
    };
    if delete_on_close {
        check_may_delete(access, opened.info.attributes).map_err(|e| e.nt_status())?;
    }
    let file_inode = opened.info.file_id;
    let inode = key_of(file_inode);
    if lease_key.is_some_and(|k| share_state.oplocks().key_used_elsewhere(&k, inode)) {
        return Err(status::INVALID_PARAMETER);
    }
    let open_count = {
        let mut modes = share_state.modes();
        if stream.is_some() {
            modes.try_open_stream(file_inode, inode, file_id.volatile, mode, delete_on_close)
        } else {
            modes.try_open(inode, file_id.volatile, mode, delete_on_close)
        }
        .map_err(|e| e.nt_status())?;
        modes.set_path(inode, file_id.volatile, &file_path);
        modes.open_count(inode)
    };
    // A lease is the client's: its breaks go to the client's oldest connection.
    let sink = match want {
        Want::Lease { .. } => conn.shared.lease_sink(conn.client_guid(), &conn.breaks),
        _ => crate::server::shared::BreakSink::to(conn.breaks.clone()),
    };
    let dir_leasing = conn.state.negotiated.as_ref().is_some_and(|n| {
        n.server_capabilities & crate::proto::negotiate::CAP_DIRECTORY_LEASING != 0
    });
    let granted = {
        let mut oplocks = share_state.oplocks();
        let same_lease = lease_key.map_or(0, |k| oplocks.opens_of_lease(inode, &k));
        let others = open_count.saturating_sub(1 + same_lease) > 0;
        let granted = oplocks.grant(
            inode,
            Holder {
                open: file_id.volatile,
                file_id,
                session_id: ctx.session_id,
            },
            // A stat open of an existing file gets no oplock (MS-FSA; leases are still
            // granted); one that created the file does, as on Windows and Samba. A
            // directory is leased only on a connection that negotiated directory leasing.
            match want {
                Want::Lease { .. } if opened.info.is_dir && !dir_leasing => Want::Nothing,
                Want::Oplock(_)
                    if attributes_only && opened.action != vfs::CreateAction::Created =>
                {
                    Want::Nothing
                }
                w => w,
            },
            others,
            opened.info.is_dir,
            sink,
        );
        if opened.info.is_dir && granted.lease.is_some() {
            oplocks.index_dir(inode, &file_path);
        }
        granted
    };
    let mut contexts: Vec<(&'static [u8], Vec<u8>)> = Vec::new();
    if req.context(CTX_MXAC).is_some() {
        contexts.push((CTX_MXAC, mxac_response(status::SUCCESS, gate.maximal())));
    }
    if req.context(CTX_QFID).is_some() {
        // The CREATE that negotiates AAPL already answers as an AAPL connection.
        let negotiated = conn.state.aapl.or(aapl.as_ref().map(|a| a.0));
        let id = super::aapl::client_file_id(negotiated, opened.info.file_id);
        contexts.push((CTX_QFID, qfid_response(id, 0)));
    }
    if let Some((_, data)) = &aapl {
        contexts.push(super::aapl::response_context(data.clone()));
    }
    let lease = lease_request(conn, &req);
    let parent_lease_key = lease
        .as_ref()
        .and_then(|l| l.parent_key)
        .map(|k| conn.lease_scope(&k));
    if let (Some((state, epoch)), Some(lease)) = (granted.lease, &lease) {
        contexts.push((
            CTX_LEASE,
            lease_response(
                &as_held(lease, &granted),
                state,
                epoch,
                granted.break_in_progress,
            ),
        ));
    }
    let durable = durable_grant(
        &req,
        &share_state,
        inode,
        file_id.volatile,
        opened.info.is_dir,
        continuously_available,
    );
    match durable {
        Some(d) if d.v2 => contexts.push((
            CTX_DURABLE_REQUEST_V2,
            durable_response_v2(
                u32::try_from(d.timeout.as_millis()).unwrap_or(u32::MAX),
                if d.persistent {
                    DURABLE_FLAG_PERSISTENT
                } else {
                    0
                },
            ),
        )),
        Some(_) => contexts.push((CTX_DURABLE_REQUEST, durable_response())),
        None => {}
    }
    let resp = CreateResponse {
        oplock_level: granted.oplock_level,
        create_action: opened.action.to_wire(),
        attrs: attrs_of(&opened.info),
        file_id,
        contexts,
    };
    let created = opened.action.to_wire();
    let name_filter = if opened.info.is_dir {
        notify::FILTER_DIR_NAME
    } else {
        notify::FILTER_FILE_NAME
    };
    if created == FILE_CREATED {
        share_state.record_change(&file_path, notify::ACTION_ADDED, name_filter);
    } else if created == FILE_OVERWRITTEN || created == FILE_SUPERSEDED {
        share_state.record_change(
            &file_path,
            notify::ACTION_MODIFIED,
            notify::FILTER_SIZE | notify::FILTER_LAST_WRITE,
        );
    }
    if created != FILE_OPENED {
        share_state.break_parent_leases(&file_path, parent_lease_key.as_ref());
    }
    let open = Open {
        lease_key,
        lease_wire_key: lease.map(|l| l.key),
        file: Some(std::sync::Arc::from(opened.file)),
        share: Some(share_state.clone()),
        is_dir: opened.info.is_dir,
        inode,
        delete_on_close,
        mode: options & 0x0000_0002,
        durable,
        create_action: created,
        channel_sequence: (ctx.hdr.status & 0xFFFF) as u16,
        parent_lease_key,
        ..Open::new(file_id, ctx.tree_id, file_path.clone(), access)
    };
    if let Some(d) = durable.filter(|d| d.persistent) {
        let record = crate::server::durable::PersistedOpen {
            persistent_id: file_id.persistent,
            create_guid: d.create_guid,
            client_guid: conn.client_guid(),
            user: super::session(conn, ctx)?.user.clone(),
            share: persist_share,
            path: file_path.clone(),
            access,
            share_access: req.share_access,
            timeout_ms: u32::try_from(d.timeout.as_millis()).unwrap_or(u32::MAX),
            locks: Vec::new(),
        };
        let backend = conn.backend.clone();
        blocking(move || {
            backend.persist_open(&record);
            Ok(())
        })
        .await?;
    }
    if let Some((negotiated, _)) = aapl {
        super::aapl::commit(conn, negotiated);
    }
    answer_open(conn, ctx, open, &resp)
}

/// Puts a new (or reclaimed) open in the session's table and answers the CREATE with
/// `resp`, naming the FileId for related compound requests.
fn answer_open(conn: &mut Connection, ctx: &Ctx<'_>, open: Open, resp: &CreateResponse) -> HResult {
    let file_id = open.file_id;
    super::session(conn, ctx)?
        .opens
        .insert(file_id.volatile, open);
    let mut body = Vec::with_capacity(160);
    resp.encode(&mut body);
    Ok(Reply {
        file_id: Some(file_id),
        ..Reply::ok(body)
    })
}

async fn open_pipe(conn: &mut Connection, ctx: &mut Ctx<'_>, req: &CreateRequest<'_>) -> HResult {
    let name = req.name.trim_start_matches('\\').to_ascii_lowercase();
    if !PIPES.contains(&name.as_str()) {
        return Err(status::OBJECT_NAME_NOT_FOUND);
    }
    let pipe =
        super::pipe::open_srvsvc(conn.backend.clone(), conn.config.computer_name.clone()).await?;
    let file_id = new_file_id(conn);
    let attrs = FileAttrs {
        attributes: ATTR_NORMAL,
        ..Default::default()
    };
    let resp = CreateResponse {
        oplock_level: 0,
        create_action: FILE_OPENED,
        attrs,
        file_id,
        contexts: Vec::new(),
    };
    let open = Open {
        pipe: Some(pipe),
        ..Open::new(file_id, ctx.tree_id, req.name.clone(), req.desired_access)
    };
    answer_open(conn, ctx, open, &resp)
}

/// Closes an open the client did not close itself (logoff, tree disconnect, a dropped
/// connection, an expired durable handle, a superseded one): its storage close first, off
/// the reactor when it writes (dropping the file would stamp a deferred write time on
/// whichever thread drops it), then `release_open`.
pub async fn close_open(o: Open) -> Result<(), u32> {
    if let Some(f) = o.file.clone() {
        // The result is the same either way: the open goes.
        let _ = super::cached_first(true, move |cached| close_with(&*f, cached)).await;
    }
    release_open(o).await
}

/// Releases an open whose storage close ([`vfs::FsFile::close`]) is done: its locks, its
/// share-mode entry, and the file itself when it was the last open of a delete-pending
/// file.
async fn release_open(o: Open) -> Result<(), u32> {
    let Some(share) = o.share.clone() else {
        return Ok(());
    };
    let id = o.file_id.volatile;
    if let (true, Some(backend)) = (
        o.durable.is_some_and(|d| d.persistent),
        share.backend.get().cloned(),
    ) {
        let persistent_id = o.file_id.persistent;
        let _ = blocking(move || {
            backend.forget_persisted_open(persistent_id);
            Ok(())
        })
        .await;
    }
    if let Some(key) = o.replay {
        share.replay().forget(key, id);
    }
    let _waiters = share.locks().release_open(o.inode, id);
    share.oplocks().close(o.inode, id);
    let (outcome, pending) = {
        let mut modes = share.modes();
        let outcome = modes.close(o.inode, id);
        let pending = modes.is_delete_pending(o.inode);
        (outcome, pending)
    };
    share.with_notify(|h| {
        h.remove(id);
        if o.is_dir && (outcome.delete_now || pending) {
            h.directory_deleted(&o.path);
        }
    });
    if outcome.delete_file_now {
        // The last open of a stream closed after its file's delete-pending last close.
        if let Some(f) = o.file.clone() {
            blocking(move || f.unlink_file()).await?;
            share.record_change(&o.path, notify::ACTION_REMOVED, notify::FILTER_FILE_NAME);
        }
    }
    if outcome.delete_now {
        if let Some(f) = o.file {
            blocking(move || f.unlink()).await?;
            let filter = if o.is_dir {
                notify::FILTER_DIR_NAME
            } else {
                notify::FILTER_FILE_NAME
            };
            share.record_change(&o.path, notify::ACTION_REMOVED, filter);
        }
    }
    if o.modified || outcome.delete_now || outcome.delete_file_now {
        share.break_parent_leases(&o.path, o.parent_lease_key.as_ref());
    }
    Ok(())
}

/// Handles CLOSE. The storage close (a deferred write-time stamp) runs here, inline when
/// it changes nothing on the device and on the blocking pool otherwise, before the open is
/// released and whether or not the client asked for the attributes after it.
pub async fn close(conn: &mut Connection, ctx: &mut Ctx<'_>, req: CloseRequest) -> HResult {
    let id = ctx.resolve(req.file_id);
    super::open(conn, ctx, id)?;
    let open = super::session(conn, ctx)?
        .opens
        .remove(&id.volatile)
        .ok_or(status::FILE_CLOSED)?;
    let postquery = req.flags & CLOSE_FLAG_POSTQUERY_ATTRIB != 0 && !open.delete_on_close;
    let post = match open.file.clone() {
        // The close's own write-time stamp shows in the attributes it returns.
        Some(f) => super::cached_first(true, move |cached| match (postquery, cached) {
            (false, _) => close_with(&*f, cached).map(|()| None),
            (true, true) => f.close_and_info_cached().map(Some),
            (true, false) => f.close_and_info().map(Some),
        })
        .await
        .ok()
        .flatten()
        .map(|i| attrs_of(&i)),
        None => None,
    };
    if let Err(st) = release_open(open).await {
        tracing::debug!(status = st, "delete on close failed");
    }
    let mut body = Vec::with_capacity(60);
    encode_close_response(&mut body, post.as_ref());
    Ok(Reply::ok(body))
}

/// `fs.create(r)`, or its cached-only form on a [`super::cached_first`] attempt.
fn open_with(
    fs: &dyn vfs::ShareFs,
    r: &vfs::CreateRequest<'_>,
    cached: bool,
) -> Result<vfs::Opened, vfs::FsError> {
    if cached {
        fs.open_cached(r)
    } else {
        fs.create(r)
    }
}

/// `f.close()`, or its cached-only form on a [`super::cached_first`] attempt.
fn close_with(f: &dyn vfs::FsFile, cached: bool) -> Result<(), vfs::FsError> {
    if cached {
        f.close_cached()
    } else {
        f.close()
    }
}

/// What the probe before a truncating or lease-holding CREATE found.
enum Probed {
    /// The file exists, with this file id.
    Existing(u64),
    /// Nothing by that name.
    Absent,
    /// Nothing by that name, so the probe created the file (see `create_open`).
    Created(vfs::Opened),
}

/// Which durable handle a CREATE asks to reclaim.
enum Reclaim {
    /// DHnC: by FileId.
    V1(FileId),
    /// DH2C: by FileId and CreateGuid.
    V2(DurableReconnectV2),
}

/// The reconnect context of a CREATE, if any (a malformed one is INVALID_PARAMETER).
fn durable_reconnect(req: &CreateRequest<'_>) -> Result<Option<Reclaim>, u32> {
    let has = |name| req.context(name).is_some();
    let (q1, q2) = (has(CTX_DURABLE_REQUEST), has(CTX_DURABLE_REQUEST_V2));
    let (c1, c2) = (has(CTX_DURABLE_RECONNECT), has(CTX_DURABLE_RECONNECT_V2));
    // One version per CREATE (MS-SMB2 3.3.5.9.10, 3.3.5.9.12); a v1 request beside a v1
    // reconnect is ignored.
    if (q2 && (q1 || c1 || c2)) || (c2 && (q1 || c1)) {
        return Err(status::INVALID_PARAMETER);
    }
    if let Some(c) = req.context(CTX_DURABLE_RECONNECT_V2) {
        return DurableReconnectV2::decode(c.data)
            .map(|r| Some(Reclaim::V2(r)))
            .map_err(|_| status::INVALID_PARAMETER);
    }
    if let Some(c) = req.context(CTX_DURABLE_RECONNECT) {
        return decode_reconnect(c.data)
            .map(|id| Some(Reclaim::V1(id)))
            .map_err(|_| status::INVALID_PARAMETER);
    }
    Ok(None)
}

/// Whether the open just made becomes durable: it asked (DHnQ or DH2Q) and holds handle
/// caching (a batch oplock, or a lease with H), as MS-SMB2 3.3.5.9.6 and 3.3.5.9.10
/// require. Directories are not made durable.
fn durable_grant(
    req: &CreateRequest<'_>,
    share: &ShareState,
    inode: u64,
    open: u64,
    is_dir: bool,
    continuously_available: bool,
) -> Option<Durable> {
    let v2 = req
        .context(CTX_DURABLE_REQUEST_V2)
        .and_then(|c| DurableRequestV2::decode(c.data).ok());
    if let Some(q) =
        v2.filter(|q| q.flags & DURABLE_FLAG_PERSISTENT != 0 && continuously_available && !is_dir)
    {
        // A persistent handle needs no caching (MS-SMB2 3.3.5.9.10): the share is
        // continuously available.
        return Some(Durable {
            persistent: true,
            v2: true,
            create_guid: q.create_guid,
            timeout: Durable::v2_timeout(q.timeout_ms),
        });
    }
    let v1 = req.context(CTX_DURABLE_REQUEST).is_some();
    if (v2.is_none() && !v1) || is_dir || !share.oplocks().holds_handle_caching(inode, open) {
        return None;
    }
    Some(match v2 {
        Some(q) => Durable {
            persistent: false,
            v2: true,
            create_guid: q.create_guid,
            timeout: Durable::v2_timeout(q.timeout_ms),
        },
        None => Durable {
            persistent: false,
            v2: false,
            create_guid: [0; 16],
            timeout: crate::server::durable::DEFAULT_TIMEOUT,
        },
    })
}

/// Closes the durable handles kept for file `name` (their connection is gone) before
/// another open of it goes on.
async fn close_preserved(
    shared: &std::sync::Arc<crate::server::shared::SharedState>,
    fs: &std::sync::Arc<dyn vfs::ShareFs>,
    share_state: &std::sync::Arc<ShareState>,
    name: &str,
    options: u32,
) {
    let probe_fs = fs.clone();
    let probe_path = name.to_string();
    let inode = blocking(move || {
        let r = vfs::CreateRequest {
            path: &probe_path,
            disposition: CreateDisposition::Open,
            options: options & !FILE_DELETE_ON_CLOSE,
            attributes: 0,
            write: false,
            read: false,
            allocation_size: 0,
            stream: None,
            security: None,
        };
        Ok(probe_fs.create(&r).ok().map(|o| o.info.file_id))
    })
    .await;
    if let Ok(Some(inode)) = inode {
        for o in shared.durable().take_file(share_state, inode) {
            let _ = close_open(o).await;
        }
    }
}

/// Takes back a durable handle (MS-SMB2 3.3.5.9.7, 3.3.5.9.12): same user, same share,
/// for v2 the same CreateGuid, for a lease the same lease key; it keeps its FileId, locks
/// and caching, now held by this session.
async fn reconnect(
    conn: &mut Connection,
    ctx: &mut Ctx<'_>,
    req: &CreateRequest<'_>,
    reclaim: Reclaim,
    share_state: std::sync::Arc<ShareState>,
) -> HResult {
    let user = super::session(conn, ctx)?.user.clone();
    let client_guid = conn
        .state
        .negotiated
        .as_ref()
        .map_or([0; 16], |n| n.client_guid);
    // A reconnect names its lease whatever OplockLevel says.
    let lease = conn
        .state
        .negotiated
        .as_ref()
        .filter(|n| n.dialect >= DIALECT_210)
        .and_then(|_| req.context(CTX_LEASE))
        .and_then(|c| LeaseRequest::decode(c.data).ok());
    let lease_key = lease.as_ref().map(|l| conn.lease_scope(&l.key));
    let mut wrong_name = false;
    let (id, guid) = match &reclaim {
        Reclaim::V1(id) => (*id, None),
        Reclaim::V2(r) => (r.file_id, Some(r.create_guid)),
    };
    let taken = conn.shared.durable().reclaim(id.persistent, |p| {
        let d = p.open.durable;
        p.user.eq_ignore_ascii_case(&user)
            && p.open.file_id == id
            && p.open.share.as_ref().is_some_and(|s| std::sync::Arc::ptr_eq(s, &share_state))
            // DH2C names the handle's CreateGuid (zeros for a v1 handle); DHnC takes
            // either kind.
            && d.is_some_and(|d| guid.is_none_or(|g| g == d.create_guid))
            && p.open.lease_key == lease_key
            // Lease keys belong to a client: only the same ClientGuid reclaims a lease,
            // and only under the name it was opened with.
            && (lease_key.is_none() || p.client_guid == client_guid)
            && (lease_key.is_none() || {
                wrong_name = !p.open.path.eq_ignore_ascii_case(&req.name);
                !wrong_name
            })
    });
    let Some(preserved) = taken else {
        tracing::debug!(id = id.persistent, "no durable handle to reclaim");
        if wrong_name {
            return Err(status::INVALID_PARAMETER);
        }
        return Err(status::OBJECT_NAME_NOT_FOUND);
    };
    let mut open = preserved.open;
    open.tree_id = ctx.tree_id;
    let granted = share_state.oplocks().reattach(
        open.inode,
        open.file_id.volatile,
        ctx.session_id,
        crate::server::shared::BreakSink::to(conn.breaks.clone()),
    );
    let info = match open.file.clone() {
        Some(f) => blocking(move || f.info()).await,
        None => Err(status::INTERNAL_ERROR),
    };
    let info = match info {
        Ok(i) => i,
        Err(st) => {
            let _ = close_open(open).await;
            return Err(st);
        }
    };
    let mut contexts: Vec<(&'static [u8], Vec<u8>)> = Vec::new();
    let granted = granted.unwrap_or(crate::oplock::Granted {
        oplock_level: 0,
        lease: None,
        lease_version: 0,
        break_in_progress: false,
    });
    if let (Some((state, epoch)), Some(l)) = (granted.lease, lease.as_ref()) {
        contexts.push((
            CTX_LEASE,
            lease_response(
                &as_held(l, &granted),
                state,
                epoch,
                granted.break_in_progress,
            ),
        ));
    }
    let resp = CreateResponse {
        oplock_level: granted.oplock_level,
        create_action: FILE_OPENED,
        attrs: attrs_of(&info),
        file_id: open.file_id,
        contexts,
    };
    tracing::debug!(file = %open.path, "durable handle reclaimed");
    answer_open(conn, ctx, open, &resp)
}
