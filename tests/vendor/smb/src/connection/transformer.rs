use crate::session::{SessionAndChannel, SessionInfo};
use crate::sync_helpers::*;
use crate::{compression::*, msg_handler::*};
use binrw::prelude::*;
use maybe_async::*;
use smb_msg::*;
use smb_transport::IoVec;
use std::{collections::HashMap, io::Cursor, sync::Arc};

use super::connection_info::ConnectionInfo;

/// The [`Transformer`] structure is responsible for transforming messages to and from bytes,
/// send over NetBios TCP connection.
///
/// See [`Transformer::transform_outgoing`] and [`Transformer::transform_incoming`] for transformation functions.
#[derive(Default)]
pub struct Transformer {
    /// Sessions opened from this connection.
    // This structure is performance-critical, so it uses RwLock to allow concurrent reads.
    // Writes are only done when a session is started or ended - which is *very* rare in high-performance scenarios.
    sessions: RwLock<HashMap<u64, Arc<RwLock<SessionAndChannel>>>>,

    config: RwLock<TransformerConfig>,
}

#[derive(Default, Debug)]
struct TransformerConfig {
    /// Compressors for this connection.
    compress: Option<(Compressor, Decompressor)>,

    negotiated: bool,
}

#[maybe_async(AFIT)]
impl Transformer {
    /// Notifies that the connection negotiation has been completed,
    /// with the given [`ConnectionInfo`].
    pub async fn negotiated(&self, neg_info: &ConnectionInfo) -> crate::Result<()> {
        {
            let config = self.config.read().await?;
            if config.negotiated {
                return Err(crate::Error::InvalidState(
                    "Connection is already negotiated!".into(),
                ));
            }
        }

        let mut config = self.config.write().await?;
        if neg_info.dialect.supports_compression() && neg_info.config.compression_enabled {
            let compress = neg_info
                .negotiation
                .compression
                .as_ref()
                .map(|c| (Compressor::new(c), Decompressor::new(c)));
            config.compress = compress;
        }

        config.negotiated = true;

        Ok(())
    }

    /// Notifies that a session has started.
    pub async fn session_started(
        &self,
        session: &Arc<RwLock<SessionAndChannel>>,
    ) -> crate::Result<()> {
        let rconfig = self.config.read().await?;
        if !rconfig.negotiated {
            return Err(crate::Error::InvalidState(
                "Connection is not negotiated yet!".to_string(),
            ));
        }

        let session_id = { session.read().await?.session_id };
        self.sessions
            .write()
            .await?
            .insert(session_id, session.clone());

        log::trace!(
            "Session {} started and inserted to worker {:p}.",
            session_id,
            self
        );

        Ok(())
    }

    /// Notifies that a session has ended.
    pub async fn session_ended(
        &self,
        session: &Arc<RwLock<SessionAndChannel>>,
    ) -> crate::Result<()> {
        let session_id = { session.read().await?.session_id };
        self.sessions
            .write()
            .await?
            .remove(&session_id)
            .ok_or(crate::Error::InvalidState(format!(
                "Session {session_id} not found!",
            )))?;

        log::trace!(
            "Session {} ended and removed from worker {:p}.",
            session_id,
            self
        );

        Ok(())
    }

    /// (Internal)
    ///
    /// Locates the current channel per the provded session ID,
    /// and invokes the provided closure with the channel information.
    ///
    /// Note: this function WILL deadlock if any lock attempt is performed within the closure on `self.sessions`.
    #[maybe_async]
    #[inline]
    async fn _with_channel<F, R>(&self, session_id: u64, f: F) -> crate::Result<R>
    where
        F: FnOnce(&SessionAndChannel) -> crate::Result<R>,
    {
        let sessions = self.sessions.read().await?;
        let session = sessions
            .get(&session_id)
            .ok_or(crate::Error::InvalidState(format!(
                "Session {session_id} not found!",
            )))?;
        let session = session.read().await?;
        f(&session)
    }

