//! One SMB connection: its request loop over the frames [`super::frames`] reads, the SMB1
//! NEGOTIATE upgrade, decryption of transform-wrapped requests, compound splitting, credit
//! and signature checks, and signing / sealing / framing of every response. Request
//! semantics live in [`super::dispatch`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;

use tokio::io::{AsyncRead, BufReader};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::crypto::PreauthHash;
use crate::proto::header::{
    FLAGS_OFFSET, FLAG_ASYNC_COMMAND, FLAG_SERVER_TO_REDIR, FLAG_SIGNED, NEXT_COMMAND_OFFSET,
    SIGNATURE_OFFSET,
};
use crate::proto::request::{request_file_id, split_compound};
use crate::proto::transform::{is_transform, TransformHeader, TRANSFORM_LEN};
use crate::proto::{smb1, status, Command, FileId, Header, HEADER_LEN};

use super::bufpool::{OutBuf, Received};
use super::channel::{Channel, ElementCheck, Forward, Inbound, Signature, Via};
use super::credits::CreditWindow;
use super::dispatch::{self, Ctx, Deferred, PreauthTarget, Reply};
use super::frames::FrameReader;
use super::outbox::Outbox;
use super::pending::{PendingOp, MAX_PENDING_PER_CONNECTION, PENDING_POLL};
use super::shared::SharedState;
use super::state::{AuthState, ConnState};
use super::{Backend, ServerConfig, AUTH_TIMEOUT, IDLE_TIMEOUT};

/// Logged-off sessions remembered per connection (see `prune_expired_sessions`).
const MAX_EXPIRED_SESSIONS: usize = 4;
/// Size of the socket read buffer.
const READ_BUFFER: usize = 256 * 1024;

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// Socket error.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The peer broke the protocol badly enough that MS-SMB2 says to disconnect.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// Server shutdown or admin disconnect.
    #[error("shut down")]
    Shutdown,
    /// No progress within the allowed time.
    #[error("timed out")]
    Timeout,
}

/// A protocol violation: the connection ends (see [`ConnError::Protocol`]).
pub(super) fn violation(what: impl Into<String>) -> ConnError {
    ConnError::Protocol(what.into())
}

/// The SMB2 header at the start of a response this server encoded. Every response starts
/// with one; a shorter one would end the connection rather than panic.
fn response_header(msg: &mut [u8]) -> Result<&mut [u8; HEADER_LEN], ConnError> {
    msg.first_chunk_mut::<HEADER_LEN>()
        .ok_or_else(|| violation("response shorter than an SMB2 header"))
}

/// Sets SMB2_FLAGS_SIGNED in an encoded header.
fn mark_signed(header: &mut [u8; HEADER_LEN]) {
    let mut flags = [0u8; 4];
    flags.copy_from_slice(&header[FLAGS_OFFSET..FLAGS_OFFSET + 4]);
    let flags = u32::from_le_bytes(flags) | FLAG_SIGNED;
    header[FLAGS_OFFSET..FLAGS_OFFSET + 4].copy_from_slice(&flags.to_le_bytes());
}

/// A response buffer without room for the headers put in front of its body: never happens
/// (the body is moved behind enough headroom first), but would end the connection rather
/// than panic.
fn no_headroom() -> ConnError {
    violation("response buffer has no room for its headers")
}

/// Runs one connection to completion.
pub async fn run_connection(
    sock: TcpStream,
    peer: SocketAddr,
    backend: Arc<dyn Backend>,
    config: Arc<ServerConfig>,
    shared: Arc<SharedState>,
    shutdown: CancellationToken,
) -> Result<(), ConnError> {
    let local = sock.local_addr()?;
    let (breaks_tx, breaks_rx) = tokio::sync::mpsc::unbounded_channel();
    let (inbox_tx, inbox_rx) = tokio::sync::mpsc::channel(super::channel::FORWARD_QUEUE);
    let (rd, wr) = sock.into_split();
    let rd = BufReader::with_capacity(READ_BUFFER, rd);
    let conn_id = shared.sessions().next_conn_id();
    let traffic = Arc::new(super::ChannelTraffic::new(peer, local));
    let (out, writer) = Outbox::new(wr, shared.clone(), traffic.clone());
    let mut conn = Connection {
        state: ConnState {
            negotiated: None,
            preauth: PreauthHash::new(),
            credits: CreditWindow::new(),
            sessions: Default::default(),
            channels: Default::default(),
            peer,
            local,
            smb1_seen: false,
            aapl: None,
        },
        backend,
        config,
        shared,
        admin_cancel: CancellationToken::new(),
        closed: CancellationToken::new(),
        pending: Vec::new(),
        next_async_id: 0,
        breaks: breaks_tx,
        conn_id,
        inbox: inbox_tx,
        inbox_rx,
        out: out.clone(),
        gone: CancellationToken::new(),
        traffic: traffic.clone(),
    };
    let _closed = conn.closed.clone().drop_guard();
    let mut frames = FrameReader::new(rd, conn.shared.bufs().clone());
    let writer = tokio::spawn(writer.run());
    let result = serve_frames(&mut conn, &mut frames, breaks_rx, out, &shutdown).await;
    conn.gone.cancel();
    // A message cut short by the end gives its pooled buffer back now.
    drop(frames);
    // Sessions with surviving channels move to one of them before this connection stops
    // taking requests from its channels, so that a channel whose request is lost here
    // finds the adoption waiting in its own inbox.
    conn.hand_over_sessions().await;
    // Channels of this connection stop pointing at their sessions' owners, and requests
    // still queued from other channels are answered (their sessions end with this one).
    for c in conn.state.channels.values() {
        c.entry().remove_channel(conn.conn_id);
    }
    conn.state.channels.clear();
    conn.inbox_rx.close();
    // The writer ends once every sender is gone: this connection's own (given up here), this
    // loop's, and those of READs and WRITEs still running. Responses already queued (a
    // LOGOFF's, say) go out first.
    conn.out = conn.out.detached();
    let flushed = tokio::time::timeout(FLUSH_TIMEOUT, writer).await;
    conn.cleanup().await;
    conn.shared
        .unregister_client(conn.client_guid(), conn.conn_id);
    traffic
        .open
        .store(false, std::sync::atomic::Ordering::Relaxed);
    match (result, flushed) {
        (Err(e), _) => Err(e),
        (Ok(()), Ok(Ok(Err(e)))) => Err(e),
        (Ok(()), _) => Ok(()),
    }
}

/// Bytes of READ/WRITE payload a connection may have in flight off its request loop; more
/// waits (each READ or WRITE is at most `MAX_IO_SIZE`, 8 MiB). Units of [`BUDGET_UNIT`].
const INFLIGHT_BUDGET: u32 = (64 * 1024 * 1024 / BUDGET_UNIT) as u32;
/// Granularity of [`INFLIGHT_BUDGET`].
const BUDGET_UNIT: usize = 64 * 1024;
/// How long a closing connection waits for queued and in-flight responses.
const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Sends the request loop's responses in order (written at once when nothing is queued);
/// an error means the socket is gone.
async fn send_all(out: &Outbox, msgs: Vec<Vec<u8>>) -> Result<(), ConnError> {
    for m in msgs {
        out.send_now((OutBuf::from_vec(m), None)).await?;
    }
    Ok(())
}

/// A message for this connection's socket or, when it answers a request that came over
/// another channel of the session, for that channel's.
pub type Routed = (Vec<u8>, Option<Arc<Via>>);

/// Sends routed messages: this connection's own in order (see [`send_all`]); another
/// channel's queued without waiting on it (a stalled channel must not stall the session's
/// owner).
async fn send_routed(out: &Outbox, msgs: Vec<Routed>) -> Result<(), ConnError> {
    for (m, via) in msgs {
        match via {
            None => send_all(out, vec![m]).await?,
            Some(via) => {
                let chan = via.out.clone();
                tokio::spawn(async move {
                    let _ = chan.send((OutBuf::from_vec(m), None)).await;
                });
            }
        }
    }
    Ok(())
}

/// Sends the final responses of the pending operations that are done, running again
/// the CREATEs whose breaks are settled.
async fn finish_pending(conn: &mut Connection, out: &Outbox) -> Result<(), ConnError> {
    let (msgs, retries) = conn.poll_pending()?;
    send_routed(out, msgs).await?;
    for op in retries {
        if let Some(msg) = conn.retry(op).await? {
            send_routed(out, vec![msg]).await?;
        }
    }
    Ok(())
}

