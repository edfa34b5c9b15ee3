//! The sign-in back-off in Redis, shared by every replica (the rule:
//! `domain::login::Backoff`; the script: `lua/login_attempt.lua`). One key
//! per subject — an email or a client IP — so a call touches one slot.

use crate::engine::{int_at, QuotaEngine, QuotaError};
use domain::login::Backoff;
use redis::Script;
use std::sync::LazyLock;

static ATTEMPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/login_attempt.lua")));

impl QuotaEngine {
    async fn login_call(
        &self,
        subject: &str,
        mode: &str,
        rule: &Backoff,
    ) -> Result<(i64, i64), QuotaError> {
        let mut inv = ATTEMPT.prepare_invoke();
        inv.key(self.keys().login(subject))
            .arg(mode)
            .arg(rule.free_attempts)
            .arg(rule.base_ms)
            .arg(rule.max_ms)
            .arg(rule.forget_ms);
        let mut conn = self.link().await?;
        let v: redis::Value = self.bounded(inv.invoke_async(&mut conn)).await?;
        let redis::Value::Array(reply) = v else {
            return Err(QuotaError::Protocol(format!("{v:?}")));
        };
        Ok((int_at(&reply, 0)?, int_at(&reply, 1)?))
    }

    /// An attempt to sign in as (or from) `subject`: `Ok(Ok(()))` may go on
    /// and counts as a failure until [`Self::login_succeeded`] or
    /// [`Self::login_refund`]; `Ok(Err(ms))` must wait that long.
    pub async fn login_attempt(
        &self,
        subject: &str,
        rule: &Backoff,
    ) -> Result<Result<(), i64>, QuotaError> {
        let (go, n) = self.login_call(subject, "try", rule).await?;
        Ok(if go == 1 { Ok(()) } else { Err(n.max(1)) })
    }

    /// The subject signed in: its run of failures is over.
    pub async fn login_succeeded(&self, subject: &str, rule: &Backoff) -> Result<(), QuotaError> {
        self.login_call(subject, "ok", rule).await.map(|_| ())
    }

    /// The attempt succeeded but the subject's other failures stay (a
    /// client IP: one good password must not wipe its guesses).
    pub async fn login_refund(&self, subject: &str, rule: &Backoff) -> Result<(), QuotaError> {
        self.login_call(subject, "refund", rule).await.map(|_| ())
    }
}
