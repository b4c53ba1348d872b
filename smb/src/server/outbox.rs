//! One connection's sending side: a bounded queue that a writer task drains into the socket,
//! and a direct path by which the request loop writes an answer itself when nothing is
//! queued.
//!
//! Why two paths: a queued answer costs a channel hand-off and a wake-up of the writer task,
//! a few microseconds per response, which a small-file workload (a CREATE, a READ and a
//! CLOSE per file, each answered at once) pays three times per file. The queue stays for
//! what the request loop must not wait on: answers finished on other tasks (deferred READs
//! and WRITEs), answers routed from another channel's connection, and anything sent while
//! the socket is busy.
//!
//! Ordering: everything sent through one [`Outbox`] by one task reaches the socket in the
//! order it was sent, whichever path each message took. The direct path is taken only when
//! every message queued before has been written whole (a counter the writer lowers after
//! each write), and the socket's writing half is held by one writer at a time (an async
//! mutex), so a frame is never split by another.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::proto::framing::frame_header;

use super::bufpool::OutBuf;
use super::conn::ConnError;
use super::shared::SharedState;
use super::ChannelTraffic;

/// A response on its way to the socket, holding its share of the in-flight budget.
pub type Outgoing = (OutBuf, Option<tokio::sync::OwnedSemaphorePermit>);

/// Responses queued for the socket writer; the queue's bound holds back the request loop
/// (and deferred READs) when the client stops reading.
pub const OUT_QUEUE: usize = 64;
/// Responses written to the socket in one vectored write at most.
const WRITE_BATCH: usize = 16;

/// The socket's writing half, type-erased so tests can write into an in-memory pipe.
type Sink = Box<dyn AsyncWrite + Send + Unpin>;

/// What the queue's senders and the writer task share.
struct Line {
    /// Messages handed to the queue and not yet written whole to the socket.
    queued: AtomicUsize,
    /// The socket's writing half; whoever holds it writes whole frames.
    sink: tokio::sync::Mutex<Sink>,
    /// Where pooled response buffers go back once sent.
    shared: Arc<SharedState>,
    /// The connection's byte counters.
    traffic: Arc<ChannelTraffic>,
}

/// A handle for sending responses on one connection (cheap to clone).
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::Sender<Outgoing>,
    line: Arc<Line>,
}

/// The task that drains an [`Outbox`]'s queue; it ends when every [`Outbox`] is gone (after
/// writing what was queued) or the socket fails.
pub struct Writer {
    rx: mpsc::Receiver<Outgoing>,
    line: Arc<Line>,
}

/// The error of a send on a connection whose writer has stopped (the socket is gone).
fn closed() -> ConnError {
    ConnError::Io(std::io::ErrorKind::BrokenPipe.into())
}

impl Outbox {
    /// An outbox writing into `sink`, and the writer task that drains its queue.
    pub fn new(
        sink: impl AsyncWrite + Send + Unpin + 'static,
        shared: Arc<SharedState>,
        traffic: Arc<ChannelTraffic>,
    ) -> (Outbox, Writer) {
        let (tx, rx) = mpsc::channel(OUT_QUEUE);
        let line = Arc::new(Line {
            queued: AtomicUsize::new(0),
            sink: tokio::sync::Mutex::new(Box::new(sink)),
            shared,
            traffic,
        });
        (
            Outbox {
                tx,
                line: line.clone(),
            },
            Writer { rx, line },
        )
    }

    /// A handle whose sends all fail: what a closing connection keeps in place of its
    /// own, so that the writer ends once the other senders (running READs and WRITEs) do.
    pub fn detached(&self) -> Outbox {
        Outbox {
            tx: mpsc::channel(1).0,
            line: self.line.clone(),
        }
    }

    /// Queues `msg` for the writer task; waits while the queue is full. An error means the
    /// writer has stopped.
    pub async fn send(&self, msg: Outgoing) -> Result<(), ConnError> {
        // The slot is taken first, so that a send given up while it waits leaves the count
        // as it was; counted before it is queued, the message is never written uncounted.
        let slot = self.tx.reserve().await.map_err(|_| closed())?;
        self.line.queued.fetch_add(1, Ordering::AcqRel);
        slot.send(msg);
        Ok(())
    }

