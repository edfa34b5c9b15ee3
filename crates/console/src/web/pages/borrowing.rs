//! Borrowing (docs/design.md §7, §10): the shared pool, what each tenant has
//! borrowed and still owes, the month's borrows and the reclaims that took
//! quota back. Platform admins set the pool here (the service
//! `PUT /api/v1/pool` calls).

use super::{form_error, int, percent, thousands, usd, FieldError};
use crate::api::pool as svc;
use crate::error::ApiError;
use crate::web::{render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use domain::borrowing::{ppm_share, PoolPolicy};
use domain::MicroUsd;
use serde::Deserialize;
use std::sync::Arc;

/// The pool form as typed: sizes (empty: no pool / no cost cap) and the
/// two shares in percent.
#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct PoolForm {
    pub monthly_tokens: String,
    pub monthly_cost_usd: String,
    pub max_borrow_share: String,
    pub reclaim_below_share: String,
}

/// A share of 1 in percent, as a form shows it ("5", "12.5").
fn pct_field(ppm: i64) -> String {
    let s = format!("{:.4}", ppm_share(ppm) * 100.0);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

impl PoolForm {
    fn of(p: &PoolPolicy) -> PoolForm {
        PoolForm {
            monthly_tokens: p.monthly_tokens.map(|t| t.to_string()).unwrap_or_default(),
            monthly_cost_usd: p
                .monthly_cost_micro
                .map(|c| MicroUsd(c).shown())
                .unwrap_or_default(),
            max_borrow_share: pct_field(p.max_borrow_share_ppm),
            reclaim_below_share: pct_field(p.reclaim_below_share_ppm),
        }
    }

    /// The service's input, or every field that does not parse.
    fn parse(&self) -> Result<svc::PoolIn, Vec<ApiError>> {
        let tokens = int("monthly_tokens", &self.monthly_tokens);
        let cost = usd("monthly_cost_usd", &self.monthly_cost_usd);
        let share = |f: &'static str, v: &str| {
            percent(f, v).and_then(|p| p.ok_or(ApiError::field(f, "err.required")))
        };
        let borrow = share("max_borrow_share", &self.max_borrow_share);
        let reclaim = share("reclaim_below_share", &self.reclaim_below_share);
        match (tokens, cost, borrow, reclaim) {
            (Ok(t), Ok(c), Ok(b), Ok(r)) => Ok(svc::PoolIn {
                monthly_tokens: t,
                monthly_cost_usd: c,
                max_borrow_share: b,
                reclaim_below_share: r,
            }),
            (t, c, b, r) => Err([t.err(), c.err(), b.err(), r.err()]
                .into_iter()
                .flatten()
                .collect()),
        }
    }
}

pub struct PoolLine {
    pub period: String,
    pub tokens: String,
    pub cost: String,
    pub lent: String,
    pub free: String,
    pub outstanding: String,
    pub max_borrow_share: String,
    pub reclaim_below_share: String,
    /// Share of the pool lent, 0–100.
    pub pct: i64,
}

pub struct OwedLine {
    pub tenant: String,
    pub tokens: String,
    pub cost: String,
}

pub struct BorrowLine {
    pub at: String,
    pub tenant: String,
    pub state: String,
    pub tokens: String,
    pub outstanding: String,
    pub cost: String,
    pub trigger: String,
}

pub struct ReclaimLine {
    pub at: String,
    pub tenant: String,
    pub tokens: String,
    pub cost: String,
    pub state: String,
    pub reason: String,
}

#[derive(Template)]
#[template(path = "pages/borrowing.html")]
struct BorrowingPage {
    c: Chrome,
    /// Platform admins set the pool.
    can_edit: bool,
    form: PoolForm,
    errors: FieldError,
    saved: bool,
    pool: PoolLine,
    owed: Vec<OwedLine>,
    borrows: Vec<BorrowLine>,
    reclaims: Vec<ReclaimLine>,
}

#[derive(Deserialize, Default)]
pub struct Q {
    period: Option<String>,
    #[serde(default)]
    saved: bool,
}

fn pct(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(q): Query<Q>,
) -> Result<Html<String>, PageError> {
    render(page(&cp, &s, q, None).await?)
}

/// Sets the pool (platform admins); every field in error is shown beside
/// it, with what was typed.
pub async fn set_pool(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Form(f): Form<PoolForm>,
) -> Result<Response, PageError> {
    crate::api::require_platform_admin(&s.actor)?;
    let result = match f.parse() {
        Ok(p) => {
            let more = svc::pool_problems(&p);
            svc::set_pool(&cp, &s.actor, p).await.map_err(|e| (e, more))
        }
        Err(mut errs) => {
            let first = errs.remove(0);
            Err((first, errs))
        }
    };
    match result {
        Ok(_) => Ok(Redirect::to("/console/borrowing?saved=true").into_response()),
        Err((e, more)) => {
            let errors = form_error(e)?.and(more);
            let p = page(&cp, &s, Q::default(), Some((f, errors))).await?;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, render(p)?).into_response())
        }
    }
}

async fn page(
    cp: &ControlPlane,
    s: &Session,
    q: Q,
    refused: Option<(PoolForm, FieldError)>,
) -> Result<BorrowingPage, PageError> {
    let v = svc::pool_view(cp, &s.actor, q.period).await?;
    let (_, borrows, reclaims) = svc::history(cp, &s.actor, Some(v.period.clone())).await?;
    let p = &v.policy;
    let total = p.monthly_tokens.unwrap_or(0);
    let pool = PoolLine {
        period: v.period.clone(),
        tokens: p.monthly_tokens.map(thousands).unwrap_or_default(),
        cost: p
            .monthly_cost_micro
            .map(|c| MicroUsd(c).shown())
            .unwrap_or_default(),
        lent: thousands(v.lent_tokens),
        free: thousands((total - v.lent_tokens).max(0)),
        outstanding: thousands(v.outstanding_tokens),
        max_borrow_share: pct(ppm_share(p.max_borrow_share_ppm)),
        reclaim_below_share: pct(ppm_share(p.reclaim_below_share_ppm)),
        pct: if total > 0 {
            (v.lent_tokens * 100 / total).clamp(0, 100)
        } else {
            0
        },
    };
    let time = |t: chrono::DateTime<chrono::Utc>| super::when_secs(s.clock, t);
    let (form, errors) = refused.unwrap_or_else(|| (PoolForm::of(p), FieldError::default()));
    Ok(BorrowingPage {
        c: Chrome::new(s, "nav.borrowing", "/console/borrowing"),
        can_edit: s.actor.is_platform_admin(),
        form,
        errors,
        saved: q.saved,
        pool,
        owed: v
            .outstanding
            .iter()
            .map(|(t, tok, c)| OwedLine {
                tenant: t.clone(),
                tokens: thousands(*tok),
                cost: MicroUsd(*c).shown(),
            })
            .collect(),
        borrows: borrows
            .iter()
            .rev()
            .map(|b| BorrowLine {
                at: time(b.created_at),
                tenant: b.tenant_id.clone(),
                state: b.state.clone(),
                tokens: thousands(b.tokens),
                outstanding: thousands(b.outstanding_tokens),
                cost: MicroUsd(b.cost_micro).shown(),
                trigger: b.trigger.clone(),
            })
            .collect(),
        reclaims: reclaims
            .iter()
            .map(|r| ReclaimLine {
                at: time(r.at),
                tenant: r.tenant_id.clone(),
                tokens: thousands(r.tokens),
                cost: MicroUsd(r.cost_micro).shown(),
                state: r.state.clone(),
                reason: r.reason.clone(),
            })
            .collect(),
    })
}
