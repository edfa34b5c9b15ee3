//! Secrets at rest (upstream provider keys): ChaCha20-Poly1305 with a key from
//! config; stored as nonce || ciphertext. `Secret` never prints its value.

use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use rand::RngCore;
use std::fmt;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("secret cannot be decrypted with the configured key")]
pub struct SecretError;

pub fn encrypt(key: &[u8; 32], plaintext: &str) -> Vec<u8> {
    let cipher = ChaCha20Poly1305::new(Key::from_slice(key));
    let mut nonce = [0u8; 12];
    rand::thread_rng().fill_bytes(&mut nonce);
    let mut out = nonce.to_vec();
    out.extend(
        cipher
            .encrypt(Nonce::from_slice(&nonce), plaintext.as_bytes())
            .expect("encrypt"),
    );
    out
}

pub fn decrypt(key: &[u8; 32], stored: &[u8]) -> Result<Secret, SecretError> {
    if stored.len() < 12 {
        return Err(SecretError);
    }
    let cipher = ChaCha20Poly1305::new(Key::from_slice(key));
    let (nonce, ct) = stored.split_at(12);
    let pt = cipher
        .decrypt(Nonce::from_slice(nonce), ct)
        .map_err(|_| SecretError)?;
    String::from_utf8(pt).map(Secret).map_err(|_| SecretError)
}

/// A secret value: usable, never shown by Debug or Display.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_the_wrong_key() {
        let k = [7u8; 32];
        let stored = encrypt(&k, "sk-upstream-123");
        assert!(!String::from_utf8_lossy(&stored).contains("sk-upstream"));
        assert_eq!(decrypt(&k, &stored).unwrap().expose(), "sk-upstream-123");
        assert_eq!(decrypt(&[8u8; 32], &stored), Err(SecretError));
        assert_eq!(format!("{:?}", Secret::new("x")), "Secret(***)");
    }
}
