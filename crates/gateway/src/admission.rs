//! The one place that decides how a request reserves quota
//! (`gateway.admission`): the hold engine's hold / extend / settle / release,
//! per request or from this replica's leases (docs/design.md §4, "Leases — the fast
//! path", docs/leases.md). Same calls, same outcomes, either way.
//!
//! - `per_request`: one Lua hold and one Lua settle per request.
//! - `lease`: non-stream requests are admitted from a lease held by this
//!   replica and settled against it in batches; a scope near its limit, and
//!   every stream (held slice by slice as it flows, docs/design.md §6), take the
//!   per-request path.
//! - `off`: no enforcement at all, for the benchmark's ablation only; the
//!   server refuses it unless `gateway.bench_unenforced_ok` is also set.
//!
//! [`get_quota`] is a request's whole way to its quota, over the pure plan
//! `domain::admission`: a model-pool slot, the hold, one clamped retry when
//! a budget refuses and the tenant allows it, a wait in the tenant's fair
//! queue when an in-flight limit or the pool is full, and one borrow from
//! the shared pool when the tenant's own budget refused.

use crate::catalog::ModelEntry;
use crate::errors::ApiError;
use crate::key_index::KeyEntry;
use crate::metrics_names as m;
use crate::queue::{Blocked, Place, Turn};
use crate::settle::PendingHold;
use crate::sharing::{ModelSlot, Slot};
use crate::Gateway;
use domain::admission::{Ask, Next, Plan};
use domain::reason::{ReasonCode, Refusal};
use domain::request::{Endpoint, RequestSummary};
use quota::{
    EndUserScope, ExtendOutcome, ExtendRequest, HoldOutcome, HoldRequest, LeaseAdmit, LeaseBook,
    LeaseTuning, LedgerSource, QuotaEngine, QuotaError, SettleOutcome, SettleRequest,
};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionMode {
    Lease,
    PerRequest,
    /// Benchmark ablation: nothing is held, nothing enforced.
    Off,
}

impl AdmissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionMode::Lease => "lease",
            AdmissionMode::PerRequest => "per_request",
            AdmissionMode::Off => "off",
        }
    }
}

pub struct Admission {
    mode: AdmissionMode,
    quota: Arc<QuotaEngine>,
    leases: Option<Arc<LeaseBook>>,
    /// Registered once (first use): counted on every lease admission.
    lease_admissions: std::sync::OnceLock<metrics::Counter>,
}

impl Admission {
    pub fn new(mode: AdmissionMode, quota: Arc<QuotaEngine>, tuning: LeaseTuning) -> Self {
        let leases =
            (mode == AdmissionMode::Lease).then(|| LeaseBook::start(quota.clone(), tuning));
        if mode == AdmissionMode::Off {
            tracing::error!("gateway.admission = \"off\": NO BUDGET, RATE OR CONCURRENCY LIMIT IS ENFORCED (benchmark ablation only)");
        }
        Self {
            mode,
            quota,
            leases,
            lease_admissions: Default::default(),
        }
    }

    pub fn mode(&self) -> AdmissionMode {
        self.mode
    }

    /// The lease book, when leasing.
    pub fn leases(&self) -> Option<&Arc<LeaseBook>> {
        self.leases.as_ref()
    }

    pub async fn hold(
        &self,
        req: &HoldRequest<'_>,
        ledger: &impl LedgerSource,
        stream: bool,
    ) -> Result<HoldOutcome, QuotaError> {
        self.hold_with(req, None, ledger, stream).await
    }

    /// A hold with the end user's scope. A lease carries the tenant, app
    /// and key chain only, so a request whose app limits its end users is
    /// held per request even in `lease` mode (docs/leases.md).
    pub async fn hold_with(
        &self,
        req: &HoldRequest<'_>,
        end_user: Option<EndUserScope<'_>>,
        ledger: &impl LedgerSource,
        stream: bool,
    ) -> Result<HoldOutcome, QuotaError> {
        // A lease carries the monthly budgets and rates of the chain only:
        // a request some budget of `Limits::budgets` counts is held per
        // request, like a stream (docs/leases.md).
        let leasable = !stream && end_user.is_none() && req.budgets.is_empty();
        match (&self.leases, self.mode) {
            (_, AdmissionMode::Off) => {
                metrics::counter!(m::ADMISSIONS, "path" => "off").increment(1);
                return Ok(HoldOutcome::Admitted {
                    remaining_requests: None,
                    remaining_tokens: None,
                });
            }
            (Some(book), _) if leasable => {
                if let LeaseAdmit::Admitted {
                    remaining_requests,
                    remaining_tokens,
                } = book.admit(req, ledger).await?
                {
                    self.lease_admissions
                        .get_or_init(|| metrics::counter!(m::ADMISSIONS, "path" => "lease"))
                        .increment(1);
                    return Ok(HoldOutcome::Admitted {
                        remaining_requests,
                        remaining_tokens,
                    });
                }
            }
            _ => {}
        }
        // Boxed, like every Redis call off the lease path: the request's
        // future stays small (bench/results/2026-12-03-the-gateway-s-own-work.md).
        let out = Box::pin(self.quota.hold_with(req, end_user, ledger)).await;
        if let Ok(HoldOutcome::Admitted { .. }) = out {
            metrics::counter!(m::ADMISSIONS, "path" => "per_request").increment(1);
        }
        out
    }

