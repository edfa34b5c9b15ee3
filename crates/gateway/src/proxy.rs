//! `POST /v1/chat/completions`, `/v1/completions`, `/v1/embeddings`: the
//! request's way through the gateway (docs/design.md §5). `/v1/responses` and
//! `/v1/messages` take the same way, read into chat at the edge (`dialect`).

use crate::catalog::{KeyEntry, ModelEntry, ModelKind};
use crate::dialect::{Dialect, Edge, Inbound};
use crate::errors::ApiError;
use crate::metrics_names as m;
use crate::settle::{HeldRequest, PendingHold};
use crate::Gateway;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use domain::keys;
use domain::limits::LimitKind;
use domain::reason::{Decision, ReasonCode};
use domain::request::{self, Endpoint, RequestSummary};
use domain::tokens;
use quota::{HoldOutcome, HoldRequest, QuotaError};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

pub async fn chat_completions(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(gw, Endpoint::ChatCompletions, Dialect::Chat, headers, body).await
}

pub async fn completions(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(gw, Endpoint::Completions, Dialect::Chat, headers, body).await
}

pub async fn embeddings(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(gw, Endpoint::Embeddings, Dialect::Chat, headers, body).await
}

pub fn new_request_id() -> String {
    format!("req_{}", uuid::Uuid::now_v7().simple())
}

pub(crate) async fn handle(
    gw: Arc<Gateway>,
    endpoint: Endpoint,
    dialect: Dialect,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = new_request_id();
    match admit_and_forward(&gw, endpoint, dialect, &headers, body, &rid).await {
        Ok(r) => r,
        Err((e, key, model)) => {
            let tenant = key.as_ref().map_or("unknown", |k| k.tenant.id.as_str());
            metrics::counter!(m::REQUESTS, "tenant" => tenant.to_string(), "model" => model.clone(),
                "decision" => Decision::Reject.as_str(), "reason" => e.reason.as_str())
            .increment(1);
            if let Some(k) = &key {
                gw.decisions.refused(&e, k, &model);
            }
            if e.reason == ReasonCode::TenantQueueFull {
                // Paces a flood that ignores Retry-After (docs/fair.md).
                tokio::time::sleep(gw.cfg.fair.queue_full_delay).await;
            }
            crate::dialect::error_response(dialect, e)
        }
    }
}

pub(crate) type Refused = (ApiError, Option<Arc<KeyEntry>>, String);

pub(crate) fn refuse(e: ApiError, key: Option<&Arc<KeyEntry>>, model: &str) -> Refused {
    (e, key.cloned(), model.to_string())
}

/// The request's key and body (413 above the size cap).
pub(crate) async fn read_body(
    gw: &Arc<Gateway>,
    headers: &HeaderMap,
    body: Body,
    rid: &str,
) -> Result<(Arc<KeyEntry>, bytes::Bytes), Refused> {
    let key = authenticate(gw, headers, rid)
        .await
        .map_err(|e| refuse(e, None, ""))?;
    let k = Some(&key);
    let cap = tokens::largest_body_limit(gw.cfg.max_body_bytes);
    let bytes = axum::body::to_bytes(body, cap).await.map_err(|_| {
        let msg = format!("request body is larger than {cap} bytes");
        refuse(
            ApiError::new(rid, ReasonCode::InvalidRequest, msg).status(413),
            k,
            "",
        )
    })?;
    Ok((key, bytes))
}

// The refusal type every handler step returns (the async ones are not
// linted); boxing it here alone would only add a conversion.
#[allow(clippy::result_large_err)]
pub(crate) fn parse_json(bytes: &[u8], key: &Arc<KeyEntry>, rid: &str) -> Result<Value, Refused> {
    serde_json::from_slice(bytes).map_err(|e| {
        let msg = format!("body is not valid JSON: {e}");
        refuse(
            ApiError::new(rid, ReasonCode::InvalidRequest, msg),
            Some(key),
            "",
        )
    })
}

pub async fn authenticate(
    gw: &Gateway,
    headers: &HeaderMap,
    rid: &str,
) -> Result<Arc<KeyEntry>, ApiError> {
    let bad = |msg: &str| ApiError::new(rid, ReasonCode::InvalidApiKey, msg);
    // Anthropic clients send their key in `x-api-key`.
    let raw = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim)
        .ok_or_else(|| {
            bad("missing API key: send Authorization: Bearer tg-... (or x-api-key: tg-...)")
        })?;
    if !keys::is_well_formed(raw) {
        return Err(bad("invalid API key"));
    }
    let hash = keys::keyed_hash(&gw.cfg.pepper, raw);
    let key = gw
        .catalog
        .key(&gw.store, &hash)
        .await
        .ok_or_else(|| bad("invalid API key"))?;
    if key.expires_at.is_some_and(|t| t <= chrono::Utc::now()) {
        return Err(bad("this API key has expired"));
    }
    Ok(key)
}

