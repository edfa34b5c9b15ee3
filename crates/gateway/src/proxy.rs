//! `POST /v1/chat/completions`, `/v1/completions`, `/v1/embeddings`: the
//! request's way through the gateway (docs/design.md §5, and
//! docs/architecture.md, "The request path, top down"). `/v1/responses` and
//! `/v1/messages` take the same way, read into chat at the edge (`dialect`).
//! Every step runs in the request's tracing span (request id, tenant, key) and
//! refuses with an [`ApiError`]; [`handle`] answers the refusal.

use crate::admission::Want;
use crate::catalog::{ModelEntry, ModelKind};
use crate::dialect::{Dialect, Edge, Inbound};
use crate::errors::{invalid, ApiError};
use crate::headers;
use crate::key_index::KeyEntry;
use crate::key_index::{KeyState, RefusedKey};
use crate::metrics_names as m;
use crate::settle::HeldRequest;
use crate::Gateway;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use domain::attribution::Attribution;
use domain::keys;
use domain::reason::{Decision, ReasonCode};
use domain::request::{self, Endpoint, RequestSummary};
use domain::tokens;
use serde_json::{json, Value};
use std::sync::Arc;
use tracing::Instrument;

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

/// A request id for an answer no period depends on (a path nobody serves),
/// where no gateway is at hand; every other request's id is
/// `Gateway::new_request_id` (the platform's clock).
pub fn new_request_id() -> String {
    domain::request_id::new().0
}

/// A request's context: its id and, once known, its key and the model a
/// refusal is recorded under. The id, tenant and key are the fields of the
/// request's tracing span, so the steps log and refuse without them as
/// parameters; [`handle`] answers a refusal with this.
pub(crate) struct RequestCtx {
    pub id: String,
    /// When the request was received: the time in its id, booked as its
    /// start (the request log is ordered by the id).
    pub received: chrono::DateTime<chrono::Utc>,
    pub key: Option<Arc<KeyEntry>>,
    /// "" until the body names a model; then the named, served, or
    /// degraded-to model, as far as the request got.
    pub model: String,
    /// The request's tags and end user once read (a refusal is recorded
    /// with them); moved into the held request on admission.
    pub attribution: Attribution,
}

impl RequestCtx {
    pub fn new(gw: &Gateway) -> Self {
        let (id, received) = gw.new_request_id();
        RequestCtx {
            id,
            received,
            key: None,
            model: String::new(),
            attribution: Attribution::default(),
        }
    }

    /// The span a request's steps run in.
    pub fn span(&self) -> tracing::Span {
        tracing::info_span!(
            "request",
            request_id = %self.id,
            tenant = tracing::field::Empty,
            key = tracing::field::Empty,
        )
    }

    /// The key is known: in the context, and in the current span.
    pub fn authenticated(&mut self, key: &Arc<KeyEntry>) {
        let span = tracing::Span::current();
        span.record("tenant", key.tenant.id.as_str());
        span.record("key", key.id.as_str());
        self.key = Some(key.clone());
    }
}

pub(crate) async fn handle(
    gw: Arc<Gateway>,
    endpoint: Endpoint,
    dialect: Dialect,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle_call(gw, endpoint, dialect, headers, body, None).await
}

/// As [`handle`], for a call whose path names its model (Gemini's).
pub(crate) async fn handle_call(
    gw: Arc<Gateway>,
    endpoint: Endpoint,
    dialect: Dialect,
    headers: HeaderMap,
    body: Body,
    path: Option<crate::dialect::PathCall>,
) -> Response {
    let mut ctx = RequestCtx::new(&gw);
    let span = ctx.span();
    let answer = admit_and_forward(&gw, &mut ctx, endpoint, dialect, &headers, body, path)
        .instrument(span)
        .await;
    match answer {
        Ok(r) => r,
        Err(e) => refusal(&gw, &ctx, dialect, e.for_request(&ctx.id)).await,
    }
}

