//! The providers' admin usage and cost APIs, served from what the mock
//! recorded (`ledger.rs`), plus the endpoints tests steer them with.
//!
//! - OpenAI (`Authorization: Bearer <admin_key>`):
//!   `GET /v1/organization/usage/completions` and `GET /v1/organization/costs`.
//! - Anthropic (`x-api-key: <admin_key>` and `anthropic-version`):
//!   `GET /v1/organizations/usage_report/messages` and
//!   `GET /v1/organizations/cost_report`.
//! - `GET`/`POST /mock/admin` (settings), `GET`/`POST /mock/clock` (offset).
//!
//! Buckets run from the start parameter in steps of the bucket width (not
//! snapped to UTC boundaries: ask from a midnight for calendar days), the
//! last one cut at the end parameter (exclusive); a page holds
//! `min(limit, page_size)` buckets, empty ones included, and `next_page` is
//! the next page's first bucket start in Unix seconds, as a decimal string.
//! Costs are exact integers in pico-USD (tokens × µUSD per million tokens),
//! written as USD `f64` (OpenAI) or as an exact decimal string of cents
//! (Anthropic).

use std::collections::BTreeMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header::AUTHORIZATION, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};

use crate::ledger::{Counts, Prices, Row, Settings};
use crate::Shared;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dialect {
    OpenAi,
    Anthropic,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Report {
    Usage,
    Cost,
}

fn openai_error(status: StatusCode, kind: &str, code: &str, message: &str) -> Response {
    crate::error(status, kind, code, message)
}

fn anthropic_error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    (status, Json(body)).into_response()
}

fn bad_params(d: Dialect, message: &str) -> Response {
    match d {
        Dialect::OpenAi => openai_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_value",
            message,
        ),
        Dialect::Anthropic => {
            anthropic_error(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
    }
}

/// Auth (401), Anthropic's version header (400), then `fail_next` (429).
fn gate(app: &crate::App, d: Dialect, headers: &HeaderMap) -> Option<Response> {
    let admin_key = app.ledger.settings().admin_key;
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    match d {
        Dialect::OpenAi => {
            let given = header(AUTHORIZATION.as_str()).and_then(|v| v.strip_prefix("Bearer "));
            if given != Some(admin_key.as_str()) {
                return Some(openai_error(
                    StatusCode::UNAUTHORIZED,
                    "invalid_request_error",
                    "invalid_api_key",
                    "Incorrect API key provided. You need an admin key for the organization endpoints.",
                ));
            }
        }
        Dialect::Anthropic => {
            if header("x-api-key") != Some(admin_key.as_str()) {
                return Some(anthropic_error(
                    StatusCode::UNAUTHORIZED,
                    "authentication_error",
                    "invalid x-api-key",
                ));
            }
            if header("anthropic-version").is_none() {
                return Some(anthropic_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    "anthropic-version: header is required",
                ));
            }
        }
    }
    if app.ledger.take_failure() {
        let mut r = match d {
            Dialect::OpenAi => openai_error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "rate_limit_exceeded",
                "mock: admin API rate limit reached, retry after 1s",
            ),
            Dialect::Anthropic => anthropic_error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "mock: admin API rate limit reached, retry after 1s",
            ),
        };
        r.headers_mut().insert("retry-after", 1.into());
        return Some(r);
    }
    None
}

/// A report's parsed query.
struct Params {
    /// Unix seconds; `end` exclusive.
    start: i64,
    end: i64,
    width: i64,
    limit: usize,
    page: Option<String>,
    group_by: Vec<String>,
}

fn width_of(s: &str) -> Option<i64> {
    match s {
        "1d" => Some(86_400),
        "1h" => Some(3_600),
        "1m" => Some(60),
        _ => None,
    }
}

