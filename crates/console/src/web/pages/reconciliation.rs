//! Reconciliation with the providers' invoices (docs/billing.md, "Closing
//! against the provider's invoice"): per account and UTC day, tollgate's
//! and the provider's dollars, the drift, the classified differences; the
//! adjustments finance proposes and a second finance user approves.
//! Finance, auditors and platform admins read it; finance acts on it.

use crate::api::reconciliation::{self as api, AdjustmentIn};
use crate::error::ApiError;
use crate::web::{render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use domain::roles::Role;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use uuid::Uuid;

pub struct AccountLine {
    pub id: String,
    pub kind: String,
    pub url: String,
    pub links: Vec<String>,
    pub drift: String,
}

pub struct DiffLine {
    pub model: String,
    pub class: String,
    pub tollgate_qty: String,
    pub provider_qty: String,
    pub diff_qty: String,
    pub tollgate_usd: String,
    pub provider_usd: String,
    pub diff_usd: String,
    pub finding: String,
}

pub struct DayLine {
    pub account: String,
    pub day: String,
    pub tollgate: String,
    pub provider: String,
    pub difference: String,
    pub drift: String,
    pub is_final: bool,
    pub revisions: i64,
    pub diffs: Vec<DiffLine>,
    /// Models with a difference finance may propose an adjustment for.
    pub models: Vec<String>,
}

pub struct AdjLine {
    pub id: String,
    pub account: String,
    pub day: String,
    pub model: String,
    pub amount: String,
    pub allocation: String,
    pub reason: String,
    pub state: String,
    pub shares: Vec<String>,
    pub can_decide: bool,
    pub refusal: &'static str,
}

#[derive(Template)]
#[template(path = "pages/reconciliation.html")]
struct ReconPage {
    c: Chrome,
    period: String,
    accounts: Vec<AccountLine>,
    unreconciled: Vec<String>,
    days: Vec<DayLine>,
    adjustments: Vec<AdjLine>,
    is_finance: bool,
    /// Platform admins add and change accounts here.
    is_platform_admin: bool,
    /// A period that is not a month, as typed (shown beside the field).
    bad_period: Option<String>,
}

#[derive(Deserialize)]
pub struct PeriodQuery {
    period: Option<String>,
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn qty(v: &Value) -> String {
    v.as_i64()
        .map(super::thousands)
        .unwrap_or_else(|| "–".into())
}

fn readers_only(s: &Session) -> Result<(), PageError> {
    if s.actor.role == Role::TenantAdmin {
        return Err(ApiError::Forbidden(
            "reconciliation with the providers is for finance, auditors and platform admins".into(),
        )
        .into());
    }
    Ok(())
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(q): Query<PeriodQuery>,
) -> Result<Html<String>, PageError> {
    readers_only(&s)?;
    let period = q.period.filter(|p| !p.is_empty()).unwrap_or_else(|| {
        cp.clock
            .month_of_unix_ms(chrono::Utc::now().timestamp_millis())
    });
    let is_finance = s.actor.role == Role::Finance;
    let is_month = period.len() == 7
        && chrono::NaiveDate::parse_from_str(&format!("{period}-01"), "%Y-%m-%d").is_ok();
    if !is_month {
        return render(ReconPage {
            c: Chrome::new(&s, "nav.reconciliation", "/console/reconciliation"),
            period: period.clone(),
            accounts: vec![],
            unreconciled: vec![],
            days: vec![],
            adjustments: vec![],
            is_finance,
            is_platform_admin: s.actor.is_platform_admin(),
            bad_period: Some(period),
        });
    }
    let rec = api::reconciliation(&cp, &period).await?;
    let arr = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let accounts = arr(&rec["accounts"])
        .iter()
        .map(|a| AccountLine {
            id: text(&a["id"]),
            kind: text(&a["kind"]),
            url: text(&a["api_base_url"]),
            links: arr(&a["deployments"])
                .iter()
                // In the form's syntax: `model/deployment provider-id`.
                .map(|l| {
                    format!(
                        "{}/{} {}",
                        text(&l["model"]),
                        text(&l["deployment"]),
                        text(&l["provider_ref"])
                    )
                })
                .collect(),
            drift: format!("{} %", text(&a["drift_alert_pct"])),
        })
        .collect();
    let unreconciled = arr(&rec["not_reconciled"])
        .iter()
        .map(|x| format!("{}/{}", text(&x["model"]), text(&x["deployment"])))
        .collect();
    let days = arr(&rec["days"])
        .iter()
        .map(|d| {
            let diffs: Vec<DiffLine> = arr(&d["lines"])
                .iter()
                .filter(|l| l["finding"] != "match")
                .map(|l| DiffLine {
                    model: text(&l["model"]),
                    class: text(&l["class"]),
                    tollgate_qty: qty(&l["tollgate_quantity"]),
                    provider_qty: qty(&l["provider_quantity"]),
                    diff_qty: qty(&l["difference_quantity"]),
                    tollgate_usd: format!("${}", text(&l["tollgate_usd"])),
                    provider_usd: format!("${}", text(&l["provider_usd"])),
                    diff_usd: format!("${}", text(&l["difference_usd"])),
                    finding: text(&l["finding"]),
                })
                .collect();
            let mut models: Vec<String> = diffs.iter().map(|l| l.model.clone()).collect();
            models.dedup();
            DayLine {
                account: text(&d["account"]),
                day: text(&d["day"]),
                tollgate: format!("${}", text(&d["tollgate_usd"])),
                provider: format!("${}", text(&d["provider_usd"])),
                difference: format!("${}", text(&d["difference_usd"])),
                drift: format!("{} %", text(&d["drift_pct"])),
                is_final: d["final"].as_bool().unwrap_or(false),
                revisions: d["revisions"].as_i64().unwrap_or(0),
                diffs,
                models,
            }
        })
        .collect();
    let rows = cp.store.adjustments(&period).await?;
    let mut adjustments = Vec::with_capacity(rows.len());
    for a in &rows {
        let (can_decide, refusal) = if a.state == "proposed" && is_finance {
            match api::may_decide(&cp, &s.actor, a.proposed_by).await? {
                Ok(()) => (true, ""),
                Err(r) => (false, crate::web::error::refusal_key(r)),
            }
        } else {
            (false, "")
        };
        let v = api::render_adjustment(a);
        adjustments.push(AdjLine {
            id: a.id.to_string(),
            account: a.account_id.clone(),
            day: a.day.to_string(),
            model: a.model.clone(),
            amount: format!("${}", text(&v["amount_usd"])),
            allocation: a.allocation.clone(),
            reason: super::clipped(&a.reason, domain::text::REASON),
            state: a.state.clone(),
            shares: arr(&v["shares"])
                .iter()
                .map(|sh| {
                    let who = if sh["unallocated"] == true {
                        s.lang.t("recon.unallocated").to_string()
                    } else {
                        text(&sh["tenant_id"])
                    };
                    format!("{who}: ${}", text(&sh["amount_usd"]))
                })
                .collect(),
            can_decide,
            refusal,
        });
    }
    render(ReconPage {
        c: Chrome::new(&s, "nav.reconciliation", "/console/reconciliation"),
        period,
        accounts,
        unreconciled,
        days,
        adjustments,
        is_finance,
        is_platform_admin: s.actor.is_platform_admin(),
        bad_period: None,
    })
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ProposeForm {
    account: String,
    day: String,
    model: String,
    reason: String,
    allocation: String,
    amount_usd: String,
    period: String,
}

fn back(period: &str) -> Response {
    let p: String = period
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == '-')
        .take(7)
        .collect();
    Redirect::to(&format!("/console/reconciliation?period={p}")).into_response()
}

pub async fn propose(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Form(f): Form<ProposeForm>,
) -> Result<Response, PageError> {
    let day = chrono::NaiveDate::parse_from_str(f.day.trim(), "%Y-%m-%d")
        .map_err(|_| ApiError::field("day", "err.required"))?;
    let a = AdjustmentIn {
        account: f.account,
        day,
        model: f.model,
        amount_usd: Some(f.amount_usd.trim().to_string()).filter(|x| !x.is_empty()),
        allocation: Some(f.allocation).filter(|x| !x.is_empty()),
        reason: f.reason,
    };
    api::propose_adjustment(&cp, &s.actor, a).await?;
    Ok(back(&f.period))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct DecisionForm {
    note: String,
    period: String,
}

pub async fn approve(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<Uuid>,
    Form(f): Form<DecisionForm>,
) -> Result<Response, PageError> {
    api::decide_adjustment(&cp, &s.actor, id, true, &f.note).await?;
    Ok(back(&f.period))
}

pub async fn reject(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<Uuid>,
    Form(f): Form<DecisionForm>,
) -> Result<Response, PageError> {
    api::decide_adjustment(&cp, &s.actor, id, false, &f.note).await?;
    Ok(back(&f.period))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct AccountForm {
    id: String,
    kind: String,
    api_base_url: String,
    admin_key: String,
    drift_alert_pct: String,
    /// One link a line: `model/deployment provider-id` (no `/`: the
    /// model's own upstream, `default`).
    deployments: String,
}

impl AccountForm {
    fn parse(self) -> Result<(String, api::AccountIn), ApiError> {
        let drift_alert_pct =
            match self.drift_alert_pct.trim() {
                "" => None,
                p => Some(p.parse::<f64>().map_err(|_| {
                    ApiError::invalid("drift_alert_pct", "a percentage from 0 to 100")
                })?),
            };
        let mut links = Vec::new();
        for line in self.deployments.lines().filter(|l| !l.trim().is_empty()) {
            let mut parts = line.split_whitespace();
            let (Some(md), Some(r), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(ApiError::invalid(
                    "deployments",
                    "one deployment a line: model/deployment provider-id",
                ));
            };
            let (model, deployment) = md.split_once('/').unwrap_or((md, "default"));
            links.push(store::AccountLink {
                model: model.to_string(),
                deployment: deployment.to_string(),
                provider_ref: r.to_string(),
            });
        }
        let id = self.id.trim().to_string();
        Ok((
            id,
            api::AccountIn {
                kind: self.kind,
                api_base_url: self.api_base_url.trim().to_string(),
                admin_key: Some(self.admin_key).filter(|k| !k.is_empty()),
                drift_alert_pct,
                deployments: links,
            },
        ))
    }
}

/// A platform admin adds or changes a provider account (as the API's PUT).
pub async fn put_account(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Form(f): Form<AccountForm>,
) -> Result<Response, PageError> {
    let (id, a) = f.parse()?;
    api::put_provider_account(&cp, &s.actor, id, a).await?;
    Ok(Redirect::to("/console/reconciliation").into_response())
}
