//! The 64-byte SMB2 packet header, sync and async forms (MS-SMB2 2.2.1.1, 2.2.1.2).

use super::wire::Reader;
use super::ProtoError;

/// ProtocolId of an SMB2/3 message.
pub const SMB2_MAGIC: [u8; 4] = [0xFE, b'S', b'M', b'B'];
/// Size of the SMB2 header on the wire.
pub const HEADER_LEN: usize = 64;
/// Offset of the Command field inside the header.
pub const COMMAND_OFFSET: usize = 12;
/// Offset of the Flags field inside the header (patched when a response is signed).
pub const FLAGS_OFFSET: usize = 16;
/// Offset of the NextCommand field inside the header (patched when a compound is joined).
pub const NEXT_COMMAND_OFFSET: usize = 20;
/// Offset of the MessageId field inside the header (the AES-GMAC nonce starts with it).
pub const MESSAGE_ID_OFFSET: usize = 24;
/// Offset of the 16-byte Signature field inside the header.
pub const SIGNATURE_OFFSET: usize = 48;

/// Header flag: the message is a response.
pub const FLAG_SERVER_TO_REDIR: u32 = 0x0000_0001;
/// Header flag: async form (AsyncId instead of TreeId).
pub const FLAG_ASYNC_COMMAND: u32 = 0x0000_0002;
/// Header flag: this compound element is related to the previous one.
pub const FLAG_RELATED_OPERATIONS: u32 = 0x0000_0004;
/// Header flag: the message is signed.
pub const FLAG_SIGNED: u32 = 0x0000_0008;
/// Header flag: DFS operation.
pub const FLAG_DFS_OPERATIONS: u32 = 0x1000_0000;
/// Header flag: replay of an earlier request.
pub const FLAG_REPLAY_OPERATION: u32 = 0x2000_0000;

/// SMB2 command codes (MS-SMB2 2.2.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Command {
    /// NEGOTIATE
    Negotiate = 0,
    /// SESSION_SETUP
    SessionSetup = 1,
    /// LOGOFF
    Logoff = 2,
    /// TREE_CONNECT
    TreeConnect = 3,
    /// TREE_DISCONNECT
    TreeDisconnect = 4,
    /// CREATE
    Create = 5,
    /// CLOSE
    Close = 6,
    /// FLUSH
    Flush = 7,
    /// READ
    Read = 8,
    /// WRITE
    Write = 9,
    /// LOCK
    Lock = 10,
    /// IOCTL
    Ioctl = 11,
    /// CANCEL
    Cancel = 12,
    /// ECHO
    Echo = 13,
    /// QUERY_DIRECTORY
    QueryDirectory = 14,
    /// CHANGE_NOTIFY
    ChangeNotify = 15,
    /// QUERY_INFO
    QueryInfo = 16,
    /// SET_INFO
    SetInfo = 17,
    /// OPLOCK_BREAK
    OplockBreak = 18,
}

impl Command {
    /// Maps a wire command code; `None` for codes outside MS-SMB2.
    pub fn from_u16(v: u16) -> Option<Self> {
        use Command::*;
        Some(match v {
            0 => Negotiate,
            1 => SessionSetup,
            2 => Logoff,
            3 => TreeConnect,
            4 => TreeDisconnect,
            5 => Create,
            6 => Close,
            7 => Flush,
            8 => Read,
            9 => Write,
            10 => Lock,
            11 => Ioctl,
            12 => Cancel,
            13 => Echo,
            14 => QueryDirectory,
            15 => ChangeNotify,
            16 => QueryInfo,
            17 => SetInfo,
            18 => OplockBreak,
            _ => return None,
        })
    }
}