/// Serves what another connection asks of this connection's sessions, then sends the
/// CHANGE_NOTIFY completions it caused.
async fn serve_inbound(conn: &mut Connection, msg: Inbound, out: &Outbox) -> Result<(), ConnError> {
    conn.inbound(msg).await;
    if conn.pending.iter().any(|p| p.is_notify()) {
        finish_pending(conn, out).await?;
    }
    Ok(())
}

/// Processes frames until EOF, error, timeout or cancellation, completing asynchronous
/// operations in between. READs and WRITEs that stand alone run as their own tasks, bounded
/// by [`INFLIGHT_BUDGET`], while later requests are read and answered.
async fn serve_frames<R: AsyncRead + Unpin>(
    conn: &mut Connection,
    frames: &mut FrameReader<R>,
    mut breaks: tokio::sync::mpsc::UnboundedReceiver<crate::oplock::BreakNotice>,
    out: Outbox,
    shutdown: &CancellationToken,
) -> Result<(), ConnError> {
    let budget = Arc::new(tokio::sync::Semaphore::new(INFLIGHT_BUDGET as usize));
    loop {
        let authed = conn.state.sessions.values().any(|s| s.is_valid())
            || conn
                .state
                .channels
                .values()
                .any(|c| matches!(c, Channel::Bound { .. }));
        let limit = if authed { IDLE_TIMEOUT } else { AUTH_TIMEOUT };
        let waiting = !conn.pending.is_empty();
        // Biased: a break notice queued while the previous request ran goes out before the
        // answer to the next request (clients such as smbtorture's lease.rename_wait read
        // the break from the stream of that answer; a random pick sometimes reordered them).
        let frame = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Err(ConnError::Shutdown),
            _ = conn.admin_cancel.cancelled() => return Err(ConnError::Shutdown),
            Some(notice) = breaks.recv() => {
                if let Some(msg) = conn.break_message(notice)? {
                    send_all(&out, vec![msg]).await?;
                }
                continue;
            }
            Some(msg) = conn.inbox_rx.recv() => {
                serve_inbound(conn, msg, &out).await?;
                continue;
            }
            _ = tokio::time::sleep(PENDING_POLL), if waiting => {
                finish_pending(conn, &out).await?;
                continue;
            }
            // Cancel-safe: a frame partly read when another branch wins is finished on
            // the next pass (see `frames`).
            r = tokio::time::timeout(limit, frames.next()) => match r {
                Err(_) => return Err(ConnError::Timeout),
                Ok(r) => r?,
            },
        };
        let Some(frame) = frame else { return Ok(()) };
        conn.traffic
            .received
            .fetch_add(frame.len() as u64 + 4, std::sync::atomic::Ordering::Relaxed);
        let units = u32::try_from(frame.len().div_ceil(BUDGET_UNIT).max(1))
            .unwrap_or(INFLIGHT_BUDGET)
            .min(INFLIGHT_BUDGET);
        let processed = conn.process(frame).await?;
        send_all(&out, processed.msgs).await?;
        if conn.pending.iter().any(|p| p.is_notify()) {
            // A change this request made completes a waiting CHANGE_NOTIFY before the
            // next request can add more (clients expect one change per completion).
            finish_pending(conn, &out).await?;
        }
        if let Some(job) = processed.deferred {
            // A READ's response is as large as what it asked for: charge the larger of the
            // request and the header's credit charge (64 KiB per credit).
            let charge = u32::from(job.credit_charge().max(1)).min(INFLIGHT_BUDGET);
            let permit = budget
                .clone()
                .acquire_many_owned(units.max(charge))
                .await
                .map_err(|_| ConnError::Shutdown)?;
            let small = job.credit_charge() <= INLINE_POLL_MAX_CHARGE;
            let mut run = Box::pin(job.run());
            // A small READ served from the page cache completes on its first poll (see
            // `handlers::cached_first`): finished here, it costs no task spawn and wake-up.
            // Anything still waiting then (the blocking pool) goes on as its own task.
            if small {
                let first = std::future::poll_fn(|cx| Poll::Ready(run.as_mut().poll(cx))).await;
                if let Poll::Ready(r) = first {
                    if let Some(msg) = deferred_response(r, &conn.admin_cancel) {
                        out.send_now((msg, Some(permit))).await?;
                    }
                    continue;
                }
            }
            let out = out.clone();
            let end = conn.admin_cancel.clone();
            tokio::spawn(async move {
                if let Some(msg) = deferred_response(run.await, &end) {
                    let _ = out.send((msg, Some(permit))).await;
                }
            });
        }
    }
}

/// Deferred READs and WRITEs charged at most this many credits (128 KiB) get a first poll on
/// the connection's own task before being spawned.
const INLINE_POLL_MAX_CHARGE: u16 = 2;

/// A deferred job's response, to send. One that cannot be sealed or signed ends the
/// connection (the client would otherwise wait for it forever).
fn deferred_response(result: Result<OutBuf, ConnError>, end: &CancellationToken) -> Option<OutBuf> {
    match result {
        Ok(msg) => Some(msg),
        Err(e) => {
            tracing::warn!(error = %e, "deferred response could not be sealed");
            end.cancel();
            None
        }
    }
}

/// What processing one frame produced.
pub struct Processed {
    /// Responses to send now, in order.
    pub msgs: Vec<Vec<u8>>,
    /// A READ or WRITE whose response is finished concurrently.
    pub deferred: Option<DeferredJob>,
}

/// A READ or WRITE's storage call plus everything needed to answer it: the response header
/// (credits already granted) and the session's signing or sealing key.
pub struct DeferredJob {
    work: Deferred,
    header: Header,
    signing_key: Option<crate::crypto::SigningKey>,
    seal: Option<(Arc<crate::crypto::CipherKey>, [u8; 16], u64)>,
}

impl DeferredJob {
    /// Credits the request was charged (a READ's response size is bounded by 64 KiB each).
    pub fn credit_charge(&self) -> u16 {
        self.header.credit_charge
    }

    /// Runs the storage call and returns the signed or sealed response message, built in
    /// place in front of the body when the body left room for it.
    pub async fn run(self) -> Result<OutBuf, ConnError> {
        let mut header = self.header;
        let body = match self.work.await {
            Ok(body) => body,
            Err(st) => {
                header.status = st;
                let mut b = Vec::with_capacity(9);
                crate::proto::io::encode_error_response(&mut b);
                OutBuf::from_vec(b)
            }
        };
        let need = HEADER_LEN
            + if self.seal.is_some() {
                TRANSFORM_LEN
            } else {
                0
            };
        let mut out = if body.start >= need {
            body
        } else {
            // No headroom (a small body): one copy behind fresh headroom.
            let mut buf = Vec::with_capacity(need + body.end - body.start);
            buf.resize(need, 0);
            buf.extend_from_slice(body.bytes());
            let end = buf.len();
            OutBuf {
                buf: buf.into(),
                start: need,
                end,
                pooled: false,
                tail: body.tail,
            }
        };
        if self.seal.is_none() && self.signing_key.is_some() {
            // The flag is covered by the signature: set before the header is encoded.
            header.flags |= FLAG_SIGNED;
        }
        let at = out.start - HEADER_LEN;
        out.buf
            .get_mut(at..out.start)
            .ok_or_else(no_headroom)?
            .copy_from_slice(&header.to_bytes());
        out.start = at;
        if let Some((key, nonce, sid)) = self.seal {
            // Sealing encrypts in place: a shared tail becomes this message's own copy.
            out.flatten();
            out.start -= TRANSFORM_LEN;
            let (s, e) = (out.start, out.end);
            let frame = out.buf.get_mut(s..e).ok_or_else(no_headroom)?;
            key.seal_frame(frame, &nonce, sid)
                .map_err(|e| violation(e.to_string()))?;
        } else if let Some(key) = self.signing_key {
            let tail = out.tail.clone();
            let (s, e) = (out.start, out.end);
            let m = out.buf.get_mut(s..e).ok_or_else(no_headroom)?;
            let tail = tail.as_deref().map_or(&[][..], |t| t.as_slice());
            key.sign_parts(m, tail)
                .map_err(|e| violation(e.to_string()))?;
        }
        Ok(out)
    }
}

