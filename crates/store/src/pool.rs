//! The shared pool, borrows and reclaims (the record the Redis pool is
//! rebuilt from), model guarantees and degrade targets (docs/design.md §7).

use crate::audit::{append, NewAudit};
use crate::{Result, Store, StoreError, TenantScope};
use chrono::{DateTime, Utc};
use domain::borrowing::PoolPolicy;
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct BorrowRow {
    pub id: Uuid,
    pub tenant_id: String,
    pub period: String,
    pub state: String,
    pub asked_tokens: i64,
    pub tokens: i64,
    pub cost_micro: i64,
    pub outstanding_tokens: i64,
    pub outstanding_cost_micro: i64,
    pub trigger: String,
    pub replica: String,
    pub created_at: DateTime<Utc>,
    pub settled_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ReclaimRow {
    pub id: Uuid,
    pub borrow_id: Uuid,
    pub tenant_id: String,
    pub period: String,
    pub tokens: i64,
    pub cost_micro: i64,
    pub state: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

/// Outstanding borrowed quota of a tenant in a period (active borrows).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct BorrowedRow {
    pub tenant_id: String,
    pub period: String,
    #[sqlx(rename = "t")]
    pub tokens: i64,
    #[sqlx(rename = "c")]
    pub cost_micro: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct GuaranteeRow {
    pub model_id: String,
    pub tenant_id: String,
    pub slots: i32,
}

const BORROW_COLS: &str =
    "id, tenant_id, period, state, asked_tokens, tokens, cost_micro, outstanding_tokens,
    outstanding_cost_micro, trigger, replica, created_at, settled_at";

/// Outstanding borrowed quota per tenant and period, of the tenant `$1`
/// (NULL: every tenant).
pub(crate) const OUTSTANDING: &str =
    "SELECT tenant_id, period, sum(outstanding_tokens)::BIGINT AS t, sum(outstanding_cost_micro)::BIGINT AS c
     FROM borrows WHERE state = 'active' AND outstanding_tokens > 0 AND ($1::text IS NULL OR tenant_id = $1)
     GROUP BY tenant_id, period";

fn pool_json(p: &PoolPolicy) -> serde_json::Value {
    json!({"monthly_tokens": p.monthly_tokens, "monthly_cost_micro": p.monthly_cost_micro,
        "max_borrow_share_ppm": p.max_borrow_share_ppm, "reclaim_below_share_ppm": p.reclaim_below_share_ppm})
}

impl Store {
    /// The pool and its policy (the defaults, with no pool, until set).
    pub async fn pool_policy(&self) -> Result<PoolPolicy> {
        let r = sqlx::query_as::<_, (Option<i64>, Option<i64>, i32, i32)>(
            "SELECT monthly_tokens, monthly_cost_micro, max_borrow_share_ppm, reclaim_below_share_ppm FROM borrow_pool",
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(r.map_or_else(
            PoolPolicy::default,
            |(tokens, cost, max_share, reclaim_below)| PoolPolicy {
                monthly_tokens: tokens,
                monthly_cost_micro: cost,
                max_borrow_share_ppm: max_share as i64,
                reclaim_below_share_ppm: reclaim_below as i64,
            },
        ))
    }

    pub async fn set_pool_policy(&self, actor: &str, p: &PoolPolicy) -> Result<()> {
        let before = self.pool_policy().await?;
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO borrow_pool (id, monthly_tokens, monthly_cost_micro, max_borrow_share_ppm, reclaim_below_share_ppm)
             VALUES (TRUE, $1, $2, $3, $4)
             ON CONFLICT (id) DO UPDATE SET monthly_tokens = $1, monthly_cost_micro = $2,
                max_borrow_share_ppm = $3, reclaim_below_share_ppm = $4, updated_at = now()",
        )
        .bind(p.monthly_tokens)
        .bind(p.monthly_cost_micro)
        .bind(p.max_borrow_share_ppm as i32)
        .bind(p.reclaim_below_share_ppm as i32)
        .execute(&mut *tx)
        .await?;
        append(
            &mut tx,
            NewAudit::new(actor, "pool.update", "pool")
                .before(pool_json(&before))
                .after(pool_json(p)),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Records a borrow before the pool is debited (state `pending`).
    pub async fn begin_borrow(
        &self,
        id: Uuid,
        tenant: &str,
        period: &str,
        asked_tokens: i64,
        trigger: &str,
        replica: &str,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO borrows (id, tenant_id, period, asked_tokens, trigger, replica)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(tenant)
        .bind(period)
        .bind(asked_tokens)
        .bind(trigger)
        .bind(replica)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The pool answered: the borrow is active with what was granted (or
    /// refused when nothing was), with its audit row. Idempotent.
    pub async fn finish_borrow(&self, id: Uuid, tokens: i64, cost_micro: i64) -> Result<BorrowRow> {
        let mut tx = self.pool.begin().await?;
        let state = if tokens > 0 { "active" } else { "refused" };
        let r = sqlx::query_as::<_, BorrowRow>(&format!(
            "UPDATE borrows SET state = $2, tokens = $3, cost_micro = $4, outstanding_tokens = $3,
                outstanding_cost_micro = $4, settled_at = now()
             WHERE id = $1 AND state = 'pending' RETURNING {BORROW_COLS}"
        ))
        .bind(id)
        .bind(state)
        .bind(tokens)
        .bind(cost_micro)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(r) = r else {
            tx.commit().await?;
            let r = sqlx::query_as::<_, BorrowRow>(&format!(
                "SELECT {BORROW_COLS} FROM borrows WHERE id = $1"
            ))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
            return r.ok_or_else(|| StoreError::NotFound(format!("borrow {id}")));
        };
        let b = r;
        if tokens > 0 {
            append(
                &mut tx,
                NewAudit::new(
                    format!("replica:{}", b.replica),
                    "borrow.grant",
                    format!("tenant:{}", b.tenant_id),
                )
                .after(
                    json!({"borrow_id": b.id, "period": b.period, "tokens": tokens,
                    "cost_micro": cost_micro, "asked_tokens": b.asked_tokens}),
                )
                .reason(b.trigger.clone()),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(b)
    }

    /// Borrows still pending after `before` (their replica died or lost
    /// Redis mid-borrow): driven again, idempotently, by the borrower.
    pub async fn pending_borrows(
        &self,
        scope: &TenantScope,
        before: DateTime<Utc>,
    ) -> Result<Vec<BorrowRow>> {
        let rows = sqlx::query_as::<_, BorrowRow>(&format!(
            "SELECT {BORROW_COLS} FROM borrows WHERE state = 'pending' AND created_at < $1
               AND ($2::text IS NULL OR tenant_id = $2) ORDER BY created_at"
        ))
        .bind(before)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// The scope's borrows of a period, oldest first.
    pub async fn borrows(&self, scope: &TenantScope, period: &str) -> Result<Vec<BorrowRow>> {
        let rows = sqlx::query_as::<_, BorrowRow>(&format!(
            "SELECT {BORROW_COLS} FROM borrows WHERE period = $1 AND ($2::text IS NULL OR tenant_id = $2)
             ORDER BY created_at, id"
        ))
        .bind(period)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// Outstanding borrowed quota per tenant of the scope and period
    /// (active borrows).
    pub async fn borrowed(&self, scope: &TenantScope) -> Result<Vec<BorrowedRow>> {
        Ok(sqlx::query_as(OUTSTANDING)
            .bind(scope.tenant())
            .fetch_all(&self.pool)
            .await?)
    }

    /// Takes `tokens` (and `cost_micro`) back from a borrow: its outstanding
    /// amount shrinks now (so limits drop at once) and a `pending` reclaim
    /// is recorded for the pool to be given the amount back; audited.
    pub async fn reclaim(
        &self,
        actor: &str,
        borrow: Uuid,
        tokens: i64,
        cost_micro: i64,
        reason: &str,
    ) -> Result<ReclaimRow> {
        let mut tx = self.pool.begin().await?;
        let (tenant, period, left): (String, String, i64) = sqlx::query_as(
            "UPDATE borrows SET outstanding_tokens = outstanding_tokens - $2,
                outstanding_cost_micro = GREATEST(0, outstanding_cost_micro - $3)
             WHERE id = $1 AND state = 'active' AND outstanding_tokens >= $2
             RETURNING tenant_id, period, outstanding_tokens",
        )
        .bind(borrow)
        .bind(tokens)
        .bind(cost_micro)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| {
            StoreError::NotFound(format!("borrow {borrow} with {tokens} outstanding"))
        })?;
        let id = Uuid::now_v7();
        let row = sqlx::query_as::<_, ReclaimRow>(
            "INSERT INTO reclaims (id, borrow_id, tenant_id, period, tokens, cost_micro, reason)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             RETURNING id, borrow_id, tenant_id, period, tokens, cost_micro, state, reason, at",
        )
        .bind(id)
        .bind(borrow)
        .bind(&tenant)
        .bind(&period)
        .bind(tokens)
        .bind(cost_micro)
        .bind(reason)
        .fetch_one(&mut *tx)
        .await?;
        append(
            &mut tx,
            NewAudit::new(actor, "borrow.reclaim", format!("tenant:{tenant}"))
                .after(
                    json!({"reclaim_id": id, "borrow_id": borrow, "period": period,
                    "tokens": tokens, "cost_micro": cost_micro, "outstanding_tokens": left}),
                )
                .reason(reason),
        )
        .await?;
        tx.commit().await?;
        Ok(row)
    }

    pub async fn finish_reclaim(&self, id: Uuid) -> Result<()> {
        sqlx::query("UPDATE reclaims SET state = 'done' WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The scope's reclaims of a period (newest first), or only those still
    /// pending.
    pub async fn reclaims(
        &self,
        scope: &TenantScope,
        period: &str,
        pending_only: bool,
    ) -> Result<Vec<ReclaimRow>> {
        let rows = sqlx::query_as::<_, ReclaimRow>(
            "SELECT id, borrow_id, tenant_id, period, tokens, cost_micro, state, reason, at FROM reclaims
             WHERE period = $1 AND ($2 = FALSE OR state = 'pending') AND ($3::text IS NULL OR tenant_id = $3)
             ORDER BY at DESC, id DESC",
        )
        .bind(period)
        .bind(pending_only)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// A tenant's settled cost of one day, from the ledger's rollups.
    pub async fn tenant_day_cost(
        &self,
        scope: &TenantScope,
        tenant: &str,
        day: &str,
    ) -> Result<i64> {
        let day = domain::period::parse_day(day)
            .ok_or_else(|| StoreError::Corrupt(format!("day {day}: not a YYYY-MM-DD day")))?;
        Ok(sqlx::query_scalar(
            "SELECT COALESCE(sum(cost_micro), 0)::BIGINT FROM usage_day_rollups
             WHERE tenant_id = $1 AND day = $2
               -- the hold's month: the settle day's, or the one before it
               AND period IN (to_char($2, 'YYYY-MM'), to_char($2 - interval '1 month', 'YYYY-MM')) AND ($3::text IS NULL OR tenant_id = $3)",
        )
        .bind(tenant)
        .bind(day)
        .bind(scope.tenant())
        .fetch_one(&self.pool)
        .await?)
    }

    /// Model `model`'s guaranteed slots per core tenant, by tenant.
    pub async fn model_guarantees(&self, model: &str) -> Result<Vec<GuaranteeRow>> {
        Ok(sqlx::query_as::<_, GuaranteeRow>(
            "SELECT model_id, tenant_id, slots FROM model_guarantees WHERE model_id = $1 ORDER BY tenant_id",
        )
        .bind(model)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Sets a model's cheaper model, pool capacity and guarantees (the
    /// guarantee list replaces the old one); audited.
    pub async fn set_model_fairness(
        &self,
        actor: &str,
        model: &str,
        degrade_to: Option<&str>,
        pool_capacity: Option<i32>,
        guarantees: &[(String, i32)],
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE models SET degrade_to = $2, pool_capacity = $3, updated_at = now() WHERE id = $1",
        )
        .bind(model)
        .bind(degrade_to)
        .bind(pool_capacity)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n == 0 {
            return Err(StoreError::NotFound(format!("model {model}")));
        }
        sqlx::query("DELETE FROM model_guarantees WHERE model_id = $1")
            .bind(model)
            .execute(&mut *tx)
            .await?;
        for (t, s) in guarantees {
            sqlx::query(
                "INSERT INTO model_guarantees (model_id, tenant_id, slots) VALUES ($1, $2, $3)",
            )
            .bind(model)
            .bind(t)
            .bind(s)
            .execute(&mut *tx)
            .await?;
        }
        append(
            &mut tx,
            NewAudit::new(actor, "model.fairness", format!("model:{model}")).after(json!({
                "degrade_to": degrade_to, "pool_capacity": pool_capacity,
                "guarantees": guarantees.iter().map(|(t, s)| json!({"tenant_id": t, "slots": s})).collect::<Vec<_>>()})),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
