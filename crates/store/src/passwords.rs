//! Console users' passwords: argon2id, m = 19 MiB, t = 2, p = 1 (OWASP's minimum).

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PasswordError {
    #[error("passwords must be at least 12 characters")]
    TooShort,
    #[error("password hashing failed")]
    Hashing,
}

fn argon() -> Argon2<'static> {
    Argon2::new(
        Algorithm::Argon2id,
        Version::V0x13,
        Params::new(19_456, 2, 1, None).expect("valid params"),
    )
}

pub fn hash(password: &str) -> Result<String, PasswordError> {
    if !domain::text::password_long_enough(password) {
        return Err(PasswordError::TooShort);
    }
    let salt = SaltString::generate(&mut OsRng);
    argon()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|_| PasswordError::Hashing)
}

pub fn verify(password: &str, stored: &str) -> bool {
    PasswordHash::new(stored)
        .is_ok_and(|h| argon().verify_password(password.as_bytes(), &h).is_ok())
}

/// A sign-in's password check, in the time of one argon2id verification
/// whatever the account is: a stored hash is verified; no account (unknown
/// email, disabled) and an account no password opens (SSO-only, whose
/// "hash" is not a PHC string) verify against a dummy hash with the same
/// parameters and fail. The one place that decides, so no kind of account
/// answers faster than another (no enumeration by timing).
pub fn check(password: &str, stored: Option<&str>) -> bool {
    match stored.and_then(|s| PasswordHash::new(s).ok()) {
        Some(h) => argon().verify_password(password.as_bytes(), &h).is_ok(),
        None => {
            verify_dummy(password);
            false
        }
    }
}

/// Spends the time of a verification (against a real argon2id hash with
/// the same parameters, made once).
fn verify_dummy(password: &str) {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let h = DUMMY.get_or_init(|| hash("dummy-password-for-timing").expect("hashes"));
    let _ = verify(password, h);
}

#[cfg(test)]
mod tests {
    #[test]
    fn hashes_are_argon2id_and_verify() {
        let h = super::hash("correct horse battery").unwrap();
        assert!(h.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{h}");
        assert!(super::verify("correct horse battery", &h));
        assert!(!super::verify("wrong horse battery", &h));
        assert!(super::hash("short").is_err());
        assert!(super::check("correct horse battery", Some(&h)));
        assert!(!super::check("wrong horse battery", Some(&h)));
        // No account, or one no password opens: refused, after the work.
        assert!(!super::check("correct horse battery", None));
        assert!(!super::check("!sso", Some("!sso")));
    }
}
