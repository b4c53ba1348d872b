//! Reading a connection's direct-TCP frames (MS-SMB2 2.1) off its socket, one at a time,
//! in a way the request loop can wait on inside its `select!`.
//!
//! The loop reads its own requests: a reader task in front of it cost a channel hand-off
//! and a wake-up per request (tests/bench/RESULTS.md, step 28). A wait the loop drops
//! because another branch won (a break notice, say) must lose nothing, so everything read
//! so far lives in the [`FrameReader`], never in the future: each await is a single
//! `read` whose bytes are kept as soon as it returns, and the next call goes on from there.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::proto::framing::{parse_frame_header, Frame, FRAME_HEADER_LEN};
use crate::proto::io::{write_data_placement, WRITE_PLACEMENT_PREFIX};

use super::bufpool::{BufPool, Received, POOLED_RECEIVE_MIN};
use super::conn::{violation, ConnError};

/// Bytes of a NetBIOS keep-alive's body that are skipped; a longer one is a protocol
/// violation (RFC 1002 gives it none).
const KEEP_ALIVE_MAX: usize = 16;

/// Reads framed messages from `R`; cancel-safe (see the module doc). Messages of
/// [`POOLED_RECEIVE_MIN`] bytes or more go into buffers from the pool (see [`Received`]).
pub struct FrameReader<R> {
    rd: R,
    pool: Arc<BufPool>,
    state: State,
}

/// How far the frame being read has come.
enum State {
    /// Reading the frame header; `filled` of its bytes are in.
    Header {
        got: [u8; FRAME_HEADER_LEN],
        filled: usize,
    },
    /// Skipping what is left of a keep-alive's body.
    Skip { left: usize },
    /// Reading the first bytes of a large message, which say where its data should land
    /// ([`write_data_placement`]); `len` is the whole message's length.
    Prefix {
        len: usize,
        got: [u8; WRITE_PLACEMENT_PREFIX],
        filled: usize,
    },
    /// Reading the rest of a large message into its pooled buffer.
    Pooled { msg: Received, filled: usize },
    /// Reading a small message into a vector that grows only into its reserved capacity
    /// (no zeroing first: RESULTS.md, step 19).
    Small { msg: Vec<u8>, len: usize },
}

impl State {
    fn header() -> State {
        State::Header {
            got: [0; FRAME_HEADER_LEN],
            filled: 0,
        }
    }
}

/// The stream ended inside a frame.
fn cut_short() -> ConnError {
    ConnError::Io(std::io::ErrorKind::UnexpectedEof.into())
}

/// What of `buf` is still to be read into, past its first `filled` bytes. Each read adds
/// at most what it was given, so `filled` never passes the end (see [`overran`]).
fn unfilled(buf: &mut [u8], filled: usize) -> Result<&mut [u8], ConnError> {
    buf.get_mut(filled..).ok_or_else(overran)
}

