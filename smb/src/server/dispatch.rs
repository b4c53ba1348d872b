//! Routes each decoded request to its handler module (one per command family) and defines the
//! [`Reply`] every handler returns.

use crate::proto::io::encode_error_response;
use crate::proto::{status, FileId, Header, ProtoError, Request};

use super::conn::Connection;
use super::handlers;
use super::OpKind;

/// Which preauth hash a message must be folded into after it is encoded (3.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreauthTarget {
    /// The connection's (NEGOTIATE).
    Connection,
    /// A session's (SESSION_SETUP legs before the last).
    Session(u64),
    /// A binding's (its legs before the last), folded in after signing.
    Channel(u64),
}

/// What a handler answers.
#[derive(Default)]
pub struct Reply {
    /// NTSTATUS.
    pub status: u32,
    /// Body after the header.
    pub body: Vec<u8>,
    /// SessionId to put in the header (SESSION_SETUP assigns one).
    pub session_id: Option<u64>,
    /// TreeId to put in the header (TREE_CONNECT assigns one).
    pub tree_id: Option<u32>,
    /// FileId created, for related compound requests that follow.
    pub file_id: Option<FileId>,
    /// Sign even though the request was not (final SESSION_SETUP).
    pub force_sign: bool,
    /// Sign with this key rather than the session's (session binding).
    pub sign_with: Option<crate::crypto::SigningKey>,
    /// Encrypt this response (and the rest of the compound).
    pub encrypt: bool,
    /// Fold the encoded response into a preauth hash.
    pub preauth: Option<PreauthTarget>,
    /// End the connection after sending nothing more.
    pub disconnect: bool,
    /// The operation must wait: send STATUS_PENDING now and complete it later.
    pub wait: Option<super::pending::Wait>,
    /// AsyncId of an interim response (set by the connection).
    pub async_id: Option<u64>,
    /// The storage part of a READ or WRITE, left for the connection to finish off its task
    /// (only when [`Ctx::deferrable`]): resolves to the success body or an NTSTATUS. The
    /// connection keeps reading and dispatching requests while it runs.
    pub deferred: Option<Deferred>,
}

/// A READ or WRITE's storage call and response body, run concurrently with later requests.
pub type Deferred = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<super::bufpool::OutBuf, u32>> + Send + 'static>,
>;

impl Reply {
    /// A success reply with `body`.
    pub fn ok(body: Vec<u8>) -> Self {
        Self {
            status: status::SUCCESS,
            body,
            ..Default::default()
        }
    }

    /// An error reply with the standard 9-byte error body.
    pub fn error(status: u32) -> Self {
        let mut body = Vec::with_capacity(9);
        encode_error_response(&mut body);
        Self {
            status,
            body,
            ..Default::default()
        }
    }

    /// A reply with a status and a body (warnings like BUFFER_OVERFLOW carry data).
    pub fn with_status(status: u32, body: Vec<u8>) -> Self {
        Self {
            status,
            body,
            ..Default::default()
        }
    }
}

impl Reply {
    /// A reply whose body comes from `work`: deferred when the request allows it, awaited
    /// in place otherwise (compound elements must answer in order).
    pub async fn deferred_or_now(ctx: &Ctx<'_>, work: Deferred) -> Result<Reply, u32> {
        if ctx.deferrable {
            Ok(Reply {
                deferred: Some(work),
                ..Reply::default()
            })
        } else {
            work.await.map(|o| Reply::ok(o.into_vec()))
        }
    }
}

/// Handler result: `Err(status)` becomes an error reply.
pub type HResult = Result<Reply, u32>;

/// The request being handled.
pub struct Ctx<'a> {
    /// Its header.
    pub hdr: &'a Header,
    /// The whole element (header included).
    pub msg: &'a [u8],
    /// Effective SessionId (related requests inherit it).
    pub session_id: u64,
    /// Effective TreeId.
    pub tree_id: u32,
    /// FileId to use for ALL_ONES handles in a related request.
    pub related_file_id: Option<FileId>,
    /// The request arrived encrypted.
    pub encrypted: bool,
    /// The request stands alone (not part of a compound), so a READ or WRITE may hand its
    /// storage call back as [`Reply::deferred`] instead of awaiting it.
    pub deferrable: bool,
    /// The received frame `msg` lies in, when the request stands alone: a deferred WRITE
    /// keeps it alive and writes its data from it without a copy.
    pub frame: Option<std::sync::Arc<super::bufpool::Received>>,
}

impl Ctx<'_> {
    /// Substitutes the related compound's handle for an all-ones FileId.
    pub fn resolve(&self, id: FileId) -> FileId {
        if id == FileId::ALL_ONES {
            self.related_file_id.unwrap_or(id)
        } else {
            id
        }
    }
}

fn decode_status(e: &ProtoError) -> u32 {
    match e {
        ProtoError::Unsupported(_) => status::NOT_SUPPORTED,
        _ => status::INVALID_PARAMETER,
    }
}