/// A decoded SMB2 header. The raw command code is kept so an unknown command can still be
/// answered with an error that echoes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Header {
    /// CreditCharge: how many credits this request consumes (0 means 1 for 2.0.2).
    pub credit_charge: u16,
    /// Status in responses; ChannelSequence (low 16 bits) in 3.x requests.
    pub status: u32,
    /// Raw command code.
    pub command: u16,
    /// CreditRequest in requests, CreditResponse in responses.
    pub credits: u16,
    /// Flags (`FLAG_*`).
    pub flags: u32,
    /// Offset of the next compound element from this header, 0 for the last.
    pub next_command: u32,
    /// MessageId.
    pub message_id: u64,
    /// AsyncId when `FLAG_ASYNC_COMMAND` is set.
    pub async_id: u64,
    /// Reserved (ProcessId) in the sync form; Windows sends 0xFEFF and servers echo it.
    pub process_id: u32,
    /// TreeId in the sync form.
    pub tree_id: u32,
    /// SessionId.
    pub session_id: u64,
    /// Signature.
    pub signature: [u8; 16],
}

impl Header {
    /// Decodes the header at the start of `buf`.
    pub fn decode(buf: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(buf);
        if r.array::<4>()? != SMB2_MAGIC {
            return Err(ProtoError::BadMagic);
        }
        if r.u16()? != 64 {
            return Err(ProtoError::BadStructureSize("header"));
        }
        let credit_charge = r.u16()?;
        let status = r.u32()?;
        let command = r.u16()?;
        let credits = r.u16()?;
        let flags = r.u32()?;
        let next_command = r.u32()?;
        let message_id = r.u64()?;
        let (async_id, process_id, tree_id) = if flags & FLAG_ASYNC_COMMAND != 0 {
            (r.u64()?, 0, 0)
        } else {
            (0, r.u32()?, r.u32()?)
        };
        let session_id = r.u64()?;
        let signature = r.array()?;
        Ok(Self {
            credit_charge,
            status,
            command,
            credits,
            flags,
            next_command,
            message_id,
            async_id,
            process_id,
            tree_id,
            session_id,
            signature,
        })
    }