/// A connection's state plus the shared server context.
pub struct Connection {
    /// Protocol state.
    pub state: ConnState,
    /// The appliance.
    pub backend: Arc<dyn Backend>,
    /// Settings.
    pub config: Arc<ServerConfig>,
    /// Cross-connection share state (share modes, locks).
    pub shared: Arc<SharedState>,
    /// Cancelled when any of this connection's sessions is disconnected by an admin.
    pub admin_cancel: CancellationToken,
    /// Cancelled when the connection ends (stops helper tasks).
    pub closed: CancellationToken,
    /// Outstanding asynchronous operations.
    pub pending: Vec<PendingOp>,
    /// Last AsyncId handed out.
    pub next_async_id: u64,
    /// Where breaks of oplocks and leases granted on this connection are delivered.
    pub breaks: super::shared::BreakSender,
    /// This connection's server-wide id.
    pub conn_id: u64,
    /// Where other channels of this connection's sessions hand over their requests.
    pub inbox: tokio::sync::mpsc::Sender<Inbound>,
    /// The receiving end of [`Connection::inbox`].
    pub inbox_rx: tokio::sync::mpsc::Receiver<Inbound>,
    /// This connection's socket writer (for the [`Via`] of a channel it binds).
    pub out: Outbox,
    /// Cancelled when this connection stops serving (answers routed to it are dropped).
    pub gone: CancellationToken,
    /// This connection's byte counters (per-channel figures of its sessions).
    pub traffic: Arc<super::ChannelTraffic>,
}

/// One response element before signing and compounding.
struct OutMsg {
    /// The encoded header and body.
    msg: Vec<u8>,
    /// Whose key signs it.
    session_id: u64,
    /// Whether to sign it.
    sign: bool,
    /// The key to sign with instead of the session's (a channel's, or a binding's).
    key: Option<crate::crypto::SigningKey>,
}

/// Facts about one compound element carried to the next (related operations).
#[derive(Clone, Copy, Default)]
struct Chain {
    session_id: u64,
    tree_id: u32,
    file_id: Option<FileId>,
    /// Status of a failed CREATE: related requests after it fail the same way.
    create_error: Option<u32>,
}

impl Connection {
    /// Processes one received frame; returns the response messages (unframed) to send now
    /// and, for a lone READ or WRITE, the job that finishes its response off this task.
    pub async fn process(&mut self, mut frame: Received) -> Result<Processed, ConnError> {
        if smb1::is_smb1(&frame) {
            return Ok(Processed {
                msgs: vec![self.smb1_negotiate(&frame)?],
                deferred: None,
            });
        }
        let mut encrypted_by: Option<u64> = None;
        let plain_start = if is_transform(&frame) {
            let th = TransformHeader::decode(&frame).map_err(|e| violation(e.to_string()))?;
            // The session's own key, or for a bound channel the owner's copy.
            let key = match (
                self.state.sessions.get(&th.session_id),
                self.state.channels.get(&th.session_id),
            ) {
                (Some(session), _) => session
                    .decrypt_key
                    .clone()
                    .ok_or_else(|| violation("session has no decryption key"))?,
                (None, Some(Channel::Bound { entry, .. })) => entry
                    .decrypt_key
                    .clone()
                    .ok_or_else(|| violation("session has no decryption key"))?,
                _ => return Err(violation("transform header names an unknown session")),
            };
            key.open_frame(&mut frame)
                .map_err(|e| violation(e.to_string()))?;
            encrypted_by = Some(th.session_id);
            TRANSFORM_LEN
        } else {
            0
        };
        // Only a connection bound as a channel of another's session forwards: the common
        // case skips the lookup.
        if !self.state.channels.is_empty() {
            let target = match encrypted_by {
                Some(sid) => sid,
                None => frame
                    .get(plain_start..)
                    .and_then(|plain| Header::decode(plain).ok())
                    .map_or(0, |h| h.session_id),
            };
            if !self.state.sessions.contains_key(&target)
                && matches!(
                    self.state.channels.get(&target),
                    Some(Channel::Bound { .. })
                )
            {
                frame.skip_front(plain_start);
                return self.forward(frame, encrypted_by, target).await;
            }
        }
        // Shared so that a deferred WRITE can take its data without a copy.
        self.process_plain(Arc::new(frame), plain_start, encrypted_by, None)
            .await
    }

    /// Hands a frame for a session this connection is a channel of to the session's owner,
    /// after checking credits and signatures here (they belong to this channel), and waits
    /// for the answer, serving what other channels hand to this connection meanwhile (two
    /// connections may each be a channel of the other's session).
    async fn forward(
        &mut self,
        frame: Received,
        encrypted_by: Option<u64>,
        session_id: u64,
    ) -> Result<Processed, ConnError> {
        let Some(Channel::Bound { entry, via, .. }) = self.state.channels.get(&session_id) else {
            return Err(violation("no channel for the session"));
        };
        let (entry, via) = (entry.clone(), via.clone());
        let elements = split_compound(&frame).map_err(|e| violation(e.to_string()))?;
        let mut checks = Vec::with_capacity(elements.len());
        let mut headers = Vec::with_capacity(elements.len());
        for element in &elements {
            let hdr = Header::decode(element).map_err(|e| violation(e.to_string()))?;
            if hdr.flags & FLAG_SERVER_TO_REDIR != 0 {
                return Err(violation("response received by the server"));
            }
            if hdr.command() == Some(Command::Cancel) {
                checks.push(ElementCheck {
                    grant: 0,
                    signature: Signature::Absent,
                });
                headers.push(hdr);
                continue;
            }
            self.state
                .credits
                .consume(hdr.message_id, hdr.credit_charge)
                .map_err(|e| violation(e.to_string()))?;
            let signature = if encrypted_by.is_some() || !hdr.is_signed() {
                Signature::Absent
            } else if via.signing_key.verify(element).is_ok() {
                Signature::Valid
            } else {
                Signature::Bad
            };
            checks.push(ElementCheck {
                grant: self.state.credits.grant(hdr.credits, hdr.credit_charge),
                signature,
            });
            headers.push(hdr);
        }
        drop(elements);
        let frame = Arc::new(frame);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut sent = entry
            .owner
            .send(Inbound::Forward(Forward {
                frame: frame.clone(),
                encrypted_by,
                checks: checks.clone(),
                via: via.clone(),
                reply: tx,
            }))
            .await;
        if let Err(tokio::sync::mpsc::error::SendError(again)) = sent {
            // The owner's connection ended; another channel may have adopted the session.
            let heir = self
                .shared
                .sessions()
                .find(session_id)
                .filter(|e| e.owner_conn != entry.owner_conn && e.owner_conn != self.conn_id);
            sent = match heir {
                Some(heir) => {
                    if let Some(Channel::Bound { entry, .. }) =
                        self.state.channels.get_mut(&session_id)
                    {
                        *entry = heir.clone();
                    }
                    heir.owner.send(again).await
                }
                None => Err(tokio::sync::mpsc::error::SendError(again)),
            };
        }
        let mut answer = if sent.is_ok() {
            self.owner_answer(rx).await
        } else {
            None
        };
        if answer.is_none() {
            // An owner that ends hands its sessions over before it stops: an adoption
            // may already wait in this connection's inbox.
            while let Ok(msg) = self.inbox_rx.try_recv() {
                self.inbound(msg).await;
            }
            // Or another channel adopted the session: ask it once.
            let heir = self
                .shared
                .sessions()
                .find(session_id)
                .filter(|e| e.owner_conn != entry.owner_conn && e.owner_conn != self.conn_id);
            if let (false, Some(heir)) = (self.state.sessions.contains_key(&session_id), heir) {
                if let Some(Channel::Bound { entry, .. }) = self.state.channels.get_mut(&session_id)
                {
                    *entry = heir.clone();
                }
                let (tx, rx) = tokio::sync::oneshot::channel();
                let again = Forward {
                    frame: frame.clone(),
                    encrypted_by,
                    checks: checks.clone(),
                    via: via.clone(),
                    reply: tx,
                };
                if heir.owner.send(Inbound::Forward(again)).await.is_ok() {
                    answer = self.owner_answer(rx).await;
                }
            }
        }
        match answer {
            Some(r) => r,
            None if self.state.sessions.contains_key(&session_id) => {
                // The old owner ended holding this request, and this connection adopted
                // the session meanwhile: serve it here, as the channel it came over.
                self.process_plain(frame, 0, encrypted_by, Some((&checks, via)))
                    .await
            }
            None => {
                tracing::debug!(
                    session_id,
                    "channel answers USER_SESSION_DELETED: its owner is gone"
                );
                // The owner's connection is gone, and the session with it: each element
                // (CANCELs get none) is answered USER_SESSION_DELETED, unsigned, with the
                // credits this channel granted.
                self.state.channels.remove(&session_id);
                let msgs = headers
                    .iter()
                    .zip(&checks)
                    .filter(|(h, _)| h.command() != Some(Command::Cancel))
                    .map(|(h, check)| {
                        let mut rh = h.response(status::USER_SESSION_DELETED);
                        rh.credits = check.grant;
                        let mut msg = Vec::with_capacity(HEADER_LEN + 9);
                        rh.encode(&mut msg);
                        crate::proto::io::encode_error_response(&mut msg);
                        OutMsg {
                            msg,
                            session_id,
                            sign: false,
                            key: None,
                        }
                    })
                    .collect::<Vec<OutMsg>>();
                Ok(Processed {
                    msgs: if msgs.is_empty() {
                        Vec::new()
                    } else {
                        vec![self.finish(msgs, None)?]
                    },
                    deferred: None,
                })
            }
        }
    }

