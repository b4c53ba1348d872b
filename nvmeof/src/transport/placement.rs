//! Large write data received in place: once the header of a PDU carrying write data is
//! in (H2CData, or a command capsule with in-capsule data), its data is read from the
//! socket straight into an aligned buffer the command then writes from, instead of the
//! whole PDU being buffered and its data copied out. Why: a 128 KiB write otherwise
//! crossed user space twice (the receive buffer grown or compacted around the PDU, then
//! the copy into the command's buffer): 24% of Quarry's samples in 128 KiB sequential
//! writes (tests/bench/nvme.md).
//!
//! H2CData goes this way only when the queue would take it ([`Queue::lend_h2c_buffer`]
//! lends the command's buffer); a capsule's data goes into a pooled buffer of its own
//! and the queue then handles the capsule exactly as if it had been buffered whole
//! ([`Queue::capsule_placed`]). Anything else (small, malformed, not expected) is
//! buffered whole and handled by [`Queue::handle_pdu`] as before, so the errors a host
//! sees do not change. The data digest, if negotiated, is checked over the placed data
//! before the queue sees it.

use bytes::{Buf, BytesMut};

use crate::target::{IoBuf, Queue};
use crate::tcp::{
    check_data_digest, decode_data_head, DataHead, DecodeContext, HeadOf, PduError, DIGEST_LEN,
};

/// PDUs carrying write data at least this long (PLEN) are received in place; shorter
/// ones cost less to buffer whole than to place.
pub(super) const PLACE_MIN: usize = 32 * 1024;

/// A PDU whose write data is being read into its buffer.
pub(super) struct Placing {
    head: DataHead,
    /// The PDU's header bytes, echoed in a termination request.
    echo: Vec<u8>,
    buf: IoBuf,
    /// Where this PDU's data starts in `buf`.
    start: usize,
    /// Data bytes still to come from the socket.
    left: usize,
}

impl Placing {
    /// Starts placing the PDU at the front of `rx` when it carries write data, is at
    /// least [`PLACE_MIN`] long, is not all received yet, and (H2CData) is one the queue
    /// takes: its header and the data already received are consumed from `rx`. `None`
    /// leaves `rx` untouched.
    pub(super) fn start(
        rx: &mut BytesMut,
        q: &mut Queue,
        ctx: &DecodeContext,
        echo_len: usize,
    ) -> Option<Placing> {
        let head = decode_data_head(rx, ctx).ok()??;
        if head.plen < PLACE_MIN || rx.len() >= head.plen {
            return None;
        }
        let mut buf = match head.of {
            HeadOf::H2cData { .. } => q.lend_h2c_buffer(&head)?,
            // Bounded by the PDU length the decoder accepts, as buffering it whole is.
            HeadOf::CapsuleCmd(_) => IoBuf::with_capacity(head.data_len),
        };
        let echo = rx.get(..head.pdo.min(echo_len))?.to_vec();
        let start = buf.len();
        rx.advance(head.pdo);
        let have = rx.len().min(head.data_len);
        // Fits: the queue lends a buffer with room for the whole PDU's data.
        buf.extend_from_slice(rx.get(..have).unwrap_or_default());
        rx.advance(have);
        Some(Placing {
            head,
            echo,
            buf,
            start,
            left: head.data_len - have,
        })
    }

    /// Where the next socket read goes while data is still to come.
    pub(super) fn room(&mut self) -> Option<&mut [u8]> {
        (self.left > 0).then(|| self.buf.spare_mut(self.left))
    }

    /// Counts `n` bytes read into [`Placing::room`].
    pub(super) fn filled(&mut self, n: usize) {
        let n = n.min(self.left);
        self.buf.commit(n);
        self.left -= n;
    }

    /// Whether the data is all in, and its digest (when negotiated) at the front of `rx`.
    pub(super) fn ready(&self, rx: &BytesMut) -> bool {
        self.left == 0 && (!self.head.data_digest || rx.len() >= DIGEST_LEN)
    }

    /// Once [`Placing::ready`]: checks the digest and hands the buffer back to the queue.
    pub(super) fn finish(self, rx: &mut BytesMut, q: &mut Queue, now_ms: u64) {
        if self.head.data_digest {
            let Some(d) = rx.first_chunk::<DIGEST_LEN>() else {
                return q.decode_error(
                    &PduError::Truncated {
                        need: DIGEST_LEN,
                        got: rx.len(),
                    },
                    &self.echo,
                );
            };
            let received = u32::from_le_bytes(*d);
            rx.advance(DIGEST_LEN);
            let data = self.buf.get(self.start..).unwrap_or_default();
            if let Err(e) = check_data_digest(data, received) {
                return q.decode_error(&e, &self.echo);
            }
        }
        match self.head.of {
            HeadOf::H2cData { .. } => q.h2c_data_placed(&self.head, self.buf, &self.echo, now_ms),
            HeadOf::CapsuleCmd(sqe) => q.capsule_placed(sqe, self.buf, &self.echo, now_ms),
        }
    }
}
