//! Provider accounts, the provider-reconcile job's findings, and the
//! adjustments finance books for them (migration 0031, docs/billing.md,
//! "Closing against the provider's invoice").

use crate::audit::{append, NewAudit};
use crate::{Result, Store, StoreError, TenantScope};
use chrono::{DateTime, NaiveDate, Utc};
use domain::invoice::Line;
use domain::pricing::{Charges, Component};
use serde::Serialize;
use serde_json::json;
use sqlx::Row;
use uuid::Uuid;

/// A provider account as the API shows it (never its admin key).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProviderAccountRow {
    pub id: String,
    pub kind: String,
    pub api_base_url: String,
    pub drift_alert_bps: i32,
    pub links: Vec<AccountLink>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A deployment billed to an account, and its provider-side id.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct AccountLink {
    pub model: String,
    /// The deployment's name; `default` for a model's own upstream.
    pub deployment: String,
    /// OpenAI `api_key_id` (or `proj_…` project id), Anthropic `workspace_id`.
    pub provider_ref: String,
}

/// A link with the upstream model it sends (what the provider reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedLink {
    pub model: String,
    pub deployment: String,
    pub upstream_model: String,
    pub provider_ref: String,
}

#[derive(Debug, Clone)]
pub struct PutProviderAccount {
    pub id: String,
    pub kind: String,
    pub api_base_url: String,
    /// The encrypted admin key; None keeps the stored one (required to create).
    pub admin_key_enc: Option<Vec<u8>>,
    pub drift_alert_bps: i32,
    pub links: Vec<AccountLink>,
}

/// What the ledger holds for a reconciled day, per upstream model ×
/// department × edge (0: in the day; 1: in the day's last
/// [`domain::invoice::EDGE_SECS`]; 2: in the same span before its start).
#[derive(Debug, Clone, PartialEq)]
pub struct ReconLedgerRow {
    pub upstream_model: String,
    pub tenant_id: String,
    pub edge: i16,
    pub requests: i64,
    pub charges: Charges,
    /// The exact cost (rows without components: all of it, unsplit).
    pub cost_pico: i64,
}

/// A reconciled day.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReconDayRow {
    pub account_id: String,
    pub day: NaiveDate,
    pub fetched_at: DateTime<Utc>,
    #[serde(rename = "final")]
    pub is_final: bool,
    pub revisions: i32,
    pub tollgate_pico: i64,
    pub provider_pico: i64,
}

/// One stored comparison line.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReconLineRow {
    pub account_id: String,
    pub day: NaiveDate,
    pub model: String,
    pub class: String,
    pub tollgate_qty: i64,
    pub provider_qty: Option<i64>,
    pub edge_qty: i64,
    pub tollgate_pico: i64,
    pub provider_pico: i64,
    pub finding: String,
}

/// How storing a day went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaySaved {
    New,
    /// Fetched before with the same figures.
    Same,
    /// The provider's figures changed since the last fetch.
    Revised,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AdjustmentRow {
    pub id: Uuid,
    pub account_id: String,
    pub day: NaiveDate,
    pub model: String,
    pub period: String,
    pub amount_pico: i64,
    pub allocation: String,
    pub reason: String,
    pub state: String,
    pub proposed_by: Uuid,
    pub proposed_at: DateTime<Utc>,
    pub decided_by: Option<Uuid>,
    pub decided_at: Option<DateTime<Utc>>,
    pub shares: Vec<AdjustmentShare>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AdjustmentShare {
    /// `""`: the unallocated line.
    pub tenant_id: String,
    pub amount_pico: i64,
}

#[derive(Debug, Clone)]
pub struct NewAdjustment {
    pub account_id: String,
    pub day: NaiveDate,
    pub model: String,
    pub period: String,
    pub amount_pico: i64,
    pub allocation: String,
    pub reason: String,
    pub proposed_by: Uuid,
}

/// An approved adjustment's share on a department's bill.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct BillAdjustment {
    pub tenant_id: String,
    pub adjustment_id: Uuid,
    pub account_id: String,
    pub day: NaiveDate,
    pub model: String,
    pub amount_pico: i64,
}