/// A refused request: counted, recorded (when its key is known), answered.
pub(crate) async fn refusal(
    gw: &Gateway,
    ctx: &RequestCtx,
    dialect: Dialect,
    e: ApiError,
) -> Response {
    let tenant = match (&ctx.key, &e.refused_key) {
        (Some(k), _) => k.tenant.id.as_str(),
        (None, Some(r)) => r.tenant_id.as_str(),
        (None, None) => "unknown",
    };
    metrics::counter!(m::REQUESTS, "tenant" => tenant.to_string(),
        "model" => model_label(gw, &ctx.model),
        "decision" => Decision::Reject.as_str(), "reason" => e.reason.as_str())
    .increment(1);
    if let Some(k) = &ctx.key {
        gw.decisions
            .refused(&e, ctx.received, k, &ctx.model, &ctx.attribution);
    } else if let Some(k) = &e.refused_key {
        // A revoked or expired key: filed under its tenant, a few a second.
        if k.may_record(gw.catalog.keys().second()) {
            gw.decisions.refused_key(&e, ctx.received, k);
        } else {
            metrics::counter!(m::DECISIONS_DROPPED, "why" => "unusable_key_bound").increment(1);
        }
    }
    // Paces a flood that ignores Retry-After (docs/fair.md).
    let pause = domain::reason::refusal_pause(
        e.http_status(),
        e.retry_after_secs,
        gw.cfg.fair.refusal_delay,
    );
    if !pause.is_zero() {
        tokio::time::sleep(pause).await;
    }
    crate::dialect::error_response(dialect, e)
}

/// The `model` label of a refused request: the model's id when the catalog
/// has it, else `unknown`. The name a client asked for is the client's to
/// choose, and every label value is a series the recorder keeps for the
/// process's life: labels carry only values the platform admin created.
fn model_label(gw: &Gateway, asked: &str) -> String {
    if asked.is_empty() {
        return "none".into();
    }
    if gw.catalog.get().models.contains_key(asked) {
        asked.to_string()
    } else {
        "unknown".into()
    }
}

/// The request's key and body (413 above the size cap).
pub(crate) async fn read_body(
    gw: &Arc<Gateway>,
    ctx: &mut RequestCtx,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Arc<KeyEntry>, bytes::Bytes), ApiError> {
    let key = authenticate(gw, headers).await?;
    ctx.authenticated(&key);
    let cap = tokens::largest_body_limit(gw.cfg.max_body_bytes);
    let bytes = axum::body::to_bytes(body, cap).await.map_err(|_| {
        let msg = format!("request body is larger than {cap} bytes");
        ApiError::new(ReasonCode::InvalidRequest, msg).status(413)
    })?;
    Ok((key, bytes))
}

pub async fn authenticate(gw: &Gateway, headers: &HeaderMap) -> Result<Arc<KeyEntry>, ApiError> {
    let bad = |msg: &str| ApiError::new(ReasonCode::InvalidApiKey, msg);
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
    let hash = gw.key_hasher.hash(raw);
    let refused = |k: Arc<RefusedKey>| {
        let mut e = bad(k.state.message());
        e.refused_key = Some(k);
        e
    };
    let key = match gw.catalog.key(&gw.store, &hash).await {
        Ok(k) => k,
        Err(Some(r)) => return Err(refused(r)),
        Err(None) => return Err(bad("invalid API key")),
    };
    if key.expires_at.is_some_and(|t| t <= gw.now()) {
        let state = KeyState::lapsed(key.rotated);
        let k = RefusedKey::new(&key.tenant.id, &key.app.id, &key.id, state);
        return Err(refused(gw.catalog.keys().remember_refused(&hash, k)));
    }
    Ok(key)
}

