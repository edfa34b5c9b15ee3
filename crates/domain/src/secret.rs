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

/// The origin a provider key was given for: scheme, host and port of an
/// upstream base URL, lower-cased, the scheme's default port filled in.
/// `None` for a URL without `scheme://host`.
pub fn origin(url: &str) -> Option<(String, String, u16)> {
    let (scheme, rest) = url.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    // user:password@ is not part of where the key goes.
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match hostport.strip_prefix('[') {
        // [v6]:port
        Some(v6) => {
            let (h, after) = v6.split_once(']')?;
            (format!("[{h}]"), after.strip_prefix(':'))
        }
        None => match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (hostport.to_string(), None),
        },
    };
    if host.is_empty() || host == "[]" {
        return None;
    }
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return None,
        },
    };
    Some((scheme, host.to_ascii_lowercase(), port))
}

/// Whether a stored provider key may stay with an upstream moved from
/// `before` to `after`: only when both name the same origin. A key given
/// for one host is never sent to another unless an admin gives it again
/// (a write-only secret must not be readable by re-pointing its deployment).
pub fn key_stays_with(before: &str, after: &str) -> bool {
    match (origin(before), origin(after)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
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

    #[test]
    fn a_key_stays_only_with_its_origin() {
        assert!(key_stays_with(
            "https://api.x.com/v1",
            "https://API.x.com:443/v2/"
        ));
        assert!(key_stays_with(
            "http://10.0.0.1:8000",
            "http://10.0.0.1:8000/v1"
        ));
        assert!(!key_stays_with(
            "https://api.x.com/v1",
            "https://evil.example/v1"
        ));
        assert!(!key_stays_with("https://api.x.com", "http://api.x.com"));
        assert!(!key_stays_with(
            "https://api.x.com",
            "https://api.x.com:8443"
        ));
        assert!(!key_stays_with(
            "https://api.x.com",
            "https://api.x.com.evil.io"
        ));
        // userinfo does not change where the request goes; it cannot hide a new host.
        assert!(!key_stays_with(
            "https://api.x.com",
            "https://api.x.com@evil.io/"
        ));
        assert!(key_stays_with("http://[::1]:9090/v1", "http://[::1]:9090"));
        assert!(!key_stays_with("", "https://api.x.com"));
        assert!(!key_stays_with("nonsense", "nonsense"));
    }

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
