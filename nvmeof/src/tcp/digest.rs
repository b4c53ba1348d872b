//! CRC32C header and data digests (NVMe/TCP 1.0 section 3.6.2.2/3.6.2.3).

/// Which digests a connection negotiated in ICReq/ICResp; why: every PDU after the
/// exchange carries (and must be checked against) exactly these.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Digests {
    /// HDGST: CRC32C over the common and PDU-specific header follows the header.
    pub header: bool,
    /// DDGST: CRC32C over the PDU data follows the data.
    pub data: bool,
}

impl Digests {
    /// Both digests off, as before the connection is initialized.
    pub const NONE: Digests = Digests {
        header: false,
        data: false,
    };

    /// Decodes the ICReq/ICResp DGST byte (bit 0 HDGST_ENABLE, bit 1 DDGST_ENABLE).
    pub fn from_dgst(dgst: u8) -> Self {
        Digests {
            header: dgst & 0x01 != 0,
            data: dgst & 0x02 != 0,
        }
    }

    /// Encodes the DGST byte for ICReq/ICResp.
    pub fn dgst(self) -> u8 {
        u8::from(self.header) | (u8::from(self.data) << 1)
    }

    /// Size in bytes the header digest adds (0 or 4).
    pub fn header_len(self) -> usize {
        if self.header {
            super::DIGEST_LEN
        } else {
            0
        }
    }
}

/// CRC32C (Castagnoli) as NVMe/TCP uses it: the plain CRC32C value, stored little-endian.
pub fn crc32c_digest(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}