    /// Serves one thing another connection asks of this connection's sessions.
    pub async fn inbound(&mut self, msg: Inbound) {
        match msg {
            Inbound::Forward(Forward {
                frame,
                encrypted_by,
                checks,
                via,
                reply,
            }) => {
                let r = self
                    .process_plain(frame, 0, encrypted_by, Some((&checks, via)))
                    .await;
                let _ = reply.send(r);
            }
            Inbound::Adopt(adoption) => self.adopt(*adoption).await,
            Inbound::CloseSession {
                session_id,
                user,
                done,
            } => {
                let same_user = self
                    .state
                    .sessions
                    .get(&session_id)
                    .is_some_and(|s| s.is_valid() && s.user.eq_ignore_ascii_case(&user));
                if same_user {
                    self.end_session(session_id, true).await;
                }
                let _ = done.send(());
            }
        }
    }

    /// Waits for the owner's answer to a forwarded request, serving what other channels
    /// hand to this connection meanwhile (two connections may each be a channel of the
    /// other's session). `None` when the owner dropped the request (its connection ended).
    async fn owner_answer(
        &mut self,
        mut rx: tokio::sync::oneshot::Receiver<Result<Processed, ConnError>>,
    ) -> Option<Result<Processed, ConnError>> {
        loop {
            tokio::select! {
                r = &mut rx => break r.ok(),
                Some(msg) = self.inbox_rx.recv() => self.inbound(msg).await,
            }
        }
    }

    /// Hands every session of this (ending) connection that still has other channels to
    /// one of them (`hand_over`); the rest end in [`Self::cleanup`].
    pub async fn hand_over_sessions(&mut self) {
        // This connection is no heir of the sessions it was a channel of.
        for c in self.state.channels.values() {
            c.entry().remove_channel(self.conn_id);
        }
        let ids: Vec<u64> = self.state.sessions.keys().copied().collect();
        for id in ids {
            self.hand_over(id).await;
        }
    }