    /// Streams are always held per request, so extends are too.
    pub async fn extend(
        &self,
        req: &ExtendRequest<'_>,
        end_user: Option<EndUserScope<'_>>,
    ) -> Result<ExtendOutcome, QuotaError> {
        if self.mode == AdmissionMode::Off {
            return Ok(ExtendOutcome::Extended {
                remaining_tokens: None,
            });
        }
        self.quota.extend_with(req, end_user).await
    }

    /// `end_user`: the request's end user, if any (its scope is booked
    /// when the hold took it).
    pub async fn settle(
        &self,
        req: &SettleRequest<'_>,
        end_user: Option<&str>,
    ) -> Result<SettleOutcome, QuotaError> {
        if self.mode == AdmissionMode::Off {
            return Ok(SettleOutcome::Settled {
                overrun_tokens: 0,
                overrun_cost: 0,
            });
        }
        if let Some(book) = &self.leases {
            if let Some(answer) = book.settle_request(req) {
                // The flusher answers once the batch is in Redis; it retries
                // a batch until Redis takes it, so it never fails. If it is
                // gone (runtime shutting down), the event may be in the
                // outbox: the sweeper stores it, never twice.
                return Ok(answer.await.unwrap_or(SettleOutcome::AlreadyClosed {
                    state: "lease_flusher_stopped".into(),
                }));
            }
        }
        self.quota.settle_with(req, end_user).await
    }

    /// Was this request admitted from a lease (and not settled yet)?
    pub fn leased(&self, request_id: &str) -> bool {
        self.leases.as_ref().is_some_and(|b| b.admitted(request_id))
    }

    /// Settles a lease-admitted request at its `billable` amounts
    /// (`SettleRequest::billable`); `done` finishes it in the lease's
    /// flusher once its batch is in Redis — no task of its own. False when
    /// the request was not admitted from a lease (ask [`Self::leased`]).
    pub fn settle_leased(
        &self,
        request_id: &str,
        billable: (i64, i64, i64),
        event_json: String,
        done: quota::SettleDone,
    ) -> bool {
        let Some(book) = &self.leases else {
            return false;
        };
        let (input, output, cost) = billable;
        let actual = domain::lease::Need {
            input,
            output,
            cost,
        };
        book.settle_with(request_id, actual, event_json, done)
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn release(
        &self,
        tenant: &str,
        app: &str,
        key: &str,
        month: &str,
        request_id: &str,
        limits: [&domain::Limits; 3],
        end_user: Option<&str>,
    ) -> Result<bool, QuotaError> {
        if self.mode == AdmissionMode::Off {
            return Ok(true);
        }
        if let Some(book) = &self.leases {
            if book.release(request_id) {
                return Ok(true);
            }
        }
        self.quota
            .release_with(tenant, app, key, month, request_id, limits, end_user)
            .await
    }

    /// Returns this replica's leases (graceful shutdown).
    pub async fn shutdown(&self, patience: Duration) {
        if let Some(book) = &self.leases {
            book.shutdown(patience).await;
        }
    }
}

/// What a request asks the hold engine for.
#[derive(Clone, Copy)]
pub(crate) struct Want<'a> {
    pub endpoint: Endpoint,
    pub summary: &'a RequestSummary,
    pub est_in: i64,
    /// Output held now (a stream's first slice, else everything allowed).
    pub est_out: i64,
    /// Output cap per choice sent to the provider.
    pub per_choice: i64,
    /// The request's end user (a fourth scope when its app limits them).
    pub end_user: Option<&'a str>,
    /// What its tokens are held at: the dearest prices it can reach
    /// (`extras::hold_price`).
    pub price: domain::pricing::Price,
    /// Its hosted tools' fees, µUSD, held on top.
    pub fees: i64,
}

