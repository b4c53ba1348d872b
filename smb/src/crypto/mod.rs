//! SMB cryptography: SP800-108 KDF, preauth integrity hash, signing (HMAC-SHA256, AES-CMAC, AES-GMAC), encryption (AES-CCM/GCM).
