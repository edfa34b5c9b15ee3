//! The decision writer: every refused request whose key was known, every
//! degraded one, and every one that waited in the fair queue before it was
//! admitted (decision `queued`), recorded for the request lookup (docs/design.md §10) and the
//! bills' "refused by reason". Same shape as the ledger writer: a bounded
//! queue drained in batches by one task. It never blocks or fails the
//! request path: a full queue drops the record and counts it in
//! `tollgate_decisions_dropped_total`; a failed insert is retried a few
//! times, then dropped and counted (these records are diagnostics, not
//! money: the ledger is the system of record).

use crate::errors::ApiError;
use crate::key_index::KeyEntry;
use crate::key_index::RefusedKey;
use crate::metrics_names as m;
use chrono::{DateTime, Utc};
use domain::attribution::Attribution;
use domain::limits::{LimitKind, ScopeKind};
use domain::period::PlatformClock;
use domain::ReasonCode;
use serde_json::{json, Value};
use std::time::Duration;
use store::{RequestDecisionRow, Store};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

enum Msg {
    Row(Box<RequestDecisionRow>),
    Flush(oneshot::Sender<()>),
}

#[derive(Clone)]
pub struct DecisionWriter {
    tx: mpsc::Sender<Msg>,
    clock: PlatformClock,
}

const QUEUE: usize = 20_000;
const BATCH: usize = 500;
const LINGER: Duration = Duration::from_millis(200);

impl DecisionWriter {
    pub fn start(store: Store, clock: PlatformClock) -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let task = tokio::spawn(run(rx, store));
        (Self { tx, clock }, task)
    }

    /// Records a refusal of a request whose key was known, with its tags
    /// and end user as far as they were read. A refusal is booked at the
    /// time its request was `received` (the time in its id), so the request
    /// log, ordered by id, is ordered by time as well.
    pub fn refused(
        &self,
        e: &ApiError,
        received: DateTime<Utc>,
        key: &KeyEntry,
        model: &str,
        attribution: &Attribution,
    ) {
        let mut detail = e.counters.as_deref().cloned().unwrap_or_else(|| json!({}));
        if let ReasonCode::Limit(scope, limit) = e.reason {
            if let Some(v) = limit_value(&self.clock, key, scope, limit) {
                detail["limit_value"] = v;
            }
        }
        if let Some(s) = e.retry_after_secs {
            detail["retry_after_secs"] = json!(s);
        }
        let row = self.row(
            received,
            &e.request_id,
            key,
            model,
            "refused",
            e.reason,
            e.http_status() as i16,
            detail,
            attribution,
        );
        self.submit(row);
    }

    /// Records the 401 of a key that exists but was revoked or has expired
    /// (before any body was read: no model, no tags).
    pub fn refused_key(&self, e: &ApiError, received: DateTime<Utc>, k: &RefusedKey) {
        let row = self.stamped(
            received,
            &e.request_id,
            [&k.tenant_id, &k.app_id, &k.key_id],
            "",
            "refused",
            e.reason.as_str(),
            e.http_status() as i16,
            None,
            json!({"key_state": k.state.as_str()}),
            &Attribution::default(),
        );
        self.submit(row);
    }

    /// Records a request that went through changed (clamped max_tokens).
    pub fn degraded(
        &self,
        request_id: &str,
        key: &KeyEntry,
        model: &str,
        reason: ReasonCode,
        detail: Value,
        attribution: &Attribution,
    ) {
        let row = self.row(
            Utc::now(),
            request_id,
            key,
            model,
            "degraded",
            reason,
            200,
            detail,
            attribution,
        );
        self.submit(row);
    }

    /// Records a request admitted after waiting in the fair queue: `why` is
    /// what it waited for (the reason code of the limit that was full, or
    /// `model_pool_full`), `detail` carries `waited_ms`. Not a refusal:
    /// bills count `refused` rows only.
    pub fn queued(
        &self,
        request_id: &str,
        key: &KeyEntry,
        model: &str,
        why: &str,
        detail: Value,
        attribution: &Attribution,
    ) {
        let row = self.stamped(
            Utc::now(),
            request_id,
            [&key.tenant.id, &key.app.id, &key.id],
            model,
            "queued",
            why,
            200,
            None,
            detail,
            attribution,
        );
        self.submit(row);
    }

    /// Records a stream the gateway cut short (budget, quota store): the
    /// client saw a clean ending, the lookup says why.
    pub fn cut_off(
        &self,
        request_id: &str,
        key: &KeyEntry,
        model: &str,
        reason: ReasonCode,
        detail: Value,
        attribution: &Attribution,
    ) {
        let mut detail = detail;
        detail["cut_off"] = json!(true);
        self.degraded(request_id, key, model, reason, detail, attribution);
    }

    #[allow(clippy::too_many_arguments)]
    fn row(
        &self,
        at: DateTime<Utc>,
        request_id: &str,
        key: &KeyEntry,
        model: &str,
        decision: &str,
        reason: ReasonCode,
        status: i16,
        detail: Value,
        attribution: &Attribution,
    ) -> RequestDecisionRow {
        let scope = match reason {
            ReasonCode::Limit(s, _) => Some(scope_label(key, s)),
            _ => None,
        };
        self.stamped(
            at,
            request_id,
            [&key.tenant.id, &key.app.id, &key.id],
            model,
            decision,
            reason.as_str(),
            status,
            scope,
            detail,
            attribution,
        )
    }

    /// A decision row of (tenant, app, key) at `at`, dated in platform time.
    #[allow(clippy::too_many_arguments)]
    fn stamped(
        &self,
        now: DateTime<Utc>,
        request_id: &str,
        [tenant, app, key]: [&str; 3],
        model: &str,
        decision: &str,
        reason: &str,
        status: i16,
        scope: Option<String>,
        detail: Value,
        attribution: &Attribution,
    ) -> RequestDecisionRow {
        RequestDecisionRow {
            request_id: request_id.to_string(),
            at: now,
            period: self.clock.month(now),
            day: domain::period::parse_day(&self.clock.day(now))
                .unwrap_or_else(|| now.date_naive()),
            tenant_id: tenant.to_string(),
            app_id: app.to_string(),
            key_id: key.to_string(),
            model: model.to_string(),
            decision: decision.to_string(),
            reason: reason.to_string(),
            status,
            scope,
            detail,
            attribution: attribution.clone(),
        }
    }

    fn submit(&self, row: RequestDecisionRow) {
        if self.tx.try_send(Msg::Row(Box::new(row))).is_err() {
            metrics::counter!(m::DECISIONS_DROPPED, "why" => "queue_full").increment(1);
        }
    }

    /// Waits until everything submitted before this call was written (or
    /// dropped).
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }
}