const ACCOUNT_COLS: &str = "id, kind, api_base_url, drift_alert_bps, created_at, updated_at";

const ADJ_COLS: &str =
    "id, account_id, day, model, period, amount_pico, allocation, reason, state, \
     proposed_by, proposed_at, decided_by, decided_at";

fn account_row(r: &sqlx::postgres::PgRow, links: Vec<AccountLink>) -> ProviderAccountRow {
    ProviderAccountRow {
        id: r.get("id"),
        kind: r.get("kind"),
        api_base_url: r.get("api_base_url"),
        drift_alert_bps: r.get("drift_alert_bps"),
        links,
        created_at: r.get("created_at"),
        updated_at: r.get("updated_at"),
    }
}

fn adjustment_row(r: &sqlx::postgres::PgRow, shares: Vec<AdjustmentShare>) -> AdjustmentRow {
    AdjustmentRow {
        id: r.get("id"),
        account_id: r.get("account_id"),
        day: r.get("day"),
        model: r.get("model"),
        period: r.get("period"),
        amount_pico: r.get("amount_pico"),
        allocation: r.get("allocation"),
        reason: r.get("reason"),
        state: r.get("state"),
        proposed_by: r.get("proposed_by"),
        proposed_at: r.get("proposed_at"),
        decided_by: r.get("decided_by"),
        decided_at: r.get("decided_at"),
        shares,
    }
}

/// The per-component sums of a set of ledger rows, as one int8 array of
/// (quantity, pico) pairs in `Component::ALL` order; rows from before
/// components were kept count their tokens as input and output and their
/// whole cost as input.
fn charge_sums() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        let mut v = Vec::new();
        for c in Component::ALL {
            let n = c.name();
            let (q_old, p_old) = match c {
                Component::Input => ("input_tokens", "cost_pico"),
                Component::Output => ("output_tokens", "0"),
                _ => ("0", "0"),
            };
            v.push(format!(
                "COALESCE(sum(CASE WHEN charges IS NULL THEN {q_old} ELSE COALESCE((charges->'{n}'->>0)::int8, 0) END), 0)::int8"
            ));
            v.push(format!(
                "COALESCE(sum(CASE WHEN charges IS NULL THEN {p_old} ELSE COALESCE((charges->'{n}'->>1)::int8, 0) END), 0)::int8"
            ));
        }
        format!("ARRAY[{}]", v.join(", "))
    })
}