async fn admit_and_forward(
    gw: &Arc<Gateway>,
    endpoint: Endpoint,
    dialect: Dialect,
    headers: &HeaderMap,
    body: Body,
    rid: &str,
) -> Result<Response, Refused> {
    let (key, bytes) = read_body(gw, headers, body, rid).await?;
    let k = Some(&key);
    crate::fair::refuse_if_queue_full(gw, &key, rid).map_err(|e| refuse(e, k, ""))?;
    let json = parse_json(&bytes, &key, rid)?;
    let attribution =
        crate::attribution::read(headers, &json, &key, rid).map_err(|e| refuse(e, k, ""))?;
    let inbound = Inbound::read(dialect, json).map_err(|f| {
        refuse(
            ApiError::new(rid, ReasonCode::InvalidRequest, f.message).param(f.param),
            k,
            "",
        )
    })?;
    let json = inbound.chat;
    let summary = request::validate(endpoint, &json).map_err(|f| {
        refuse(
            ApiError::new(rid, ReasonCode::InvalidRequest, f.message).param(f.param),
            k,
            "",
        )
    })?;
    let model = resolve_model(gw, &key, endpoint, &summary, rid)
        .map_err(|e| refuse(e, k, &summary.model))?;
    // Every deployment down: a fallback model the key may use, at its price.
    let model = crate::routing::serving_model(gw, &key, model);
    // Past the daily soft limit: the cheaper model and/or a smaller cap.
    let degrade = crate::fair::degrade_step(gw, &key, &model, rid)
        .await
        .map_err(|e| refuse(e, k, &model.id))?;
    let requested_model = model.id.clone();
    let model = match degrade.as_ref().and_then(|d| d.model.clone()) {
        Some(cheaper) => cheaper,
        None => model,
    };
    crate::estimate::check_body_size(gw, &model, bytes.len(), rid).map_err(|e| refuse(e, k, &model.id))?;
    let (estimated, json_back) = crate::estimate::estimate_input(
        gw,
        gw.cfg.long_input,
        &key,
        &model,
        endpoint,
        &summary,
        json,
        bytes.len(),
        rid,
    )
    .await;
    let mut json = json_back;
    let (est_in, asked_per_choice) = estimated.map_err(|e| refuse(e, k, &model.id))?;
    let per_choice = match degrade.as_ref().and_then(|d| d.max_output) {
        Some(cap) if endpoint != Endpoint::Embeddings => asked_per_choice.min(cap),
        _ => asked_per_choice,
    };
    let soft_degraded = degrade
        .as_ref()
        .is_some_and(|d| d.model.is_some() || per_choice < asked_per_choice);
    let max_out = per_choice * summary.choices;
    // A stream holds one slice of output at a time, extended as it flows.
    // A provider that hides its reasoning streams nothing to count for it,
    // so its streams hold their whole cap up front.
    let first_out = if summary.stream && !model.profile.hidden_reasoning {
        max_out.min(gw.cfg.stream_slice_tokens)
    } else {
        max_out
    };
    let now = chrono::Utc::now();
    let month = gw.cfg.clock.month(now);
    let want = Want {
        endpoint,
        summary: &summary,
        est_in,
        est_out: first_out,
        per_choice,
        end_user: attribution.end_user.as_deref(),
    };
    let fairly = crate::fair::admit_fairly(gw, &key, &model, &month, rid, || {
        admit(gw, &key, &model, &month, rid, want)
    })
    .await
    .map_err(|e| refuse(e, k, &model.id))?;
    let adm = fairly.admitted;
    if soft_degraded {
        let detail = json!({"requested_output_tokens": asked_per_choice * summary.choices,
            "output_tokens_cap": max_out, "requested_model": requested_model, "served_model": model.id});
        gw.decisions
            .degraded(rid, &key, &model.id, ReasonCode::DailyCostSoftLimit, detail);
    } else if adm.degraded {
        let detail = json!({"requested_output_tokens": max_out, "clamped_output_tokens": adm.est_out,
            "est_input_tokens": est_in});
        gw.decisions.degraded(
            rid,
            &key,
            &model.id,
            ReasonCode::MaxTokensClampedToBudget,
            detail,
        );
    }
    let (decision, reason) = if soft_degraded {
        (Decision::Degrade, ReasonCode::DailyCostSoftLimit.as_str())
    } else if adm.degraded {
        (
            Decision::Degrade,
            ReasonCode::MaxTokensClampedToBudget.as_str(),
        )
    } else if let Some((_, why)) = fairly.queued {
        (Decision::Queue, why)
    } else {
        (Decision::Allow, "none")
    };
    metrics::counter!(m::REQUESTS, "tenant" => key.tenant.id.clone(), "model" => model.id.clone(),
        "decision" => decision.as_str(), "reason" => reason)
    .increment(1);

    let est_cost = model.price.cost(est_in, adm.est_out).0;
    let mut held = HeldRequest::new(
        gw.clone(),
        rid.to_string(),
        key.clone(),
        model.clone(),
        month,
        (est_in, adm.est_out, est_cost),
        summary.stream,
        now.timestamp_millis(),
    );
    held.attribution = attribution;
    held.max_output = if adm.degraded { adm.est_out } else { max_out };
    held.slot = fairly.slot.map(|mut s| {
        s.mark_used();
        s
    });
    let edge = Edge {
        dialect,
        native: crate::dialect::speaks_natively(&model, dialect),
        model: summary.model.clone(),
        request_id: rid.to_string(),
    };
    let body = match inbound.original {
        Some(mut native) if edge.native => {
            crate::dialect::rewrite_native(&mut native, &model, dialect, adm.provider_cap);
            native
        }
        _ => {
            crate::forward::rewrite_for_upstream(&mut json, &model, endpoint, &summary, adm.provider_cap);
            json
        }
    };
    let mut out_headers = HeaderMap::new();
    out_headers.insert(
        "x-request-id",
        HeaderValue::from_str(rid).expect("ascii id"),
    );
    out_headers.insert(
        "x-tollgate-decision",
        HeaderValue::from_static(decision.as_str()),
    );
    if reason != "none" {
        out_headers.insert("x-tollgate-reason", HeaderValue::from_static(reason));
    }
    if let Ok(served) = HeaderValue::from_str(&model.id) {
        out_headers.insert("x-tollgate-model", served);
    }
    if let Some((waited, _)) = fairly.queued {
        out_headers.insert(
            "x-tollgate-queue-wait-ms",
            HeaderValue::from(waited.as_millis() as u64),
        );
    }
    if let Some(r) = adm.remaining_requests {
        out_headers.insert("x-ratelimit-remaining-requests", HeaderValue::from(r));
    }
    if let Some(t) = adm.remaining_tokens {
        out_headers.insert("x-ratelimit-remaining-tokens", HeaderValue::from(t));
    }
    crate::forward::forward(gw, held, endpoint, &summary, body, out_headers, edge)
        .await
        .map_err(|e| refuse(e, k, &model.id))
}