    /// (Internal)
    ///
    /// Locates the current session per the provided session ID,
    /// and invokes the provided closure with the session information.
    ///
    /// Note: this function WILL deadlock if any lock attempt is performed within the closure on `self.sessions`.
    #[maybe_async]
    #[inline]
    async fn _with_session<F, R>(&self, session_id: u64, f: F) -> crate::Result<R>
    where
        F: FnOnce(&SessionInfo) -> crate::Result<R>,
    {
        let sessions = self.sessions.read().await?;
        let session = sessions
            .get(&session_id)
            .ok_or(crate::Error::InvalidState(format!(
                "Session {session_id} not found!",
            )))?;
        let session = session.read().await?;
        let session_info = session.session.read().await?;
        f(&session_info)
    }

    /// Transforms an outgoing message to a raw SMB message.
    pub async fn transform_outgoing(&self, mut msg: OutgoingMessage) -> crate::Result<IoVec> {
        let should_encrypt = msg.encrypt;
        let should_sign = msg.message.header.flags.signed();
        let session_id = msg.message.header.session_id;

        let mut outgoing_data = IoVec::default();
        // Plain header + content
        {
            let buffer = outgoing_data.add_owned(Vec::with_capacity(Header::STRUCT_SIZE));
            msg.message.write(&mut Cursor::new(buffer))?;
        }
        // Additional data, if any
        if msg.additional_data.as_ref().is_some_and(|d| !d.is_empty()) {
            outgoing_data.add_shared(msg.additional_data.unwrap().clone());
        }

        // 1. Sign
        if should_sign {
            debug_assert!(
                !should_encrypt,
                "Should not sign and encrypt at the same time!"
            );

            let mut signer = self
                ._with_channel(session_id, |session| {
                    let channel_info =
                        session
                            .channel
                            .as_ref()
                            .ok_or(crate::Error::TranformFailed(TransformError {
                                outgoing: true,
                                phase: TransformPhase::SignVerify,
                                session_id: Some(session_id),
                                why: "Message is required to be signed, but no channel is set up!",
                                msg_id: Some(msg.message.header.message_id),
                            }))?;

                    Ok(channel_info.signer()?.clone())
                })
                .await?;

            signer.sign_message(&mut msg.message.header, &mut outgoing_data)?;

            log::debug!(
                "Message #{} signed (signature={}).",
                msg.message.header.message_id,
                msg.message.header.signature
            );
        };

        // 2. Compress
        const COMPRESSION_THRESHOLD: usize = 1024;
        outgoing_data = {
            if msg.compress && outgoing_data.total_size() > COMPRESSION_THRESHOLD {
                let rconfig = self.config.read().await?;
                if let Some(compress) = &rconfig.compress {
                    // Build a vector of the entire data. In the future, this may be optimized to avoid copying.
                    // currently, there's not chained compression, and copy will occur anyway.
                    outgoing_data.consolidate();
                    let compressed = compress.0.compress(outgoing_data.first().unwrap())?;

                    let mut compressed_result = IoVec::default();
                    let write_compressed =
                        compressed_result.add_owned(Vec::with_capacity(compressed.total_size()));
                    compressed.write(&mut Cursor::new(write_compressed))?;
                    compressed_result
                } else {
                    outgoing_data
                }
            } else {
                outgoing_data
            }
        };

        // 3. Encrypt
        if should_encrypt {
            let mut encryptor = self
                ._with_session(session_id, |session| {
                    let encryptor = session.encryptor()?.ok_or(crate::Error::TranformFailed(
                        TransformError {
                            outgoing: true,
                            phase: TransformPhase::EncryptDecrypt,
                            session_id: Some(session_id),
                            why: "Message is required to be encrypted, but no encryptor is set up!",
                            msg_id: Some(msg.message.header.message_id),
                        },
                    ))?;
                    Ok(encryptor.clone())
                })
                .await?;

            debug_assert!(should_encrypt && !should_sign);

            let encrypted_header = encryptor.encrypt_message(&mut outgoing_data, session_id)?;

            let write_encryption_header =
                outgoing_data.insert_owned(0, Vec::with_capacity(EncryptedHeader::STRUCTURE_SIZE));

            encrypted_header.write(&mut Cursor::new(write_encryption_header))?;
        }

        Ok(outgoing_data)
    }