/// A request with its quota.
pub(crate) struct Admitted {
    /// Output held.
    pub est_out: i64,
    /// Output cap per choice to send the provider.
    pub provider_cap: i64,
    /// Clamped to what the budget still covers (decision `degrade`).
    pub degraded: bool,
    pub remaining_requests: Option<i64>,
    pub remaining_tokens: Option<i64>,
    pub slot: Option<ModelSlot>,
    /// How long the request waited in its queue and why, when it did.
    pub queued: Option<(Duration, &'static str)>,
}

/// What one hold (with its clamped retry) came to.
enum Held {
    Admitted {
        est_out: i64,
        provider_cap: i64,
        degraded: bool,
        remaining_requests: Option<i64>,
        remaining_tokens: Option<i64>,
    },
    /// The first hold's refusal (a clamped retry that failed changes
    /// nothing the client is told).
    Refused(Refusal),
}

/// Gets the request its quota, end to end: takes a model-pool slot first
/// when the model has a pool; holds (and, when a budget refuses a request
/// the tenant lets through clamped, holds again with the output the budget
/// still covers); when the tenant's in-flight limit or the pool is full,
/// waits in the tenant's queue for a turn (503 `queue_timeout` after the
/// priority's maximum wait, 429 `tenant_queue_full` when the queue is
/// full); when the tenant's budget refuses and it may borrow, borrows and
/// tries once more.
pub(crate) async fn get_quota(
    gw: &Arc<Gateway>,
    key: &Arc<KeyEntry>,
    model: &ModelEntry,
    month: &str,
    request_id: &str,
    want: Want<'_>,
) -> Result<Admitted, ApiError> {
    let mut plan = Plan::new(Ask {
        est_in: want.est_in,
        per_choice: want.per_choice,
        choices: want.summary.choices,
        may_clamp: key.tenant.clamp_max_tokens
            && !want.summary.stream
            && want.endpoint != Endpoint::Embeddings,
        may_borrow: key.tenant.may_borrow,
        min_clamped_per_choice: gw.cfg.min_clamped_output_tokens,
    });
    let mut fair = FairWait::new(gw, key);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let slot = match crate::sharing::take_slot(gw, key, model, request_id, attempt).await {
            Ok(Slot::Free(slot)) => slot,
            Ok(Slot::Full) => {
                Box::pin(fair.wait(Blocked::Model(model.id.clone()), "model_pool_full", model))
                    .await?;
                continue;
            }
            Err(e) => return Err(fair.refused(e)),
        };
        let refusal = match hold_or_clamp(gw, key, model, month, request_id, &want, &plan).await {
            Ok(Held::Admitted {
                est_out,
                provider_cap,
                degraded,
                remaining_requests,
                remaining_tokens,
            }) => {
                return Ok(Admitted {
                    est_out,
                    provider_cap,
                    degraded,
                    remaining_requests,
                    remaining_tokens,
                    slot,
                    queued: fair.admitted(),
                })
            }
            Ok(Held::Refused(r)) => r,
            Err(e) => return Err(fair.refused(e)),
        };
        // The slot goes back before the request waits or borrows.
        drop(slot);
        match plan.after_refusal(&refusal) {
            Next::Wait => {
                let why = refusal.reason().as_str();
                Box::pin(fair.wait(Blocked::Tenant(key.tenant.id.clone()), why, model)).await?;
            }
            // Lent something: the next attempt holds against the raised limit.
            Next::Borrow if Box::pin(gw.borrower.borrow_for(key.tenant.clone(), month)).await => {}
            Next::Borrow | Next::Refuse => {
                return Err(fair.refused(refused(gw, key, model, &refusal, &want)))
            }
        }
    }
}

/// A request that asks for no tokens (a `count_tokens` call) still takes
/// its place in every rate that applies: one hold of nothing — RPM and
/// in-flight of tenant, app and key checked and taken, all or nothing —
/// released at once. Never queued, never borrows, never clamps; a refusal
/// is the hold's own (429 `key_rpm_exceeded`, …), a quota store down 503.
pub(crate) async fn take_request_rates(
    gw: &Arc<Gateway>,
    key: &Arc<KeyEntry>,
    model: &ModelEntry,
    month: &str,
    request_id: &str,
    summary: &RequestSummary,
) -> Result<(), ApiError> {
    let want = Want {
        endpoint: Endpoint::ChatCompletions,
        summary,
        est_in: 0,
        est_out: 0,
        per_choice: 0,
        end_user: None,
        price: model.price,
        fees: 0,
    };
    match hold(gw, key, model, month, request_id, &want, 0).await? {
        HoldOutcome::Admitted { .. } => {
            // Its own task: a client gone meanwhile leaves no hold open.
            tokio::spawn(crate::settle::release_hold(
                gw.clone(),
                key.clone(),
                month.to_string(),
                request_id.to_string(),
                None,
            ));
            Ok(())
        }
        HoldOutcome::Refused(r) => Err(refused(gw, key, model, &r, &want)),
        HoldOutcome::Duplicate { .. } => Err(ApiError::new(
            ReasonCode::QuotaStoreUnavailable,
            "duplicate request id",
        )
        .retry_after(Some(1))),
    }
}

