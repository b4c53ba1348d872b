//! The tokio NVMe/TCP transport: one task per connection (= per queue), storage on
//! the target's executor (or the blocking pool), nothing shared between queues on the
//! data path but atomics. Answers leave in vectored writes, many PDUs per system call.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

mod placement;

use placement::{Placing, PLACE_MIN};

use crate::target::io::IoOutcome;
use crate::target::{IoBuf, IoFinished, ListenerInfo, Output, Queue, QueueIo, Target};
use crate::tcp::{decode, frame_len, header_received, PduType, COMMON_HEADER_LEN};

/// How often each connection checks keep-alive and controller teardown.
pub const TICK: Duration = Duration::from_millis(500);
/// A connection that has not completed ICReq + Connect by then is closed.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// A host that does not take our PDUs for this long is dropped (it also stalls its
/// own queue's keep-alive checks while we wait).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Concurrent connections (queues) a listener serves; more are closed on accept.
/// Bounds the memory idle or hostile connections can pin.
pub const MAX_CONNECTIONS: usize = 4096;
/// Initial receive buffer per connection.
const RECV_BUF: usize = 64 * 1024;
/// Most bytes read into the receive buffer right after a large write's PDU: its
/// successor's header and some data (see [`read_some`]).
const HEAD_READ: usize = 4096;
/// Bytes of an offending PDU echoed in a termination request.
const TERM_ECHO: usize = 72;
/// Storage completions taken per wake-up of a connection before its answers are sent
/// (bounds how long one burst can delay the first answer).
const MAX_COMPLETIONS_PER_WAKE: usize = 64;
/// PDUs handed to one vectored socket write (Linux takes up to 1024 buffers).
const MAX_WRITE_SLICES: usize = 64;
/// Answer bytes gathered before they are written even mid-turn: small answers share
/// a system call, large ones (128 KiB reads) stream out without waiting for the rest.
const FLUSH_BYTES: usize = 256 * 1024;

/// Bytes a storage result carries back to the host.
fn read_len(res: &std::io::Result<IoOutcome>) -> usize {
    match res {
        Ok(IoOutcome::Read(b)) => b.len(),
        _ => 0,
    }
}

/// Resolves when finished storage requests wait in `finished`, moving them there first
/// from the queue's own engine and from the channel that executor and blocking-pool
/// requests report to.
async fn next_finished(
    engine: &mut Option<Box<dyn QueueIo>>,
    reported: &mut mpsc::UnboundedReceiver<IoFinished>,
    finished: &mut VecDeque<IoFinished>,
) {
    std::future::poll_fn(|cx| {
        while let Poll::Ready(Some(done)) = reported.poll_recv(cx) {
            finished.push_back(done);
        }
        if let Some(e) = engine.as_mut() {
            // Registers the waker for the engine's next completion when it has none.
            let _ = e.poll_done(cx, finished);
        }
        if finished.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await
}

/// A piece of what a connection writes: encoded PDU bytes, or a read's data sent from
/// the buffer the storage filled.
enum Chunk {
    Bytes(Vec<u8>),
    Data(IoBuf),
}

impl std::ops::Deref for Chunk {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Chunk::Bytes(b) => b,
            Chunk::Data(d) => d,
        }
    }
}

/// [`write_all_pdus`] bounded by [`WRITE_TIMEOUT`] (a host that stopped reading). The
/// deadline is set only when the socket cannot take the whole turn's answers at once:
/// most turns' answers fit its buffer, and setting a deadline reads the clock and
/// takes a handle to the runtime's timer even when the write then needs no timer.
async fn send_pdus<W: tokio::io::AsyncWrite + Unpin>(
    wr: &mut W,
    pdus: Vec<Chunk>,
) -> std::io::Result<()> {
    if pdus.is_empty() {
        return Ok(());
    }
    let mut write = std::pin::pin!(write_all_pdus(wr, pdus));
    let first = std::future::poll_fn(|cx| Poll::Ready(write.as_mut().poll(cx))).await;
    if let Poll::Ready(r) = first {
        return r;
    }
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "host stopped reading",
        )),
    }
}