/// What a request asks the hold engine for.
#[derive(Clone, Copy)]
struct Want<'a> {
    endpoint: Endpoint,
    summary: &'a RequestSummary,
    est_in: i64,
    /// Output held now (a stream's first slice, else everything allowed).
    est_out: i64,
    /// Output cap per choice sent to the provider.
    per_choice: i64,
    /// The request's end user (a fourth scope when its app limits them).
    end_user: Option<&'a str>,
}

struct Admission {
    est_out: i64,
    provider_cap: i64,
    degraded: bool,
    remaining_requests: Option<i64>,
    remaining_tokens: Option<i64>,
}

/// Holds the request; when a budget refuses a non-stream request whose
/// tenant allows it, retries once with `max_tokens` clamped to what the
/// budget still covers (decision `degrade`).
async fn admit(
    gw: &Arc<Gateway>,
    key: &Arc<KeyEntry>,
    model: &ModelEntry,
    month: &str,
    rid: &str,
    want: Want<'_>,
) -> Result<Admission, ApiError> {
    let stream = want.summary.stream;
    let refusal = match hold(
        gw,
        key,
        model,
        month,
        rid,
        want.est_in,
        want.est_out,
        stream,
        want.end_user,
    )
    .await?
    {
        HoldOutcome::Admitted {
            remaining_requests,
            remaining_tokens,
        } => {
            return Ok(Admission {
                est_out: want.est_out,
                provider_cap: want.per_choice,
                degraded: false,
                remaining_requests,
                remaining_tokens,
            })
        }
        HoldOutcome::Refused(r) => r,
        // Request ids are minted here per request: a duplicate means a bug.
        HoldOutcome::Duplicate { .. } => {
            return Err(ApiError::new(
                rid,
                ReasonCode::QuotaStoreUnavailable,
                "duplicate request id",
            )
            .retry_after(Some(1)))
        }
    };
    let budget = matches!(
        refusal.limit,
        LimitKind::MonthlyTokens | LimitKind::MonthlyCost
    );
    let may_clamp = budget
        && key.tenant.clamp_max_tokens
        && !want.summary.stream
        && want.endpoint != Endpoint::Embeddings;
    let clamped = may_clamp
        .then(|| {
            domain::pricing::clamped_output_per_choice(
                refusal.headroom_tokens,
                refusal.headroom_cost,
                want.est_in,
                &model.price,
                want.summary.choices,
                gw.cfg.min_clamped_output_tokens,
            )
        })
        .flatten()
        .filter(|c| *c < want.per_choice);
    if let Some(per_choice) = clamped {
        let est_out = per_choice * want.summary.choices;
        // The refused hold recorded nothing: the same id can hold again.
        if let HoldOutcome::Admitted {
            remaining_requests,
            remaining_tokens,
        } = hold(
            gw,
            key,
            model,
            month,
            rid,
            want.est_in,
            est_out,
            stream,
            want.end_user,
        )
        .await?
        {
            return Ok(Admission {
                est_out,
                provider_cap: per_choice,
                degraded: true,
                remaining_requests,
                remaining_tokens,
            });
        }
    }
    let msg = format!(
        "{}: request refused by the {} limit",
        refusal.reason(),
        refusal.scope.as_str()
    );
    let counters = json!({"scope": refusal.scope.as_str(), "limit": format!("{:?}", refusal.limit),
        "headroom_tokens": refusal.headroom_tokens, "headroom_cost_micro_usd": refusal.headroom_cost,
        "retry_after_ms": refusal.retry_after_ms, "est_input_tokens": want.est_in,
        "est_output_tokens": want.est_out});
    Err(ApiError::new(rid, refusal.reason(), msg)
        .retry_after(refusal.retry_after_secs())
        .counters(counters))
}

