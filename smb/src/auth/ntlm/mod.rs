//! NTLMSSP (MS-NLMP): message codecs in [`messages`], NTLMv2 and key cryptography in [`crypto`].

pub mod crypto;
pub mod messages;

/// NTLMSSP negotiate flags (MS-NLMP 2.2.2.5) that this server reads or sets.
pub mod flags {
    /// NTLMSSP_NEGOTIATE_UNICODE.
    pub const UNICODE: u32 = 0x0000_0001;
    /// NTLM_NEGOTIATE_OEM.
    pub const OEM: u32 = 0x0000_0002;
    /// NTLMSSP_REQUEST_TARGET.
    pub const REQUEST_TARGET: u32 = 0x0000_0004;
    /// NTLMSSP_NEGOTIATE_SIGN.
    pub const SIGN: u32 = 0x0000_0010;
    /// NTLMSSP_NEGOTIATE_SEAL.
    pub const SEAL: u32 = 0x0000_0020;
    /// NTLMSSP_NEGOTIATE_LM_KEY.
    pub const LM_KEY: u32 = 0x0000_0080;
    /// NTLMSSP_NEGOTIATE_NTLM.
    pub const NTLM: u32 = 0x0000_0200;
    /// NTLMSSP_ANONYMOUS (the "anonymous" bit clients set for null sessions).
    pub const ANONYMOUS: u32 = 0x0000_0800;
    /// NTLMSSP_NEGOTIATE_ALWAYS_SIGN.
    pub const ALWAYS_SIGN: u32 = 0x0000_8000;
    /// NTLMSSP_TARGET_TYPE_DOMAIN.
    pub const TARGET_TYPE_DOMAIN: u32 = 0x0001_0000;
    /// NTLMSSP_TARGET_TYPE_SERVER.
    pub const TARGET_TYPE_SERVER: u32 = 0x0002_0000;
    /// NTLMSSP_NEGOTIATE_EXTENDED_SESSIONSECURITY.
    pub const EXTENDED_SESSIONSECURITY: u32 = 0x0008_0000;
    /// NTLMSSP_NEGOTIATE_TARGET_INFO.
    pub const TARGET_INFO: u32 = 0x0080_0000;
    /// NTLMSSP_NEGOTIATE_VERSION.
    pub const VERSION: u32 = 0x0200_0000;
    /// NTLMSSP_NEGOTIATE_128.
    pub const N128: u32 = 0x2000_0000;
    /// NTLMSSP_NEGOTIATE_KEY_EXCH.
    pub const KEY_EXCH: u32 = 0x4000_0000;
    /// NTLMSSP_NEGOTIATE_56.
    pub const N56: u32 = 0x8000_0000;
}
