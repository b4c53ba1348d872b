use aes::cipher::{BlockCipherDecrypt, BlockCipherEncrypt};
use aes_gcm::{AesGcm, KeyInit, KeySizeUser, aead::AeadInOut};
use crypto_common::typenum;

use crate::crypto::CryptoError;

use super::*;

pub type Aes128GcmEncryptor = AesGcmEncryptor<aes::Aes128>;
pub type Aes256GcmEncryptor = AesGcmEncryptor<aes::Aes256>;

#[derive(Clone)]
pub struct AesGcmEncryptor<T> {
    cipher: AesGcm<T, typenum::U12>,
    // Quarry's patch (QUARRY-PATCH.md, 4): graviola's AES-GCM when this CPU has what it
    // needs (`crate::crypto::fast_gcm`), shared by the clones made per message.
    fast: Option<std::sync::Arc<graviola::aead::AesGcm>>,
}

impl<T> AesGcmEncryptor<T>
where
    T: BlockCipherEncrypt<BlockSize = typenum::U16>
        + BlockCipherDecrypt<BlockSize = typenum::U16>
        + KeySizeUser
        + KeyInit
        + Send
        + Clone
        + Sync
        + 'static,
{
    pub fn build(encrypting_key: &[u8]) -> Result<Box<dyn EncryptingAlgo>, CryptoError> {
        let cipher = AesGcm::<T, typenum::U12>::new_from_slice(encrypting_key)?;
        // The key's length was checked just above (16 or 32 bytes: graviola's two sizes).
        let fast = crate::crypto::fast_gcm::supported()
            .then(|| std::sync::Arc::new(graviola::aead::AesGcm::new(encrypting_key)));
        Ok(Box::new(Self { cipher, fast }))
    }
}

impl<T> EncryptingAlgo for AesGcmEncryptor<T>
where
    T: BlockCipherEncrypt<BlockSize = typenum::U16>
        + BlockCipherDecrypt
        + KeyInit
        + KeySizeUser
        + Send
        + Clone
        + Sync
        + 'static,
{
    fn encrypt(
        &mut self,
        payload: &mut [u8],
        header_data: &[u8],
        nonce: &EncryptionNonce,
    ) -> Result<EncryptionResult, CryptoError> {
        let nonce = trim_nonce(self, nonce);
        if let Some(fast) = &self.fast {
            let mut tag = [0u8; 16];
            fast.encrypt(&nonce.into(), header_data, payload, &mut tag);
            return Ok(EncryptionResult {
                signature: u128::from_le_bytes(tag),
            });
        }
        let tag = self
            .cipher
            .encrypt_inout_detached(&nonce, header_data, payload.into())?;
        Ok(EncryptionResult {
            signature: u128::from_le_bytes(tag.into()),
        })
    }

    fn decrypt(
        &mut self,
        payload: &mut [u8],
        header_data: &[u8],
        nonce: &EncryptionNonce,
        signature: u128,
    ) -> Result<(), CryptoError> {
        let nonce = trim_nonce(self, nonce);
        if let Some(fast) = &self.fast {
            return fast
                .decrypt(&nonce.into(), header_data, payload, &signature.to_le_bytes())
                .map_err(|_| CryptoError::AeadError(aead::Error));
        }
        self.cipher.decrypt_inout_detached(
            &nonce,
            header_data,
            payload.into(),
            &signature.to_le_bytes().into(),
        )?;
        Ok(())
    }

    fn nonce_size(&self) -> usize {
        12
    }

    fn clone_box(&self) -> Box<dyn EncryptingAlgo> {
        Box::new(self.clone())
    }
}

impl<T> std::fmt::Debug for AesGcmEncryptor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AesGcmEncrypter")
    }
}
