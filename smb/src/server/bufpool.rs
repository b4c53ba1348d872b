//! Reusable response buffers for READ: an 8 MiB read otherwise allocates, zeroes and
//! page-faults a fresh buffer per request and copies the data once more behind the header.
//! A pooled buffer is read into at [`HEADROOM`], so the SMB2 header (and the transform
//! header when sealing) is written in front of the data in place, and the writer hands the
//! buffer back once it is on the socket.

use std::sync::Mutex;

use crate::proto::transform::TRANSFORM_LEN;
use crate::proto::HEADER_LEN;

/// Free bytes kept in front of a response body: a transform header and an SMB2 header.
pub const HEADROOM: usize = TRANSFORM_LEN + HEADER_LEN;
/// Buffers kept for reuse; more are freed on return. Bounds the pool's memory to this
/// many times the largest pooled buffer.
const MAX_POOLED: usize = 16;
/// Largest buffer kept: a full-size READ response with its headroom.
const MAX_POOLED_LEN: usize = HEADROOM + 16 + super::MAX_IO_SIZE as usize;

/// A response being built in a buffer: the message occupies `buf[start..end]`, with at
/// least `start` bytes free in front of it.
#[derive(Debug)]
pub struct OutBuf {
    /// The buffer (from the pool, or any `Vec`).
    pub buf: Vec<u8>,
    /// First byte of the message.
    pub start: usize,
    /// One past its last byte.
    pub end: usize,
    /// Taken from a [`BufPool`]: give it back once sent.
    pub pooled: bool,
}

impl OutBuf {
    /// A message in a plain vector (no headroom).
    pub fn from_vec(v: Vec<u8>) -> OutBuf {
        let end = v.len();
        OutBuf {
            buf: v,
            start: 0,
            end,
            pooled: false,
        }
    }

    /// The message bytes.
    pub fn bytes(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or(&[])
    }

    /// The message as its own vector (copies unless it already is one).
    pub fn into_vec(mut self) -> Vec<u8> {
        if self.start == 0 {
            self.buf.truncate(self.end);
            self.buf
        } else {
            self.bytes().to_vec()
        }
    }
}

/// The server's pool of response buffers.
#[derive(Debug, Default)]
pub struct BufPool {
    free: Mutex<Vec<Vec<u8>>>,
}

impl BufPool {
    /// A buffer of at least `len` initialised bytes (contents unspecified).
    pub fn take(&self, len: usize) -> Vec<u8> {
        let reused = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match reused {
            Some(mut b) => {
                if b.len() < len {
                    // Only the growth is zeroed; a full-size buffer never grows again.
                    b.resize(len, 0);
                }
                b
            }
            None => vec![0; len],
        }
    }

    /// Returns a buffer for reuse (dropped when the pool is full or it is oversized).
    pub fn give(&self, buf: Vec<u8>) {
        if buf.capacity() > MAX_POOLED_LEN || buf.len() < HEADROOM {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < MAX_POOLED {
            free.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_without_shrinking_and_the_pool_is_bounded() {
        let pool = BufPool::default();
        let a = pool.take(HEADROOM + 4096);
        assert_eq!(a.len(), HEADROOM + 4096);
        let ptr = a.as_ptr();
        pool.give(a);
        let b = pool.take(HEADROOM + 100);
        assert_eq!(b.as_ptr(), ptr, "reused");
        assert!(b.len() >= HEADROOM + 100);
        pool.give(b);
        for _ in 0..MAX_POOLED + 4 {
            pool.give(vec![0; HEADROOM + 1]);
        }
        assert_eq!(pool.free.lock().unwrap().len(), MAX_POOLED);
        // Oversized and tiny buffers are not kept.
        let before = pool.free.lock().unwrap().len();
        pool.give(vec![0; 8]);
        assert_eq!(pool.free.lock().unwrap().len(), before);
    }

    #[test]
    fn out_buf_views() {
        let o = OutBuf::from_vec(vec![1, 2, 3]);
        assert_eq!(o.bytes(), &[1, 2, 3]);
        assert_eq!(o.into_vec(), vec![1, 2, 3]);
        let o = OutBuf {
            buf: vec![0, 0, 7, 8, 9],
            start: 2,
            end: 4,
            pooled: false,
        };
        assert_eq!(o.bytes(), &[7, 8]);
        assert_eq!(o.into_vec(), vec![7, 8]);
    }
}
