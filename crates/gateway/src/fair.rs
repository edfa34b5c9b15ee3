//! The fairness steps around admission (docs/design.md §5, §7): degrade past the
//! daily soft limit, the model pool's concurrent slots with guarantees, the
//! fair queue when a tenant's in-flight limit or a model pool is full, and
//! one retry after borrowing when the tenant's budget refused.

use crate::catalog::{KeyEntry, ModelEntry};
use crate::errors::ApiError;
use crate::metrics_names as m;
use crate::queue::{Blocked, Turn};
use crate::Gateway;
use domain::limits::{LimitKind, ScopeKind};
use domain::reason::ReasonCode;
use quota::SlotOutcome;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use store::TenantScope;

/// One upstream slot of a model pool, given back when dropped (with the
/// request that holds it).
pub struct ModelSlot {
    gw: Arc<Gateway>,
    model: String,
    tenant: String,
    request_id: String,
    /// Wake local waiters on release (not when admission failed right
    /// after taking it: nothing new is free then).
    used: bool,
}

impl ModelSlot {
    pub fn mark_used(&mut self) {
        self.used = true;
    }
}

impl Drop for ModelSlot {
    fn drop(&mut self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (gw, model, tenant, rid, used) = (
            self.gw.clone(),
            std::mem::take(&mut self.model),
            std::mem::take(&mut self.tenant),
            std::mem::take(&mut self.request_id),
            self.used,
        );
        rt.spawn(async move {
            for attempt in 0..20u32 {
                match gw.quota.model_release(&model, &tenant, &rid).await {
                    Ok(_) => break,
                    Err(e) => {
                        // The slot's lifetime frees it eventually.
                        tracing::warn!(model = %model, attempt, error = %e, "model slot release failed");
                        tokio::time::sleep(Duration::from_millis(50 << attempt.min(6))).await;
                    }
                }
            }
            if used {
                gw.queue.slot_freed();
            }
        });
    }
}

enum Attempt {
    Blocked(Blocked, ApiError),
    Refused(ApiError),
}

fn store_down(rid: &str) -> ApiError {
    ApiError::new(
        rid,
        ReasonCode::QuotaStoreUnavailable,
        "quota store unavailable; retry shortly",
    )
    .retry_after(Some(1))
}

/// `attempt` numbers the slot ids of one request: a slot given back after a
/// failed attempt is released asynchronously and must not be mistaken for
/// the next attempt's.
async fn take_slot(
    gw: &Arc<Gateway>,
    key: &KeyEntry,
    model: &ModelEntry,
    rid: &str,
    attempt: u32,
) -> Result<Option<ModelSlot>, Attempt> {
    let Some(capacity) = model.pool_capacity else {
        return Ok(None);
    };
    let slot_id = format!("{rid}.{attempt}");
    let out = gw
        .quota
        .model_acquire(
            &model.id,
            &key.tenant.id,
            &slot_id,
            capacity,
            gw.cfg.fair.slot_lifetime.as_millis() as u64,
            &model.guarantees,
        )
        .await
        .map_err(|e| {
            tracing::warn!(request_id = rid, error = %e, "model slot: failing closed");
            Attempt::Refused(store_down(rid))
        })?;
    match out {
        SlotOutcome::Taken => Ok(Some(ModelSlot {
            gw: gw.clone(),
            model: model.id.clone(),
            tenant: key.tenant.id.clone(),
            request_id: slot_id,
            used: false,
        })),
        SlotOutcome::Full { inflight, reserved } => {
            let msg = format!(
                "model {} is at its pool capacity ({inflight} in flight, {reserved} reserved for guarantees)",
                model.id
            );
            Err(Attempt::Blocked(
                Blocked::Model(model.id.clone()),
                ApiError::new(rid, ReasonCode::QueueTimeout, msg),
            ))
        }
    }
}