    /// Sends `msg`, writing it on the caller's task when nothing is queued and the socket
    /// is free, and queueing it otherwise. For the request loop's own answers: a socket
    /// that takes only part of the message is waited on here, as the writer would be.
    pub async fn send_now(&self, msg: Outgoing) -> Result<(), ConnError> {
        if self.tx.is_closed() {
            return Err(closed());
        }
        if self.line.queued.load(Ordering::Acquire) == 0 {
            if let Ok(mut sink) = self.line.sink.try_lock() {
                let one = [msg];
                self.line.write(&mut sink, &one).await?;
                drop(sink);
                self.line.recycle(one);
                return Ok(());
            }
        }
        self.send(msg).await
    }
}

impl Line {
    /// Writes `msgs` whole, each behind its frame header, in vectored writes (no copy into
    /// a frame buffer).
    async fn write(&self, sink: &mut Sink, msgs: &[Outgoing]) -> Result<(), ConnError> {
        let headers = msgs
            .iter()
            .map(|(m, _)| frame_header(m.len()).map_err(|e| ConnError::Protocol(e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        let mut slices: Vec<std::io::IoSlice<'_>> = Vec::with_capacity(msgs.len() * 3);
        for (h, (m, _)) in headers.iter().zip(msgs.iter()) {
            slices.push(std::io::IoSlice::new(h));
            slices.push(std::io::IoSlice::new(m.bytes()));
            if !m.tail_bytes().is_empty() {
                slices.push(std::io::IoSlice::new(m.tail_bytes()));
            }
        }
        let mut rest = &mut slices[..];
        while !rest.is_empty() {
            let n = sink.write_vectored(rest).await?;
            if n == 0 {
                return Err(ConnError::Io(std::io::ErrorKind::WriteZero.into()));
            }
            std::io::IoSlice::advance_slices(&mut rest, n);
            self.traffic.sent.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Gives the pooled buffers of sent messages back, and their in-flight budget.
    fn recycle(&self, sent: impl IntoIterator<Item = Outgoing>) {
        for (m, _) in sent {
            if m.pooled {
                self.shared.bufs().give(m.buf);
            }
        }
    }
}

impl Writer {
    /// Writes queued responses as they come, batching whatever is queued into one vectored
    /// write, until every sender is gone; then flushes the socket and shuts its sending side
    /// (the client sees the end at once, not when the last handle is dropped).
    pub async fn run(mut self) -> Result<(), ConnError> {
        let mut batch: Vec<Outgoing> = Vec::with_capacity(WRITE_BATCH);
        while self.rx.recv_many(&mut batch, WRITE_BATCH).await > 0 {
            let mut sink = self.line.sink.lock().await;
            self.line.write(&mut sink, &batch).await?;
            // Lowered only once the batch is on the socket: until then the direct path
            // must not overtake it.
            self.line.queued.fetch_sub(batch.len(), Ordering::AcqRel);
            drop(sink);
            self.line.recycle(batch.drain(..));
        }
        let mut sink = self.line.sink.lock().await;
        sink.flush().await?;
        // A peer already gone makes this fail; there is nothing left to tell it.
        let _ = sink.shutdown().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, DuplexStream};

    const WAIT: std::time::Duration = std::time::Duration::from_secs(5);

    fn outbox(pipe: usize) -> (Outbox, Writer, DuplexStream) {
        let (sink, wire) = tokio::io::duplex(pipe);
        let at = std::net::SocketAddr::from(([127, 0, 0, 1], 445));
        let traffic = Arc::new(ChannelTraffic::new(at, at));
        let (out, writer) = Outbox::new(sink, Arc::new(SharedState::default()), traffic);
        (out, writer, wire)
    }

    fn msg(fill: u8, len: usize) -> Outgoing {
        (OutBuf::from_vec(vec![fill; len]), None)
    }

    /// Reads one frame off the wire: its message's bytes.
    async fn frame(wire: &mut DuplexStream) -> Vec<u8> {
        let read = async {
            let mut h = [0u8; 4];
            wire.read_exact(&mut h).await?;
            let mut m = vec![0u8; u32::from_be_bytes(h) as usize];
            wire.read_exact(&mut m).await?;
            Ok::<_, std::io::Error>(m)
        };
        match tokio::time::timeout(WAIT, read).await {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => panic!("reading a frame: {e}"),
            Err(_) => panic!("no frame within {WAIT:?}"),
        }
    }

    /// With nothing queued, the caller writes the answer itself: it is on the wire though
    /// no writer task runs.
    #[tokio::test]
    async fn an_answer_is_written_at_once_when_nothing_is_queued() {
        let (out, _writer, mut wire) = outbox(1 << 16);
        within(out.send_now(msg(7, 100))).await;
        assert_eq!(frame(&mut wire).await, vec![7; 100]);
        assert_eq!(out.line.traffic.sent.load(Ordering::Relaxed), 104);
    }

    /// Sends within [`WAIT`], or fails the test.
    async fn within(send: impl std::future::Future<Output = Result<(), ConnError>>) {
        match tokio::time::timeout(WAIT, send).await {
            Ok(r) => r.unwrap(),
            Err(_) => panic!("a send still waited after {WAIT:?}"),
        }
    }

    /// An answer sent after one still queued goes behind it, and the writer sends them in
    /// order, each frame whole, through a pipe smaller than the first.
    #[tokio::test]
    async fn a_direct_answer_never_overtakes_a_queued_one() {
        let (out, writer, mut wire) = outbox(4096);
        within(out.send(msg(1, 5000))).await;
        within(out.send_now(msg(2, 3000))).await;
        within(out.send_now(msg(3, 10))).await;
        let writer = tokio::spawn(writer.run());
        assert_eq!(frame(&mut wire).await, vec![1; 5000]);
        assert_eq!(frame(&mut wire).await, vec![2; 3000]);
        assert_eq!(frame(&mut wire).await, vec![3; 10]);
        drop(out);
        // With every handle gone, the writer ends, and the socket closes behind the frames.
        writer.await.unwrap().unwrap();
        assert_eq!(wire.read(&mut [0u8; 1]).await.unwrap(), 0);
    }

    /// Once everything queued is written, the next answer takes the direct path again.
    #[tokio::test]
    async fn the_direct_path_reopens_once_the_queue_is_written() {
        let (out, writer, mut wire) = outbox(1 << 16);
        out.send(msg(1, 10)).await.unwrap();
        let mut run = Box::pin(writer.run());
        let deadline = tokio::time::Instant::now() + WAIT;
        while out.line.queued.load(Ordering::Acquire) != 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the writer never lowered the count"
            );
            tokio::select! {
                r = &mut run => panic!("the writer ended: {r:?}"),
                _ = tokio::task::yield_now() => {}
            }
        }
        assert_eq!(frame(&mut wire).await, vec![1; 10]);
        // The writer is no longer polled (but its queue stays open): only a direct write
        // puts this answer on the wire.
        within(out.send_now(msg(2, 10))).await;
        assert_eq!(frame(&mut wire).await, vec![2; 10]);
    }

    /// A connection whose writer has stopped refuses sends on both paths, and so does a
    /// detached handle.
    #[tokio::test]
    async fn sends_fail_once_the_writer_is_gone() {
        let (out, writer, _wire) = outbox(1 << 16);
        let detached = out.detached();
        assert!(detached.send_now(msg(1, 10)).await.is_err());
        assert!(detached.send(msg(1, 10)).await.is_err());
        drop(writer);
        assert!(out.send_now(msg(1, 10)).await.is_err());
        assert!(out.send(msg(1, 10)).await.is_err());
        assert_eq!(out.line.queued.load(Ordering::Acquire), 0);
    }
}
