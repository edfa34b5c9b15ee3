//! How capacity is shared around admission (docs/design.md §5, §7): degrade past the
//! daily soft limit, the model pool's concurrent slots with guarantees, and
//! the early refusal when a tenant's queue is full. The fair queue wait and
//! the borrow-and-retry are steps of `admission::get_quota`.

use crate::catalog::ModelEntry;
use crate::errors::ApiError;
use crate::key_index::KeyEntry;
use crate::Gateway;
use domain::reason::ReasonCode;
use quota::SlotOutcome;
use std::sync::Arc;
use std::time::Duration;

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

/// A model-pool slot, or none needed (the model has no pool).
pub(crate) enum Slot {
    Free(Option<ModelSlot>),
    /// The pool is full: wait in the tenant's queue.
    Full,
}

/// `attempt` numbers the slot ids of one request: a slot given back after a
/// failed attempt is released asynchronously and must not be mistaken for
/// the next attempt's.
pub(crate) async fn take_slot(
    gw: &Arc<Gateway>,
    key: &KeyEntry,
    model: &ModelEntry,
    request_id: &str,
    attempt: u32,
) -> Result<Slot, ApiError> {
    let Some(capacity) = model.pool_capacity else {
        return Ok(Slot::Free(None));
    };
    let slot_id = format!("{request_id}.{attempt}");
    let acquire = gw.quota.model_acquire(
        &model.id,
        &key.tenant.id,
        &slot_id,
        capacity,
        gw.cfg.fair.slot_lifetime.as_millis() as u64,
        &model.guarantees,
    );
    // Boxed: only pooled models wait on Redis here.
    let out = Box::pin(acquire).await.map_err(|e| {
        tracing::warn!(error = %e, "model slot: failing closed");
        ApiError::store_down()
    })?;
    match out {
        SlotOutcome::Taken => Ok(Slot::Free(Some(ModelSlot {
            gw: gw.clone(),
            model: model.id.clone(),
            tenant: key.tenant.id.clone(),
            request_id: slot_id,
            used: false,
        }))),
        SlotOutcome::Full { inflight, reserved } => {
            tracing::debug!(model = %model.id, inflight, reserved, "model pool full");
            Ok(Slot::Full)
        }
    }
}

pub(crate) fn queue_full(why: &str, depth: usize) -> ApiError {
    let msg =
        format!("{why}: and this tenant already has {depth} requests waiting on this replica");
    ApiError::new(ReasonCode::TenantQueueFull, msg).retry_after(Some(1))
}

/// Refuses a request at once, before its body is parsed or tokenized, when
/// its tenant's queue on this replica is full: it could only wait behind
/// that queue. A flooding tenant's refusals then cost little of the CPU the
/// other tenants' requests need.
pub fn refuse_if_queue_full(gw: &Gateway, key: &KeyEntry) -> Result<(), ApiError> {
    match gw
        .queue
        .full_for(&key.tenant.id, key.tenant.max_queued_requests)
    {
        Some(full) => Err(queue_full("the tenant's queue is full", full.depth)),
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
) -> Result<Option<Degrade>, ApiError> {
    let Some(soft) = key.tenant.limits.daily_cost_soft_usd else {
        return Ok(None);
    };
    let day = gw.cfg.clock.day(gw.now());
    let spent = gw
        .day_costs
        .current(&key.tenant.id, &day)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "day cost: failing closed");
            ApiError::store_down()
        })?;
    if spent < soft.0 {
        return Ok(None);
    }
    Ok(Some(Degrade {
        model: cheaper_model(gw, key, model),
        max_output: gw.cfg.fair.degrade_max_output_tokens,
    }))
}

/// The model to serve instead of `model` when a budget that names it
/// refused the request (`reason`): the model's cheaper one, when it names
/// one the key may use (docs/limits.md, "When a model's budget is spent").
pub fn budget_fallback(
    gw: &Gateway,
    key: &KeyEntry,
    model: &ModelEntry,
    reason: ReasonCode,
) -> Option<Arc<ModelEntry>> {
    match reason {
        ReasonCode::Budget {
            model_scoped: true, ..
        } => cheaper_model(gw, key, model),
        _ => None,
    }
}

/// The cheaper model `model` names (`degrade_to`), when the key may use it
/// and it serves the same kind of request: where a degrade goes.
fn cheaper_model(gw: &Gateway, key: &KeyEntry, model: &ModelEntry) -> Option<Arc<ModelEntry>> {
    model
        .degrade_to
        .as_ref()
        .filter(|m| key.may_use(m))
        .and_then(|m| gw.catalog.get().models.get(m).cloned())
        .filter(|m| m.kind == model.kind)
}

/// After a settle of a tenant with a daily soft limit: its cost counts
/// toward its day at once on this replica, and in Redis soon
/// (`day_cost::DayCosts`).
pub fn count_day_cost(gw: &Gateway, key: &KeyEntry, day: &str, cost: i64) {
    if key.tenant.limits.daily_cost_soft_usd.is_some() {
        gw.day_costs.add(&key.tenant.id, day, cost);
    }
}