async fn admit_and_forward(
    gw: &Arc<Gateway>,
    ctx: &mut RequestCtx,
    endpoint: Endpoint,
    dialect: Dialect,
    headers: &HeaderMap,
    body: Body,
    path: Option<crate::dialect::PathCall>,
) -> Result<Response, ApiError> {
    let (key, bytes) = read_body(gw, ctx, headers, body).await?;
    crate::sharing::refuse_if_queue_full(gw, &key)?;
    let json = gw.tokenize.parse(&key.tenant.id, &bytes).await?;
    ctx.attribution = crate::attribution::read(headers, &json, &key)?;
    let inbound = Inbound::read(dialect, json, path.as_ref()).map_err(invalid)?;
    let json = inbound.chat;
    let summary = request::validate(endpoint, &json).map_err(invalid)?;
    ctx.model = summary.model.clone();
    let model = resolve_model(gw, &key, endpoint, &summary)?;
    // Every deployment down: a fallback model the key may use, at its price.
    let model = crate::routing::serving_model(gw, &key, model);
    ctx.model = model.id.clone();
    // A stream past its tenant's open-stream cap is refused before any
    // quota is held or anything forwarded; its place, once taken, goes with
    // the stream's body (`open_streams`).
    let open_stream = if summary.stream {
        let cap = key
            .tenant
            .max_open_streams
            .or(gw.cfg.fair.max_open_streams_per_tenant);
        Some(
            gw.open_streams
                .open(&key.tenant.id, cap)
                .map_err(crate::open_streams::refused)?,
        )
    } else {
        None
    };
    // A tenant's streams start a few at a time (held until the provider's
    // headers are in, when this function returns): a burst of stream opens
    // is spread out instead of taking the cores from everyone else at once.
    // Never a refusal: past its wait a stream starts without a turn.
    let _start = match gw.cfg.fair.stream_starts_per_tenant {
        Some(n) if summary.stream => {
            let wait = gw.cfg.fair.stream_start_wait;
            gw.stream_starts.start(&key.tenant.id, n, wait).await
        }
        _ => None,
    };
    // Past the daily soft limit: the cheaper model and/or a smaller cap.
    let degrade = crate::sharing::degrade_step(gw, &key, &model).await?;
    let requested_model = model.id.clone();
    let model = match degrade.as_ref().and_then(|d| d.model.clone()) {
        Some(cheaper) => cheaper,
        None => model,
    };

    ctx.model = model.id.clone();
    if model.id != summary.model {
        // Served by another model than the name asked for (an alias, a
        // fallback, a degrade): the ledger keeps the name asked for.
        ctx.attribution.asked_model = domain::attribution::attribute(&summary.model);
    }
    // Service tiers and hosted tools: refused unless the key may use them
    // (docs/billing.md, "Service tiers and hosted tools").
    let extras = crate::extras::allowed(&key, dialect, inbound.original.as_ref().unwrap_or(&json))?;
    // A Responses tool chat has no equivalent of: only for a provider that
    // serves Responses natively (docs/clients.md, "Responses tools").
    if let Some(f) = inbound.untranslated {
        if !crate::dialect::speaks_natively(&model, dialect) {
            return Err(invalid(f));
        }
    }
    crate::estimate::check_body_size(gw, &model, bytes.len())?;
    let (estimated, json_back) = crate::estimate::estimate_input(
        gw,
        gw.cfg.long_input,
        &key,
        &model,
        endpoint,
        &summary,
        json,
        bytes.len(),
    )
    .await;
    let mut json = json_back;
    let (est_in, asked_per_choice) = estimated?;
    // Hosted tools' results come back as input: held with the prompt.
    let est_in = est_in.saturating_add(extras.tools.result_tokens);
    let (hold_price, fees) =
        crate::extras::hold_price(&model, ctx.received.timestamp_millis(), &extras, est_in);
    let per_choice = match degrade.as_ref().and_then(|d| d.max_output) {
        Some(cap) if endpoint != Endpoint::Embeddings => asked_per_choice.min(cap),
        _ => asked_per_choice,
    };
    let soft_degraded = degrade
        .as_ref()
        .is_some_and(|d| d.model.is_some() || per_choice < asked_per_choice);
    let max_out = per_choice * summary.choices;
    // A stream holds one slice of output at a time, extended as it flows.
    // A provider that hides its reasoning streams nothing to count for it
    // (nor a summary of its worth: Claude's extended thinking), so its
    // streams hold their whole cap up front.
    let hidden = model.profile.hidden_reasoning || extras.thinks;
    let first_out = if summary.stream && !hidden {
        max_out.min(gw.cfg.stream_slice_tokens)
    } else {
        max_out
    };
    let now = ctx.received;
    let month = gw.cfg.clock.month(now);
    let want = Want {
        endpoint,
        summary: &summary,
        est_in,
        est_out: first_out,
        per_choice,
        end_user: ctx.attribution.end_user.as_deref(),
        price: hold_price,
        fees,
    };
    let first = crate::admission::get_quota(gw, &key, &model, &month, &ctx.id, want).await;
    // A budget that names the model refused it: the model's fallback, when
    // it names one the key may use — its own price and budgets, the input
    // as counted for the model asked (the refused hold took nothing: the
    // same request id holds again).
    let (adm, model, hold_price, fees, fallback) = match first {
        Ok(adm) => (adm, model, hold_price, fees, None),
        Err(e) => {
            let fb = match degrade {
                None => crate::sharing::budget_fallback(gw, &key, &model, e.reason),
                Some(_) => None,
            };
            let Some(fb) = fb else { return Err(e) };
            ctx.model = fb.id.clone();
            ctx.attribution.asked_model = domain::attribution::attribute(&summary.model);
            let (hold_price, fees) =
                crate::extras::hold_price(&fb, ctx.received.timestamp_millis(), &extras, est_in);
            let first_out = if summary.stream && !(fb.profile.hidden_reasoning || extras.thinks) {
                max_out.min(gw.cfg.stream_slice_tokens)
            } else {
                max_out
            };
            let want = Want {
                endpoint,
                summary: &summary,
                est_in,
                est_out: first_out,
                per_choice,
                end_user: ctx.attribution.end_user.as_deref(),
                price: hold_price,
                fees,
            };
            let adm = crate::admission::get_quota(gw, &key, &fb, &month, &ctx.id, want).await?;
            (adm, fb, hold_price, fees, Some(e.reason))
        }
    };
    let rid = ctx.id.as_str();
    if soft_degraded {
        let mut detail = json!({"requested_output_tokens": asked_per_choice * summary.choices,
            "output_tokens_cap": max_out, "requested_model": requested_model, "served_model": model.id});
        with_queue_wait(&mut detail, adm.queued);
        gw.decisions.degraded(
            rid,
            &key,
            &model.id,
            ReasonCode::DailyCostSoftLimit,
            detail,
            &ctx.attribution,
        );
    } else if let Some(reason) = fallback {
        let mut detail = json!({"requested_model": requested_model, "served_model": model.id});
        with_queue_wait(&mut detail, adm.queued);
        gw.decisions
            .degraded(rid, &key, &model.id, reason, detail, &ctx.attribution);
    } else if adm.degraded {
        let mut detail = json!({"requested_output_tokens": max_out, "clamped_output_tokens": adm.est_out,
            "est_input_tokens": est_in});
        with_queue_wait(&mut detail, adm.queued);
        gw.decisions.degraded(
            rid,
            &key,
            &model.id,
            ReasonCode::MaxTokensClampedToBudget,
            detail,
            &ctx.attribution,
        );
    }
    // Waited in the fair queue, then admitted: recorded with how long and
    // what for (a degraded request has it on its degradation's row: one row
    // per request).
    if let (false, false, None, Some((waited, why))) =
        (soft_degraded, adm.degraded, fallback, adm.queued)
    {
        let detail = json!({"waited_ms": waited.as_millis() as u64, "queue_reason": why});
        gw.decisions
            .queued(rid, &key, &model.id, why, detail, &ctx.attribution);
    }
    let (decision, reason) = if soft_degraded {
        (Decision::Degrade, ReasonCode::DailyCostSoftLimit.as_str())
    } else if let Some(r) = fallback {
        (Decision::Degrade, r.as_str())
    } else if adm.degraded {
        (
            Decision::Degrade,
            ReasonCode::MaxTokensClampedToBudget.as_str(),
        )
    } else if let Some((_, why)) = adm.queued {
        (Decision::Queue, why)
    } else {
        (Decision::Allow, "none")
    };
    if decision == Decision::Allow {
        gw.meters.of(&key.tenant.id, &model.id).allowed.increment(1);
    } else {
        metrics::counter!(m::REQUESTS, "tenant" => key.tenant.id.clone(), "model" => model.id.clone(),
            "decision" => decision.as_str(), "reason" => reason)
        .increment(1);
    }

    let est_cost = hold_price.cost(est_in, adm.est_out).0.saturating_add(fees);
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
    held.attribution = std::mem::take(&mut ctx.attribution);
    held.hold_price = hold_price;
    held.max_output = if adm.degraded { adm.est_out } else { max_out };
    let out_headers = answer_headers(rid, decision, reason, &model, &adm);
    held.open_stream = open_stream;
    held.slot = adm.slot.map(|mut s| {
        s.mark_used();
        s
    });
    let edge = Edge {
        dialect,
        native: crate::dialect::speaks_natively(&model, dialect),
        model: summary.model.clone(),
        request_id: rid.to_string(),
        custom_tools: inbound.custom_tools,
        tool_search: inbound.tool_search,
        json_array: inbound.json_array,
    };
    let body = match inbound.original {
        Some(mut native) if edge.native => {
            crate::dialect::rewrite_native(&mut native, &model, dialect, adm.provider_cap);
            crate::extras::inject_caps(dialect, &extras, &mut native);
            native
        }
        _ => {
            crate::forward::rewrite_for_upstream(
                &mut json,
                &model,
                endpoint,
                &summary,
                adm.provider_cap,
            );
            json
        }
    };
    let large_body = bytes.len() > crate::tokenize::LARGE_BODY;
    // Parsed: not held for the whole answer.
    drop(bytes);
    // Boxed: forwarding's state (the upstream call, the body read) is not
    // part of the admission's future, which axum moves into its box whole.
    Box::pin(crate::forward::forward(
        gw,
        held,
        endpoint,
        &summary,
        body,
        out_headers,
        edge,
        large_body,
    ))
    .await
}