async fn try_once<A, Fut: Future<Output = Result<A, ApiError>>>(
    gw: &Arc<Gateway>,
    key: &KeyEntry,
    model: &ModelEntry,
    rid: &str,
    attempt: u32,
    admit: &mut impl FnMut() -> Fut,
) -> Result<(A, Option<ModelSlot>), Attempt> {
    let slot = take_slot(gw, key, model, rid, attempt).await?;
    match admit().await {
        Ok(a) => Ok((a, slot)),
        Err(e) if matches!(e.reason, ReasonCode::Limit(_, LimitKind::MaxInflight)) => {
            Err(Attempt::Blocked(Blocked::Tenant(key.tenant.id.clone()), e))
        }
        Err(e) => Err(Attempt::Refused(e)),
    }
}

fn budget_refusal(e: &ApiError) -> bool {
    matches!(
        e.reason,
        ReasonCode::Limit(
            ScopeKind::Tenant,
            LimitKind::MonthlyTokens | LimitKind::MonthlyCost
        )
    )
}

/// What fair admission adds to a plain admission.
pub struct Fairly<A> {
    pub admitted: A,
    pub slot: Option<ModelSlot>,
    /// How long the request waited in its queue, when it did.
    pub queued: Option<(Duration, &'static str)>,
}

/// Runs `admit` (the hold) fairly: takes a model-pool slot first when the
/// model has a pool; when the tenant's in-flight limit or the pool is full,
/// waits in the tenant's queue for a turn (503 `queue_timeout` after the
/// priority's maximum wait, 429 `tenant_queue_full` when the queue is
/// full); when the tenant's budget refuses and it may borrow, borrows and
/// retries once.
pub async fn admit_fairly<A, Fut: Future<Output = Result<A, ApiError>>>(
    gw: &Arc<Gateway>,
    key: &Arc<KeyEntry>,
    model: &ModelEntry,
    month: &str,
    rid: &str,
    mut admit: impl FnMut() -> Fut,
) -> Result<Fairly<A>, ApiError> {
    let mut place = None;
    let mut turn: Option<Turn> = None;
    let mut borrowed = false;
    let mut why: &'static str = "";
    let priority = key.tenant.priority;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (blocked, err) = match try_once(gw, key, model, rid, attempt, &mut admit).await {
            Ok((admitted, slot)) => {
                if let Some(t) = turn.take() {
                    t.admitted();
                }
                let queued = place.as_ref().map(|p: &crate::queue::Place| {
                    let w = p.waited();
                    metrics::histogram!(m::QUEUE_WAIT_SECONDS, "priority" => priority.as_str(), "outcome" => "admitted")
                        .record(w.as_secs_f64());
                    (w, why)
                });
                return Ok(Fairly {
                    admitted,
                    slot,
                    queued,
                });
            }
            Err(Attempt::Blocked(b, e)) => (b, e),
            Err(Attempt::Refused(e)) => {
                if !borrowed && budget_refusal(&e) && key.tenant.may_borrow {
                    borrowed = true;
                    if gw.borrower.borrow_for(key.tenant.clone(), month).await {
                        continue;
                    }
                }
                if place.is_some() {
                    metrics::histogram!(m::QUEUE_WAIT_SECONDS, "priority" => priority.as_str(), "outcome" => "refused")
                        .record(place.as_ref().map_or(0.0, |p: &crate::queue::Place| p.waited().as_secs_f64()));
                }
                return Err(e);
            }
        };
        why = match &blocked {
            Blocked::Tenant(_) => err.reason.as_str(),
            Blocked::Model(_) => "model_pool_full",
        };
        if let Some(t) = turn.take() {
            t.blocked(blocked);
        }
        if place.is_none() {
            match gw.queue.join(&key.tenant.id, priority, &model.id) {
                Ok(p) => place = Some(p),
                Err(full) => return Err(queue_full(rid, why, full.depth)),
            }
        }
        let p = place.as_mut().expect("joined above");
        match p.next_turn().await {
            Some(t) => turn = Some(t),
            None => {
                let waited = p.waited();
                metrics::histogram!(m::QUEUE_WAIT_SECONDS, "priority" => priority.as_str(), "outcome" => "timeout")
                    .record(waited.as_secs_f64());
                let msg = format!(
                    "waited {} ms in the {} queue ({why}); no slot freed in time",
                    waited.as_millis(),
                    priority.as_str()
                );
                return Err(ApiError::new(rid, ReasonCode::QueueTimeout, msg).retry_after(Some(1)));
            }
        }
    }
}