/// Decodes and handles one request.
pub async fn dispatch(conn: &mut Connection, ctx: &mut Ctx<'_>) -> Reply {
    let req = match Request::decode(ctx.hdr, ctx.msg) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(command = ctx.hdr.command, error = %e, "undecodable request");
            return Reply::error(decode_status(&e));
        }
    };
    if conn.state.negotiated.is_none() && !matches!(req, Request::Negotiate(_)) {
        return Reply {
            disconnect: true,
            ..Reply::error(status::INVALID_PARAMETER)
        };
    }
    let kind = op_kind(&req);
    let started = std::time::Instant::now();
    let r = match req {
        Request::Negotiate(r) => handlers::negotiate::negotiate(conn, ctx, r),
        Request::SessionSetup(r) => handlers::session::session_setup(conn, ctx, r).await,
        Request::Logoff => handlers::session::logoff(conn, ctx).await,
        Request::TreeConnect(r) => handlers::tree::tree_connect(conn, ctx, r).await,
        Request::TreeDisconnect => handlers::tree::tree_disconnect(conn, ctx).await,
        Request::Create(r) => handlers::create::create(conn, ctx, r).await,
        Request::Close(r) => handlers::create::close(conn, ctx, r).await,
        Request::Flush(id) => handlers::io::flush(conn, ctx, id).await,
        Request::Read(r) => handlers::io::read(conn, ctx, r).await,
        Request::Write(r) => handlers::io::write(conn, ctx, r).await,
        Request::Lock(r) => handlers::io::lock(conn, ctx, r).await,
        Request::Ioctl(r) => handlers::ioctl::ioctl(conn, ctx, r).await,
        Request::Cancel => Err(status::INVALID_PARAMETER),
        Request::Echo => {
            let mut b = Vec::new();
            crate::proto::session::encode_empty_response(&mut b);
            Ok(Reply::ok(b))
        }
        Request::QueryDirectory(r) => handlers::dir::query_directory(conn, ctx, r).await,
        Request::ChangeNotify(r) => handlers::notify::change_notify(conn, ctx, r),
        Request::OplockBreak(ack) => handlers::oplock::acknowledge(conn, ctx, ack),
        Request::QueryInfo(r) => handlers::info::query_info(conn, ctx, r).await,
        Request::SetInfo(r) => handlers::info::set_info(conn, ctx, r).await,
    };
    let reply = r.unwrap_or_else(Reply::error);
    if status::is_error(reply.status) {
        tracing::trace!(
            command = ctx.hdr.command,
            status = format_args!("{:#010x}", reply.status),
            "request failed"
        );
    }
    match kind {
        Some(kind) => observed(conn, ctx, kind, started, reply),
        None => reply,
    }
}

/// The family of a request that [`OpObserver`](super::OpObserver)s count (requests on a
/// tree's files); `None` for connection, session and tree management.
fn op_kind(req: &Request<'_>) -> Option<OpKind> {
    Some(match req {
        Request::Create(_) => OpKind::Create,
        Request::Close(_) => OpKind::Close,
        Request::Flush(_) => OpKind::Flush,
        Request::Read(_) => OpKind::Read,
        Request::Write(_) => OpKind::Write,
        Request::Lock(_) => OpKind::Lock,
        Request::Ioctl(_) => OpKind::Ioctl,
        Request::QueryDirectory(_) => OpKind::QueryDirectory,
        Request::ChangeNotify(_) => OpKind::ChangeNotify,
        Request::QueryInfo(_) => OpKind::QueryInfo,
        Request::SetInfo(_) => OpKind::SetInfo,
        _ => return None,
    })
}

/// File data a successful READ or WRITE response reports: both bodies carry the count
/// as a little-endian u32 at offset 4 (DataLength, Count; MS-SMB2 2.2.20, 2.2.22).
fn transferred(kind: OpKind, body: &[u8]) -> u64 {
    if !matches!(kind, OpKind::Read | OpKind::Write) {
        return 0;
    }
    body.get(4..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, |b: [u8; 4]| u64::from(u32::from_le_bytes(b)))
}

/// Reports `reply` to the tree's observer: now, or when its deferred storage call ends.
fn observed(
    conn: &Connection,
    ctx: &Ctx<'_>,
    kind: OpKind,
    started: std::time::Instant,
    mut reply: Reply,
) -> Reply {
    if reply.wait.is_some() {
        // Counted when it completes (a CREATE waiting for breaks runs again).
        return reply;
    }
    let Some(observer) = conn
        .state
        .sessions
        .get(&ctx.session_id)
        .and_then(|s| s.trees.get(&ctx.tree_id))
        .and_then(|t| t.observer.clone())
    else {
        return reply;
    };
    match reply.deferred.take() {
        Some(work) => {
            reply.deferred = Some(Box::pin(async move {
                let result = work.await;
                match &result {
                    Ok(out) => {
                        let body = out.buf.get(out.start..out.end).unwrap_or_default();
                        observer.completed(
                            kind,
                            transferred(kind, body),
                            started.elapsed(),
                            status::SUCCESS,
                        );
                    }
                    Err(st) => observer.completed(kind, 0, started.elapsed(), *st),
                }
                result
            }));
        }
        None => {
            let bytes = if reply.status == status::SUCCESS {
                transferred(kind, &reply.body)
            } else {
                0
            };
            observer.completed(kind, bytes, started.elapsed(), reply.status);
        }
    }
    reply
}
