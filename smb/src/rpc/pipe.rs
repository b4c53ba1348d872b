//! The per-open srvsvc pipe: bytes written by the client go in, DCE/RPC PDUs come out.
//!
//! Named pipes on IPC$ are message-mode: each PDU is one message. A read returns (part of)
//! the oldest pending message; if the caller's buffer is too small, [`PipeRead::more`] says
//! so and the server answers STATUS_BUFFER_OVERFLOW, leaving the rest for the next read.

use std::collections::VecDeque;

use super::pdu::{self, fault, ptype, ContextResult, Header, SyntaxId, NDR20, SRVSVC};
use super::srvsvc;
use super::{RpcError, ShareEntry};

/// Most bytes buffered from client writes that do not yet form a whole PDU.
pub const MAX_PENDING_INPUT: usize = pdu::MAX_FRAG as usize;
/// Largest reassembled request stub (a srvsvc request is under 1 KiB).
pub const MAX_REQUEST_STUB: usize = 64 * 1024;
/// Most response messages queued and not yet read; a client that writes without reading is
/// refused beyond this.
pub const MAX_QUEUED_MESSAGES: usize = 64;
/// Association group id reported when the client asks for a new one.
pub const ASSOC_GROUP_ID: u32 = 0x0000_53F0;
/// Secondary address reported in bind_ack.
pub const SECONDARY_ADDRESS: &str = "\\PIPE\\srvsvc";
/// Bind-time features we acknowledge: none of the optional ones (MS-RPCE 2.2.2.14).
const BIND_TIME_FEATURES: u16 = 0;

/// Data returned by one read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipeRead {
    /// Bytes of the current message (at most the requested length).
    pub data: Vec<u8>,
    /// More bytes of the same message remain (STATUS_BUFFER_OVERFLOW).
    pub more: bool,
}

#[derive(Debug)]
struct PendingRequest {
    call_id: u32,
    context_id: u16,
    opnum: u16,
    stub: Vec<u8>,
}

/// One open of `\PIPE\srvsvc`.
#[derive(Debug)]
pub struct SrvsvcPipe {
    shares: Vec<ShareEntry>,
    server: Option<srvsvc::ServerInfo>,
    bound_contexts: Vec<u16>,
    max_xmit: u16,
    input: Vec<u8>,
    pending: Option<PendingRequest>,
    output: VecDeque<Vec<u8>>,
    read_offset: usize,
}

impl SrvsvcPipe {
    /// A pipe that reports `shares` (a snapshot: a new open sees the current share list).
    pub fn new(shares: Vec<ShareEntry>) -> Self {
        Self {
            shares,
            server: None,
            bound_contexts: Vec::new(),
            max_xmit: pdu::MAX_FRAG,
            input: Vec::new(),
            pending: None,
            output: VecDeque::new(),
            read_offset: 0,
        }
    }

    /// Also answers NetrServerGetInfo (levels 100, 101) with this name and comment; without
    /// it that call gets an op-range fault.
    pub fn with_server_info(mut self, name: impl Into<String>, comment: impl Into<String>) -> Self {
        self.server = Some(srvsvc::ServerInfo {
            name: name.into(),
            comment: comment.into(),
        });
        self
    }

    /// Accepts bytes the client wrote. Whole PDUs are processed at once and their replies
    /// queued. An error means the stream is unusable and the pipe should be closed.
    pub fn write(&mut self, data: &[u8]) -> Result<(), RpcError> {
        if self.input.len() + data.len() > MAX_PENDING_INPUT {
            return Err(RpcError::TooLarge("pipe input"));
        }
        self.input.extend_from_slice(data);
        loop {
            if self.input.len() < pdu::HEADER_LEN {
                return Ok(());
            }
            let h = pdu::parse_header(&self.input)?;
            let len = usize::from(h.frag_len);
            if self.input.len() < len {
                return Ok(());
            }
            let frag: Vec<u8> = self.input.drain(..len).collect();
            self.handle_pdu(&h, &frag)?;
        }
    }

    /// Returns up to `max_len` bytes of the oldest queued reply, or `None` if nothing is
    /// pending.
    pub fn read(&mut self, max_len: usize) -> Option<PipeRead> {
        let front = self.output.front()?;
        let start = self.read_offset;
        let end = front.len().min(start.saturating_add(max_len));
        let data = front
            .get(start..end)
            .map(<[u8]>::to_vec)
            .unwrap_or_default();
        let more = end < front.len();
        if more {
            self.read_offset = end;
        } else {
            self.output.pop_front();
            self.read_offset = 0;
        }
        Some(PipeRead { data, more })
    }

    /// FSCTL_PIPE_TRANSCEIVE: write `input`, then read one reply of at most `max_out` bytes.
    pub fn transact(&mut self, input: &[u8], max_out: usize) -> Result<Option<PipeRead>, RpcError> {
        self.write(input)?;
        Ok(self.read(max_out))
    }

    /// Bytes of replies waiting to be read (for FILE_PIPE_LOCAL_INFORMATION and peeks).
    pub fn pending_output(&self) -> usize {
        self.output
            .iter()
            .map(Vec::len)
            .sum::<usize>()
            .saturating_sub(self.read_offset)
    }

    fn queue(&mut self, msg: Vec<u8>) -> Result<(), RpcError> {
        if self.output.len() >= MAX_QUEUED_MESSAGES {
            return Err(RpcError::TooLarge("unread pipe output"));
        }
        self.output.push_back(msg);
        Ok(())
    }

    fn handle_pdu(&mut self, h: &Header, frag: &[u8]) -> Result<(), RpcError> {
        match h.ptype {
            ptype::BIND | ptype::ALTER_CONTEXT => self.handle_bind(h, frag),
            ptype::REQUEST => self.handle_request(h, frag),
            _ => self.queue(pdu::build_fault(h.call_id, 0, fault::PROTO_ERROR)),
        }
    }

