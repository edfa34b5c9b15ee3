//! Closing against the provider's invoice (docs/billing.md):
//! `GET /api/v1/provider-accounts`, `PUT /api/v1/provider-accounts/{id}`
//! (platform admins; the admin key is write-only),
//! `GET /api/v1/reconciliation?period=YYYY-MM` (finance, auditors, platform
//! admins), `POST /api/v1/adjustments` (finance proposes),
//! `POST /api/v1/adjustments/{id}/approve|reject` (a second finance user).

use super::extract::{Body, Params};
use super::require_platform_admin;
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::Query;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{Duration, NaiveDate, TimeZone, Utc};
use domain::invoice;
use domain::roles::Role;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::{AccountLink, AdjustmentRow, AdjustmentShare, NewAdjustment, NewAudit, Principal};
use uuid::Uuid;

fn require_books_reader(actor: &Principal) -> Result<(), ApiError> {
    match actor.role {
        Role::PlatformAdmin | Role::Finance | Role::Auditor => Ok(()),
        Role::TenantAdmin => Err(ApiError::Forbidden(
            "reconciliation with the provider is for finance, auditors and platform admins".into(),
        )),
    }
}

/// Exact USD without the sign of the currency or thousands separators:
/// "0.05", "-1.25" (a credit).
fn usd(pico: i128) -> String {
    domain::money::pico_shown(pico)
        .replacen('$', "", 1)
        .replace(',', "")
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct AccountIn {
    pub kind: String,
    pub api_base_url: String,
    /// Write-only: stored encrypted, never returned or logged.
    #[serde(default)]
    pub admin_key: Option<String>,
    /// Drift above this share of the provider's dollars alerts (percent).
    #[serde(default)]
    pub drift_alert_pct: Option<f64>,
    #[serde(default)]
    pub deployments: Vec<AccountLink>,
}

fn render_account(a: &store::ProviderAccountRow) -> Value {
    json!({"id": a.id, "kind": a.kind, "api_base_url": a.api_base_url,
        "drift_alert_pct": f64::from(a.drift_alert_bps) / 100.0,
        "deployments": a.links, "created_at": a.created_at, "updated_at": a.updated_at})
}

pub async fn list_accounts(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
) -> Result<Json<Value>, ApiError> {
    require_books_reader(&actor)?;
    let accounts = cp.store.provider_accounts().await?;
    let unreconciled = cp.store.unreconciled_deployments().await?;
    Ok(Json(json!({
        "data": accounts.iter().map(render_account).collect::<Vec<_>>(),
        "not_reconciled": unreconciled.iter()
            .map(|(m, d)| json!({"model": m, "deployment": d})).collect::<Vec<_>>(),
    })))
}

pub async fn put_account(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<String>,
    Body(a): Body<AccountIn>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(render_account(
        &put_provider_account(&cp, &actor, id, a).await?,
    )))
}