/// "tenant:t", "app:t/a", "key:<id>" — how the lookup names a scope.
fn scope_label(key: &KeyEntry, s: ScopeKind) -> String {
    match s {
        ScopeKind::Tenant => format!("tenant:{}", key.tenant.id),
        ScopeKind::App => format!("app:{}/{}", key.tenant.id, key.app.id),
        ScopeKind::Key => format!("key:{}", key.id),
        ScopeKind::EndUser => format!("end_user:{}/{}", key.tenant.id, key.app.id),
    }
}

/// The configured value of the limit that refused (grants included).
fn limit_value(
    clock: &domain::period::PlatformClock,
    key: &KeyEntry,
    s: ScopeKind,
    l: LimitKind,
) -> Option<Value> {
    let now = Utc::now();
    let limits = key.effective_limits(now, &clock.month(now));
    let lim = match s {
        ScopeKind::Tenant => &limits[0],
        ScopeKind::App => &limits[1],
        ScopeKind::Key => &limits[2],
        ScopeKind::EndUser => {
            let e = key.app.attribution.end_user_limits.as_ref()?;
            return match l {
                LimitKind::MonthlyTokens => e.monthly_tokens.map(|v| json!(v)),
                LimitKind::MonthlyCost => e.monthly_cost_usd.map(|v| json!(v)),
                LimitKind::Rpm => e.rpm.map(|v| json!(v)),
                LimitKind::EndUsersPerMinute => Some(json!(e.end_users_per_minute())),
                _ => None,
            };
        }
    };
    match l {
        LimitKind::MonthlyTokens => lim.monthly_tokens.map(|v| json!(v)),
        LimitKind::MonthlyCost => lim.monthly_cost_usd.map(|v| json!(v)),
        LimitKind::MaxInflight => lim.max_inflight.map(|v| json!(v)),
        LimitKind::Rpm => lim.rpm.map(|v| json!(v)),
        LimitKind::InputTpm => lim.input_tpm.map(|v| json!(v)),
        LimitKind::OutputTpm => lim.output_tpm.map(|v| json!(v)),
        LimitKind::EndUsersPerMinute => None,
        // The scope's budgets by period and model (the refusal's reason
        // names which).
        LimitKind::Budget => lim.budgets.as_ref().map(|b| json!(b)),
    }
}

async fn run(mut rx: mpsc::Receiver<Msg>, store: Store) {
    let mut rows: Vec<RequestDecisionRow> = Vec::with_capacity(BATCH);
    let mut waiters: Vec<oneshot::Sender<()>> = Vec::new();
    loop {
        let Some(first) = rx.recv().await else { break };
        let mut closed = false;
        push(first, &mut rows, &mut waiters);
        let deadline = tokio::time::Instant::now() + LINGER;
        while rows.len() < BATCH && waiters.is_empty() {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(msg)) => push(msg, &mut rows, &mut waiters),
                Ok(None) => {
                    closed = true;
                    break;
                }
                Err(_) => break,
            }
        }
        store_batch(&store, &mut rows).await;
        for w in waiters.drain(..) {
            let _ = w.send(());
        }
        if closed {
            break;
        }
    }
    store_batch(&store, &mut rows).await;
}

fn push(msg: Msg, rows: &mut Vec<RequestDecisionRow>, waiters: &mut Vec<oneshot::Sender<()>>) {
    match msg {
        Msg::Row(r) => rows.push(*r),
        Msg::Flush(w) => waiters.push(w),
    }
}

async fn store_batch(store: &Store, rows: &mut Vec<RequestDecisionRow>) {
    if rows.is_empty() {
        return;
    }
    for attempt in 0..3u32 {
        match store.insert_request_decisions(rows).await {
            Ok(n) => {
                metrics::counter!(m::DECISIONS_STORED).increment(n);
                rows.clear();
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, attempt, rows = rows.len(), "request decisions insert failed");
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
            }
        }
    }
    metrics::counter!(m::DECISIONS_DROPPED, "why" => "insert_failed").increment(rows.len() as u64);
    rows.clear();
}