    fn handle_bind(&mut self, h: &Header, frag: &[u8]) -> Result<(), RpcError> {
        if h.auth_len != 0 {
            // The SMB session already authenticates the pipe; DCE/RPC-level auth is not offered.
            return self.queue(pdu::build_bind_nak(
                h.call_id,
                pdu::reject::AUTHENTICATION_TYPE_NOT_RECOGNIZED,
            ));
        }
        let bind = match pdu::parse_bind(frag) {
            Ok(b) => b,
            Err(_) => {
                return self.queue(pdu::build_bind_nak(h.call_id, pdu::reject::NOT_SPECIFIED))
            }
        };
        let mut results = Vec::with_capacity(bind.contexts.len());
        for ctx in &bind.contexts {
            let zero = SyntaxId {
                uuid: [0; 16],
                version: 0,
            };
            let r = if ctx
                .transfer_syntaxes
                .iter()
                .any(|t| t.uuid[..8] == pdu::BIND_TIME_FEATURE_PREFIX)
            {
                ContextResult {
                    result: pdu::result::NEGOTIATE_ACK,
                    reason: BIND_TIME_FEATURES,
                    transfer_syntax: zero,
                }
            } else if ctx.abstract_syntax != SRVSVC {
                ContextResult {
                    result: pdu::result::PROVIDER_REJECTION,
                    reason: pdu::result::REASON_ABSTRACT_SYNTAX,
                    transfer_syntax: zero,
                }
            } else if ctx.transfer_syntaxes.contains(&NDR20) {
                if !self.bound_contexts.contains(&ctx.id) {
                    self.bound_contexts.push(ctx.id);
                }
                ContextResult {
                    result: pdu::result::ACCEPTANCE,
                    reason: 0,
                    transfer_syntax: NDR20,
                }
            } else {
                ContextResult {
                    result: pdu::result::PROVIDER_REJECTION,
                    reason: pdu::result::REASON_TRANSFER_SYNTAXES,
                    transfer_syntax: zero,
                }
            };
            results.push(r);
        }
        self.max_xmit = bind.max_recv_frag.clamp(pdu::MIN_FRAG, pdu::MAX_FRAG);
        let max_recv = bind.max_xmit_frag.clamp(pdu::MIN_FRAG, pdu::MAX_FRAG);
        let (out_type, addr) = if h.ptype == ptype::BIND {
            (ptype::BIND_ACK, SECONDARY_ADDRESS)
        } else {
            (ptype::ALTER_CONTEXT_RESP, "")
        };
        let assoc = if bind.assoc_group_id == 0 {
            ASSOC_GROUP_ID
        } else {
            bind.assoc_group_id
        };
        self.queue(pdu::build_bind_ack(
            out_type,
            h.call_id,
            self.max_xmit,
            max_recv,
            assoc,
            addr,
            &results,
        ))
    }

    fn handle_request(&mut self, h: &Header, frag: &[u8]) -> Result<(), RpcError> {
        let req = pdu::parse_request(h, frag)?;
        if h.flags & pdu::pfc::FIRST_FRAG != 0 {
            self.pending = Some(PendingRequest {
                call_id: h.call_id,
                context_id: req.context_id,
                opnum: req.opnum,
                stub: Vec::new(),
            });
        }
        let Some(p) = self.pending.as_mut() else {
            return self.queue(pdu::build_fault(
                h.call_id,
                req.context_id,
                fault::PROTO_ERROR,
            ));
        };
        if p.call_id != h.call_id {
            self.pending = None;
            return self.queue(pdu::build_fault(
                h.call_id,
                req.context_id,
                fault::PROTO_ERROR,
            ));
        }
        if p.stub.len() + req.stub.len() > MAX_REQUEST_STUB {
            return Err(RpcError::TooLarge("request stub"));
        }
        p.stub.extend_from_slice(req.stub);
        if h.flags & pdu::pfc::LAST_FRAG == 0 {
            return Ok(());
        }
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        if !self.bound_contexts.contains(&p.context_id) {
            return self.queue(pdu::build_fault(
                p.call_id,
                p.context_id,
                fault::CONTEXT_MISMATCH,
            ));
        }
        let stub = match p.opnum {
            srvsvc::OPNUM_NETR_SHARE_ENUM => srvsvc::parse_share_enum(&p.stub)
                .map(|r| srvsvc::share_enum_response(&r, &self.shares)),
            srvsvc::OPNUM_NETR_SHARE_GET_INFO => srvsvc::parse_share_get_info(&p.stub)
                .map(|r| srvsvc::share_get_info_response(&r, &self.shares)),
            srvsvc::OPNUM_NETR_SERVER_GET_INFO => match &self.server {
                Some(info) => srvsvc::parse_server_get_info(&p.stub)
                    .map(|r| srvsvc::server_get_info_response(&r, info)),
                None => {
                    return self.queue(pdu::build_fault(
                        p.call_id,
                        p.context_id,
                        fault::OP_RNG_ERROR,
                    ))
                }
            },
            _ => {
                return self.queue(pdu::build_fault(
                    p.call_id,
                    p.context_id,
                    fault::OP_RNG_ERROR,
                ))
            }
        };
        match stub {
            Ok(stub) => {
                for f in pdu::build_responses(p.call_id, p.context_id, &stub, self.max_xmit) {
                    self.queue(f)?;
                }
                Ok(())
            }
            Err(_) => self.queue(pdu::build_fault(p.call_id, p.context_id, fault::NDR)),
        }
    }
}

#[cfg(test)]
mod tests;