/// A platform admin creates or replaces a provider account (the API's
/// `PUT` and the console's form).
pub async fn put_provider_account(
    cp: &ControlPlane,
    actor: &Principal,
    id: String,
    a: AccountIn,
) -> Result<store::ProviderAccountRow, ApiError> {
    require_platform_admin(actor)?;
    super::valid_id("id", &id)?;
    if invoice::ProviderKind::parse(&a.kind).is_none() {
        return Err(ApiError::invalid("kind", "kind is openai or anthropic"));
    }
    super::deployments::check_base_url("api_base_url", &a.api_base_url)?;
    let bps = match a.drift_alert_pct {
        None => 100,
        Some(p) if (0.0..=100.0).contains(&p) => (p * 100.0).round() as i32,
        Some(_) => {
            return Err(ApiError::invalid(
                "drift_alert_pct",
                "a percentage from 0 to 100",
            ))
        }
    };
    for (i, l) in a.deployments.iter().enumerate() {
        if !cp.store.model_exists(&l.model).await? {
            return Err(ApiError::invalid(
                format!("deployments[{i}].model"),
                "no such model",
            ));
        }
        let ok_ref = !l.provider_ref.is_empty()
            && l.provider_ref.len() <= 128
            && l.provider_ref
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b));
        if !ok_ref {
            return Err(ApiError::invalid(
                format!("deployments[{i}].provider_ref"),
                "the provider's id of the key, project or workspace: letters, digits, _ . : -",
            ));
        }
        let ok_name = l.deployment.len() <= 64
            && l.deployment
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphanumeric())
            && l.deployment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !ok_name {
            return Err(ApiError::invalid(
                format!("deployments[{i}].deployment"),
                "the deployment's name (`default` for the model's own upstream)",
            ));
        }
    }
    let enc = match a.admin_key.as_deref() {
        Some(k) if k.trim().is_empty() => {
            return Err(ApiError::invalid("admin_key", "must not be empty"))
        }
        Some(k) => Some(domain::secret::encrypt(&cp.encryption_key, k)),
        None => None,
    };
    let before = cp.store.provider_account(&id).await?;
    match &before {
        None if enc.is_none() => {
            return Err(ApiError::invalid(
                "admin_key",
                "a new account needs the provider's admin key",
            ))
        }
        // The stored key goes only where it was given for: a new address
        // or provider needs it again.
        Some(b) if enc.is_none() && (b.api_base_url != a.api_base_url || b.kind != a.kind) => {
            return Err(ApiError::invalid(
                "admin_key",
                "give the admin key again when the API address or the provider changes",
            ))
        }
        _ => {}
    }
    if a.kind == "openai" {
        let projects = a
            .deployments
            .iter()
            .filter(|l| l.provider_ref.starts_with("proj_"))
            .count();
        if projects != 0 && projects != a.deployments.len() {
            return Err(ApiError::invalid(
                "deployments",
                "an OpenAI account is reconciled by API key ids or by project ids, not both",
            ));
        }
    }
    let row = cp
        .store
        .put_provider_account(
            &actor.label(),
            &store::PutProviderAccount {
                id,
                kind: a.kind,
                api_base_url: a.api_base_url,
                admin_key_enc: enc,
                drift_alert_bps: bps,
                links: a.deployments,
            },
        )
        .await?;
    Ok(row)
}

#[derive(Deserialize)]
pub struct PeriodQuery {
    pub period: Option<String>,
}

/// The first and last day (UTC) of a `YYYY-MM`.
fn month_days(period: &str) -> Result<(NaiveDate, NaiveDate), ApiError> {
    let bad = || ApiError::invalid("period", "a month, YYYY-MM");
    let first =
        NaiveDate::parse_from_str(&format!("{period}-01"), "%Y-%m-%d").map_err(|_| bad())?;
    let next = first
        .checked_add_months(chrono::Months::new(1))
        .ok_or_else(bad)?;
    Ok((first, next - Duration::days(1)))
}

/// The month's reconciliation: every account and day, its lines (each
/// with its difference in quantity and dollars, and its finding), the
/// adjustments proposed and approved, and the deployments not reconciled.
pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Query(q): Query<PeriodQuery>,
) -> Result<Json<Value>, ApiError> {
    require_books_reader(&actor)?;
    let period = q
        .period
        .unwrap_or_else(|| cp.clock.month_of_unix_ms(Utc::now().timestamp_millis()));
    Ok(Json(reconciliation(&cp, &period).await?))
}

pub async fn reconciliation(cp: &ControlPlane, period: &str) -> Result<Value, ApiError> {
    let (from, to) = month_days(period)?;
    let days = cp.store.recon_days(from, to).await?;
    let lines = cp.store.recon_lines(from, to).await?;
    let adjustments = cp.store.adjustments(period).await?;
    let accounts = cp.store.provider_accounts().await?;
    let unreconciled = cp.store.unreconciled_deployments().await?;
    let days_v: Vec<Value> = days
        .iter()
        .map(|d| {
            let mine: Vec<Value> = lines
                .iter()
                .filter(|l| l.account_id == d.account_id && l.day == d.day)
                .map(|l| {
                    json!({"model": l.model, "class": l.class,
                        "tollgate_quantity": l.tollgate_qty, "provider_quantity": l.provider_qty,
                        "difference_quantity": l.provider_qty.map(|p| p - l.tollgate_qty),
                        "edge_quantity": l.edge_qty,
                        "tollgate_usd": usd(l.tollgate_pico.into()),
                        "provider_usd": usd(l.provider_pico.into()),
                        "difference_usd": usd(i128::from(l.provider_pico) - i128::from(l.tollgate_pico)),
                        "finding": l.finding})
                })
                .collect();
            let diffs = mine
                .iter()
                .filter(|l| {
                    l["finding"]
                        .as_str()
                        .and_then(invoice::Finding::parse)
                        .is_some_and(invoice::Finding::is_difference)
                })
                .count();
            json!({"account": d.account_id, "day": d.day, "fetched_at": d.fetched_at,
                "final": d.is_final, "revisions": d.revisions,
                "tollgate_usd": usd(d.tollgate_pico.into()), "provider_usd": usd(d.provider_pico.into()),
                "difference_usd": usd(i128::from(d.provider_pico) - i128::from(d.tollgate_pico)),
                "drift_pct": invoice::drift_bps(d.tollgate_pico.into(), d.provider_pico.into()) as f64 / 100.0,
                "differences": diffs, "lines": mine})
        })
        .collect();
    Ok(json!({
        "period": period,
        "accounts": accounts.iter().map(render_account).collect::<Vec<_>>(),
        "not_reconciled": unreconciled.iter()
            .map(|(m, d)| json!({"model": m, "deployment": d})).collect::<Vec<_>>(),
        "days": days_v,
        "adjustments": adjustments.iter().map(render_adjustment).collect::<Vec<_>>(),
    }))
}