/// Writes `pdus` in order with vectored writes: one system call for a burst of answers
/// instead of one per PDU, and no copy to join them.
async fn write_all_pdus<W: tokio::io::AsyncWrite + Unpin>(
    wr: &mut W,
    pdus: Vec<Chunk>,
) -> std::io::Result<()> {
    let mut pdus = std::collections::VecDeque::from(pdus);
    // Bytes of the front PDU already written.
    let mut done = 0usize;
    while let Some(front) = pdus.front() {
        let mut slices = Vec::with_capacity(pdus.len().min(MAX_WRITE_SLICES));
        slices.push(std::io::IoSlice::new(front.get(done..).unwrap_or_default()));
        slices.extend(
            pdus.iter()
                .skip(1)
                .take(MAX_WRITE_SLICES - 1)
                .map(|p| std::io::IoSlice::new(p)),
        );
        let mut n = wr.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while let Some(front) = pdus.front() {
            let left = front.len() - done;
            if n < left {
                done += n;
                break;
            }
            n -= left;
            done = 0;
            pdus.pop_front();
        }
    }
    Ok(())
}

/// Whether the PDU at the front of `rx`, `plen` bytes long, may carry a large write's
/// data ([`PLACE_MIN`] or more; an H2CData PDU, or a command capsule, which may have
/// in-capsule data): such PDUs are placed (`placement`).
fn large_write(rx: &[u8], plen: usize) -> bool {
    plen >= PLACE_MIN
        && rx
            .first()
            .is_some_and(|&t| t == PduType::H2cData as u8 || t == PduType::CapsuleCmd as u8)
}

/// Reads what the socket has: into the command's buffer while a PDU's data is placed,
/// else into the receive buffer. Cancel-safe, as the `select!` it runs in needs: the
/// placed bytes are counted in the same poll that reads them.
///
/// `head_only`: the last PDU carried a large write's data, so the next likely does too;
/// only [`HEAD_READ`] bytes go into the receive buffer, enough for its header, so that
/// its data is placed rather than read here and copied.
async fn read_some(
    rd: &mut tokio::net::tcp::OwnedReadHalf,
    rx: &mut BytesMut,
    placing: &mut Option<Placing>,
    head_only: bool,
) -> std::io::Result<usize> {
    if let Some(room) = placing.as_mut().and_then(Placing::room) {
        let n = rd.read(room).await?;
        if let Some(p) = placing.as_mut() {
            p.filled(n);
        }
        return Ok(n);
    }
    if head_only {
        return rd.read_buf(&mut (&mut *rx).limit(HEAD_READ)).await;
    }
    rd.read_buf(rx).await
}

/// Serves NVMe/TCP on `listener` until `shutdown` is cancelled.
/// `advertised` overrides the address put in discovery log entries (else the local
/// address each connection arrived on).
pub async fn serve(
    listener: TcpListener,
    target: Arc<Target>,
    advertised: Option<String>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let start = Instant::now();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            r = listener.accept() => match r {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(error = %e, "nvme accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, limit = MAX_CONNECTIONS, "NVMe/TCP connection limit reached; closing");
            drop(stream);
            continue;
        };
        let local = stream.local_addr().ok();
        let info = listener_info(local, advertised.as_deref());
        let target = target.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = connection(stream, target, info, peer, start, shutdown).await {
                tracing::debug!(%peer, error = %e, "nvme connection ended with error");
            }
        });
    }
}

fn listener_info(local: Option<SocketAddr>, advertised: Option<&str>) -> ListenerInfo {
    let (ip, port) = match local {
        Some(a) => (a.ip().to_string(), a.port().to_string()),
        None => (String::new(), String::new()),
    };
    let traddr = advertised.map(str::to_string).unwrap_or(ip);
    ListenerInfo {
        ipv6: traddr.contains(':'),
        traddr,
        trtype: crate::spec::log::TRTYPE_TCP,
        trsvcid: port,
    }
}

/// Brings the target's configuration up to date before a Connect is processed, so
/// hosts see every change an API call made before they connected.
async fn refresh_config(target: &Arc<Target>) {
    if !target.has_source() {
        return;
    }
    let t = target.clone();
    match tokio::task::spawn_blocking(move || t.refresh()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "configuration refresh failed; using the previous one")
        }
        Err(e) => tracing::warn!(error = %e, "configuration refresh task failed"),
    }
}