impl Store {
    /// Every provider account with its links, by id.
    pub async fn provider_accounts(&self) -> Result<Vec<ProviderAccountRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {ACCOUNT_COLS} FROM provider_accounts ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await?;
        let links = sqlx::query(
            "SELECT account_id, model_id, deployment, provider_ref FROM provider_account_links
             ORDER BY account_id, model_id, deployment",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| {
                let id: String = r.get("id");
                let l = links
                    .iter()
                    .filter(|l| l.get::<String, _>("account_id") == id)
                    .map(|l| AccountLink {
                        model: l.get("model_id"),
                        deployment: l.get("deployment"),
                        provider_ref: l.get("provider_ref"),
                    })
                    .collect();
                account_row(r, l)
            })
            .collect())
    }

    /// One account (never its admin key).
    pub async fn provider_account(&self, id: &str) -> Result<Option<ProviderAccountRow>> {
        Ok(self
            .provider_accounts()
            .await?
            .into_iter()
            .find(|a| a.id == id))
    }

    /// An account's encrypted admin key (None: no such account).
    pub async fn provider_admin_key(&self, id: &str) -> Result<Option<Vec<u8>>> {
        Ok(
            sqlx::query_scalar("SELECT admin_key_enc FROM provider_accounts WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Creates or replaces an account and its links (audited, without the key).
    pub async fn put_provider_account(
        &self,
        actor: &str,
        a: &PutProviderAccount,
    ) -> Result<ProviderAccountRow> {
        let before = self.provider_account(&a.id).await?;
        if before.is_none() && a.admin_key_enc.is_none() {
            return Err(StoreError::Corrupt(
                "a new provider account needs its admin key".into(),
            ));
        }
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO provider_accounts (id, kind, api_base_url, admin_key_enc, drift_alert_bps)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (id) DO UPDATE SET kind = $2, api_base_url = $3,
                admin_key_enc = COALESCE($4, provider_accounts.admin_key_enc),
                drift_alert_bps = $5, updated_at = now()",
        )
        .bind(&a.id)
        .bind(&a.kind)
        .bind(&a.api_base_url)
        .bind(&a.admin_key_enc)
        .bind(a.drift_alert_bps)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM provider_account_links WHERE account_id = $1")
            .bind(&a.id)
            .execute(&mut *tx)
            .await?;
        for l in &a.links {
            let r = sqlx::query(
                "INSERT INTO provider_account_links (model_id, deployment, account_id, provider_ref)
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(&l.model)
            .bind(&l.deployment)
            .bind(&a.id)
            .bind(&l.provider_ref)
            .execute(&mut *tx)
            .await;
            if let Err(sqlx::Error::Database(e)) = &r {
                if e.is_unique_violation() {
                    return Err(StoreError::Conflict(format!(
                        "deployment {}/{} is billed to another account",
                        l.model, l.deployment
                    )));
                }
            }
            r?;
        }
        let row = sqlx::query(&format!(
            "SELECT {ACCOUNT_COLS} FROM provider_accounts WHERE id = $1"
        ))
        .bind(&a.id)
        .fetch_one(&mut *tx)
        .await?;
        let after = account_row(&row, a.links.clone());
        append(
            &mut tx,
            NewAudit::new(
                actor,
                if before.is_some() {
                    "provider_account.update"
                } else {
                    "provider_account.create"
                },
                format!("provider_account:{}", a.id),
            )
            .before(before.as_ref().map_or(serde_json::Value::Null, |b| {
                serde_json::to_value(b).expect("serialises")
            }))
            .after(json!({
                "account": serde_json::to_value(&after).expect("serialises"),
                "admin_key_changed": a.admin_key_enc.is_some(),
            })),
        )
        .await?;
        tx.commit().await?;
        Ok(after)
    }

    /// The account's links with the upstream model each deployment sends
    /// now (a link to a deployment that no longer exists is left out).
    pub async fn resolved_links(&self, account: &str) -> Result<Vec<ResolvedLink>> {
        let rows = sqlx::query(
            "SELECT l.model_id, l.deployment, l.provider_ref,
                    COALESCE(d.upstream_model, CASE WHEN l.deployment = 'default' THEN m.upstream_model END) AS upstream
             FROM provider_account_links l
             JOIN models m ON m.id = l.model_id
             LEFT JOIN model_deployments d ON d.model_id = l.model_id AND d.name = l.deployment
             WHERE l.account_id = $1
             ORDER BY l.model_id, l.deployment",
        )
        .bind(account)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                Some(ResolvedLink {
                    model: r.get("model_id"),
                    deployment: r.get("deployment"),
                    upstream_model: r.get::<Option<String>, _>("upstream")?,
                    provider_ref: r.get("provider_ref"),
                })
            })
            .collect())
    }

    /// Deployments (model, name) no account reconciles.
    pub async fn unreconciled_deployments(&self) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT model_id, deployment FROM (
                SELECT d.model_id, d.name AS deployment FROM model_deployments d
                UNION
                SELECT m.id, 'default' FROM models m
                WHERE NOT EXISTS (SELECT 1 FROM model_deployments d WHERE d.model_id = m.id)
             ) x
             WHERE NOT EXISTS (SELECT 1 FROM provider_account_links l
                               WHERE l.model_id = x.model_id AND l.deployment = x.deployment)
             ORDER BY 1, 2",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get("model_id"), r.get("deployment")))
            .collect())
    }

    /// The ledger's side of a day: requests and charges of the linked
    /// deployments' rows started in `[start − edge, end)` (UTC), per
    /// upstream model × department × edge.
    pub async fn recon_ledger(
        &self,
        links: &[ResolvedLink],
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        edge_secs: i64,
    ) -> Result<Vec<ReconLedgerRow>> {
        if links.is_empty() {
            return Ok(Vec::new());
        }
        let models: Vec<&str> = links.iter().map(|l| l.model.as_str()).collect();
        let deps: Vec<&str> = links.iter().map(|l| l.deployment.as_str()).collect();
        let ups: Vec<&str> = links.iter().map(|l| l.upstream_model.as_str()).collect();
        let edge = chrono::Duration::seconds(edge_secs);
        // The ledger's `day` is platform time: a day either side covers any zone.
        let sql = format!(
            "WITH l(model_id, deployment, upstream) AS (
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
             SELECT l.upstream, e.tenant_id,
                (CASE WHEN e.started_at < $5 THEN 2 WHEN e.started_at >= $6 THEN 1 ELSE 0 END)::int2 AS edge,
                count(*) FILTER (WHERE e.status NOT IN ('upstream_error', 'expired'))::int8 AS requests,
                COALESCE(sum(e.cost_pico), 0)::int8 AS cost_pico,
                {charges} AS charges
             FROM usage_events e
             JOIN l ON l.model_id = e.model AND l.deployment = e.deployment
             WHERE e.day BETWEEN ($4::timestamptz)::date - 2 AND ($7::timestamptz)::date + 2
               AND e.started_at >= $4 AND e.started_at < $7
             GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
            charges = charge_sums()
        );
        let rows = sqlx::query(&sql)
            .bind(&models)
            .bind(&deps)
            .bind(&ups)
            .bind(start - edge)
            .bind(start)
            .bind(end - edge)
            .bind(end)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                let arr: Vec<i64> = r.get("charges");
                let mut charges = Charges::default();
                for (i, c) in Component::ALL.into_iter().enumerate() {
                    let (q, p) = (arr.get(2 * i), arr.get(2 * i + 1));
                    let (Some(q), Some(p)) = (q, p) else {
                        return Err(StoreError::Corrupt("charge sums".into()));
                    };
                    charges.quantity[c.index()] = *q;
                    charges.pico[c.index()] = *p;
                }
                Ok(ReconLedgerRow {
                    upstream_model: r.get("upstream"),
                    tenant_id: r.get("tenant_id"),
                    edge: r.get("edge"),
                    requests: r.get("requests"),
                    charges,
                    cost_pico: r.get("cost_pico"),
                })
            })
            .collect()
    }

    /// Stores a day's comparison, replacing an earlier one whole (one
    /// transaction: a reader sees the old lines or the new).
    #[allow(clippy::too_many_arguments)]
    pub async fn save_recon_day(
        &self,
        account: &str,
        day: NaiveDate,
        fetched_at: DateTime<Utc>,
        is_final: bool,
        digest: &str,
        lines: &[Line],
    ) -> Result<DaySaved> {
        let sat = |v: i128| i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX });
        let tollgate: i128 = lines.iter().map(|l| l.sums.tollgate_pico).sum();
        let provider: i128 = lines.iter().map(|l| l.sums.provider_pico).sum();
        let mut tx = self.pool.begin().await?;
        let prev: Option<String> = sqlx::query_scalar(
            "SELECT digest FROM provider_recon_days WHERE account_id = $1 AND day = $2 FOR UPDATE",
        )
        .bind(account)
        .bind(day)
        .fetch_optional(&mut *tx)
        .await?;
        let saved = match prev.as_deref() {
            None => DaySaved::New,
            Some(d) if d == digest => DaySaved::Same,
            Some(_) => DaySaved::Revised,
        };
        sqlx::query(
            "INSERT INTO provider_recon_days (account_id, day, fetched_at, final, digest, tollgate_pico, provider_pico)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (account_id, day) DO UPDATE SET fetched_at = $3, final = $4, digest = $5,
                tollgate_pico = $6, provider_pico = $7,
                revisions = provider_recon_days.revisions + $8",
        )
        .bind(account)
        .bind(day)
        .bind(fetched_at)
        .bind(is_final)
        .bind(digest)
        .bind(sat(tollgate))
        .bind(sat(provider))
        .bind(i32::from(saved == DaySaved::Revised))
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM provider_recon_lines WHERE account_id = $1 AND day = $2")
            .bind(account)
            .bind(day)
            .execute(&mut *tx)
            .await?;
        if !lines.is_empty() {
            let models: Vec<&str> = lines.iter().map(|l| l.model.as_str()).collect();
            let classes: Vec<&str> = lines.iter().map(|l| l.class.as_str()).collect();
            let tq: Vec<i64> = lines.iter().map(|l| l.sums.tollgate_qty).collect();
            let pq: Vec<Option<i64>> = lines.iter().map(|l| l.sums.provider_qty).collect();
            let eq: Vec<i64> = lines.iter().map(|l| l.sums.edge_qty).collect();
            let tp: Vec<i64> = lines.iter().map(|l| sat(l.sums.tollgate_pico)).collect();
            let pp: Vec<i64> = lines.iter().map(|l| sat(l.sums.provider_pico)).collect();
            let f: Vec<&str> = lines.iter().map(|l| l.finding.as_str()).collect();
            sqlx::query(
                "INSERT INTO provider_recon_lines (account_id, day, model, class, tollgate_qty,
                    provider_qty, edge_qty, tollgate_pico, provider_pico, finding)
                 SELECT $1, $2, * FROM unnest($3::text[], $4::text[], $5::int8[], $6::int8[],
                    $7::int8[], $8::int8[], $9::int8[], $10::text[])",
            )
            .bind(account)
            .bind(day)
            .bind(&models)
            .bind(&classes)
            .bind(&tq)
            .bind(&pq)
            .bind(&eq)
            .bind(&tp)
            .bind(&pp)
            .bind(&f)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(saved)
    }

    /// Reconciled days in `[from, to]`, every account.
    pub async fn recon_days(&self, from: NaiveDate, to: NaiveDate) -> Result<Vec<ReconDayRow>> {
        let rows = sqlx::query(
            "SELECT account_id, day, fetched_at, final, revisions, tollgate_pico, provider_pico
             FROM provider_recon_days WHERE day BETWEEN $1 AND $2 ORDER BY account_id, day",
        )
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| ReconDayRow {
                account_id: r.get("account_id"),
                day: r.get("day"),
                fetched_at: r.get("fetched_at"),
                is_final: r.get("final"),
                revisions: r.get("revisions"),
                tollgate_pico: r.get("tollgate_pico"),
                provider_pico: r.get("provider_pico"),
            })
            .collect())
    }

    /// The lines of the reconciled days in `[from, to]`.
    pub async fn recon_lines(&self, from: NaiveDate, to: NaiveDate) -> Result<Vec<ReconLineRow>> {
        let rows = sqlx::query(
            "SELECT account_id, day, model, class, tollgate_qty, provider_qty, edge_qty,
                    tollgate_pico, provider_pico, finding
             FROM provider_recon_lines WHERE day BETWEEN $1 AND $2
             ORDER BY account_id, day, model, class",
        )
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| ReconLineRow {
                account_id: r.get("account_id"),
                day: r.get("day"),
                model: r.get("model"),
                class: r.get("class"),
                tollgate_qty: r.get("tollgate_qty"),
                provider_qty: r.get("provider_qty"),
                edge_qty: r.get("edge_qty"),
                tollgate_pico: r.get("tollgate_pico"),
                provider_pico: r.get("provider_pico"),
                finding: r.get("finding"),
            })
            .collect())
    }

    /// Proposes an adjustment (audited).
    pub async fn propose_adjustment(
        &self,
        actor: &str,
        a: &NewAdjustment,
    ) -> Result<AdjustmentRow> {
        let id = Uuid::now_v7();
        let mut tx = self.pool.begin().await?;
        let r = sqlx::query(&format!(
            "INSERT INTO bill_adjustments (id, account_id, day, model, period, amount_pico,
                allocation, reason, proposed_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING {ADJ_COLS}"
        ))
        .bind(id)
        .bind(&a.account_id)
        .bind(a.day)
        .bind(&a.model)
        .bind(&a.period)
        .bind(a.amount_pico)
        .bind(&a.allocation)
        .bind(&a.reason)
        .bind(a.proposed_by)
        .fetch_one(&mut *tx)
        .await?;
        let row = adjustment_row(&r, Vec::new());
        append(
            &mut tx,
            NewAudit::new(actor, "adjustment.propose", format!("adjustment:{id}"))
                .after(serde_json::to_value(&row).expect("serialises"))
                .reason(&a.reason),
        )
        .await?;
        tx.commit().await?;
        Ok(row)
    }

    pub async fn adjustment(&self, id: Uuid) -> Result<Option<AdjustmentRow>> {
        let sql = format!("SELECT {ADJ_COLS} FROM bill_adjustments WHERE id = $1");
        let rows = sqlx::query(&sql).bind(id).fetch_all(&self.pool).await?;
        Ok(self.with_shares(rows).await?.into_iter().next())
    }

    /// The adjustments billed in `period`, every state, newest first.
    pub async fn adjustments(&self, period: &str) -> Result<Vec<AdjustmentRow>> {
        let sql = format!(
            "SELECT {ADJ_COLS} FROM bill_adjustments WHERE period = $1 ORDER BY proposed_at DESC, id"
        );
        let rows = sqlx::query(&sql).bind(period).fetch_all(&self.pool).await?;
        self.with_shares(rows).await
    }

    async fn with_shares(&self, rows: Vec<sqlx::postgres::PgRow>) -> Result<Vec<AdjustmentRow>> {
        let ids: Vec<Uuid> = rows.iter().map(|r| r.get("id")).collect();
        let shares = sqlx::query(
            "SELECT adjustment_id, tenant_id, amount_pico FROM bill_adjustment_shares
             WHERE adjustment_id = ANY($1) ORDER BY adjustment_id, tenant_id",
        )
        .bind(&ids)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| {
                let id: Uuid = r.get("id");
                let s = shares
                    .iter()
                    .filter(|s| s.get::<Uuid, _>("adjustment_id") == id)
                    .map(|s| AdjustmentShare {
                        tenant_id: s.get("tenant_id"),
                        amount_pico: s.get("amount_pico"),
                    })
                    .collect();
                adjustment_row(r, s)
            })
            .collect())
    }

    /// Approves (with its shares, which must add up to the amount) or
    /// rejects a proposed adjustment, once. The caller has checked four eyes.
    pub async fn decide_adjustment(
        &self,
        actor: &str,
        id: Uuid,
        decided_by: Uuid,
        shares: Option<&[AdjustmentShare]>,
        note: &str,
    ) -> Result<AdjustmentRow> {
        let state = if shares.is_some() {
            "approved"
        } else {
            "rejected"
        };
        let mut tx = self.pool.begin().await?;
        let r = sqlx::query(&format!(
            "UPDATE bill_adjustments SET state = $2, decided_by = $3, decided_at = now()
             WHERE id = $1 AND state = 'proposed' RETURNING {ADJ_COLS}"
        ))
        .bind(id)
        .bind(state)
        .bind(decided_by)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::Conflict(format!("adjustment {id} is not proposed")))?;
        let row = adjustment_row(&r, shares.map(<[_]>::to_vec).unwrap_or_default());
        if let Some(shares) = shares {
            let sum: i128 = shares.iter().map(|s| i128::from(s.amount_pico)).sum();
            if sum != i128::from(row.amount_pico) {
                return Err(StoreError::Corrupt(format!(
                    "adjustment {id}: shares add up to {sum}, not {}",
                    row.amount_pico
                )));
            }
            for s in shares {
                sqlx::query(
                    "INSERT INTO bill_adjustment_shares (adjustment_id, tenant_id, period, amount_pico)
                     VALUES ($1, $2, $3, $4)",
                )
                .bind(id)
                .bind(&s.tenant_id)
                .bind(&row.period)
                .bind(s.amount_pico)
                .execute(&mut *tx)
                .await?;
            }
        }
        append(
            &mut tx,
            NewAudit::new(
                actor,
                if shares.is_some() {
                    "adjustment.approve"
                } else {
                    "adjustment.reject"
                },
                format!("adjustment:{id}"),
            )
            .before(json!({"state": "proposed"}))
            .after(serde_json::to_value(&row).expect("serialises"))
            .reason(note),
        )
        .await?;
        tx.commit().await?;
        Ok(row)
    }

    /// Approved adjustment shares billed in `period` (the scope's
    /// departments; a platform-wide scope also gets the unallocated line,
    /// tenant `""`), by department, day and model.
    pub async fn bill_adjustments(
        &self,
        scope: &TenantScope,
        period: &str,
    ) -> Result<Vec<BillAdjustment>> {
        let rows = sqlx::query(
            "SELECT s.tenant_id, a.id, a.account_id, a.day, a.model, s.amount_pico
             FROM bill_adjustment_shares s JOIN bill_adjustments a ON a.id = s.adjustment_id
             WHERE s.period = $1 AND a.state = 'approved'
               AND ($2::text IS NULL OR s.tenant_id = $2)
             ORDER BY s.tenant_id, a.day, a.model, a.id",
        )
        .bind(period)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| BillAdjustment {
                tenant_id: r.get("tenant_id"),
                adjustment_id: r.get("id"),
                account_id: r.get("account_id"),
                day: r.get("day"),
                model: r.get("model"),
                amount_pico: r.get("amount_pico"),
            })
            .collect())
    }

    /// Records a day's drift alert once per account and day: a platform
    /// notice, and a webhook delivery when `webhook` (delivered with the
    /// budget alerts). False when it was already recorded.
    pub async fn record_drift_alert(
        &self,
        account: &str,
        day: NaiveDate,
        payload: &serde_json::Value,
        notice: &str,
        webhook: bool,
        at: DateTime<Utc>,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let id: Option<i64> = sqlx::query_scalar(
            "INSERT INTO budget_alerts (tenant_id, scope, period, measure, threshold, payload, delivery, next_attempt_at)
             VALUES ('', $1, $2, 'provider_drift', $6, $3, $4, $5)
             ON CONFLICT (scope, period, measure, threshold) DO NOTHING RETURNING id",
        )
        .bind(format!("provider_account:{account}"))
        .bind(day.format("%Y-%m").to_string())
        .bind(payload)
        .bind(if webhook { "pending" } else { "no_webhook" })
        .bind(at)
        .bind(format!("day {day}"))
        .fetch_optional(&mut *tx)
        .await?;
        if id.is_none() {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO notices (tenant_id, kind, message, detail) VALUES (NULL, 'provider_drift', $1, $2)",
        )
        .bind(notice)
        .bind(payload)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }
}