    /// Hands session `sid`, whose owner (this connection) is ending, to the first of its
    /// channels that still serves; returns whether one took it. Its waiting operations
    /// go along; those that came over this connection finish unanswered.
    async fn hand_over(&mut self, sid: u64) -> bool {
        if !self.state.sessions.get(&sid).is_some_and(|s| s.is_valid()) {
            return false;
        }
        let Some(entry) = self
            .shared
            .sessions()
            .find(sid)
            .filter(|e| e.owner_conn == self.conn_id)
        else {
            return false;
        };
        let heirs = entry.live_channels();
        if heirs.is_empty() {
            return false;
        }
        let Some(session) = self.state.sessions.remove(&sid) else {
            return false;
        };
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| p.session_id == sid);
        self.pending = rest;
        let pending = mine
            .into_iter()
            .map(|mut p| {
                p.silent |= p.via.is_none();
                p
            })
            .collect();
        let mut adoption = Box::new(super::channel::Adoption {
            session,
            entry,
            pending,
        });
        for (conn_id, tx) in heirs {
            match tx.send(Inbound::Adopt(adoption)).await {
                Ok(()) => {
                    tracing::info!(
                        session = sid,
                        heir = conn_id,
                        "session handed to a surviving channel"
                    );
                    return true;
                }
                Err(tokio::sync::mpsc::error::SendError(Inbound::Adopt(a))) => adoption = a,
                Err(_) => return false,
            }
        }
        self.state.sessions.insert(sid, adoption.session);
        false
    }

    /// Becomes the owner of a session whose owner's connection ended (this connection is
    /// one of its channels): its trees, opens and waiting operations move here, its
    /// oplocks and leases break to this connection, this channel's key signs for it, and
    /// it is published again with this connection as owner.
    async fn adopt(&mut self, a: super::channel::Adoption) {
        let super::channel::Adoption {
            mut session,
            entry,
            pending,
        } = a;
        let sid = session.id;
        let via = match self.state.channels.remove(&sid) {
            Some(Channel::Bound { via, .. }) => via,
            other => {
                // Not a channel of it (any more): nobody can reach the session.
                tracing::info!(
                    session = sid,
                    "session offered to a connection no longer its channel: closed"
                );
                if let Some(c) = other {
                    self.state.channels.insert(sid, c);
                }
                let opens: Vec<_> = session.opens.drain().map(|(_, o)| (o, None)).collect();
                close_or_keep(self.shared.clone(), opens).await;
                return;
            }
        };
        session.signing_key = Some(via.signing_key.clone());
        for o in session.opens.values() {
            if let Some(share) = &o.share {
                share.oplocks().reattach(
                    o.inode,
                    o.file_id.volatile,
                    sid,
                    super::shared::BreakSink::to(self.breaks.clone()),
                );
            }
        }
        entry.remove_channel(self.conn_id);
        let heirs = entry.live_channels();
        self.shared
            .sessions()
            .publish(super::channel::SessionEntry {
                session_id: sid,
                owner_conn: self.conn_id,
                owner: self.inbox.clone(),
                user: entry.user.clone(),
                dialect: entry.dialect,
                cipher: entry.cipher,
                signing_key: entry.signing_key.clone(),
                decrypt_key: entry.decrypt_key.clone(),
                signing_required: entry.signing_required,
                channels: std::sync::atomic::AtomicUsize::new(heirs.len()),
                channel_inboxes: std::sync::Mutex::new(heirs),
                observer: entry.observer.clone(),
            });
        for mut op in pending {
            if op.via.as_ref().is_some_and(|v| v.conn_id == self.conn_id) {
                op.via = None;
            }
            self.pending.push(op);
        }
        self.state.sessions.insert(sid, session);
        tracing::info!(session = sid, "session adopted by a surviving channel");
    }

    /// A client lease key as the oplock table knows it (scoped by this client's GUID).
    pub fn lease_scope(&self, key: &[u8; 16]) -> [u8; 16] {
        crate::oplock::scoped_lease_key(&self.client_guid(), key)
    }

    /// The ClientGuid this connection negotiated with (zeros before NEGOTIATE).
    pub fn client_guid(&self) -> [u8; 16] {
        self.state
            .negotiated
            .as_ref()
            .map_or([0; 16], |n| n.client_guid)
    }

    /// Ends a session: it stays as a tombstone (USER_SESSION_DELETED for late requests),
    /// leaves the directory, and its trees and opens are closed, except that with
    /// `keep_durable` (a reconnecting client replaced the session) its durable opens are
    /// kept for the client to reclaim.
    pub async fn end_session(&mut self, session_id: u64, keep_durable: bool) {
        self.shared.sessions().withdraw(session_id, self.conn_id);
        let client_guid = self.client_guid();
        let owner = |user: &str| super::durable::Owner {
            user: user.to_string(),
            client_guid,
        };
        let opens: Vec<_> = match self.state.sessions.get_mut(&session_id) {
            Some(s) => {
                let keep = (keep_durable && s.is_valid()).then(|| owner(&s.user));
                s.auth = AuthState::Expired;
                s.trees.clear();
                s.opens.drain().map(|(_, o)| (o, keep.clone())).collect()
            }
            None => return,
        };
        close_or_keep(self.shared.clone(), opens).await;
    }

    /// Processes a decrypted frame: each element's checks and dispatch, then the signed,
    /// compounded and (when needed) sealed response. `via` is set when another channel
    /// of the session handed the frame over: that channel already charged credits and
    /// checked signatures, and its key signs the answers.
    pub async fn process_plain(
        &mut self,
        frame: Arc<Received>,
        plain_start: usize,
        encrypted_by: Option<u64>,
        via: Option<(&[ElementCheck], Arc<Via>)>,
    ) -> Result<Processed, ConnError> {
        let (checks, via) = match via {
            Some((c, v)) => (Some(c), Some(v)),
            None => (None, None),
        };
        let via_conn = via.as_ref().map(|v| v.conn_id);
        let via_key = via.as_ref().map(|v| v.signing_key.clone());
        let plain = frame
            .get(plain_start..)
            .filter(|plain| plain.len() >= HEADER_LEN)
            .ok_or_else(|| violation("message shorter than an SMB2 header"))?;
        let elements = split_compound(plain).map_err(|e| violation(e.to_string()))?;
        if checks.is_some_and(|c| c.len() != elements.len()) {
            return Err(violation("forwarded frame does not match its checks"));
        }
        let mut responses: Vec<OutMsg> = Vec::with_capacity(elements.len());
        let mut channel_preauth: Option<u64> = None;
        let mut extra: Vec<Vec<u8>> = Vec::new();
        let mut chain = Chain::default();
        let mut encrypt_response = encrypted_by;
        let mut deferred_job = None;
        for (i, element) in elements.iter().enumerate() {
            let hdr = Header::decode(element).map_err(|e| violation(e.to_string()))?;
            if hdr.flags & FLAG_SERVER_TO_REDIR != 0 {
                return Err(violation("response received by the server"));
            }
            if hdr.command() == Some(Command::Cancel) {
                // CANCEL consumes no credit and gets no response of its own; the cancelled
                // operation completes with STATUS_CANCELLED (MS-SMB2 3.3.5.16).
                let pos = self.pending.iter().position(|p| {
                    if p.via.as_ref().map(|v| v.conn_id) != via_conn {
                        false
                    } else if hdr.is_async() {
                        p.async_id == hdr.async_id
                    } else {
                        p.hdr.message_id == hdr.message_id
                    }
                });
                if let Some(pos) = pos {
                    let op = self.pending.swap_remove(pos);
                    extra.push(self.complete(op, status::CANCELLED)?);
                }
                continue;
            }
            let forwarded = checks.and_then(|c| c.get(i)).copied();
            if forwarded.is_none() {
                if let Err(e) = self
                    .state
                    .credits
                    .consume(hdr.message_id, hdr.credit_charge)
                {
                    return Err(violation(e.to_string()));
                }
            }
            let related = i > 0 && hdr.is_related();
            let first_marked_related = i == 0 && hdr.is_related();
            let mut session_id = hdr.session_id;
            let mut tree_id = hdr.tree_id;
            if related {
                session_id = chain.session_id;
                tree_id = chain.tree_id;
            }
            let (mut reply, signed_req) = if first_marked_related {
                (Reply::error(status::INVALID_PARAMETER), false)
            } else {
                self.one_request(
                    &hdr,
                    element,
                    session_id,
                    tree_id,
                    related,
                    &chain,
                    encrypted_by,
                    (elements.len() == 1).then_some(&frame),
                    forwarded.map(|c| c.signature),
                )
                .await
            };
            let (mut reply, signed_req) = match reply.wait.take() {
                Some(wait) if self.pending.len() < MAX_PENDING_PER_CONNECTION => {
                    self.next_async_id += 1;
                    let element = if matches!(wait, super::pending::Wait::Breaks { .. }) {
                        element.to_vec()
                    } else {
                        Vec::new()
                    };
                    self.pending.push(PendingOp {
                        async_id: self.next_async_id,
                        hdr: hdr.clone(),
                        session_id,
                        signed: signed_req,
                        encrypted: encrypted_by.is_some(),
                        wait,
                        tree_id,
                        element,
                        via: via.clone(),
                        silent: false,
                    });
                    (
                        Reply {
                            async_id: Some(self.next_async_id),
                            ..Reply::error(status::PENDING)
                        },
                        false,
                    )
                }
                Some(super::pending::Wait::Lock { .. }) => {
                    (Reply::error(status::LOCK_NOT_GRANTED), signed_req)
                }
                Some(_) => (Reply::error(status::INSUFFICIENT_RESOURCES), signed_req),
                None => (reply, signed_req),
            };
            let mut rh = hdr.response(reply.status);
            if let Some(aid) = reply.async_id {
                rh.flags |= FLAG_ASYNC_COMMAND;
                rh.async_id = aid;
            }
            rh.session_id = reply.session_id.unwrap_or(session_id);
            rh.tree_id = reply.tree_id.unwrap_or(tree_id);
            rh.credits = match forwarded {
                Some(c) => c.grant,
                None => self.state.credits.grant(hdr.credits, hdr.credit_charge),
            };
            let named = request_file_id(&hdr, element).map(|id| {
                if related && id == FileId::ALL_ONES {
                    chain.file_id.unwrap_or(id)
                } else {
                    id
                }
            });
            // A failed CREATE, or a first element wrongly marked related, poisons the chain.
            let is_create = hdr.command() == Some(Command::Create) || (i == 0 && hdr.is_related());
            chain = Chain {
                // Only a session that exists carries over: a related request after one
                // naming an unknown session has none (MS-SMB2 3.3.5.2.7.2; Samba too).
                session_id: if self.state.sessions.contains_key(&rh.session_id) {
                    rh.session_id
                } else {
                    0
                },
                tree_id: rh.tree_id,
                file_id: reply
                    .file_id
                    .or(named)
                    .or(if related { chain.file_id } else { None }),
                create_error: if is_create && reply.status != status::SUCCESS {
                    Some(reply.status)
                } else if related {
                    chain.create_error
                } else {
                    None
                },
            };
            if let Some(work) = reply.deferred.take() {
                // Only a lone request is deferred: nothing follows it in this frame.
                if reply.encrypt && encrypt_response.is_none() {
                    encrypt_response = Some(rh.session_id);
                }
                let sign =
                    signed_req || reply.force_sign || self.session_requires_signing(rh.session_id);
                let key = reply.sign_with.take().or_else(|| via_key.clone());
                deferred_job = Some(self.deferred_job(work, rh, sign, encrypt_response, key));
                break;
            }
            let mut msg = Vec::with_capacity(HEADER_LEN + reply.body.len());
            rh.encode(&mut msg);
            msg.extend_from_slice(&reply.body);
            match reply.preauth {
                Some(PreauthTarget::Connection) => self.state.preauth.update(&msg),
                Some(PreauthTarget::Session(sid)) => {
                    if let Some(AuthState::InProgress { preauth, .. }) =
                        self.state.sessions.get_mut(&sid).map(|s| &mut s.auth)
                    {
                        preauth.update(&msg);
                    }
                }
                Some(PreauthTarget::Channel(sid)) => channel_preauth = Some(sid),
                None => {}
            }
            if reply.encrypt && encrypt_response.is_none() {
                encrypt_response = Some(rh.session_id);
            }
            let mut sign =
                signed_req || reply.force_sign || self.session_requires_signing(rh.session_id);
            if matches!(
                reply.status,
                status::USER_SESSION_DELETED | status::INVALID_PARAMETER
            ) && hdr.is_signed()
                && !self.state.sessions.contains_key(&rh.session_id)
            {
                // No key to sign with: mark it signed and echo the request's signature, which
                // clients accept for these statuses (Samba's smbXcli requires the flag).
                let header = response_header(&mut msg)?;
                mark_signed(header);
                header[SIGNATURE_OFFSET..].copy_from_slice(&hdr.signature);
                sign = false;
            }
            responses.push(OutMsg {
                msg,
                session_id: rh.session_id,
                sign: sign && reply.status != status::PENDING,
                key: reply.sign_with.take().or_else(|| via_key.clone()),
            });
            if reply.disconnect {
                return Err(violation("disconnect requested by handler"));
            }
        }
        let mut out = extra;
        if !responses.is_empty() {
            let lone = responses.len() == 1;
            let msg = self.finish(responses, encrypt_response)?;
            if let (true, Some(sid)) = (lone, channel_preauth) {
                // A binding leg's response is signed (with the session's key) and the hash
                // covers it as sent.
                if let Some(Channel::Binding { preauth, .. }) = self.state.channels.get_mut(&sid) {
                    preauth.update(&msg);
                }
            }
            out.insert(0, msg);
        }
        self.prune_expired_sessions();
        Ok(Processed {
            msgs: out,
            deferred: deferred_job,
        })
    }

    /// Captures what a deferred response needs from the session now (its signing key, or its
    /// sealing key with a fresh nonce), so the job runs without the connection.
    fn deferred_job(
        &mut self,
        work: Deferred,
        header: Header,
        sign: bool,
        encrypt_for: Option<u64>,
        key: Option<crate::crypto::SigningKey>,
    ) -> DeferredJob {
        let mut job = DeferredJob {
            work,
            header,
            signing_key: None,
            seal: None,
        };
        if let Some(sid) = encrypt_for {
            if let Some(session) = self.state.sessions.get_mut(&sid) {
                if let Some(key) = session.encrypt_key.clone() {
                    job.seal = Some((key, session.next_nonce(), sid));
                    return job;
                }
            }
        }
        if sign {
            job.signing_key = key.or_else(|| {
                self.state
                    .sessions
                    .get(&job.header.session_id)
                    .and_then(|s| s.signing_key.clone())
            });
        }
        job
    }

    /// Closes every open of every session (share-mode entries, locks, delete-on-close) when
    /// the connection ends, however it ends.
    pub async fn cleanup(&mut self) {
        let client_guid = self.client_guid();
        let owner = |user: &str| super::durable::Owner {
            user: user.to_string(),
            client_guid,
        };
        let mut opens = Vec::new();
        for id in self.state.sessions.keys() {
            self.shared.sessions().withdraw(*id, self.conn_id);
        }
        for s in self.state.sessions.values_mut() {
            s.trees.clear();
            // Durable opens of a live session outlast the connection (a logged-off
            // session has none left).
            let keep = s.is_valid().then(|| owner(&s.user));
            opens.extend(s.opens.drain().map(|(_, o)| (o, keep.clone())));
        }
        self.state.sessions.clear();
        close_or_keep(self.shared.clone(), opens).await;
    }

    /// Re-checks every waiting operation; returns the final responses of those that finished
    /// (completed, or their open / session went away), and the CREATEs whose breaks are
    /// done, to be run again with [`Connection::retry`].
    pub fn poll_pending(&mut self) -> Result<(Vec<Routed>, Vec<PendingOp>), ConnError> {
        let mut out = Vec::new();
        let mut retries = Vec::new();
        let mut i = 0;
        while let Some(op) = self.pending.get(i) {
            if op.via.as_ref().is_some_and(|v| v.gone.is_cancelled()) {
                // Its channel is gone: nobody is left to answer.
                self.pending.swap_remove(i);
                continue;
            }
            let open_alive = self.state.sessions.get(&op.session_id).is_some_and(|s| {
                s.is_valid() && op.open_id().is_none_or(|id| s.opens.contains_key(&id))
            });
            let done = if open_alive {
                op.poll_body()
            } else {
                let st = op.orphan_status();
                Some((st, op.final_body(st)))
            };
            match done {
                Some((st, body)) => {
                    let op = self.pending.swap_remove(i);
                    if st == status::SUCCESS && op.retries() {
                        retries.push(op);
                    } else if !op.silent {
                        let via = op.via.clone();
                        out.push((self.complete_with(op, st, body)?, via));
                    }
                }
                None => i += 1,
            }
        }
        Ok((out, retries))
    }

    /// Runs a CREATE again once the breaks it waited for are done; returns its final
    /// (async) response, or `None` when it has to wait again.
    pub async fn retry(&mut self, mut op: PendingOp) -> Result<Option<Routed>, ConnError> {
        let element = std::mem::take(&mut op.element);
        let mut ctx = Ctx {
            hdr: &op.hdr,
            msg: &element,
            session_id: op.session_id,
            tree_id: op.tree_id,
            related_file_id: None,
            encrypted: op.encrypted,
            deferrable: false,
            frame: None,
        };
        let mut reply = dispatch::dispatch(self, &mut ctx).await;
        if let Some(wait) = reply.wait.take() {
            op.wait = wait;
            op.element = element;
            self.pending.push(op);
            return Ok(None);
        }
        if op.silent {
            // Its connection is gone: the work is done, nobody hears of it.
            return Ok(None);
        }
        // Only lone CREATEs run again: the request's own TreeId and encryption are what
        // the final response carries, as for every other pending operation.
        let via = op.via.clone();
        self.complete_with(op, reply.status, Some(reply.body))
            .map(|m| Some((m, via)))
    }

    /// The notification of an oplock or lease break: not signed (MessageId -1), sealed
    /// when the session encrypts. An oplock break goes out on the connection of its open's
    /// session; a lease break on the client's oldest connection (leases belong to the
    /// client, as on Windows), sealed for a session of that connection. `None` when no
    /// session is left to send it for.
    pub fn break_message(
        &mut self,
        notice: crate::oplock::BreakNotice,
    ) -> Result<Option<Vec<u8>>, ConnError> {
        use crate::oplock::NoticeKind;
        use crate::proto::oplock::{encode_lease_break_notification, encode_oplock_break};
        let lease = matches!(notice.kind, NoticeKind::Lease { .. });
        let own = self
            .state
            .sessions
            .get(&notice.session_id)
            .filter(|s| s.is_valid() || !lease);
        let (session_id, session) = match own {
            Some(s) => (notice.session_id, s),
            None if lease => match self.state.sessions.iter().find(|(_, s)| s.is_valid()) {
                Some((id, s)) => (*id, s),
                None => {
                    tracing::debug!(
                        session_id = notice.session_id,
                        "lease break with no session here"
                    );
                    return Ok(None);
                }
            },
            None => {
                tracing::debug!(session_id = notice.session_id, "break for a session gone");
                return Ok(None);
            }
        };
        let seal = session.encrypt_key.is_some()
            && (session.encrypt_data || session.trees.values().any(|t| t.encrypt));
        let mut rh = Header {
            command: Command::OplockBreak as u16,
            flags: FLAG_SERVER_TO_REDIR,
            message_id: u64::MAX,
            ..Header::default()
        };
        let mut body = Vec::with_capacity(44);
        match notice.kind {
            NoticeKind::Oplock { file_id, level } => {
                rh.session_id = notice.session_id;
                encode_oplock_break(&mut body, level, file_id);
            }
            NoticeKind::Lease {
                wire_key,
                epoch,
                ack_required,
                current,
                new,
                ..
            } => encode_lease_break_notification(
                &mut body,
                &wire_key,
                epoch,
                ack_required,
                current,
                new,
            ),
        }
        let mut msg = Vec::with_capacity(HEADER_LEN + body.len());
        rh.encode(&mut msg);
        msg.extend_from_slice(&body);
        self.finish(
            vec![OutMsg {
                msg,
                session_id,
                sign: false,
                key: None,
            }],
            seal.then_some(session_id),
        )
        .map(Some)
    }

    /// The final (async) response of a pending operation ending with `st` and no data.
    fn complete(&mut self, op: PendingOp, st: u32) -> Result<Vec<u8>, ConnError> {
        let body = op.final_body(st);
        self.complete_with(op, st, body)
    }

    /// The final (async) response of a pending operation, with `body` when it has one.
    fn complete_with(
        &mut self,
        op: PendingOp,
        st: u32,
        body: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, ConnError> {
        let mut rh = op.hdr.response(st);
        rh.flags |= FLAG_ASYNC_COMMAND;
        rh.async_id = op.async_id;
        rh.session_id = op.session_id;
        rh.credits = 0;
        let mut msg = Vec::with_capacity(HEADER_LEN + 16);
        rh.encode(&mut msg);
        match body {
            Some(b) => msg.extend_from_slice(&b),
            None if st == status::SUCCESS => crate::proto::session::encode_empty_response(&mut msg),
            None => crate::proto::io::encode_error_response(&mut msg),
        }
        let sign = op.signed || self.session_requires_signing(op.session_id);
        let encrypt = op.encrypted.then_some(op.session_id);
        let key = op.via.as_ref().map(|v| v.signing_key.clone());
        self.finish(
            vec![OutMsg {
                msg,
                session_id: op.session_id,
                sign,
                key,
            }],
            encrypt,
        )
    }

    /// Logged-off sessions are kept (keys only, no trees or opens) so that late requests on
    /// them get a signed USER_SESSION_DELETED; only the newest few are kept.
    fn prune_expired_sessions(&mut self) {
        let mut expired: Vec<u64> = self
            .state
            .sessions
            .iter()
            .filter(|(_, s)| matches!(s.auth, AuthState::Expired))
            .map(|(id, _)| *id)
            .collect();
        if expired.len() > MAX_EXPIRED_SESSIONS {
            expired.sort_unstable();
            let excess = expired.len() - MAX_EXPIRED_SESSIONS;
            for id in expired.iter().take(excess) {
                self.state.sessions.remove(id);
            }
        }
    }

    fn session_requires_signing(&self, session_id: u64) -> bool {
        self.state
            .sessions
            .get(&session_id)
            .is_some_and(|s| s.is_valid() && s.signing_required)
    }

    /// Checks and dispatches one request element. Returns the reply and whether the request
    /// was (validly) signed.
    #[allow(clippy::too_many_arguments)]
    async fn one_request(
        &mut self,
        hdr: &Header,
        element: &[u8],
        session_id: u64,
        tree_id: u32,
        related: bool,
        chain: &Chain,
        encrypted_by: Option<u64>,
        lone_frame: Option<&Arc<Received>>,
        channel_signature: Option<Signature>,
    ) -> (Reply, bool) {
        if let (true, Some(st)) = (related, chain.create_error) {
            // A related request after a failed CREATE fails the same way (MS-SMB2 3.3.5.2.7.2).
            return (Reply::error(st), false);
        }
        let cmd = hdr.command();
        let mut signed = false;
        let needs_session = !matches!(
            cmd,
            Some(Command::Negotiate) | Some(Command::SessionSetup) | Some(Command::Echo)
        );
        if let Some(session) = self.state.sessions.get(&session_id) {
            let encrypted = encrypted_by == Some(session_id);
            if let (Some(sig), false) = (channel_signature, encrypted) {
                // Checked by the channel it came over, with the channel's key; unsigned
                // requests on a channel get no exemption (smbtorture session.bind*).
                match sig {
                    Signature::Valid => signed = true,
                    Signature::Bad => {
                        tracing::debug!(session_id, "bad signature on a channel");
                        return (Reply::error(status::ACCESS_DENIED), false);
                    }
                    Signature::Absent if session.signing_required => {
                        tracing::debug!(session_id, "unsigned request on a channel");
                        return (Reply::error(status::ACCESS_DENIED), false);
                    }
                    Signature::Absent => {}
                }
                if session.encrypt_data && needs_session {
                    tracing::debug!(session_id, "unencrypted request on a channel");
                    return (Reply::error(status::ACCESS_DENIED), false);
                }
            } else if session.is_valid() && !encrypted {
                if hdr.is_signed() {
                    let ok = session
                        .signing_key
                        .as_ref()
                        .is_some_and(|k| k.verify(element).is_ok());
                    if !ok {
                        tracing::debug!(session_id, "bad signature");
                        return (Reply::error(status::ACCESS_DENIED), false);
                    }
                    signed = true;
                } else if session.signing_required && cmd != Some(Command::SessionSetup) {
                    tracing::debug!(session_id, "unsigned request");
                    return (Reply::error(status::ACCESS_DENIED), false);
                }
                if session.encrypt_data && needs_session {
                    return (Reply::error(status::ACCESS_DENIED), false);
                }
            }
            if session.is_valid() && !encrypted && needs_session {
                if let Some(t) = session.trees.get(&tree_id) {
                    if t.encrypt && cmd != Some(Command::TreeConnect) {
                        return (Reply::error(status::ACCESS_DENIED), signed);
                    }
                }
            }
        } else if needs_session {
            if self.state.negotiated.is_none() || related {
                // A related request without a session of its chain is malformed.
                return (Reply::error(status::INVALID_PARAMETER), false);
            }
            return (Reply::error(status::USER_SESSION_DELETED), false);
        }
        if needs_session {
            match self.state.sessions.get(&session_id) {
                Some(s) if s.is_valid() => {}
                Some(s) if matches!(s.auth, AuthState::Expired) => {
                    // Answered with the logged-off session's key so a signing client can
                    // trust the status (smbtorture smb2.connect checks this).
                    return (Reply::error(status::USER_SESSION_DELETED), hdr.is_signed());
                }
                _ => return (Reply::error(status::USER_SESSION_DELETED), signed),
            }
        }
        let mut ctx = Ctx {
            hdr,
            msg: element,
            session_id,
            tree_id,
            related_file_id: if related { chain.file_id } else { None },
            encrypted: encrypted_by.is_some(),
            deferrable: lone_frame.is_some(),
            frame: lone_frame.cloned(),
        };
        let reply = dispatch::dispatch(self, &mut ctx).await;
        (reply, signed)
    }

    /// Signs each response element, joins a compound, and seals it when the session
    /// `encrypt_for` has a cipher key (see [`join_responses`]).
    fn finish(
        &mut self,
        responses: Vec<OutMsg>,
        encrypt_for: Option<u64>,
    ) -> Result<Vec<u8>, ConnError> {
        let seal = encrypt_for.and_then(|sid| {
            let session = self.state.sessions.get_mut(&sid)?;
            let key = session.encrypt_key.clone()?;
            Some((key, session.next_nonce(), sid))
        });
        let sessions = &self.state.sessions;
        join_responses(
            responses,
            seal.as_ref()
                .map(|(key, nonce, sid)| (key.as_ref(), nonce, *sid)),
            |sid| sessions.get(&sid).and_then(|s| s.signing_key.as_ref()),
        )
    }

    /// Answers an SMB1 NEGOTIATE that offers SMB2 with the wildcard upgrade (MS-SMB2 3.3.5.3.1).
    fn smb1_negotiate(&mut self, frame: &[u8]) -> Result<Vec<u8>, ConnError> {
        if self.state.smb1_seen || self.state.negotiated.is_some() {
            return Err(violation("SMB1 message after negotiation"));
        }
        self.state.smb1_seen = true;
        let upgrade = smb1::parse_negotiate(frame).map_err(|e| violation(e.to_string()))?;
        let dialect = match upgrade {
            smb1::Smb1Upgrade::Wildcard => crate::proto::negotiate::DIALECT_WILDCARD,
            smb1::Smb1Upgrade::Smb202 => crate::proto::negotiate::DIALECT_202,
            smb1::Smb1Upgrade::None => return Err(violation("SMB1-only client")),
        };
        self.state
            .credits
            .consume(0, 1)
            .map_err(|e| violation(e.to_string()))?;
        let body = super::handlers::negotiate::smb1_upgrade_response(self, dialect);
        let mut rh = Header {
            command: Command::Negotiate as u16,
            flags: FLAG_SERVER_TO_REDIR,
            ..Default::default()
        };
        rh.credits = self.state.credits.grant(1, 1);
        let mut msg = Vec::new();
        rh.encode(&mut msg);
        msg.extend_from_slice(&body);
        Ok(msg)
    }
}