/// A degraded request that waited in the fair queue first: its wait, in
/// the degradation's detail.
fn with_queue_wait(detail: &mut Value, queued: Option<(std::time::Duration, &'static str)>) {
    if let Some((waited, why)) = queued {
        detail["waited_ms"] = json!(waited.as_millis() as u64);
        detail["queue_reason"] = json!(why);
    }
}

/// The headers of an admitted request's answer: its id, the decision and
/// its reason, the model served, the queue wait, what is left.
fn answer_headers(
    rid: &str,
    decision: Decision,
    reason: &'static str,
    model: &ModelEntry,
    adm: &crate::admission::Admitted,
) -> HeaderMap {
    // Room for these and the content type and cache control added later.
    let mut out_headers = HeaderMap::with_capacity(12);
    out_headers.insert(
        headers::REQUEST_ID,
        HeaderValue::from_str(rid).expect("ascii id"),
    );
    out_headers.insert(
        headers::DECISION,
        HeaderValue::from_static(decision.as_str()),
    );
    if reason != "none" {
        out_headers.insert(headers::REASON, HeaderValue::from_static(reason));
    }
    if let Ok(served) = HeaderValue::from_str(&model.id) {
        out_headers.insert(headers::MODEL, served);
    }
    if let Some((waited, _)) = adm.queued {
        out_headers.insert(
            headers::QUEUE_WAIT,
            HeaderValue::from(waited.as_millis() as u64),
        );
    }
    if let Some(r) = adm.remaining_requests {
        out_headers.insert(headers::REMAINING_REQUESTS, HeaderValue::from(r));
    }
    if let Some(t) = adm.remaining_tokens {
        out_headers.insert(headers::REMAINING_TOKENS, HeaderValue::from(t));
    }
    out_headers
}

pub(crate) fn resolve_model(
    gw: &Gateway,
    key: &KeyEntry,
    endpoint: Endpoint,
    s: &RequestSummary,
) -> Result<Arc<ModelEntry>, ApiError> {
    // A name no catalog model has may be an alias (docs/clients.md).
    let model = gw
        .catalog
        .get()
        .model_for(&key.tenant.id, &s.model)
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                ReasonCode::ModelNotFound,
                format!("model {:?} does not exist or is disabled", s.model),
            )
            .param("model")
        })?;
    if !key.may_use(&model.id) {
        let msg = format!("model {:?} is not allowed for this key", s.model);
        return Err(ApiError::new(ReasonCode::ModelNotAllowed, msg).param("model"));
    }
    let wants = if endpoint == Endpoint::Embeddings {
        ModelKind::Embedding
    } else {
        ModelKind::Chat
    };
    if model.kind != wants {
        let msg = format!("model {:?} cannot serve /v1/{}", s.model, endpoint.path());
        return Err(ApiError::new(ReasonCode::InvalidRequest, msg).param("model"));
    }
    Ok(model)
}
