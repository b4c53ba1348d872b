//! Authentication: SPNEGO (MS-SPNG) wrapping NTLMSSP (MS-NLMP) with NTLMv2 verification.
