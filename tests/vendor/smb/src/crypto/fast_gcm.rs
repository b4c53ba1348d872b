//! Quarry's patch (tests/vendor/smb/QUARRY-PATCH.md, 4): whether graviola's AES-GCM can run
//! on this CPU.
//!
//! The crate's own AES-GCM (RustCrypto's `aes-gcm` with `polyval`) was 86% of the client's
//! worker threads' samples in a profile of the bench's signed runs, and the client, not the
//! server, set most read figures. Graviola
//! hashes eight (AVX2) or sixteen (AVX-512) blocks at a time and interleaves AES with the
//! hashing. It asserts its CPU requirements on every call, so it is only ever built when
//! [`supported`] says they hold; otherwise the crate's own code runs, as before.

/// Whether graviola's AES-GCM requirements hold on this CPU (checked once).
pub(crate) fn supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(detect)
}

/// Quarry's patch (QUARRY-PATCH.md, 8): whether the faster AES-GCM code may be used at all:
/// not when `SMB_CLIENT_NO_FAST_GCM` is set, which runs the crate's own code, as before.
pub(crate) fn wanted() -> bool {
    std::env::var_os("SMB_CLIENT_NO_FAST_GCM").is_none()
}

fn detect() -> bool {
    if !wanted() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("adx")
            && std::arch::is_x86_feature_detected!("avx")
            && std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("neon")
            && std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
            && std::arch::is_aarch64_feature_detected!("sha2")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}