/// The hold, and when a budget refuses it and the plan allows, the hold
/// again with the output clamped (the refused hold recorded nothing: the
/// same id can hold again).
async fn hold_or_clamp(
    gw: &Arc<Gateway>,
    key: &Arc<KeyEntry>,
    model: &ModelEntry,
    month: &str,
    request_id: &str,
    want: &Want<'_>,
    plan: &Plan,
) -> Result<Held, ApiError> {
    let hold_out = |est_out| hold(gw, key, model, month, request_id, want, est_out);
    let refusal = match hold_out(want.est_out).await? {
        HoldOutcome::Admitted {
            remaining_requests,
            remaining_tokens,
        } => {
            return Ok(Held::Admitted {
                est_out: want.est_out,
                provider_cap: want.per_choice,
                degraded: false,
                remaining_requests,
                remaining_tokens,
            })
        }
        HoldOutcome::Refused(r) => r,
        // Request ids are minted per request: a duplicate means a bug.
        HoldOutcome::Duplicate { .. } => {
            return Err(
                ApiError::new(ReasonCode::QuotaStoreUnavailable, "duplicate request id")
                    .retry_after(Some(1)),
            )
        }
    };
    if let Some(per_choice) = plan.clamp(&refusal, &want.price) {
        let est_out = per_choice * want.summary.choices;
        if let HoldOutcome::Admitted {
            remaining_requests,
            remaining_tokens,
        } = hold_out(est_out).await?
        {
            return Ok(Held::Admitted {
                est_out,
                provider_cap: per_choice,
                degraded: true,
                remaining_requests,
                remaining_tokens,
            });
        }
    }
    Ok(Held::Refused(refusal))
}

/// The refusal as the client sees it, with the counters the request lookup
/// shows.
fn refused(
    gw: &Gateway,
    key: &KeyEntry,
    model: &ModelEntry,
    r: &Refusal,
    want: &Want<'_>,
) -> ApiError {
    // GET /v1/usage lists the tenant's, app's and key's limits, not an end
    // user's: the hint only where it answers.
    let hint = match r.scope {
        domain::limits::ScopeKind::EndUser => "",
        _ => " (GET /v1/usage shows what is left)",
    };
    // A budget of `Limits::budgets`: named with its models and when it
    // starts again; a request budget is retried then.
    let mut retry_after = r.retry_after_secs();
    let what = match r.budget {
        Some(b) => {
            let now = gw.now();
            let applied = key.budgets(&model.id, &gw.cfg.clock, now);
            match applied.get(b.index) {
                Some(a) => {
                    if b.kind == domain::budgets::BudgetKind::Requests {
                        let secs = (a.resets_at - now).num_seconds().max(1);
                        retry_after = Some(secs as u64);
                    }
                    format!(
                        "{} (it starts again at {})",
                        domain::chain_budgets::describe(
                            r.scope,
                            a.models.as_deref(),
                            b.period,
                            b.kind
                        ),
                        domain::standing::rfc3339(&gw.cfg.clock, a.resets_at)
                    )
                }
                None => domain::chain_budgets::describe(r.scope, None, b.period, b.kind),
            }
        }
        None => domain::standing::describe(r.scope, r.limit),
    };
    let msg = format!("{}: request refused by {what}{hint}", r.reason());
    let counters = json!({"scope": r.scope.as_str(), "limit": format!("{:?}", r.limit),
        "headroom_tokens": r.headroom_tokens, "headroom_cost_micro_usd": r.headroom_cost,
        "retry_after_ms": r.retry_after_ms, "est_input_tokens": want.est_in,
        "est_output_tokens": want.est_out});
    ApiError::new(r.reason(), msg)
        .retry_after(retry_after)
        .counters(counters)
}