/// A count of bytes read past the end of the buffer it counts: cannot happen (reads add
/// at most what they were given, and buffers are sized from the frame header), but would
/// end the connection rather than panic.
fn overran() -> ConnError {
    ConnError::Io(std::io::Error::other("frame reader overran its buffer"))
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader of `rd`'s frames, taking large messages' buffers from `pool`.
    pub fn new(rd: R, pool: Arc<BufPool>) -> FrameReader<R> {
        FrameReader {
            rd,
            pool,
            state: State::header(),
        }
    }

    /// The next message; `Ok(None)` on a clean end of stream (between frames). Dropping
    /// the future before it is ready loses nothing: a later call goes on where it stopped.
    pub async fn next(&mut self) -> Result<Option<Received>, ConnError> {
        let FrameReader { rd, pool, state } = self;
        loop {
            match state {
                State::Header { got, filled } => {
                    let n = rd.read(unfilled(got, *filled)?).await?;
                    if n == 0 {
                        return match *filled {
                            0 => Ok(None),
                            _ => Err(cut_short()),
                        };
                    }
                    *filled += n;
                    if *filled < FRAME_HEADER_LEN {
                        continue;
                    }
                    *state = match parse_frame_header(*got).map_err(|e| violation(e.to_string()))? {
                        Frame::KeepAlive(left) if left <= KEEP_ALIVE_MAX => State::Skip { left },
                        Frame::KeepAlive(n) => {
                            return Err(violation(format!("keep-alive of {n} bytes")))
                        }
                        Frame::Message(len) if len >= POOLED_RECEIVE_MIN => State::Prefix {
                            len,
                            got: [0; WRITE_PLACEMENT_PREFIX],
                            filled: 0,
                        },
                        Frame::Message(len) => State::Small {
                            msg: Vec::with_capacity(len),
                            len,
                        },
                    };
                }
                State::Skip { left } => {
                    if *left > 0 {
                        let mut skip = [0u8; KEEP_ALIVE_MAX];
                        // `left` starts at most KEEP_ALIVE_MAX and only shrinks.
                        let n = rd.read(skip.get_mut(..*left).ok_or_else(overran)?).await?;
                        if n == 0 {
                            return Err(cut_short());
                        }
                        *left -= n;
                    }
                    if *left == 0 {
                        *state = State::header();
                    }
                }
                State::Prefix { len, got, filled } => {
                    // `len` is at least POOLED_RECEIVE_MIN, far more than the prefix.
                    let n = rd.read(unfilled(got, *filled)?).await?;
                    if n == 0 {
                        return Err(cut_short());
                    }
                    *filled += n;
                    if *filled == WRITE_PLACEMENT_PREFIX {
                        let (lead, file_offset) = write_data_placement(got);
                        let mut msg = Received::pooled(pool, *len, lead, file_offset);
                        let prefix = msg
                            .first_chunk_mut::<WRITE_PLACEMENT_PREFIX>()
                            .ok_or_else(overran)?;
                        *prefix = *got;
                        *state = State::Pooled {
                            msg,
                            filled: WRITE_PLACEMENT_PREFIX,
                        };
                    }
                }
                State::Pooled { msg, filled } => {
                    if *filled < msg.len() {
                        let n = rd.read(unfilled(msg, *filled)?).await?;
                        if n == 0 {
                            return Err(cut_short());
                        }
                        *filled += n;
                    }
                    if *filled == msg.len() {
                        if let State::Pooled { msg, .. } = std::mem::replace(state, State::header())
                        {
                            return Ok(Some(msg));
                        }
                    }
                }
                State::Small { msg, len } => {
                    use bytes::BufMut;
                    let left = *len - msg.len();
                    // `limit` keeps the read inside the message (and the vector from growing).
                    if left > 0 && rd.read_buf(&mut (&mut *msg).limit(left)).await? == 0 {
                        return Err(cut_short());
                    }
                    if msg.len() == *len {
                        let msg = std::mem::take(msg);
                        *state = State::header();
                        return Ok(Some(msg.into()));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::framing::frame_header;
    use crate::proto::transform::TRANSFORM_LEN;
    use crate::proto::{Command, FileId, Header};
    use tokio::io::{AsyncWriteExt, BufReader};

    /// The wire form of `msgs`, each framed, with a NetBIOS keep-alive (type 0x85, no
    /// length) before the last.
    fn wire_of(msgs: &[&[u8]]) -> Vec<u8> {
        let mut wire = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            if i + 1 == msgs.len() {
                wire.extend_from_slice(&[0x85, 0, 0, 0]);
            }
            wire.extend_from_slice(&frame_header(m.len()).unwrap());
            wire.extend_from_slice(m);
        }
        wire
    }

    fn reader_of<R: AsyncRead + Unpin>(rd: R) -> FrameReader<BufReader<R>> {
        FrameReader::new(
            BufReader::with_capacity(512, rd),
            Arc::new(BufPool::default()),
        )
    }

    /// Frames arrive whole however the socket splits them; keep-alives are skipped, and
    /// a message cut short is an error, not a frame.
    #[tokio::test]
    async fn frames_are_read_whole_across_split_reads() {
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let wire = wire_of(&[b"first", &big, b"", b"end"]);
        let (mut tx, rx) = tokio::io::duplex(1000);
        let writer = tokio::spawn(async move {
            for piece in wire.chunks(777) {
                tx.write_all(piece).await.unwrap();
            }
        });
        let mut frames = reader_of(rx);
        assert_eq!(&*frames.next().await.unwrap().unwrap(), b"first");
        assert!(*frames.next().await.unwrap().unwrap() == big[..]);
        assert!(frames.next().await.unwrap().unwrap().is_empty());
        assert_eq!(&*frames.next().await.unwrap().unwrap(), b"end");
        writer.await.unwrap();
        assert!(frames.next().await.unwrap().is_none(), "clean end");

        for (cut, sent) in [(10, &b"short"[..]), (POOLED_RECEIVE_MIN + 10, b"short")] {
            let (mut tx, rx) = tokio::io::duplex(1000);
            tx.write_all(&frame_header(cut).unwrap()).await.unwrap();
            tx.write_all(sent).await.unwrap();
            drop(tx);
            assert!(reader_of(rx).next().await.is_err(), "{cut} cut short");
        }
        // A header cut short is an error too; nothing at all is a clean end.
        let (mut tx, rx) = tokio::io::duplex(1000);
        tx.write_all(&[0, 0]).await.unwrap();
        drop(tx);
        assert!(reader_of(rx).next().await.is_err(), "header cut short");
    }

    /// The request loop drops a wait for the next frame whenever another branch of its
    /// `select!` wins. Dropped at every point of a frame (header, keep-alive, a large
    /// message's prefix and body, a small message), the reader still yields every message
    /// whole and in order.
    #[tokio::test]
    async fn waits_dropped_midway_lose_nothing() {
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
        let small: Vec<u8> = (0..3_000u32).map(|i| (i % 239) as u8).collect();
        let msgs: Vec<&[u8]> = vec![&small, &big, b"x", &big, &small];
        let wire = wire_of(&msgs);
        let (mut tx, rx) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            for piece in wire.chunks(61) {
                tx.write_all(piece).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let mut frames = reader_of(rx);
        let (mut got, mut dropped_midframe) = (Vec::new(), 0);
        loop {
            tokio::select! {
                biased;
                r = frames.next() => match r.unwrap() {
                    Some(m) => got.push(m),
                    None => break,
                },
                _ = tokio::task::yield_now() => {
                    let between = matches!(frames.state, State::Header { filled: 0, .. });
                    dropped_midframe += usize::from(!between);
                }
            }
        }
        writer.await.unwrap();
        assert_eq!(got.len(), msgs.len());
        for (i, (g, m)) in got.iter().zip(&msgs).enumerate() {
            assert!(**g == **m, "message {i}");
        }
        assert!(
            dropped_midframe > 100,
            "only {dropped_midframe} waits dropped mid-frame"
        );
    }

    /// A small deterministic generator (xorshift64*), so a failing case can be replayed.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
        }
    }

    /// A socket that hands out random pieces of `wire` and says "not yet" at random. It
    /// wakes no one: only for polling by hand, as the test below does, again and again.
    struct Trickle {
        wire: Vec<u8>,
        at: usize,
        rng: Rng,
    }
    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if self.rng.below(3) == 0 {
                return std::task::Poll::Pending;
            }
            let piece = 1 + self.rng.below(3000);
            let n = piece.min(buf.remaining()).min(self.wire.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.wire[at..at + n]);
            self.at += n;
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// What the wire holds, read the simple way with the whole of it at hand: the messages
    /// in order, then whether it ends cleanly (between frames) or with an error.
    fn frames_of(wire: &[u8]) -> (Vec<Vec<u8>>, bool) {
        let mut msgs = Vec::new();
        let mut at = 0;
        while at < wire.len() {
            let Some(h) = wire.get(at..at + FRAME_HEADER_LEN) else {
                return (msgs, false);
            };
            at += FRAME_HEADER_LEN;
            let body = match parse_frame_header([h[0], h[1], h[2], h[3]]) {
                Ok(Frame::Message(n)) => n,
                Ok(Frame::KeepAlive(n)) if n <= KEEP_ALIVE_MAX => {
                    at += n;
                    if at > wire.len() {
                        return (msgs, false);
                    }
                    continue;
                }
                _ => return (msgs, false),
            };
            let Some(m) = wire.get(at..at + body) else {
                return (msgs, false);
            };
            msgs.push(m.to_vec());
            at += body;
        }
        (msgs, true)
    }

    /// Random streams of messages (small, empty and pooled), keep-alives, bad headers and
    /// cut-short ends, delivered in random pieces through a `BufReader` of random size,
    /// with each wait polled a random number of times and then dropped: the reader yields
    /// exactly what the simple reading of the whole stream finds, and ends the same way.
    #[test]
    fn random_streams_read_as_a_whole_reading_finds() {
        use std::future::Future;
        use std::task::{Context, Poll, Waker};
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let pool = Arc::new(BufPool::default());
        let (mut pooled, mut cut, mut whole) = (0, 0, 0);
        for case in 0..400 {
            let mut wire = Vec::new();
            for _ in 0..rng.below(6) {
                match rng.below(10) {
                    0 => {
                        // A keep-alive, now and then with a body (too long, at times).
                        let n = [0, 0, 3, KEEP_ALIVE_MAX, KEEP_ALIVE_MAX + 1][rng.below(5)];
                        wire.extend_from_slice(&[0x85, 0, 0, n as u8]);
                        wire.extend(std::iter::repeat_n(0xee, n));
                    }
                    1 => wire.extend_from_slice(&[rng.below(256) as u8, 0, 0, 9]),
                    k => {
                        let len = match k {
                            2 | 3 => POOLED_RECEIVE_MIN + rng.below(5000),
                            4 => 0,
                            _ => rng.below(600),
                        };
                        wire.extend_from_slice(&frame_header(len).unwrap());
                        wire.extend((0..len).map(|_| rng.below(256) as u8));
                    }
                }
            }
            if rng.below(4) == 0 {
                wire.truncate(rng.below(wire.len() + 1));
            }
            let (want, clean) = frames_of(&wire);
            let trickle = Trickle {
                wire,
                at: 0,
                rng: Rng(rng.0 ^ 0xabcd),
            };
            let buffer = 1 + rng.below(700);
            let mut frames =
                FrameReader::new(BufReader::with_capacity(buffer, trickle), pool.clone());
            let mut cx = Context::from_waker(Waker::noop());
            let mut got = Vec::new();
            let ended_clean = loop {
                let polls = 1 + rng.below(4);
                let mut next = std::pin::pin!(frames.next());
                let mut done = None;
                for _ in 0..polls {
                    if let Poll::Ready(r) = next.as_mut().poll(&mut cx) {
                        done = Some(r);
                        break;
                    }
                }
                match done {
                    None => continue,
                    Some(Ok(Some(m))) => got.push(m.to_vec()),
                    Some(Ok(None)) => break true,
                    Some(Err(_)) => break false,
                }
            };
            assert_eq!(got.len(), want.len(), "case {case}: messages");
            assert!(got == want, "case {case}: message bytes");
            assert_eq!(ended_clean, clean, "case {case}: how it ended");
            pooled += got.iter().filter(|m| m.len() >= POOLED_RECEIVE_MIN).count();
            (cut, whole) = if clean {
                (cut, whole + 1)
            } else {
                (cut + 1, whole)
            };
        }
        // The cases reach every kind of frame and both ends.
        assert!(
            pooled > 100 && cut > 50 && whole > 50,
            "{pooled} {cut} {whole}"
        );
    }

    /// `msg` framed (behind a keep-alive), read back by a reader of its own over `pool`.
    async fn read_one(msg: &[u8], pool: &Arc<BufPool>) -> Received {
        let wire = wire_of(&[msg]);
        let mut frames = FrameReader::new(&wire[..], pool.clone());
        frames.next().await.unwrap().unwrap()
    }

    /// A large WRITE is read into a pooled buffer with its data at an address aligned as
    /// its file offset is (plain), or aligned for a lone WRITE behind a transform header
    /// (encrypted); the buffer goes back to the pool when the message is dropped.
    #[tokio::test]
    async fn large_writes_land_aligned_in_pooled_buffers() {
        use crate::proto::io::WriteRequest;
        use crate::server::bufpool::DATA_ALIGN;
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        let pool = Arc::new(BufPool::default());
        for file_offset in [0u64, 8 << 20, (1 << 20) + 513] {
            let mut msg = Vec::new();
            Header {
                command: Command::Write as u16,
                ..Default::default()
            }
            .encode(&mut msg);
            WriteRequest {
                offset: file_offset,
                file_id: FileId::default(),
                flags: 0,
                data: &data,
            }
            .encode(&mut msg);
            let got = read_one(&msg, &pool).await;
            assert!(*got == msg[..]);
            let req = WriteRequest::decode(&got).unwrap();
            assert_eq!(req.data, &data[..]);
            let at = req.data.as_ptr() as usize % DATA_ALIGN;
            assert_eq!(
                at as u64,
                file_offset % DATA_ALIGN as u64,
                "at {file_offset}"
            );
            let buffer = got.as_ptr();
            drop(got);
            let again = pool.take(1);
            assert!(again.as_ptr() <= buffer, "back in the pool");
            assert!(buffer < again.as_ptr().wrapping_add(again.len()));
            pool.give(again);
        }
        let mut sealed = crate::proto::transform::TRANSFORM_MAGIC.to_vec();
        sealed.resize(POOLED_RECEIVE_MIN + 1000, 7);
        let got = read_one(&sealed, &pool).await;
        assert!(*got == sealed[..]);
        let data_at = got.as_ptr() as usize + TRANSFORM_LEN + WRITE_PLACEMENT_PREFIX;
        assert_eq!(data_at % DATA_ALIGN, 0);
    }
}
