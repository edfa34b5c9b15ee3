//! Sign-in back-off: how long a run of failed logins makes the next attempt
//! wait. The same rule runs atomically in Redis (`quota/lua/login_attempt.lua`,
//! shared by every replica) and in memory when Redis cannot answer.
//!
//! The first `free_attempts` failures cost nothing; after them each attempt
//! waits `base_ms · 2^(extra failures)`, never more than `max_ms`. An attempt
//! refused during the wait is not counted, so however long someone hammers a
//! known account, its owner gets a try at least every `max_ms`: the account
//! is slowed, never locked. A success clears the run; a run is forgotten
//! `forget_ms` after its last failure.

/// One limiter's rule (per email, per client IP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub free_attempts: i64,
    pub base_ms: i64,
    pub max_ms: i64,
    pub forget_ms: i64,
}

impl Backoff {
    /// Per email: five tries, then 1 s, 2 s, 4 s … at most 5 minutes.
    pub const PER_EMAIL: Backoff = Backoff {
        free_attempts: 5,
        base_ms: 1_000,
        max_ms: 300_000,
        forget_ms: 900_000,
    };
    /// Per client IP (every email it tries): twenty failures, then the same
    /// doubling from 1 s, at most a minute.
    pub const PER_IP: Backoff = Backoff {
        free_attempts: 20,
        base_ms: 1_000,
        max_ms: 60_000,
        forget_ms: 600_000,
    };

    /// The wait after `failures` failed attempts (0 while they are free).
    pub fn delay_ms(&self, failures: i64) -> i64 {
        let extra = failures.saturating_sub(self.free_attempts);
        if extra < 0 {
            return 0;
        }
        let doubled = u32::try_from(extra)
            .ok()
            .and_then(|e| 1i64.checked_shl(e))
            .filter(|m| *m > 0)
            .and_then(|m| m.checked_mul(self.base_ms));
        doubled.map_or(self.max_ms, |d| d.min(self.max_ms))
    }

    /// An attempt at `now_ms` after `failures` failures, the last at
    /// `last_ms`: `Ok(())` may go on (and counts as a failure until it
    /// succeeds), `Err(ms)` must wait that long first.
    pub fn admit(&self, failures: i64, last_ms: i64, now_ms: i64) -> Result<(), i64> {
        if failures > 0 && now_ms.saturating_sub(last_ms) >= self.forget_ms {
            return Ok(());
        }
        let ready = last_ms.saturating_add(self.delay_ms(failures));
        if failures >= self.free_attempts && now_ms < ready {
            return Err(ready - now_ms);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Backoff = Backoff::PER_EMAIL;

    #[test]
    fn free_attempts_then_doubling_capped() {
        assert_eq!(B.delay_ms(0), 0);
        assert_eq!(B.delay_ms(4), 0);
        assert_eq!(B.delay_ms(5), 1_000);
        assert_eq!(B.delay_ms(6), 2_000);
        assert_eq!(B.delay_ms(9), 16_000);
        assert_eq!(B.delay_ms(14), 300_000);
        assert_eq!(B.delay_ms(64), 300_000);
        assert_eq!(B.delay_ms(i64::MAX), 300_000);
    }

    #[test]
    fn a_hammered_account_is_slowed_never_locked() {
        // Five failures at t=0: the sixth waits a second, not forever.
        assert_eq!(B.admit(4, 0, 0), Ok(()));
        assert_eq!(B.admit(5, 0, 10), Err(990));
        assert_eq!(B.admit(5, 0, 1_000), Ok(()));
        // However many failures, the wait after the last one is at most max.
        assert_eq!(B.admit(1_000_000, 50, 50), Err(300_000));
        assert_eq!(B.admit(1_000_000, 50, 300_050), Ok(()));
        // A run is forgotten.
        assert_eq!(B.admit(7, 0, 900_000), Ok(()));
    }
}
