//! Borrowing (docs/design.md §7, §10): the shared pool, what each tenant has
//! borrowed and still owes, the month's borrows and the reclaims that took
//! quota back. Read-only; the pool is set with `PUT /api/v1/pool`.

use super::thousands;
use crate::api::pool as svc;
use crate::web::{render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Query, State};
use axum::response::Html;
use domain::borrowing::ppm_share;
use domain::MicroUsd;
use serde::Deserialize;
use std::sync::Arc;

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
    pool: PoolLine,
    owed: Vec<OwedLine>,
    borrows: Vec<BorrowLine>,
    reclaims: Vec<ReclaimLine>,
}

#[derive(Deserialize)]
pub struct Q {
    period: Option<String>,
}

fn pct(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(q): Query<Q>,
) -> Result<Html<String>, PageError> {
    let v = svc::pool_view(&cp, &s.actor, q.period).await?;
    let (_, borrows, reclaims) = svc::history(&cp, &s.actor, Some(v.period.clone())).await?;
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
    let time = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    render(BorrowingPage {
        c: Chrome::new(&s, "nav.borrowing", "/console/borrowing"),
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