/// (default, max) limit for a bucket width.
fn limits(d: Dialect, report: Report, width: i64) -> (usize, usize) {
    match (report, width) {
        (Report::Cost, _) if d == Dialect::OpenAi => (7, 180),
        (_, 86_400) => (7, 31),
        (_, 3_600) => (24, 168),
        _ => (60, 1_440),
    }
}

fn group_keys(d: Dialect, report: Report) -> &'static [&'static str] {
    match (d, report) {
        (Dialect::OpenAi, Report::Usage) => &[
            "project_id",
            "user_id",
            "api_key_id",
            "model",
            "batch",
            "service_tier",
        ],
        (Dialect::OpenAi, Report::Cost) => &["project_id", "line_item", "api_key_id"],
        (Dialect::Anthropic, Report::Usage) => &[
            "api_key_id",
            "workspace_id",
            "model",
            "service_tier",
            "context_window",
        ],
        (Dialect::Anthropic, Report::Cost) => &["workspace_id", "description"],
    }
}

fn parse_time(d: Dialect, name: &str, v: &str) -> Result<i64, String> {
    match d {
        Dialect::OpenAi => v
            .parse()
            .map_err(|_| format!("{name} must be Unix seconds, got {v:?}")),
        Dialect::Anthropic => DateTime::parse_from_rfc3339(v)
            .map(|t| t.timestamp())
            .map_err(|_| format!("{name} must be an RFC 3339 timestamp, got {v:?}")),
    }
}

fn parse(d: Dialect, report: Report, pairs: &[(String, String)]) -> Result<Params, String> {
    let (start_name, end_name) = match d {
        Dialect::OpenAi => ("start_time", "end_time"),
        Dialect::Anthropic => ("starting_at", "ending_at"),
    };
    let (mut start, mut end, mut width, mut limit, mut page) = (None, None, None, None, None);
    let mut group_by = Vec::new();
    for (k, v) in pairs {
        match k.as_str() {
            k if k == start_name => start = Some(parse_time(d, k, v)?),
            k if k == end_name => end = Some(parse_time(d, k, v)?),
            "bucket_width" => {
                let w = width_of(v).ok_or_else(|| format!("bad bucket_width {v:?}"))?;
                if report == Report::Cost && w != 86_400 {
                    return Err("the cost report has only bucket_width=1d".into());
                }
                width = Some(w);
            }
            "limit" => {
                limit = Some(
                    v.parse::<usize>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| format!("bad limit {v:?}"))?,
                )
            }
            "page" => page = Some(v.clone()),
            "group_by" | "group_by[]" => {
                if !group_keys(d, report).contains(&v.as_str()) {
                    return Err(format!("cannot group by {v:?}"));
                }
                group_by.push(v.clone());
            }
            other => return Err(format!("unknown parameter {other:?}")),
        }
    }
    let start = start.ok_or_else(|| format!("{start_name} is required"))?;
    let end = end.ok_or_else(|| format!("{end_name} is required"))?;
    if end <= start {
        return Err(format!("{end_name} must be after {start_name}"));
    }
    let width = width.unwrap_or(86_400);
    let (default, max) = limits(d, report, width);
    let limit = limit.unwrap_or(default);
    if limit > max {
        return Err(format!("limit must be at most {max}"));
    }
    Ok(Params {
        start,
        end,
        width,
        limit,
        page,
        group_by,
    })
}

/// The buckets of one page.
struct Page {
    /// (start, end) in Unix seconds.
    buckets: Vec<(i64, i64)>,
    /// Seconds.
    width: i64,
    next: Option<String>,
}

impl Params {
    fn grouped(&self, by: &str) -> bool {
        self.group_by.iter().any(|g| g == by)
    }