    /// Quarry's patch (tests/vendor/smb/QUARRY-PATCH.md, 5): an encrypted message's
    /// transform header is parsed alone. `Response::try_from` would parse the ciphertext
    /// with binrw's `until_eof`, one byte at a time into a growing vector: two thirds of the
    /// client's CPU in an encrypted read of 8 MiB messages. A plain message is parsed by
    /// [`Self::parse_plain`]. Returns the parsed message (a plain one) or the transform
    /// header (an encrypted one, whose ciphertext follows the header in the buffer, still
    /// to be decrypted where it lies), and the buffer.
    fn parse_incoming(data: Vec<u8>) -> crate::Result<(Incoming, Vec<u8>)> {
        let header_len = EncryptedHeader::STRUCTURE_SIZE;
        if data.len() < header_len || !data.starts_with(b"\xfdSMB") {
            return Ok((Incoming::Parsed(Self::parse_plain(&data)?), data));
        }
        let header = EncryptedHeader::read(&mut Cursor::new(&data[..header_len]))?;
        Ok((Incoming::Sealed(header), data))
    }

    /// Quarry's patch (tests/vendor/smb/QUARRY-PATCH.md, 7): parses a plain (or compressed)
    /// message. A successful READ response is parsed without its data, which stays in the
    /// buffer: `Response::try_from` would copy it into the response's own vector, and
    /// [`crate::resource::File`]'s reads then copy it again into the caller's buffer. Its
    /// `ReadResponse::buffer` is then empty (a parsed READ response never has an empty one:
    /// `smb-msg` refuses a DataLength of 0), and the reads take the data from the message's
    /// raw bytes with [`read_response_data`]. Anything else, and any READ response
    /// [`read_response_data`] refuses, is parsed by `Response::try_from` as before.
    fn parse_plain(data: &[u8]) -> crate::Result<Response> {
        if read_response_data(data).is_some() {
            return Self::parse_read_without_data(data);
        }
        Ok(Response::try_from(data)?)
    }

    /// Quarry's patch (7): a READ response that [`read_response_data`] accepted, parsed
    /// without its data (an empty `ReadResponse::buffer`).
    fn parse_read_without_data(data: &[u8]) -> crate::Result<Response> {
        let header = Header::read(&mut Cursor::new(&data[..Header::STRUCT_SIZE]))?;
        Ok(Response::Plain(PlainResponse {
            header,
            content: ResponseContent::Read(ReadResponse { buffer: Vec::new() }),
        }))
    }

    /// Transforms an incoming message buffer to an [`IncomingMessage`].
    pub async fn transform_incoming(&self, data: Vec<u8>) -> crate::Result<IncomingMessage> {
        let (message, mut data) = Self::parse_incoming(data)?;

        let mut form = MessageForm::default();
        let mut payload_at = 0;

        // 3. Decrpt
        let (message, raw) = match message {
            Incoming::Sealed(header) => {
                let session_id = header.session_id;

                let mut decryptor = self
                    ._with_session(session_id, |session| {
                        let decryptor = session.decryptor()?.ok_or(crate::Error::TranformFailed(
                            TransformError {
                                outgoing: false,
                                phase: TransformPhase::EncryptDecrypt,
                                session_id: Some(session_id),
                                why: "Message is required to be encrypted, but no decryptor is set up!",
                                msg_id: None,
                            },
                        ))?;
                        Ok(decryptor.clone())
                    })
                    .await?;
                form.encrypted = true;
                // Quarry's patch (7): decrypted where it lies. A READ response's data stays
                // there, behind the transform header (`payload_at`); any other message is
                // moved to the front of its buffer and parsed as before.
                let header_len = EncryptedHeader::STRUCTURE_SIZE;
                decryptor.decrypt_in_place(&header, &mut data[header_len..])?;
                if read_response_data(&data[header_len..]).is_some() {
                    payload_at = header_len;
                    (Self::parse_read_without_data(&data[header_len..])?, data)
                } else {
                    data.copy_within(header_len.., 0);
                    data.truncate(data.len() - header_len);
                    (Response::try_from(data.as_ref())?, data)
                }
            }
            Incoming::Parsed(message) => (message, data),
        };

        // 2. Decompress
        debug_assert!(!matches!(message, Response::Encrypted(_)));
        let (message, raw) = if let Response::Compressed(compressed_message) = message {
            let rconfig = self.config.read().await?;
            form.compressed = true;
            match &rconfig.compress {
                Some(compress) => compress.1.decompress(&compressed_message)?,
                None => {
                    return Err(crate::Error::TranformFailed(TransformError {
                        outgoing: false,
                        phase: TransformPhase::CompressDecompress,
                        session_id: None,
                        why: "Compression is requested, but no decompressor is set up!",
                        msg_id: None,
                    }));
                }
            }
        } else {
            (message, raw)
        };

        let mut message = match message {
            Response::Plain(message) => message,
            _ => panic!("Unexpected message type"),
        };

        let mut iovec = IoVec::from(raw);
        // If fails, return TranformFailed, with message id.
        // this allows to notify the error to the task that was waiting for this message.
        match self
            .verify_plain_incoming(&mut message, &mut iovec, &mut form)
            .await
        {
            Ok(_) => {}
            Err(e) => {
                log::error!("Failed to verify incoming message: {e:?}",);
                return Err(crate::Error::TranformFailed(TransformError {
                    outgoing: false,
                    phase: TransformPhase::SignVerify,
                    session_id: Some(message.header.session_id),
                    why: "Failed to verify incoming message!",
                    msg_id: Some(message.header.message_id),
                }));
            }
        };

        let mut incoming = IncomingMessage::new(message, iovec, form);
        incoming.payload_at = payload_at;
        Ok(incoming)
    }

