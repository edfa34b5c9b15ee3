//! A key that exists but may not be used (revoked, expired, or a previous
//! secret past its rotation grace): why, and who it was, so its refusals
//! are filed under its tenant.

use std::sync::Mutex;
use store::KeyRow;

/// Why a key that exists may not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    Revoked,
    Expired,
    /// A key's previous secret after a rotation, past its grace period.
    Rotated,
}

impl KeyState {
    /// Why the secret of `row` may not be used: revoked, else a previous
    /// secret past its grace (rotated), else past the key's expiry.
    pub fn of_row(revoked: bool, row: &KeyRow) -> Self {
        if revoked {
            KeyState::Revoked
        } else if row.rotated_out() {
            KeyState::Rotated
        } else {
            KeyState::Expired
        }
    }

    /// An entry of the index that stopped being usable by time.
    pub fn lapsed(rotated: bool) -> Self {
        if rotated {
            KeyState::Rotated
        } else {
            KeyState::Expired
        }
    }

    /// As the request lookup stores it (`detail.key_state`).
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Revoked => "revoked",
            KeyState::Expired => "expired",
            KeyState::Rotated => "rotated",
        }
    }

    /// What the client is told.
    pub fn message(self) -> &'static str {
        match self {
            KeyState::Revoked => "this API key was revoked",
            KeyState::Expired => "this API key has expired",
            KeyState::Rotated => {
                "this API key was rotated and its grace period has ended: use its new secret"
            }
        }
    }
}

/// A key that exists but may not be used (revoked, or past its expiry):
/// who it was, so that its 401s are filed under its tenant and can be
/// looked up — a few a second per key, so a client that keeps sending it
/// cannot fill the tenant's request log.
#[derive(Debug)]
pub struct RefusedKey {
    pub tenant_id: String,
    pub app_id: String,
    pub key_id: String,
    pub state: KeyState,
    /// (second since the index started, refusals recorded in it).
    recorded: Mutex<(u64, u32)>,
}

/// Refusals of one unusable key recorded per second; the rest are counted.
pub const REFUSALS_RECORDED_PER_SEC: u32 = 5;

impl RefusedKey {
    pub fn new(tenant_id: &str, app_id: &str, key_id: &str, state: KeyState) -> Self {
        Self {
            tenant_id: tenant_id.to_string(),
            app_id: app_id.to_string(),
            key_id: key_id.to_string(),
            state,
            recorded: Mutex::new((u64::MAX, 0)),
        }
    }

    /// Whether this refusal, in second `now` of the index, is recorded.
    pub fn may_record(&self, now: u64) -> bool {
        let mut r = self.recorded.lock().expect("refused key");
        if r.0 != now {
            *r = (now, 0);
        }
        r.1 += 1;
        r.1 <= REFUSALS_RECORDED_PER_SEC
    }
}