    fn page(&self, page_size: Option<usize>) -> Result<Page, String> {
        let total = (self.end - self.start + self.width - 1) / self.width;
        let first = match &self.page {
            None => 0,
            Some(c) => {
                let at: i64 = c.parse().map_err(|_| format!("bad page cursor {c:?}"))?;
                let i = (at - self.start) / self.width;
                if at < self.start || (at - self.start) % self.width != 0 || i >= total {
                    return Err(format!("page cursor {c:?} is not of this query"));
                }
                i
            }
        };
        let per = self.limit.min(page_size.unwrap_or(usize::MAX)) as i64;
        let last = (first + per).min(total);
        let buckets = (first..last)
            .map(|i| {
                let s = self.start + i * self.width;
                (s, (s + self.width).min(self.end))
            })
            .collect();
        let next = (last < total).then(|| (self.start + last * self.width).to_string());
        Ok(Page {
            buckets,
            width: self.width,
            next,
        })
    }
}

/// A result's dimensions (`None`: not grouped by it).
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Group {
    key_id: Option<String>,
    workspace: Option<String>,
    model: Option<String>,
}

/// Each bucket's usage by group.
fn bucketed(
    rows: &[Row],
    settings: &Settings,
    page: &Page,
    (key_id, workspace, model): (bool, bool, bool),
) -> Vec<BTreeMap<Group, Counts>> {
    let mut out = vec![BTreeMap::new(); page.buckets.len()];
    let Some(&(first, _)) = page.buckets.first() else {
        return out;
    };
    for r in rows {
        // Rows are of the page's span (`page_rows`): every one has a bucket.
        let i = ((r.at_ms - first * 1000) / (page.width * 1000)) as usize;
        if r.at_ms < first * 1000 || i >= out.len() {
            continue;
        }
        let (id, ws) = if key_id || workspace {
            settings.identity(&r.key)
        } else {
            Default::default()
        };
        let g = Group {
            key_id: key_id.then_some(id),
            workspace: workspace.then_some(ws),
            model: model.then(|| r.model.clone()),
        };
        *out[i].entry(g).or_default() += r.counts;
    }
    out
}

/// The recorded traffic of a page's buckets, with the settings to report it under.
fn page_rows(app: &crate::App, page: &Page) -> (Vec<Row>, Settings) {
    let from = page.buckets.first().map_or(0, |b| b.0);
    let to = page.buckets.last().map_or(0, |b| b.1);
    app.ledger.rows(from * 1000, to * 1000)
}