fn queue_full(rid: &str, why: &str, depth: usize) -> ApiError {
    let msg =
        format!("{why}: and this tenant already has {depth} requests waiting on this replica");
    ApiError::new(rid, ReasonCode::TenantQueueFull, msg).retry_after(Some(1))
}

/// Refuses a request at once, before its body is parsed or tokenized, when
/// its tenant's queue on this replica is full: it could only wait behind
/// that queue. A flooding tenant's refusals then cost little of the CPU the
/// other tenants' requests need.
pub fn refuse_if_queue_full(gw: &Gateway, key: &KeyEntry, rid: &str) -> Result<(), ApiError> {
    match gw.queue.full_for(&key.tenant.id) {
        Some(full) => Err(queue_full(rid, "the tenant's queue is full", full.depth)),
        None => Ok(()),
    }
}

/// A request past its tenant's daily soft limit: the model to use instead
/// (when the model names a cheaper one the key may use) and the output cap.
pub struct Degrade {
    pub model: Option<Arc<ModelEntry>>,
    pub max_output: Option<i64>,
}

/// Is the tenant past its daily cost soft limit (settled cost of today, in
/// platform time)? Then the request is degraded (docs/design.md §3, §5).
pub async fn degrade_step(
    gw: &Arc<Gateway>,
    key: &KeyEntry,
    model: &ModelEntry,
    rid: &str,
) -> Result<Option<Degrade>, ApiError> {
    let Some(soft) = key.tenant.limits.daily_cost_soft_usd else {
        return Ok(None);
    };
    let day = gw.cfg.clock.day(chrono::Utc::now());
    let spent = day_cost(gw, &key.tenant.id, &day).await.map_err(|e| {
        tracing::warn!(request_id = rid, error = %e, "day cost: failing closed");
        store_down(rid)
    })?;
    if spent < soft.0 {
        return Ok(None);
    }
    let cheaper = model
        .degrade_to
        .as_ref()
        .filter(|m| key.may_use(m))
        .and_then(|m| gw.catalog.get().models.get(m).cloned())
        .filter(|m| m.kind == model.kind);
    Ok(Some(Degrade {
        model: cheaper,
        max_output: gw.cfg.fair.degrade_max_output_tokens,
    }))
}

async fn day_cost(gw: &Gateway, tenant: &str, day: &str) -> Result<i64, String> {
    if let Some(c) = gw
        .quota
        .day_cost(tenant, day)
        .await
        .map_err(|e| e.to_string())?
    {
        return Ok(c);
    }
    let from_ledger = gw
        .store
        .tenant_day_cost(&TenantScope::system(), tenant, day)
        .await
        .map_err(|e| e.to_string())?;
    gw.quota
        .day_cost_rebuild(tenant, day, from_ledger)
        .await
        .map(|(_, cost)| cost)
        .map_err(|e| e.to_string())
}

/// After a settle of a tenant with a daily soft limit: count its cost in
/// the day. A day without a counter starts from the ledger plus this event
/// (which reaches the ledger only after this call).
pub async fn count_day_cost(gw: &Gateway, key: &KeyEntry, day: &str, cost: i64) {
    if key.tenant.limits.daily_cost_soft_usd.is_none() || cost <= 0 {
        return;
    }
    let t = &key.tenant.id;
    let r = async {
        if gw
            .quota
            .day_cost_add(t, day, cost)
            .await
            .map_err(|e| e.to_string())?
        {
            return Ok(());
        }
        let ledger = gw
            .store
            .tenant_day_cost(&TenantScope::system(), t, day)
            .await
            .map_err(|e| e.to_string())?;
        let (started, _) = gw
            .quota
            .day_cost_rebuild(t, day, ledger + cost)
            .await
            .map_err(|e| e.to_string())?;
        if !started {
            gw.quota
                .day_cost_add(t, day, cost)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    }
    .await;
    if let Err(e) = r {
        tracing::warn!(tenant = %t, error = %e, "day cost not counted");
    }
}