    /// Quarry's patch: how long a SESSION_SETUP response waits for the session setup to
    /// install its channel (see `verify_plain_incoming`).
    const SETUP_CHANNEL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

    /// (Internal)
    ///
    /// A helper method to verify the incoming message.
    /// This method is used to verify the signature of the incoming message,
    /// if such verification is required.
    #[maybe_async]
    async fn verify_plain_incoming(
        &self,
        message: &mut PlainResponse,
        raw: &mut IoVec,
        form: &mut MessageForm,
    ) -> crate::Result<()> {
        // Check if signing check is required.
        if form.encrypted
            || message.header.message_id == u64::MAX
            || message.header.status == Status::Pending as u32
            || !(message.header.flags.signed() || self.is_message_signed_ksmbd(message).await)
        {
            return Ok(());
        }

        // Verify signature (if required, according to the spec)
        let session_id = message.header.session_id;
        // Quarry's patch: the session setup installs the channel (its signing key) only
        // after it has sent the final SESSION_SETUP request, whose bytes the key derives
        // from; a server that answers before that happens found no channel here (a new
        // session) or the primary channel (a binding), and the logon or the binding
        // failed. A SESSION_SETUP response waits for the channel, a bounded while, with
        // no lock held between the looks.
        let is_setup = message.header.command == Command::SessionSetup;
        let mut waited = std::time::Duration::ZERO;
        let mut signer = loop {
            let signer = self
                ._with_channel(session_id, |session| {
                    if is_setup && session.channel_pending {
                        return Ok(None);
                    }
                    session
                        .channel
                        .as_ref()
                        .map(|channel_info| Ok(channel_info.signer()?.clone()))
                        .transpose()
                })
                .await?;
            match signer {
                Some(signer) => break signer,
                None if is_setup && waited < Self::SETUP_CHANNEL_WAIT =>
                {
                    let step = std::time::Duration::from_millis(1);
                    #[cfg(feature = "async")]
                    tokio::time::sleep(step).await;
                    #[cfg(not(feature = "async"))]
                    std::thread::sleep(step);
                    waited += step;
                }
                None => {
                    return Err(crate::Error::TranformFailed(TransformError {
                        outgoing: false,
                        phase: TransformPhase::SignVerify,
                        session_id: Some(session_id),
                        why: "Message is required to be signed, but no channel is set up!",
                        msg_id: Some(message.header.message_id),
                    }));
                }
            }
        };

        signer.verify_signature(&mut message.header, raw)?;
        log::debug!(
            "Message #{} verified (signature={}).",
            message.header.message_id,
            message.header.signature
        );
        form.signed = true;
        Ok(())
    }

