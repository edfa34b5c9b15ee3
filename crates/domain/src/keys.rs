//! Virtual keys: `tg-` + 32 random base62 characters + a 6-character checksum.
//! The checksum lets secret scanners (and the gateway, before hashing) tell a
//! real tollgate key from noise. Keys are stored only as HMAC-SHA256 with a
//! server pepper; the first characters are kept as a display prefix.

use hmac::{Hmac, Mac};
use rand::Rng;
use sha2::Sha256;

pub const KEY_PREFIX: &str = "tg-";
const BODY_LEN: usize = 32;
const CHECK_LEN: usize = 6;
const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// How many characters of a key are kept for display (`tg-` + 9).
pub const DISPLAY_PREFIX_LEN: usize = 12;

/// A rotated key's previous secret works this long by default (seconds).
pub const ROTATION_GRACE_DEFAULT_SECS: i64 = 86_400;
/// The longest grace a rotation may give (seven days).
pub const ROTATION_GRACE_MAX_SECS: i64 = 7 * 86_400;

fn checksum(body: &str) -> String {
    String::from_utf8(checksum_bytes(body).to_vec()).expect("ascii")
}

/// The checksum's characters, without allocating (checked on every
/// request).
fn checksum_bytes(body: &str) -> [u8; CHECK_LEN] {
    let mut v = crc32fast::hash(body.as_bytes()) as u64;
    let mut out = [b'0'; CHECK_LEN];
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(v % 62) as usize];
        v /= 62;
    }
    out
}

/// A freshly generated key: shown once, never stored.
pub fn generate() -> String {
    let mut rng = rand::thread_rng();
    let body: String = (0..BODY_LEN)
        .map(|_| ALPHABET[rng.gen_range(0..62)] as char)
        .collect();
    format!("{KEY_PREFIX}{body}{}", checksum(&body))
}

/// True when the string has the shape and checksum of a tollgate key.
pub fn is_well_formed(key: &str) -> bool {
    let Some(rest) = key.strip_prefix(KEY_PREFIX) else {
        return false;
    };
    if rest.len() != BODY_LEN + CHECK_LEN || !rest.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return false;
    }
    let (body, check) = rest.split_at(BODY_LEN);
    checksum_bytes(body) == check.as_bytes()
}

pub fn display_prefix(key: &str) -> String {
    key.chars().take(DISPLAY_PREFIX_LEN).collect()
}

/// Keyed hash of a key: what the database and the in-memory index hold.
pub fn keyed_hash(pepper: &[u8], key: &str) -> [u8; 32] {
    KeyHasher::new(pepper).hash(key)
}

/// [`keyed_hash`] for one pepper, many keys (the gateway hashes the key of
/// every request): the HMAC's keyed inner and outer states are computed
/// once, so a hash costs two SHA-256 blocks instead of four.
#[derive(Clone)]
pub struct KeyHasher(Hmac<Sha256>);

impl KeyHasher {
    pub fn new(pepper: &[u8]) -> Self {
        Self(Hmac::<Sha256>::new_from_slice(pepper).expect("hmac takes any key length"))
    }

    pub fn hash(&self, key: &str) -> [u8; 32] {
        let mut mac = self.0.clone();
        mac.update(key.as_bytes());
        mac.finalize().into_bytes().into()
    }
}

impl std::fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyHasher(***)")
    }
}

/// How many key-miss lookups (a key the gateway's index does not know, looked
/// up in Postgres) may start: a token bucket of `per_sec` refilled
/// continuously, holding at most `burst`. Random keys then cost Postgres at
/// most `per_sec` queries a second, whatever their rate.
#[derive(Debug, Clone)]
pub struct MissBudget {
    per_sec: f64,
    burst: f64,
    tokens: f64,
    /// Seconds (any monotonic origin) of the last refill.
    at: f64,
}

impl MissBudget {
    /// Full at `now` (seconds, monotonic).
    pub fn new(per_sec: u32, burst: u32, now: f64) -> MissBudget {
        MissBudget {
            per_sec: f64::from(per_sec),
            burst: f64::from(burst.max(1)),
            tokens: f64::from(burst.max(1)),
            at: now,
        }
    }

    /// Takes one lookup at `now` if the budget has one.
    pub fn take(&mut self, now: f64) -> bool {
        let elapsed = (now - self.at).max(0.0);
        self.tokens = (self.tokens + elapsed * self.per_sec).min(self.burst);
        self.at = self.at.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_well_formed_and_distinct() {
        let a = generate();
        let b = generate();
        assert_ne!(a, b);
        assert!(a.starts_with("tg-") && a.len() == 3 + 32 + 6);
        assert!(is_well_formed(&a));
        assert_eq!(display_prefix(&a).len(), 12);
    }

    #[test]
    fn a_changed_character_breaks_the_checksum() {
        let k = generate();
        let mut chars: Vec<char> = k.chars().collect();
        chars[10] = if chars[10] == 'a' { 'b' } else { 'a' };
        let broken: String = chars.into_iter().collect();
        assert!(!is_well_formed(&broken));
        assert!(!is_well_formed("sk-openai-style-key"));
        assert!(!is_well_formed(""));
    }

    #[test]
    fn keyed_hash_depends_on_the_pepper() {
        let k = generate();
        assert_eq!(keyed_hash(b"p1", &k), keyed_hash(b"p1", &k));
        assert_ne!(keyed_hash(b"p1", &k), keyed_hash(b"p2", &k));
    }

    /// HMAC-SHA256 test case 2 of RFC 4231 (an independent expected value),
    /// and one hasher reused for many keys gives each key's own hash.
    #[test]
    fn key_hasher_is_hmac_sha256_and_reusable() {
        let h = KeyHasher::new(b"Jefe");
        let want = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        let hex = |b: [u8; 32]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(hex(h.hash("what do ya want for nothing?")), want);
        let (a, b) = (generate(), generate());
        let (ha, hb) = (h.hash(&a), h.hash(&b));
        assert_eq!(h.hash(&a), ha);
        assert_ne!(ha, hb);
        assert_eq!(ha, keyed_hash(b"Jefe", &a));
        assert_eq!(format!("{h:?}"), "KeyHasher(***)");
    }

    #[test]
    fn miss_budget_allows_the_burst_then_the_rate() {
        let mut b = MissBudget::new(10, 5, 100.0);
        let first: usize = (0..20).filter(|_| b.take(100.0)).count();
        assert_eq!(first, 5, "the burst, then nothing at the same instant");
        // Half a second later: 5 more (10/s), not more than the burst.
        let later: usize = (0..20).filter(|_| b.take(100.5)).count();
        assert_eq!(later, 5);
        // A long idle period refills to the burst only.
        let idle: usize = (0..100).filter(|_| b.take(1000.0)).count();
        assert_eq!(idle, 5);
        // A clock that steps back grants nothing extra.
        assert!(!b.take(10.0));
    }

    #[test]
    fn a_zero_rate_budget_allows_only_its_burst() {
        let mut b = MissBudget::new(0, 2, 0.0);
        assert!(b.take(0.0) && b.take(50.0));
        assert!(!b.take(1e6));
    }
}