/// One hold call, failing closed on any quota-store error. A hold whose
/// outcome is unknown (timeout, client gone) is released by the guard.
#[allow(clippy::too_many_arguments)]
async fn hold(
    gw: &Arc<Gateway>,
    key: &Arc<KeyEntry>,
    model: &ModelEntry,
    month: &str,
    rid: &str,
    est_in: i64,
    est_out: i64,
    stream: bool,
    end_user: Option<&str>,
) -> Result<HoldOutcome, ApiError> {
    let limits = key.effective_limits(chrono::Utc::now(), month);
    let req = HoldRequest {
        request_id: rid,
        tenant: &key.tenant.id,
        app: &key.app.id,
        key: &key.id,
        month,
        est_input: est_in,
        est_output: est_out,
        est_cost: model.price.cost(est_in, est_out).0,
        model: &model.id,
        limits: [&limits[0], &limits[1], &limits[2]],
    };
    let mut pending = PendingHold {
        gw: gw.clone(),
        key: key.clone(),
        month: month.to_string(),
        request_id: rid.to_string(),
        end_user: end_user.map(str::to_string),
        armed: true,
    };
    let t0 = Instant::now();
    let ledger = crate::ledger_source::StoreLedger {
        store: &gw.store,
        quota: &gw.quota,
    };
    let eu = crate::attribution::end_user_scope(key, end_user);
    let outcome = gw.admission.hold_with(&req, eu, &ledger, stream).await;
    pending.armed = outcome.is_err();
    metrics::histogram!(m::HOLD_SECONDS).record(t0.elapsed().as_secs_f64());
    outcome.map_err(|err| {
        metrics::counter!(m::QUOTA_STORE_ERRORS, "op" => "hold").increment(1);
        let kind = if matches!(err, QuotaError::Ledger(_)) {
            "ledger"
        } else {
            "redis"
        };
        tracing::warn!(request_id = rid, kind, error = %err, "hold failed: failing closed");
        ApiError::new(
            rid,
            ReasonCode::QuotaStoreUnavailable,
            "quota store unavailable; retry shortly",
        )
        .retry_after(Some(1))
    })
}

pub(crate) fn resolve_model(
    gw: &Gateway,
    key: &KeyEntry,
    endpoint: Endpoint,
    s: &RequestSummary,
    rid: &str,
) -> Result<Arc<ModelEntry>, ApiError> {
    let model = gw
        .catalog
        .get()
        .models
        .get(&s.model)
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                rid,
                ReasonCode::ModelNotFound,
                format!("model {:?} does not exist", s.model),
            )
            .param("model")
        })?;
    if !key.may_use(&model.id) {
        let msg = format!("model {:?} is not allowed for this key", s.model);
        return Err(ApiError::new(rid, ReasonCode::ModelNotAllowed, msg).param("model"));
    }
    let wants = if endpoint == Endpoint::Embeddings {
        ModelKind::Embedding
    } else {
        ModelKind::Chat
    };
    if model.kind != wants {
        let msg = format!("model {:?} cannot serve /v1/{}", s.model, endpoint.path());
        return Err(ApiError::new(rid, ReasonCode::InvalidRequest, msg).param("model"));
    }
    Ok(model)
}