fn rfc3339(s: i64) -> String {
    DateTime::<Utc>::from_timestamp(s, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Parses, pages and reads the traffic, or answers with the error.
fn prepare(
    app: &crate::App,
    d: Dialect,
    report: Report,
    headers: &HeaderMap,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<(Params, Page, Vec<Row>, Settings), Box<Response>> {
    if let Some(r) = gate(app, d, headers) {
        return Err(Box::new(r));
    }
    let bad = |e: &str| Box::new(bad_params(d, e));
    let Query(pairs) = q.map_err(|e| bad(&e.body_text()))?;
    let params = parse(d, report, &pairs).map_err(|e| bad(&e))?;
    let page = params
        .page(app.ledger.settings().page_size)
        .map_err(|e| bad(&e))?;
    let (rows, settings) = page_rows(app, &page);
    Ok((params, page, rows, settings))
}

fn openai_page(data: Vec<Value>, next: Option<String>) -> Response {
    Json(json!({"object": "page", "data": data, "has_more": next.is_some(), "next_page": next}))
        .into_response()
}

fn anthropic_page(data: Vec<Value>, next: Option<String>) -> Response {
    Json(json!({"data": data, "has_more": next.is_some(), "next_page": next})).into_response()
}

/// `GET /v1/organization/usage/completions`.
pub(crate) async fn openai_usage(
    State(app): State<Shared>,
    headers: HeaderMap,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let (p, page, rows, settings) = match prepare(&app, Dialect::OpenAi, Report::Usage, &headers, q)
    {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let dims = (p.grouped("api_key_id"), false, p.grouped("model"));
    let per = bucketed(&rows, &settings, &page, dims);
    let data = page
        .buckets
        .iter()
        .zip(per)
        .map(|((s, e), groups)| {
            let results: Vec<Value> = groups
                .into_iter()
                .map(|(g, c)| {
                    // input_tokens is every input token: uncached + cache
                    // reads + cache writes (each of which is also given apart).
                    json!({
                        "object": "organization.usage.completions.result",
                        "input_tokens": c.uncached + c.cached + c.writes(),
                        "input_cached_tokens": c.cached,
                        "input_cache_write_tokens": c.writes(),
                        "input_uncached_tokens": c.uncached,
                        "input_audio_tokens": 0,
                        "output_tokens": c.output,
                        "output_audio_tokens": 0,
                        "num_model_requests": c.requests,
                        "project_id": null,
                        "user_id": null,
                        "api_key_id": g.key_id,
                        "model": g.model,
                        "batch": null,
                        "service_tier": null,
                    })
                })
                .collect();
            json!({"object": "bucket", "start_time": s, "end_time": e, "results": results})
        })
        .collect();
    openai_page(data, page.next)
}

/// `GET /v1/organizations/usage_report/messages`.
pub(crate) async fn anthropic_usage(
    State(app): State<Shared>,
    headers: HeaderMap,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let (p, page, rows, settings) =
        match prepare(&app, Dialect::Anthropic, Report::Usage, &headers, q) {
            Ok(x) => x,
            Err(r) => return *r,
        };
    let dims = (
        p.grouped("api_key_id"),
        p.grouped("workspace_id"),
        p.grouped("model"),
    );
    let per = bucketed(&rows, &settings, &page, dims);
    let data = page
        .buckets
        .iter()
        .zip(per)
        .map(|((s, e), groups)| {
            let results: Vec<Value> = groups
                .into_iter()
                .map(|(g, c)| {
                    json!({
                        // OpenAI's 30m / 12h writes are plain input to Anthropic.
                        "uncached_input_tokens": c.uncached + c.w30m + c.w12h,
                        "cache_creation": {
                            "ephemeral_1h_input_tokens": c.w1h,
                            "ephemeral_5m_input_tokens": c.w5m,
                        },
                        "cache_read_input_tokens": c.cached,
                        "output_tokens": c.output,
                        "server_tool_use": {"web_search_requests": c.web_search},
                        "api_key_id": g.key_id,
                        "workspace_id": g.workspace,
                        "model": g.model,
                        "service_tier": null,
                        "context_window": null,
                    })
                })
                .collect();
            json!({"starting_at": rfc3339(*s), "ending_at": rfc3339(*e), "results": results})
        })
        .collect();
    anthropic_page(data, page.next)
}

/// Pico-USD of `tokens` at `price` µUSD per million tokens (or of calls
/// at µUSD per call: 1 µUSD = 10^6 pico-USD).
fn pico(tokens: u64, price: u64) -> u128 {
    u128::from(tokens) * u128::from(price)
}

/// OpenAI's cost lines of a model's usage: (line item suffix, pico-USD).
fn openai_lines(c: &Counts, p: &Prices) -> [(&'static str, u128); 5] {
    [
        ("input", pico(c.uncached, p.input)),
        ("cached input", pico(c.cached, p.cached_input)),
        (
            "cache write",
            pico(c.w5m, p.cache_write_5m)
                + pico(c.w1h, p.cache_write_1h)
                + pico(c.w30m, p.cache_write_30m)
                + pico(c.w12h, p.cache_write_12h),
        ),
        ("output", pico(c.output, p.output)),
        ("web search", pico(c.web_search, p.web_search) * 1_000_000),
    ]
}

/// An Anthropic cost line: token type (None for web search), cost type,
/// description suffix.
type AnthropicLine = (Option<&'static str>, &'static str, &'static str);

/// Anthropic's cost lines of a model's usage.
fn anthropic_lines(c: &Counts, p: &Prices) -> [(AnthropicLine, u128); 6] {
    [
        (
            (Some("uncached_input_tokens"), "tokens", "Input Tokens"),
            pico(c.uncached + c.w30m + c.w12h, p.input),
        ),
        (
            (Some("output_tokens"), "tokens", "Output Tokens"),
            pico(c.output, p.output),
        ),
        (
            (
                Some("cache_read_input_tokens"),
                "tokens",
                "Input Tokens, Cache Read",
            ),
            pico(c.cached, p.cached_input),
        ),
        (
            (
                Some("cache_creation.ephemeral_5m_input_tokens"),
                "tokens",
                "Input Tokens, Cache Write (5m)",
            ),
            pico(c.w5m, p.cache_write_5m),
        ),
        (
            (
                Some("cache_creation.ephemeral_1h_input_tokens"),
                "tokens",
                "Input Tokens, Cache Write (1h)",
            ),
            pico(c.w1h, p.cache_write_1h),
        ),
        (
            (None, "web_search", "Web Search"),
            pico(c.web_search, p.web_search) * 1_000_000,
        ),
    ]
}

/// Pico-USD as cents, exactly: pico / 10^10, trailing zeros trimmed.
pub(crate) fn cents(pico: u128) -> String {
    let (int, frac) = (pico / 10_000_000_000, pico % 10_000_000_000);
    if frac == 0 {
        return int.to_string();
    }
    let frac = format!("{frac:010}");
    format!("{int}.{}", frac.trim_end_matches('0'))
}

/// `GET /v1/organization/costs`.
pub(crate) async fn openai_costs(
    State(app): State<Shared>,
    headers: HeaderMap,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let (p, page, rows, settings) = match prepare(&app, Dialect::OpenAi, Report::Cost, &headers, q)
    {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let by_line = p.grouped("line_item");
    let per = bucketed(
        &rows,
        &settings,
        &page,
        (p.grouped("api_key_id"), false, true),
    );
    let data = page
        .buckets
        .iter()
        .zip(per)
        .map(|((s, e), groups)| {
            let mut lines: BTreeMap<(Option<String>, Option<String>), u128> = BTreeMap::new();
            for (g, c) in groups {
                let model = g.model.unwrap_or_default();
                let prices = settings.prices.get(&model).copied().unwrap_or_default();
                for (item, cost) in openai_lines(&c, &prices) {
                    let line = by_line.then(|| format!("{model}, {item}"));
                    *lines.entry((g.key_id.clone(), line)).or_default() += cost;
                }
            }
            let results: Vec<Value> = lines
                .into_iter()
                .filter(|(_, cost)| *cost > 0)
                .map(|((key_id, line), cost)| {
                    json!({
                        "object": "organization.costs.result",
                        "amount": {"value": cost as f64 / 1e12, "currency": "usd"},
                        "line_item": line,
                        "project_id": null,
                        "api_key_id": key_id,
                    })
                })
                .collect();
            json!({"object": "bucket", "start_time": s, "end_time": e, "results": results})
        })
        .collect();
    openai_page(data, page.next)
}

/// `GET /v1/organizations/cost_report`.
pub(crate) async fn anthropic_costs(
    State(app): State<Shared>,
    headers: HeaderMap,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let (p, page, rows, settings) =
        match prepare(&app, Dialect::Anthropic, Report::Cost, &headers, q) {
            Ok(x) => x,
            Err(r) => return *r,
        };
    let by_desc = p.grouped("description");
    let per = bucketed(
        &rows,
        &settings,
        &page,
        (false, p.grouped("workspace_id"), true),
    );
    type Key = (Option<String>, Option<(String, AnthropicLine)>);
    let data = page
        .buckets
        .iter()
        .zip(per)
        .map(|((s, e), groups)| {
            let mut lines: BTreeMap<Key, u128> = BTreeMap::new();
            for (g, c) in groups {
                let model = g.model.unwrap_or_default();
                let prices = settings.prices.get(&model).copied().unwrap_or_default();
                for (line, cost) in anthropic_lines(&c, &prices) {
                    let line = by_desc.then(|| (model.clone(), line));
                    *lines.entry((g.workspace.clone(), line)).or_default() += cost;
                }
            }
            let results: Vec<Value> = lines
                .into_iter()
                .filter(|(_, cost)| *cost > 0)
                .map(|((workspace, line), cost)| {
                    let (model, token_type, cost_type, description) = match line {
                        Some((m, (tt, ct, d))) => {
                            let desc = format!("{m} Usage - {d}");
                            (Some(m), tt, Some(ct), Some(desc))
                        }
                        None => (None, None, None, None),
                    };
                    json!({
                        "currency": "USD",
                        "amount": cents(cost),
                        "workspace_id": workspace,
                        "description": description,
                        "cost_type": cost_type,
                        "context_window": null,
                        "model": model,
                        "service_tier": null,
                        "token_type": token_type,
                    })
                })
                .collect();
            json!({"starting_at": rfc3339(*s), "ending_at": rfc3339(*e), "results": results})
        })
        .collect();
    anthropic_page(data, page.next)
}

/// `GET /mock/admin`.
pub(crate) async fn get_settings(State(app): State<Shared>) -> Json<Settings> {
    Json(app.ledger.settings())
}

/// `POST /mock/admin`: merges the body into the settings, answers them.
pub(crate) async fn set_settings(State(app): State<Shared>, body: axum::body::Bytes) -> Response {
    let patch: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return crate::bad_request(e),
    };
    let Some(patch) = patch.as_object() else {
        return bad_params(Dialect::OpenAi, "the admin settings must be a JSON object");
    };
    match app.ledger.update(patch) {
        Ok(s) => Json(s).into_response(),
        Err(e) => bad_params(Dialect::OpenAi, &e),
    }
}

fn clock(app: &crate::App) -> Json<Value> {
    let now = app
        .ledger
        .now()
        .to_rfc3339_opts(SecondsFormat::Millis, true);
    Json(json!({"offset_secs": app.ledger.offset_secs(), "now": now}))
}

/// `GET /mock/clock`: `{"offset_secs": N, "now": RFC 3339}`.
pub(crate) async fn get_clock(State(app): State<Shared>) -> Json<Value> {
    clock(&app)
}

/// `POST /mock/clock {"offset_secs": N}`.
pub(crate) async fn set_clock(State(app): State<Shared>, body: axum::body::Bytes) -> Response {
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return crate::bad_request(e),
    };
    let Some(n) = v["offset_secs"].as_i64() else {
        return bad_params(Dialect::OpenAi, "offset_secs must be an integer");
    };
    app.ledger.set_offset_secs(n);
    clock(&app).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cents_are_exact() {
        assert_eq!(cents(0), "0");
        assert_eq!(cents(10_000_000_000), "1");
        assert_eq!(cents(123_456_789_000), "12.3456789");
        assert_eq!(cents(1), "0.0000000001");
        assert_eq!(cents(25_000_000_000_000), "2500");
    }

    #[test]
    fn pages_partition_the_buckets() {
        let p = Params {
            start: 0,
            end: 5 * 3600 - 10,
            width: 3600,
            limit: 24,
            page: None,
            group_by: vec![],
        };
        let a = p.page(Some(2)).unwrap();
        assert_eq!(a.buckets, vec![(0, 3600), (3600, 7200)]);
        assert_eq!(a.next.as_deref(), Some("7200"));
        let c = Params {
            page: Some("14400".into()),
            ..p
        };
        let last = c.page(Some(2)).unwrap();
        assert_eq!(last.buckets, vec![(14400, 17990)]);
        assert_eq!(last.next, None);
        let bad = Params {
            page: Some("100".into()),
            ..c
        };
        assert!(bad.page(None).is_err());
    }
}