pub fn render_adjustment(a: &AdjustmentRow) -> Value {
    json!({"id": a.id, "account": a.account_id, "day": a.day, "model": a.model,
        "period": a.period, "amount_usd": usd(a.amount_pico.into()), "amount_pico": a.amount_pico,
        "allocation": a.allocation, "reason": a.reason, "state": a.state,
        "proposed_by": a.proposed_by, "proposed_at": a.proposed_at,
        "decided_by": a.decided_by, "decided_at": a.decided_at,
        "shares": a.shares.iter().map(|s| json!({
            "tenant_id": if s.tenant_id.is_empty() { Value::Null } else { json!(s.tenant_id) },
            "unallocated": s.tenant_id.is_empty(),
            "amount_usd": usd(s.amount_pico.into()), "amount_pico": s.amount_pico})).collect::<Vec<_>>()})
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct AdjustmentIn {
    pub account: String,
    pub day: NaiveDate,
    pub model: String,
    /// Default: the day's difference on that model (provider − tollgate).
    #[serde(default)]
    pub amount_usd: Option<String>,
    /// `pro_rata` (default) or `unallocated`.
    #[serde(default)]
    pub allocation: Option<String>,
    pub reason: String,
}

pub async fn propose(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Body(a): Body<AdjustmentIn>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let row = propose_adjustment(&cp, &actor, a).await?;
    Ok((StatusCode::CREATED, Json(render_adjustment(&row))))
}

/// Finance proposes an adjustment of a reconciled day's model.
pub async fn propose_adjustment(
    cp: &ControlPlane,
    actor: &Principal,
    a: AdjustmentIn,
) -> Result<AdjustmentRow, ApiError> {
    if actor.role != Role::Finance {
        return Err(ApiError::Forbidden(
            "only finance proposes bill adjustments".into(),
        ));
    }
    if a.reason.trim().is_empty() {
        return Err(ApiError::field("reason", "err.required"));
    }
    super::valid_text("reason", domain::text::REASON, &a.reason)?;
    let allocation = a.allocation.unwrap_or_else(|| "pro_rata".into());
    if !matches!(allocation.as_str(), "pro_rata" | "unallocated") {
        return Err(ApiError::invalid("allocation", "pro_rata or unallocated"));
    }
    let lines: Vec<_> = cp
        .store
        .recon_lines(a.day, a.day)
        .await?
        .into_iter()
        .filter(|l| l.account_id == a.account && l.model == a.model)
        .collect();
    if lines.is_empty() {
        return Err(ApiError::invalid(
            "model",
            "this account, day and model have not been reconciled",
        ));
    }
    let amount: i128 = match a.amount_usd.as_deref() {
        Some(s) => invoice::decimal_to_pico(s, 1_000_000_000_000)
            .ok_or_else(|| ApiError::invalid("amount_usd", "a decimal amount of US dollars"))?,
        None => lines
            .iter()
            .map(|l| i128::from(l.provider_pico) - i128::from(l.tollgate_pico))
            .sum(),
    };
    let amount = i64::try_from(amount)
        .map_err(|_| ApiError::invalid("amount_usd", "too large an amount"))?;
    if amount == 0 {
        return Err(ApiError::invalid("amount_usd", "a non-zero amount"));
    }
    // Billed in the month of the provider's (UTC) day; a month already
    // closed is not changed: the adjustment goes on this month's bills.
    let mut period = a.day.format("%Y-%m").to_string();
    if matches!(
        cp.books.book(&period).await,
        Ok((billing::MonthBook::Archive(_), _))
    ) {
        period = cp.clock.month_of_unix_ms(Utc::now().timestamp_millis());
    }
    let proposed_by = actor.user_id.parse().map_err(|_| ApiError::Internal)?;
    Ok(cp
        .store
        .propose_adjustment(
            &actor.label(),
            &NewAdjustment {
                account_id: a.account,
                day: a.day,
                model: a.model,
                period,
                amount_pico: amount,
                allocation,
                reason: a.reason,
                proposed_by,
            },
        )
        .await?)
}

#[derive(Deserialize, Default)]
pub struct Decision {
    #[serde(default)]
    note: String,
}

/// A second finance user approves (the shares are fixed now: pro rata to
/// the departments' exact cost of that account, day and model) or rejects.
pub async fn decide_adjustment(
    cp: &ControlPlane,
    actor: &Principal,
    id: Uuid,
    approve: bool,
    note: &str,
) -> Result<AdjustmentRow, ApiError> {
    if actor.role != Role::Finance {
        return Err(ApiError::Forbidden(
            "only finance decides bill adjustments".into(),
        ));
    }
    super::valid_text("note", domain::text::NOTE, note)?;
    let adj = cp
        .store
        .adjustment(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("adjustment {id}")))?;
    let decider: Uuid = actor.user_id.parse().map_err(|_| ApiError::Internal)?;
    if let Err(r) = may_decide(cp, actor, adj.proposed_by).await? {
        cp.store
            .audit(
                NewAudit::new(
                    actor.label(),
                    "adjustment.four_eyes_refused",
                    format!("adjustment:{id}"),
                )
                .after(json!({"why": r.code(), "proposed_by": adj.proposed_by})),
            )
            .await?;
        return Err(ApiError::FourEyes(r));
    }
    let shares = if approve {
        let links = cp.store.resolved_links(&adj.account_id).await?;
        let start = Utc.from_utc_datetime(&adj.day.and_hms_opt(0, 0, 0).expect("midnight"));
        let rows = cp
            .store
            .recon_ledger(&links, start, start + Duration::days(1), 0)
            .await?;
        let mut costs: std::collections::BTreeMap<String, i128> = Default::default();
        for r in rows
            .iter()
            .filter(|r| r.upstream_model == adj.model && r.edge != 2)
        {
            *costs.entry(r.tenant_id.clone()).or_default() += i128::from(r.cost_pico);
        }
        let costs: Vec<(String, i128)> = costs.into_iter().collect();
        let split = invoice::allocate(adj.amount_pico.into(), &costs, adj.allocation == "pro_rata");
        Some(
            split
                .into_iter()
                .map(|(tenant_id, p)| AdjustmentShare {
                    tenant_id,
                    amount_pico: i64::try_from(p).unwrap_or(0),
                })
                .collect::<Vec<_>>(),
        )
    } else {
        None
    };
    Ok(cp
        .store
        .decide_adjustment(&actor.label(), id, decider, shares.as_deref(), note)
        .await?)
}

/// Whether `actor` may approve or reject an adjustment `proposed_by` made:
/// the rule the decision enforces, asked beforehand so the page shows no
/// button that would be refused.
pub async fn may_decide(
    cp: &ControlPlane,
    actor: &Principal,
    proposed_by: Uuid,
) -> Result<Result<(), domain::roles::DecisionRefusal>, ApiError> {
    if actor.role != Role::Finance {
        return Ok(Err(domain::roles::DecisionRefusal::NotFinance));
    }
    super::quota_requests::four_eyes(cp, actor, proposed_by, domain::roles::may_decide_adjustment)
        .await
}

pub async fn approve(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<Uuid>,
    body: Option<Body<Decision>>,
) -> Result<Json<Value>, ApiError> {
    let note = body.map(|b| b.0).unwrap_or_default().note;
    Ok(Json(render_adjustment(
        &decide_adjustment(&cp, &actor, id, true, &note).await?,
    )))
}

pub async fn reject(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<Uuid>,
    body: Option<Body<Decision>>,
) -> Result<Json<Value>, ApiError> {
    let note = body.map(|b| b.0).unwrap_or_default().note;
    Ok(Json(render_adjustment(
        &decide_adjustment(&cp, &actor, id, false, &note).await?,
    )))
}