    /// (Internal)
    ///
    /// ksmbd multichannel setup compatibility check.
    ///
    // ksmbd has a subtle, but irritating bug, where it does not set the "signed" flag
    // for responses during multi channel session setups. To resolve this, we check if the
    // current channel is defined as "binding-only" channel. The feature `ksmbd-multichannel-compat`
    // must also be enabled, or else this code will not be compiled.
    // This behavior is actually against the spec - MS-SMB2 3.2.4.1.1:
    // > "If the client signs the request, it MUST set the SMB2_FLAGS_SIGNED bit in the Flags field of the SMB2 header."
    #[maybe_async]
    async fn is_message_signed_ksmbd(&self, _message: &PlainResponse) -> bool {
        #[cfg(feature = "ksmbd-multichannel-compat")]
        {
            if _message.header.command != Command::SessionSetup || _message.header.signature == 0 {
                return false;
            }

            let session_id = _message.header.session_id;
            let is_binding = self
                ._with_channel(session_id, |session| {
                    let channel_info = session.channel.as_ref().ok_or(crate::Error::Other(
                        "Get channel info for ksmbd sign test failed",
                    ))?;

                    Ok(channel_info.is_binding())
                })
                .await;

            return matches!(is_binding, Ok(true));
        }

        #[cfg(not(feature = "ksmbd-multichannel-compat"))]
        return false;
    }
}

/// An error that can occur during the transformation of messages.
#[derive(Debug)]
pub struct TransformError {
    /// If true, the error occurred while transforming an outgoing message.
    /// If false, it occurred while transforming an incoming message.
    pub outgoing: bool,
    pub phase: TransformPhase,
    pub session_id: Option<u64>,
    pub why: &'static str,
    /// If a message ID is available, it will be set here,
    /// for error-handling purposes.
    pub msg_id: Option<u64>,
}

impl std::fmt::Display for TransformError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.outgoing {
            write!(
                f,
                "Failed to transform outgoing message: {:?} (session_id: {:?}) - {}",
                self.phase, self.session_id, self.why
            )
        } else {
            write!(
                f,
                "Failed to transform incoming message: {:?} (session_id: {:?}) - {}",
                self.phase, self.session_id, self.why
            )
        }
    }
}

/// The phase of the transformation process.
#[derive(Debug)]
pub enum TransformPhase {
    /// Initial to/from bytes.
    EncodeDecode,
    /// Signature calculation and verification.
    SignVerify,
    /// Compression and decompression.
    CompressDecompress,
    /// Encryption and decryption.
    EncryptDecrypt,
}

/// Quarry's patch (7): what [`Transformer::parse_incoming`] found at the front of a received
/// buffer.
enum Incoming {
    /// A plain or compressed message, parsed.
    Parsed(Response),
    /// An encrypted message's transform header; its ciphertext follows it in the buffer.
    Sealed(EncryptedHeader),
}

/// Quarry's patch (tests/vendor/smb/QUARRY-PATCH.md, 7): the data of `message` (one plain
/// SMB2 message, header first) if it is a successful, single (not compounded) READ response
/// whose fields hold: StructureSize 17, a DataOffset past the fixed part, a DataLength above
/// zero that fits in the message, no DataRemaining. What `smb-msg` checks when it parses one.
pub fn read_response_data(message: &[u8]) -> Option<&[u8]> {
    const HEADER: usize = Header::STRUCT_SIZE;
    const FIXED: usize = HEADER + ReadResponse::STRUCT_SIZE - 1;
    let u32_at = |at: usize| {
        message
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    if message.len() <= FIXED || !message.starts_with(b"\xfeSMB") {
        return None;
    }
    // Header: Status at 8, Command at 12, Flags at 16 (bit 0: a response), NextCommand at 20.
    let command = u16::from_le_bytes([message[12], message[13]]);
    let is_response = u32_at(16)? & 1 == 1;
    if u32_at(8)? != Status::Success as u32
        || command != Command::Read as u16
        || !is_response
        || u32_at(20)? != 0
    {
        return None;
    }
    // READ response: StructureSize (2), DataOffset (1), Reserved (1), DataLength (4),
    // DataRemaining (4), Reserved2 (4).
    let structure_size = u16::from_le_bytes([message[HEADER], message[HEADER + 1]]);
    let data_offset = usize::from(message[HEADER + 2]);
    let data_length = usize::try_from(u32_at(HEADER + 4)?).ok()?;
    if structure_size as usize != ReadResponse::STRUCT_SIZE
        || data_offset < FIXED
        || data_length == 0
        || u32_at(HEADER + 8)? != 0
    {
        return None;
    }
    message.get(data_offset..data_offset.checked_add(data_length)?)
}
