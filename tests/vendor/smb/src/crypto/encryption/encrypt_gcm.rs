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
    // Quarry's patch (QUARRY-PATCH.md, 4 and 8): ring's AES-GCM (unless
    // `crate::crypto::fast_gcm::wanted` says no), shared by the clones made per message.
    // Ring picks its fastest code for the CPU (VAES with AVX2 where it can): 6.7-7.3 GiB/s
    // each way on 8 MiB messages on the bench machine, where graviola, used before, ran at
    // 3.7-3.9.
    fast: Option<std::sync::Arc<ring::aead::LessSafeKey>>,
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
        let algorithm = match encrypting_key.len() {
            16 => Some(&ring::aead::AES_128_GCM),
            32 => Some(&ring::aead::AES_256_GCM),
            _ => None,
        };
        let fast = algorithm
            .filter(|_| crate::crypto::fast_gcm::wanted())
            .and_then(|algorithm| ring::aead::UnboundKey::new(algorithm, encrypting_key).ok())
            .map(|key| std::sync::Arc::new(ring::aead::LessSafeKey::new(key)));
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
            let tag = fast
                .seal_in_place_separate_tag(
                    ring::aead::Nonce::assume_unique_for_key(nonce.into()),
                    ring::aead::Aad::from(header_data),
                    payload,
                )
                .map_err(|_| CryptoError::AeadError(aead::Error))?;
            let tag: [u8; 16] = tag
                .as_ref()
                .try_into()
                .map_err(|_| CryptoError::AeadError(aead::Error))?;
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
                .open_in_place_separate_tag(
                    ring::aead::Nonce::assume_unique_for_key(nonce.into()),
                    ring::aead::Aad::from(header_data),
                    ring::aead::Tag::from(signature.to_le_bytes()),
                    payload,
                    0..,
                )
                .map(|_| ())
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