/// The frame that carries `responses`: one element alone, or a compound whose elements are
/// padded to 8 bytes and chained through NextCommand. Unless it is sealed (`seal`: the key,
/// a fresh nonce and the session), each element that asks to be signed is signed with its
/// own key or, through `session_key`, its session's. A lone plain response goes out in its
/// own buffer; otherwise the elements are copied once, behind room for the transform header
/// when sealing, and sealed there in place.
fn join_responses<'k>(
    mut responses: Vec<OutMsg>,
    seal: Option<(&crate::crypto::CipherKey, &[u8; 16], u64)>,
    session_key: impl Fn(u64) -> Option<&'k crate::crypto::SigningKey>,
) -> Result<Vec<u8>, ConnError> {
    let n = responses.len();
    let sign = |r: OutMsg| -> Result<Vec<u8>, ConnError> {
        let OutMsg {
            mut msg,
            session_id,
            sign,
            key,
        } = r;
        if sign {
            if let Some(key) = key.as_ref().or_else(|| session_key(session_id)) {
                mark_signed(response_header(&mut msg)?);
                key.sign(&mut msg).map_err(|e| violation(e.to_string()))?;
            }
        }
        Ok(msg)
    };
    if n == 1 && seal.is_none() {
        if let Some(r) = responses.pop() {
            return sign(r);
        }
    }
    let headroom = if seal.is_some() { TRANSFORM_LEN } else { 0 };
    let total = responses
        .iter()
        .map(|r| r.msg.len().next_multiple_of(8))
        .sum::<usize>();
    let mut out = Vec::with_capacity(headroom + total);
    out.resize(headroom, 0);
    for (i, mut r) in responses.into_iter().enumerate() {
        if n > 1 {
            // Every response of a compound is padded to 8 bytes, the last one too (what
            // Windows and Samba send; smbtorture checks a READ's body size).
            let padded = r.msg.len().next_multiple_of(8);
            r.msg.resize(padded, 0);
            if i + 1 < n {
                let next = u32::try_from(padded).map_err(|_| violation("response too large"))?;
                response_header(&mut r.msg)?[NEXT_COMMAND_OFFSET..NEXT_COMMAND_OFFSET + 4]
                    .copy_from_slice(&next.to_le_bytes());
            }
        }
        if seal.is_some() {
            // The transform's AEAD tag protects the whole frame; nothing is signed.
            out.extend_from_slice(&r.msg);
        } else {
            out.extend_from_slice(&sign(r)?);
        }
    }
    if let Some((key, nonce, sid)) = seal {
        key.seal_frame(&mut out, nonce, sid)
            .map_err(|e| violation(e.to_string()))?;
    }
    Ok(out)
}