/// Whether a framed PDU is a Fabrics Connect for the admin queue (type, opcode,
/// FCTYPE and QID peeked at their fixed offsets; full validation happens later).
fn is_admin_connect(pdu: &[u8]) -> bool {
    pdu.first() == Some(&(PduType::CapsuleCmd as u8))
        && pdu.get(8) == Some(&crate::spec::admin_opc::FABRICS)
        && pdu.get(12) == Some(&crate::spec::fabrics::FCTYPE_CONNECT)
        && pdu.get(50..52) == Some(&[0, 0][..])
}

/// Milliseconds from `start` to `at`: the queues' keep-alive clock.
pub(crate) fn ms_between(start: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(start).as_millis()).unwrap_or(u64::MAX)
}

/// Runs one connection to completion.
pub async fn connection(
    stream: TcpStream,
    target: Arc<Target>,
    info: ListenerInfo,
    peer: SocketAddr,
    start: Instant,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let (mut rd, mut wr) = stream.into_split();
    let mut q = Queue::new(target.clone(), info, peer.to_string());
    let mut buf = BytesMut::with_capacity(RECV_BUF);
    let (io_tx, mut io_rx) = mpsc::unbounded_channel::<IoFinished>();
    let executor = target.executor();
    // Storage on this task's own engine when the executor offers one; finished
    // requests, from it or through `io_rx`, wait here until the loop takes them.
    let mut queue_io = executor.as_ref().and_then(|e| e.queue_io());
    let mut finished: VecDeque<IoFinished> = VecDeque::new();
    let events = Arc::new(Notify::new());
    let mut waker_installed = false;
    let mut tick = tokio::time::interval(TICK);
    let opened = Instant::now();
    // A large write's PDU whose data the socket reads straight into its own buffer.
    let mut placing: Option<Placing> = None;
    // The last PDU carried a large write's data (see `read_some`).
    let mut large_writes = false;
    let result = loop {
        tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            r = read_some(&mut rd, &mut buf, &mut placing, large_writes) => {
                match r {
                    Ok(0) => break Ok(()),
                    Ok(_) => {}
                    Err(e) => break Err(e),
                }
                let at = Instant::now();
                q.begin_turn(at);
                let now = ms_between(start, at);
                // Handle every complete PDU in the buffer.
                loop {
                    if placing.as_ref().is_some_and(|p| !p.ready(&buf)) {
                        break;
                    }
                    if let Some(p) = placing.take() {
                        p.finish(&mut buf, &mut q, now);
                        if q.is_closed() {
                            break;
                        }
                    }
                    let ctx = q.decode_context();
                    // The PDU at the front of `buf`, with its length, once it is all in.
                    let framed = frame_len(&buf, &ctx).map(|f| f.map(|n| (n, buf.get(..n))));
                    match framed {
                        Ok(Some((n, Some(frame)))) => {
                            if q.controller().is_none() && is_admin_connect(frame) {
                                refresh_config(&target).await;
                            }
                            large_writes = large_write(frame, n);
                            let echo = frame.get(..TERM_ECHO).unwrap_or(frame);
                            match decode(frame, &ctx) {
                                Ok(pdu) => q.handle_pdu(pdu, echo, now),
                                Err(e) => q.decode_error(&e, echo),
                            }
                            buf.advance(n);
                        }
                        Ok(Some((n, None))) => {
                            if large_write(&buf, n) {
                                placing = Placing::start(&mut buf, &mut q, &ctx, TERM_ECHO);
                                if placing.is_some() {
                                    large_writes = true;
                                    continue;
                                }
                                // Its header first: the PDU may still be placed.
                                if !header_received(&buf, &ctx) {
                                    break;
                                }
                            }
                            buf.reserve(n - buf.len());
                            break;
                        }
                        Ok(None) => break,
                        Err(e) => {
                            let echo = buf.get(..COMMON_HEADER_LEN).unwrap_or_default().to_vec();
                            q.decode_error(&e, &echo);
                            break;
                        }
                    }
                    if q.is_closed() {
                        break;
                    }
                }
            }
            _ = next_finished(&mut queue_io, &mut io_rx, &mut finished) => {
                q.begin_turn(Instant::now());
                // Completions already waiting too, so their answers leave together; but
                // not so many read bytes that the first answer waits on the copies of
                // the rest (large reads stream out one by one). The rest stays for the
                // next turn.
                let mut read_bytes = 0;
                for _ in 0..MAX_COMPLETIONS_PER_WAKE {
                    if read_bytes >= FLUSH_BYTES {
                        break;
                    }
                    let Some((req, res)) = finished.pop_front() else { break };
                    read_bytes += read_len(&res);
                    q.io_done(&req, res);
                }
            }
            _ = events.notified() => {
                q.poll_events();
            }
            _ = tick.tick() => {
                q.tick(ms_between(start, Instant::now()));
                if q.controller().is_none() && opened.elapsed() > CONNECT_TIMEOUT {
                    tracing::debug!(%peer, "no Connect in time, closing");
                    break Ok(());
                }
            }
        }
        if !waker_installed && q.qid() == 0 {
            if let Some(c) = q.controller() {
                let n = events.clone();
                c.set_waker(Arc::new(move || n.notify_one()));
                waker_installed = true;
            }
        }
        let mut close = false;
        let mut sends: Vec<Chunk> = Vec::new();
        let mut pending = 0usize;
        while let Some(o) = q.poll_output() {
            // The answer's pieces go straight onto this turn's list (no list per answer).
            let queued = sends.len();
            match o {
                Output::Send(b) => sends.push(Chunk::Bytes(b)),
                Output::SendData { head, data, tail } => {
                    sends.push(Chunk::Bytes(head));
                    sends.push(Chunk::Data(data));
                    if !tail.is_empty() {
                        sends.push(Chunk::Bytes(tail));
                    }
                }
                Output::Io(req) => {
                    match (queue_io.as_mut(), &executor) {
                        (Some(engine), _) => engine.submit(req),
                        (None, Some(e)) => {
                            let tx = io_tx.clone();
                            e.submit(
                                req,
                                Box::new(move |req, res| {
                                    // The connection may be gone; then the result is moot.
                                    let _ = tx.send((req, res));
                                }),
                            )
                        }
                        (None, None) => {
                            let tx = io_tx.clone();
                            tokio::task::spawn_blocking(move || {
                                let res = req.execute();
                                let _ = tx.send((req, res));
                            });
                        }
                    }
                    continue;
                }
                Output::Close => {
                    close = true;
                    continue;
                }
                // A TCP queue never asks for RDMA operations; treat one as a bug and
                // end the connection rather than guess.
                Output::FetchData { .. } | Output::Respond { .. } => {
                    tracing::error!(%peer, "RDMA output on an NVMe/TCP queue; closing");
                    close = true;
                    continue;
                }
            }
            pending += sends.iter().skip(queued).map(|p| p.len()).sum::<usize>();
            // Large answers stream out as they come rather than pile up.
            if pending >= FLUSH_BYTES {
                if let Err(e) = send_pdus(&mut wr, std::mem::take(&mut sends)).await {
                    q.on_disconnect();
                    return Err(e);
                }
                pending = 0;
            }
        }
        // This turn's storage requests start together, before the answers are written.
        if let Some(engine) = queue_io.as_mut() {
            engine.flush();
        }
        // What is left of this turn's answers goes out in as few writes as the socket
        // allows.
        if let Err(e) = send_pdus(&mut wr, sends).await {
            q.on_disconnect();
            return Err(e);
        }
        if close {
            let _ = wr.shutdown().await;
            break Ok(());
        }
    };
    q.on_disconnect();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most `step` bytes per call, like a full socket.
    struct Trickle {
        got: Vec<u8>,
        step: usize,
        calls: usize,
    }

    impl tokio::io::AsyncWrite for Trickle {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.step);
            self.got.extend_from_slice(&buf[..n]);
            self.calls += 1;
            std::task::Poll::Ready(Ok(n))
        }
        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.step - n);
                self.got.extend_from_slice(&b[..take]);
                n += take;
                if n == self.step {
                    break;
                }
            }
            self.calls += 1;
            std::task::Poll::Ready(Ok(n))
        }
        fn is_write_vectored(&self) -> bool {
            true
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn pdus_go_out_whole_and_in_order_across_partial_writes() {
        let pdus: Vec<Vec<u8>> = (0..200u32)
            .map(|i| vec![(i % 251) as u8; 1 + (i as usize * 37) % 300])
            .collect();
        let want: Vec<u8> = pdus.concat();
        for step in [1, 7, 100, 4096, 1 << 20] {
            let mut w = Trickle {
                got: Vec::new(),
                step,
                calls: 0,
            };
            // Every third piece is a read's data buffer, as `Output::SendData` sends.
            let chunks = pdus
                .iter()
                .enumerate()
                .map(|(i, p)| match i % 3 {
                    1 => Chunk::Data(IoBuf::copy_from(p)),
                    _ => Chunk::Bytes(p.clone()),
                })
                .collect();
            write_all_pdus(&mut w, chunks).await.unwrap();
            assert_eq!(w.got, want, "step {step}");
            if step == 1 << 20 {
                // 200 PDUs, 64 per vectored write: 4 calls, not 200.
                assert_eq!(w.calls, 4);
            }
        }
    }

    /// A socket that takes `room` bytes, then none until `open` is set (a host that
    /// stopped reading, or reads again later).
    struct Stalled {
        got: Vec<u8>,
        room: usize,
        open: Arc<std::sync::atomic::AtomicBool>,
        waker: Arc<std::sync::Mutex<Option<std::task::Waker>>>,
    }

    impl tokio::io::AsyncWrite for Stalled {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let room = if self.open.load(std::sync::atomic::Ordering::SeqCst) {
                buf.len()
            } else {
                buf.len().min(self.room)
            };
            if room == 0 {
                *self.waker.lock().unwrap() = Some(cx.waker().clone());
                return Poll::Pending;
            }
            self.room -= room.min(self.room);
            self.got.extend_from_slice(&buf[..room]);
            Poll::Ready(Ok(room))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn stalled(room: usize) -> Stalled {
        Stalled {
            got: Vec::new(),
            room,
            open: Arc::default(),
            waker: Arc::default(),
        }
    }

    fn answers() -> (Vec<Chunk>, Vec<u8>) {
        let pdus: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 1000]).collect();
        let want = pdus.concat();
        (pdus.into_iter().map(Chunk::Bytes).collect(), want)
    }

    #[tokio::test(start_paused = true)]
    async fn answers_that_fit_the_socket_go_out_at_once() {
        let (chunks, want) = answers();
        let mut w = stalled(want.len());
        let t0 = tokio::time::Instant::now();
        send_pdus(&mut w, chunks).await.unwrap();
        assert_eq!(w.got, want);
        assert_eq!(t0.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_that_stops_reading_times_out_after_the_write_limit() {
        let (chunks, want) = answers();
        let mut w = stalled(2500);
        let t0 = tokio::time::Instant::now();
        let e = send_pdus(&mut w, chunks).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(t0.elapsed(), WRITE_TIMEOUT);
        assert_eq!(w.got, want[..2500]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_that_reads_again_within_the_limit_gets_everything() {
        let (chunks, want) = answers();
        let mut w = stalled(0);
        let (open, waker) = (w.open.clone(), w.waker.clone());
        let reader = tokio::spawn(async move {
            tokio::time::sleep(WRITE_TIMEOUT - Duration::from_secs(1)).await;
            open.store(true, std::sync::atomic::Ordering::SeqCst);
            if let Some(w) = waker.lock().unwrap().take() {
                w.wake();
            }
        });
        send_pdus(&mut w, chunks).await.unwrap();
        reader.await.unwrap();
        assert_eq!(w.got, want);
    }

    #[test]
    fn admin_connect_is_recognised_in_the_linux_capsule() {
        let v = crate::tcp::tests::vector(include_str!("../../vectors/connect-capsule.hex"));
        assert!(is_admin_connect(&v));
        let mut io = v.clone();
        io[50] = 1;
        assert!(!is_admin_connect(&io));
        assert!(!is_admin_connect(&v[..20]));
    }
}