/// One hold call, failing closed on any quota-store error. A hold whose
/// outcome is unknown (timeout, client gone) is released by the guard.
async fn hold(
    gw: &Arc<Gateway>,
    key: &Arc<KeyEntry>,
    model: &ModelEntry,
    month: &str,
    request_id: &str,
    want: &Want<'_>,
    est_out: i64,
) -> Result<HoldOutcome, ApiError> {
    let now = gw.now();
    let limits = key.effective_limits(now, month);
    let limits = [&limits[0], &limits[1], &limits[2]];
    let budgets = domain::chain_budgets::applicable(
        limits,
        &key.app.id,
        &key.id,
        &model.id,
        &gw.cfg.clock,
        now,
    );
    let req = HoldRequest {
        request_id,
        tenant: &key.tenant.id,
        app: &key.app.id,
        key: &key.id,
        month,
        est_input: want.est_in,
        est_output: est_out,
        est_cost: want
            .price
            .cost(want.est_in, est_out)
            .0
            .saturating_add(want.fees),
        model: &model.id,
        limits,
        budgets: &budgets,
    };
    let mut pending = PendingHold {
        gw: gw.clone(),
        key: key.clone(),
        month: month.to_string(),
        request_id: request_id.to_string(),
        end_user: want.end_user.map(str::to_string),
        armed: true,
    };
    let t0 = Instant::now();
    let ledger = gw.ledger_source();
    let eu = crate::attribution::end_user_scope(key, want.end_user);
    let outcome = gw
        .admission
        .hold_with(&req, eu, &ledger, want.summary.stream)
        .await;
    pending.armed = outcome.is_err();
    gw.meters.hold_seconds().record(t0.elapsed().as_secs_f64());
    outcome.map_err(|err| {
        metrics::counter!(m::QUOTA_STORE_ERRORS, "op" => "hold").increment(1);
        let kind = if matches!(err, QuotaError::Ledger(_)) {
            "ledger"
        } else {
            "redis"
        };
        tracing::warn!(kind, error = %err, "hold failed: failing closed");
        ApiError::store_down()
    })
}

/// A request's place in its tenant's fair queue, joined the first time it
/// must wait, and the turn it was last given.
struct FairWait<'a> {
    gw: &'a Gateway,
    key: &'a KeyEntry,
    place: Option<Place>,
    turn: Option<Turn>,
    /// Why it last waited (`x-tollgate-reason` of a queued request).
    why: &'static str,
}

impl<'a> FairWait<'a> {
    fn new(gw: &'a Gateway, key: &'a KeyEntry) -> Self {
        FairWait {
            gw,
            key,
            place: None,
            turn: None,
            why: "",
        }
    }

    fn priority(&self) -> &'static str {
        self.key.tenant.priority.as_str()
    }

    /// Admitted: the turn is used; how long it waited, when it did.
    fn admitted(&mut self) -> Option<(Duration, &'static str)> {
        if let Some(t) = self.turn.take() {
            t.admitted();
        }
        let p = self.place.as_ref()?;
        let w = p.waited();
        metrics::histogram!(m::QUEUE_WAIT_SECONDS, "priority" => self.priority(), "outcome" => "admitted")
            .record(w.as_secs_f64());
        Some((w, self.why))
    }

    /// Refused after all: counted as a wait that ended in a refusal, when
    /// the request waited.
    fn refused(&self, e: ApiError) -> ApiError {
        if let Some(p) = &self.place {
            metrics::histogram!(m::QUEUE_WAIT_SECONDS, "priority" => self.priority(), "outcome" => "refused")
                .record(p.waited().as_secs_f64());
        }
        e
    }

    /// Blocked by `by`: joins the tenant's queue (once) and waits for the
    /// next turn, or refuses when the queue is full or the wait too long.
    async fn wait(
        &mut self,
        by: Blocked,
        why: &'static str,
        model: &ModelEntry,
    ) -> Result<(), ApiError> {
        self.why = why;
        if let Some(t) = self.turn.take() {
            t.blocked(by);
        }
        let priority = self.key.tenant.priority;
        if self.place.is_none() {
            let cap = self.key.tenant.max_queued_requests;
            match self
                .gw
                .queue
                .join(&self.key.tenant.id, priority, &model.id, cap)
            {
                Ok(p) => self.place = Some(p),
                Err(full) => return Err(crate::sharing::queue_full(why, full.depth)),
            }
        }
        let p = self.place.as_mut().expect("joined above");
        match p.next_turn().await {
            Some(t) => {
                self.turn = Some(t);
                Ok(())
            }
            None => {
                let waited = p.waited();
                metrics::histogram!(m::QUEUE_WAIT_SECONDS, "priority" => priority.as_str(), "outcome" => "timeout")
                    .record(waited.as_secs_f64());
                let msg = format!(
                    "waited {} ms in the {} queue ({why}); no slot freed in time",
                    waited.as_millis(),
                    priority.as_str()
                );
                Err(ApiError::new(ReasonCode::QueueTimeout, msg).retry_after(Some(1)))
            }
        }
    }
}
