//! Borrowing and fairness in Redis (docs/design.md §7): the platform pool (its own
//! hash tag, touched only when borrowing or reclaiming), model pools'
//! concurrent slots (each model its own tag), and tenants' day cost for the
//! daily soft limit.

use crate::engine::{int_at, lua_script, QuotaEngine, QuotaError};
use redis::Script;
use std::sync::LazyLock;

/// The pool's month outlives the month a little; it is rebuilt from
/// Postgres whenever it is missing.
const POOL_TTL_SECS: u64 = 62 * 24 * 3600;
const DAY_TTL_SECS: u64 = 3 * 24 * 3600;

struct FairScripts {
    borrow: Script,
    give_back: Script,
    rebuild: Script,
    acquire: Script,
    release: Script,
    day_cost: Script,
}

static SCRIPTS: LazyLock<FairScripts> = LazyLock::new(|| FairScripts {
    borrow: lua_script(include_str!("../lua/pool_borrow.lua")),
    give_back: lua_script(include_str!("../lua/pool_return.lua")),
    rebuild: lua_script(include_str!("../lua/pool_rebuild.lua")),
    acquire: lua_script(include_str!("../lua/model_acquire.lua")),
    release: lua_script(include_str!("../lua/model_release.lua")),
    day_cost: lua_script(include_str!("../lua/day_cost.lua")),
});

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BorrowOutcome {
    /// Tokens lent by this call (0 when the pool or the cap had no room).
    Granted {
        tokens: i64,
        lent: i64,
        tenant_outstanding: i64,
    },
    /// This borrow id was debited before: its first answer.
    Seen { tokens: i64 },
    /// The pool's month is missing in Redis: rebuild it from Postgres.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotOutcome {
    Taken,
    /// No slot free for this tenant (after keeping others' guarantees free).
    Full {
        inflight: i64,
        reserved: i64,
    },
}

impl QuotaEngine {
    async fn run_script(
        &self,
        inv: redis::ScriptInvocation<'_>,
    ) -> Result<redis::Value, QuotaError> {
        let mut conn = self.link().await?;
        self.bounded(inv.invoke_async(&mut conn)).await
    }

    /// Lends up to `chunk` tokens of `month`'s pool to `tenant`, keeping
    /// `lent <= pool_tokens` and the tenant's outstanding `<= cap`.
    pub async fn pool_borrow(
        &self,
        month: &str,
        borrow_id: &str,
        tenant: &str,
        chunk: i64,
        pool_tokens: i64,
        cap: i64,
    ) -> Result<BorrowOutcome, QuotaError> {
        let mut inv = SCRIPTS.borrow.prepare_invoke();
        inv.key(self.keys().pool(month))
            .arg(borrow_id)
            .arg(tenant)
            .arg(chunk)
            .arg(pool_tokens)
            .arg(cap);
        let reply = as_list(self.run_script(inv).await?)?;
        match int_at(&reply, 0)? {
            1 => Ok(BorrowOutcome::Granted {
                tokens: int_at(&reply, 1)?,
                lent: int_at(&reply, 2)?,
                tenant_outstanding: int_at(&reply, 3)?,
            }),
            2 => Ok(BorrowOutcome::Seen {
                tokens: int_at(&reply, 1)?,
            }),
            -1 => Ok(BorrowOutcome::Unknown),
            _ => Err(QuotaError::Protocol(format!("{reply:?}"))),
        }
    }

    /// Gives `tokens` of `tenant`'s borrowed amount back to the pool, once
    /// per `reclaim_id`. False when the pool month is missing (its rebuild
    /// reads Postgres, where the reclaim is already counted).
    pub async fn pool_return(
        &self,
        month: &str,
        reclaim_id: &str,
        tenant: &str,
        tokens: i64,
    ) -> Result<bool, QuotaError> {
        let mut inv = SCRIPTS.give_back.prepare_invoke();
        inv.key(self.keys().pool(month))
            .arg(reclaim_id)
            .arg(tenant)
            .arg(tokens);
        let reply = as_list(self.run_script(inv).await?)?;
        Ok(int_at(&reply, 0)? != -1)
    }

    /// Restores the pool's month from Postgres' outstanding borrows.
    pub async fn pool_rebuild(
        &self,
        month: &str,
        outstanding: &[(String, i64)],
        counted_reclaims: &[String],
    ) -> Result<bool, QuotaError> {
        let mut inv = SCRIPTS.rebuild.prepare_invoke();
        inv.key(self.keys().pool(month))
            .arg(POOL_TTL_SECS)
            .arg(outstanding.len());
        for (t, o) in outstanding {
            inv.arg(t).arg(*o);
        }
        for r in counted_reclaims {
            inv.arg(r);
        }
        let v = self.run_script(inv).await?;
        Ok(matches!(v, redis::Value::Int(1)))
    }

