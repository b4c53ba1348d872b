//! Direct-TCP transport framing (MS-SMB2 2.1): each message is preceded by a 4-byte header,
//! a zero byte and a 24-bit big-endian length. NetBIOS session keep-alives (type 0x85) are
//! recognised so they can be skipped.

use super::ProtoError;

/// Size of the framing header.
pub const FRAME_HEADER_LEN: usize = 4;
/// Largest frame the server accepts: an 8 MiB WRITE plus headers and an encryption transform
/// header fit well inside this; anything larger is a protocol violation and ends the connection.
pub const MAX_FRAME_LEN: usize = 8 * 1024 * 1024 + 64 * 1024;
/// The 24-bit length field's ceiling.
pub const MAX_WIRE_FRAME_LEN: usize = 0x00FF_FFFF;

/// What a 4-byte frame header announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A session message of this many bytes follows.
    Message(usize),
    /// A NetBIOS keep-alive with this many bytes of (ignored) payload.
    KeepAlive(usize),
}

/// Parses a frame header, enforcing [`MAX_FRAME_LEN`].
pub fn parse_frame_header(h: [u8; FRAME_HEADER_LEN]) -> Result<Frame, ProtoError> {
    let len = (usize::from(h[1]) << 16) | (usize::from(h[2]) << 8) | usize::from(h[3]);
    match h[0] {
        0x00 => {
            if len > MAX_FRAME_LEN {
                Err(ProtoError::FrameTooLarge(len))
            } else {
                Ok(Frame::Message(len))
            }
        }
        0x85 => Ok(Frame::KeepAlive(len)),
        other => Err(ProtoError::BadFrameType(other)),
    }
}

/// Encodes the frame header for a message of `len` bytes.
pub fn frame_header(len: usize) -> Result<[u8; FRAME_HEADER_LEN], ProtoError> {
    if len > MAX_WIRE_FRAME_LEN {
        return Err(ProtoError::FrameTooLarge(len));
    }
    let b = u32::try_from(len)
        .map_err(|_| ProtoError::FrameTooLarge(len))?
        .to_be_bytes();
    Ok([0, b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_limits() {
        let h = frame_header(0x01_02_03).unwrap();
        assert_eq!(h, [0, 1, 2, 3]);
        assert_eq!(parse_frame_header(h).unwrap(), Frame::Message(0x010203));
        assert_eq!(
            parse_frame_header([0, 0xFF, 0xFF, 0xFF]),
            Err(ProtoError::FrameTooLarge(0xFF_FFFF))
        );
        assert_eq!(
            parse_frame_header([0x85, 0, 0, 0]).unwrap(),
            Frame::KeepAlive(0)
        );
        assert_eq!(
            parse_frame_header([0x81, 0, 0, 4]),
            Err(ProtoError::BadFrameType(0x81))
        );
        assert!(frame_header(0x0100_0000).is_err());
    }
}