    /// The 64-byte encoding, built on the stack: a response's header is written straight
    /// into the headroom in front of its body without a buffer of its own.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut ids = [0u8; 8];
        if self.flags & FLAG_ASYNC_COMMAND != 0 {
            ids = self.async_id.to_le_bytes();
        } else {
            let (pid, tid) = ids.split_at_mut(4);
            pid.copy_from_slice(&self.process_id.to_le_bytes());
            tid.copy_from_slice(&self.tree_id.to_le_bytes());
        }
        let fields = SMB2_MAGIC
            .into_iter()
            .chain((HEADER_LEN as u16).to_le_bytes())
            .chain(self.credit_charge.to_le_bytes())
            .chain(self.status.to_le_bytes())
            .chain(self.command.to_le_bytes())
            .chain(self.credits.to_le_bytes())
            .chain(self.flags.to_le_bytes())
            .chain(self.next_command.to_le_bytes())
            .chain(self.message_id.to_le_bytes())
            .chain(ids)
            .chain(self.session_id.to_le_bytes())
            .chain(self.signature);
        let mut out = [0u8; HEADER_LEN];
        for (slot, byte) in out.iter_mut().zip(fields) {
            *slot = byte;
        }
        out
    }

    /// Appends the 64-byte encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    /// The decoded command, if known.
    pub fn command(&self) -> Option<Command> {
        Command::from_u16(self.command)
    }

    /// True when the async form is used.
    pub fn is_async(&self) -> bool {
        self.flags & FLAG_ASYNC_COMMAND != 0
    }

    /// True for a related compound element.
    pub fn is_related(&self) -> bool {
        self.flags & FLAG_RELATED_OPERATIONS != 0
    }

    /// True when the sender marked the message signed.
    pub fn is_signed(&self) -> bool {
        self.flags & FLAG_SIGNED != 0
    }

    /// The response header skeleton for this request: same command, message id, session and
    /// tree, the response flag set, and the related flag kept (MS-SMB2 3.3.4.1.3).
    pub fn response(&self, status: u32) -> Header {
        Header {
            credit_charge: self.credit_charge,
            status,
            command: self.command,
            credits: 0,
            flags: FLAG_SERVER_TO_REDIR | (self.flags & FLAG_RELATED_OPERATIONS),
            next_command: 0,
            message_id: self.message_id,
            async_id: 0,
            process_id: self.process_id,
            tree_id: self.tree_id,
            session_id: self.session_id,
            signature: [0; 16],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The NEGOTIATE request header of the MS preauth-integrity blog exchange.
    const BLOG_NEGOTIATE_HDR: &str = "FE534D4240000100000000000000800000000000000000000100000000000000FFFE000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn decodes_and_reencodes_blog_header() {
        let raw = hex::decode(BLOG_NEGOTIATE_HDR).unwrap();
        let h = Header::decode(&raw).unwrap();
        assert_eq!(h.credit_charge, 1);
        assert_eq!(h.command(), Some(Command::Negotiate));
        assert_eq!(h.credits, 0x80);
        assert_eq!(h.message_id, 1);
        assert_eq!(h.process_id, 0xFEFF);
        assert_eq!(h.tree_id, 0);
        let mut out = Vec::new();
        h.encode(&mut out);
        assert_eq!(out, raw);
        assert_eq!(h.to_bytes().as_slice(), raw.as_slice());
    }

    #[test]
    fn every_field_lands_at_its_offset() {
        let h = Header {
            credit_charge: 0x0102,
            status: 0x0304_0506,
            command: 0x0708,
            credits: 0x090A,
            flags: FLAG_SERVER_TO_REDIR | FLAG_SIGNED,
            next_command: 0x0B0C_0D0E,
            message_id: 0x1112_1314_1516_1718,
            process_id: 0x2122_2324,
            tree_id: 0x2526_2728,
            session_id: 0x3132_3334_3536_3738,
            signature: [0x40; 16],
            ..Default::default()
        };
        let b = h.to_bytes();
        assert_eq!(&b[..4], &SMB2_MAGIC);
        assert_eq!(&b[4..6], &64u16.to_le_bytes());
        assert_eq!(
            &b[COMMAND_OFFSET..COMMAND_OFFSET + 2],
            &0x0708u16.to_le_bytes()
        );
        assert_eq!(&b[FLAGS_OFFSET..FLAGS_OFFSET + 4], &9u32.to_le_bytes());
        assert_eq!(
            &b[NEXT_COMMAND_OFFSET..NEXT_COMMAND_OFFSET + 4],
            &0x0B0C_0D0Eu32.to_le_bytes()
        );
        assert_eq!(
            &b[MESSAGE_ID_OFFSET..MESSAGE_ID_OFFSET + 8],
            &0x1112_1314_1516_1718u64.to_le_bytes()
        );
        assert_eq!(&b[SIGNATURE_OFFSET..], &[0x40; 16]);
        assert_eq!(Header::decode(&b).unwrap(), h);
    }

    #[test]
    fn async_form_round_trips() {
        let h = Header {
            flags: FLAG_ASYNC_COMMAND | FLAG_SERVER_TO_REDIR,
            async_id: 0x1122_3344_5566_7788,
            command: Command::Lock as u16,
            status: super::super::status::PENDING,
            ..Default::default()
        };
        let mut out = Vec::new();
        h.encode(&mut out);
        assert_eq!(out.len(), HEADER_LEN);
        assert_eq!(&out[32..40], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(Header::decode(&out).unwrap(), h);
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(Header::decode(&[0xFE, b'S']), Err(ProtoError::Truncated));
        let mut raw = hex::decode(BLOG_NEGOTIATE_HDR).unwrap();
        raw[4] = 63;
        assert_eq!(
            Header::decode(&raw),
            Err(ProtoError::BadStructureSize("header"))
        );
        raw[0] = 0xFF;
        assert_eq!(Header::decode(&raw), Err(ProtoError::BadMagic));
        assert!(Header::decode(&raw[..10]).is_err());
    }
}