    /// `(lent, outstanding per tenant)` of the pool's month, None when
    /// Redis does not have it.
    pub async fn pool_state(
        &self,
        month: &str,
    ) -> Result<Option<(i64, Vec<(String, i64)>)>, QuotaError> {
        let mut conn = self.link().await?;
        let raw: std::collections::HashMap<String, String> = self
            .bounded(
                redis::cmd("HGETALL")
                    .arg(self.keys().pool(month))
                    .query_async(&mut conn),
            )
            .await?;
        if !raw.contains_key("_rb") {
            return Ok(None);
        }
        let lent = raw.get("lent").and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut per: Vec<(String, i64)> = raw
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("o:")?.to_string(), v.parse().ok()?)))
            .collect();
        per.sort();
        Ok(Some((lent, per)))
    }

    /// Takes one of `model`'s `capacity` upstream slots for `tenant`'s
    /// request, unless that would eat into another tenant's unused
    /// guarantee (`guarantees`: tenant, slots).
    pub async fn model_acquire(
        &self,
        model: &str,
        tenant: &str,
        request_id: &str,
        capacity: i64,
        lifetime_ms: u64,
        guarantees: &[(String, i64)],
    ) -> Result<SlotOutcome, QuotaError> {
        let mut inv = SCRIPTS.acquire.prepare_invoke();
        inv.key(self.keys().model_slots(model))
            .key(self.keys().model_by_tenant(model))
            .arg(format!("{tenant}|{request_id}"))
            .arg(tenant)
            .arg(capacity)
            .arg(lifetime_ms);
        for (t, s) in guarantees {
            inv.arg(t).arg(*s);
        }
        let reply = as_list(self.run_script(inv).await?)?;
        match int_at(&reply, 0)? {
            1 | 2 => Ok(SlotOutcome::Taken),
            0 => Ok(SlotOutcome::Full {
                inflight: int_at(&reply, 1)?,
                reserved: int_at(&reply, 2)?,
            }),
            _ => Err(QuotaError::Protocol(format!("{reply:?}"))),
        }
    }

    pub async fn model_release(
        &self,
        model: &str,
        tenant: &str,
        request_id: &str,
    ) -> Result<bool, QuotaError> {
        let mut inv = SCRIPTS.release.prepare_invoke();
        inv.key(self.keys().model_slots(model))
            .key(self.keys().model_by_tenant(model))
            .arg(format!("{tenant}|{request_id}"))
            .arg(tenant);
        Ok(matches!(self.run_script(inv).await?, redis::Value::Int(1)))
    }

    /// Requests of `tenant` holding a slot of `model` right now.
    pub async fn model_inflight(&self, model: &str, tenant: &str) -> Result<i64, QuotaError> {
        let mut conn = self.link().await?;
        let v: Option<i64> = self
            .bounded(
                redis::cmd("HGET")
                    .arg(self.keys().model_by_tenant(model))
                    .arg(tenant)
                    .query_async(&mut conn),
            )
            .await?;
        Ok(v.unwrap_or(0).max(0))
    }

    /// A tenant's settled cost of `day`; None when Redis has no counter for
    /// that day yet (the caller rebuilds it from the ledger).
    pub async fn day_cost(&self, tenant: &str, day: &str) -> Result<Option<i64>, QuotaError> {
        let mut conn = self.link().await?;
        let v: (Option<i64>, Option<String>) = self
            .bounded(
                redis::cmd("HMGET")
                    .arg(self.keys().day(tenant, day))
                    .arg("uc")
                    .arg("_rb")
                    .query_async(&mut conn),
            )
            .await?;
        Ok(v.1.map(|_| v.0.unwrap_or(0)))
    }

    /// Starts the day's counter at `cost` (from the ledger) unless it
    /// exists: (started now, the day's cost after the call).
    pub async fn day_cost_rebuild(
        &self,
        tenant: &str,
        day: &str,
        cost: i64,
    ) -> Result<(bool, i64), QuotaError> {
        let mut inv = SCRIPTS.day_cost.prepare_invoke();
        inv.key(self.keys().day(tenant, day))
            .arg("rebuild")
            .arg(cost)
            .arg(DAY_TTL_SECS);
        let reply = as_list(self.run_script(inv).await?)?;
        Ok((int_at(&reply, 0)? == 1, int_at(&reply, 1)?))
    }

    /// Adds settled cost to the tenant's day: the day's cost after the
    /// add, or None when the day has no counter yet (nothing changed: the
    /// caller rebuilds it). Adding 0 reads it.
    pub async fn day_cost_add(
        &self,
        tenant: &str,
        day: &str,
        cost: i64,
    ) -> Result<Option<i64>, QuotaError> {
        let mut inv = SCRIPTS.day_cost.prepare_invoke();
        inv.key(self.keys().day(tenant, day))
            .arg("add")
            .arg(cost)
            .arg(DAY_TTL_SECS);
        match self.run_script(inv).await? {
            redis::Value::Int(-1) => Ok(None),
            redis::Value::Int(total) => Ok(Some(total)),
            other => Err(QuotaError::Protocol(format!("{other:?}"))),
        }
    }
}

fn as_list(v: redis::Value) -> Result<Vec<redis::Value>, QuotaError> {
    match v {
        redis::Value::Array(a) => Ok(a),
        other => Err(QuotaError::Protocol(format!("{other:?}"))),
    }
}