/// Closes opens, keeping for reconnection the durable ones whose owner is given.
async fn close_or_keep(
    shared: Arc<SharedState>,
    opens: Vec<(super::state::Open, Option<super::durable::Owner>)>,
) {
    for (o, keep) in opens {
        let o = match keep {
            Some(user) if o.durable.is_some() => match super::durable::preserve(&shared, o, user) {
                None => continue,
                Some(o) => o,
            },
            _ => o,
        };
        let _ = super::handlers::create::close_open(o).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{Cipher, CipherKey, SigningAlgorithm, SigningKey};
    use crate::server::bufpool::HEADROOM;

    const BODY: &[u8] = b"\x11\x00\x50\x00 the READ response body";

    /// A job whose storage call answers `body` at once.
    fn job(
        body: OutBuf,
        signing_key: Option<SigningKey>,
        seal: Option<(Arc<CipherKey>, [u8; 16], u64)>,
    ) -> DeferredJob {
        DeferredJob {
            work: Box::pin(async move { Ok(body) }),
            header: Header {
                command: 8,
                flags: FLAG_SERVER_TO_REDIR,
                message_id: 7,
                session_id: 5,
                ..Default::default()
            },
            signing_key,
            seal,
        }
    }

    /// The body with room for the headers in front (as a pooled READ buffer has it), and
    /// without (it is moved behind fresh room).
    fn bodies() -> [OutBuf; 2] {
        let mut buf = vec![0u8; HEADROOM];
        buf.extend_from_slice(BODY);
        let end = buf.len();
        let roomy = OutBuf {
            buf: buf.into(),
            start: HEADROOM,
            end,
            pooled: false,
            tail: None,
        };
        [roomy, OutBuf::from_vec(BODY.to_vec())]
    }

    #[tokio::test]
    async fn a_deferred_response_is_marked_signed_and_signed() {
        for body in bodies() {
            let key = SigningKey::new(SigningAlgorithm::AesCmac, &[3; 16]);
            let msg = job(body, Some(key.clone()), None)
                .run()
                .await
                .unwrap()
                .into_vec();
            let header = Header::decode(&msg).unwrap();
            assert!(header.is_signed());
            assert_eq!(header.flags, FLAG_SERVER_TO_REDIR | FLAG_SIGNED);
            assert_eq!(header.message_id, 7);
            key.verify(&msg).unwrap();
            assert_eq!(&msg[HEADER_LEN..], BODY);
        }
    }

    #[tokio::test]
    async fn a_deferred_response_is_sealed_whole_and_not_marked_signed() {
        for body in bodies() {
            let key = Arc::new(CipherKey::new(Cipher::Aes128Gcm, &[4; 16]).unwrap());
            let mut frame = job(body, None, Some((key.clone(), [9; 16], 5)))
                .run()
                .await
                .unwrap()
                .into_vec();
            assert_eq!(crate::crypto::transform_session_id(&frame), Some(5));
            let msg = key.open_frame(&mut frame).unwrap();
            let header = Header::decode(msg).unwrap();
            assert!(!header.is_signed());
            assert_eq!(&msg[HEADER_LEN..], BODY);
        }
    }

    /// A response element: a header for `message_id` and a body of `body_len` bytes.
    fn element(message_id: u64, body_len: usize, sign: bool, key: Option<SigningKey>) -> OutMsg {
        let mut msg = Header {
            command: 5,
            flags: FLAG_SERVER_TO_REDIR,
            message_id,
            session_id: 5,
            ..Default::default()
        }
        .to_bytes()
        .to_vec();
        msg.extend((0..body_len).map(|i| i as u8 ^ message_id as u8));
        OutMsg {
            msg,
            session_id: 5,
            sign,
            key,
        }
    }

    #[test]
    fn a_lone_response_is_signed_in_its_own_buffer() {
        let session = SigningKey::new(SigningAlgorithm::AesCmac, &[1; 16]);
        let r = element(3, 13, true, None);
        let body = r.msg[HEADER_LEN..].to_vec();
        let msg = join_responses(vec![r], None, |sid| (sid == 5).then_some(&session)).unwrap();
        assert_eq!(msg.len(), HEADER_LEN + 13, "a lone response is not padded");
        assert!(Header::decode(&msg).unwrap().is_signed());
        session.verify(&msg).unwrap();
        assert_eq!(&msg[HEADER_LEN..], body.as_slice());
    }

    #[test]
    fn a_compound_is_padded_chained_and_each_element_signed_with_its_key() {
        let session = SigningKey::new(SigningAlgorithm::AesCmac, &[1; 16]);
        let own = SigningKey::new(SigningAlgorithm::AesCmac, &[2; 16]);
        let responses = vec![
            element(1, 9, true, None),
            element(2, 13, true, Some(own.clone())),
            element(3, 5, false, None),
        ];
        let frame = join_responses(responses, None, |_| Some(&session)).unwrap();
        let parts = crate::proto::request::split_compound(&frame).unwrap();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [80, 80, 72],
            "each element padded to 8 bytes, the last one too"
        );
        assert_eq!(frame.len(), 232);
        let headers: Vec<Header> = parts.iter().map(|p| Header::decode(p).unwrap()).collect();
        assert_eq!(
            headers.iter().map(|h| h.next_command).collect::<Vec<_>>(),
            [80, 80, 0]
        );
        assert_eq!(
            headers.iter().map(|h| h.message_id).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        session.verify(parts[0]).unwrap();
        own.verify(parts[1]).unwrap();
        assert!(
            session.verify(parts[1]).is_err(),
            "its own key, not the session's"
        );
        assert!(!headers[2].is_signed());
        assert_eq!(
            &parts[2][HEADER_LEN..HEADER_LEN + 5],
            &element(3, 5, false, None).msg[HEADER_LEN..]
        );
        assert!(
            parts[2][HEADER_LEN + 5..].iter().all(|&b| b == 0),
            "zero padding"
        );
    }

    #[test]
    fn a_sealed_compound_is_one_frame_with_no_element_signed() {
        let session = SigningKey::new(SigningAlgorithm::AesCmac, &[1; 16]);
        let cipher = CipherKey::new(Cipher::Aes128Gcm, &[4; 16]).unwrap();
        let responses = vec![element(1, 9, true, None), element(2, 13, true, None)];
        let plain = join_responses(
            vec![element(1, 9, false, None), element(2, 13, false, None)],
            None,
            |_| None,
        )
        .unwrap();
        let mut frame =
            join_responses(responses, Some((&cipher, &[7; 16], 5)), |_| Some(&session)).unwrap();
        assert_eq!(frame.len(), TRANSFORM_LEN + 160);
        assert_eq!(crate::crypto::transform_session_id(&frame), Some(5));
        let opened = cipher.open_frame(&mut frame).unwrap();
        assert_eq!(
            opened,
            plain.as_slice(),
            "the compound as it would go out unsigned"
        );

        let mut lone = join_responses(
            vec![element(4, 3, true, None)],
            Some((&cipher, &[8; 16], 5)),
            |_| Some(&session),
        )
        .unwrap();
        let opened = cipher.open_frame(&mut lone).unwrap();
        assert_eq!(opened.len(), HEADER_LEN + 3);
        assert!(!Header::decode(opened).unwrap().is_signed());
    }
}
