//! `provider-reconcile`: each provider account's usage and cost reports
//! for a day, fetched from the provider's admin API and compared with the
//! ledger per account × day × model × class (docs/billing.md, "Closing
//! against the provider's invoice"). The comparison and its classification
//! are `domain::invoice`'s; this module fetches and stores.

use crate::{JobContext, JobError, JobReport};
use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use domain::invoice::{self, Class, LineSums, ProviderKind};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use store::ProviderAccountRow;

/// A day is final (the provider will not revise it) once fetched this long
/// after its end; until then each run fetches it again.
pub const FINAL_AFTER_HOURS: i64 = 36;
/// Days before today a scheduled run looks at (those not yet final).
pub const LOOKBACK_DAYS: i64 = 3;
/// Attempts at one page on 429 / 5xx / a dropped connection.
const ATTEMPTS: u32 = 5;
/// Longest wait honoured from a `Retry-After`.
const MAX_RETRY_AFTER_SECS: u64 = 30;
/// Buckets asked per page (the provider may send fewer).
const PAGE_LIMIT: u32 = 24;
/// Pages followed before giving up on a day (a provider that never ends).
const MAX_PAGES: u32 = 1_000;
/// The model of a provider cost line that names none.
pub const NO_MODEL: &str = "(no model)";

/// Why an account's day could not be reconciled.
#[derive(Debug)]
enum FetchError {
    /// The admin key was refused (401/403).
    Auth(u16),
    /// Anything else (network, 4xx, malformed, retries exhausted).
    Other(String),
}

impl From<store::StoreError> for FetchError {
    fn from(e: store::StoreError) -> Self {
        FetchError::Other(e.to_string())
    }
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Auth(s) => write!(f, "the provider refused the admin key ({s})"),
            FetchError::Other(m) => f.write_str(m),
        }
    }
}

/// The days a run reconciles: `day` when given, else the last
/// [`LOOKBACK_DAYS`] days before today (UTC) that some account has not
/// stored as final.
pub async fn days_to_run(
    ctx: &JobContext,
    accounts: &[ProviderAccountRow],
    now: DateTime<Utc>,
    day: Option<NaiveDate>,
) -> Result<Vec<NaiveDate>, JobError> {
    if let Some(d) = day {
        return Ok(vec![d]);
    }
    let today = now.date_naive();
    let from = today - Duration::days(LOOKBACK_DAYS);
    let stored = ctx.store.recon_days(from, today).await?;
    Ok((1..=LOOKBACK_DAYS)
        .rev()
        .map(|i| today - Duration::days(i))
        .filter(|d| {
            accounts.iter().any(|a| {
                !stored
                    .iter()
                    .any(|s| s.account_id == a.id && s.day == *d && s.is_final)
            })
        })
        .collect())
}

pub async fn run(
    ctx: &JobContext,
    now: DateTime<Utc>,
    day: Option<NaiveDate>,
) -> Result<JobReport, JobError> {
    let accounts = ctx.store.provider_accounts().await?;
    let days = days_to_run(ctx, &accounts, now, day).await?;
    let unreconciled = ctx.store.unreconciled_deployments().await?;
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| JobError::Failed(format!("http client: {e}")))?;
    let mut detail = Vec::new();
    let (mut lines_n, mut differences, mut revised, mut errors) = (0u64, 0u64, 0u64, 0u64);
    for acc in &accounts {
        for d in &days {
            match reconcile_day(ctx, &http, acc, *d, now).await {
                Ok(r) => {
                    lines_n += r.lines;
                    differences += r.differences;
                    revised += u64::from(r.revised);
                    detail.push(json!({"account": acc.id, "day": d.to_string(),
                        "lines": r.lines, "differences": r.differences, "revised": r.revised,
                        "tollgate_usd": domain::money::pico_shown(r.tollgate_pico),
                        "provider_usd": domain::money::pico_shown(r.provider_pico),
                        "drift_bps": r.drift_bps}));
                }
                Err(e) => {
                    errors += 1;
                    let msg = format!(
                        "provider account {}: {} could not be reconciled: {e}",
                        acc.id, d
                    );
                    tracing::warn!(account = %acc.id, day = %d, error = %e, "provider reconcile failed");
                    ctx.store
                        .add_notice(
                            None,
                            "provider_reconcile_failed",
                            &msg,
                            &json!({"account": acc.id, "day": d.to_string(),
                                "auth": matches!(e, FetchError::Auth(_))}),
                        )
                        .await?;
                    detail.push(
                        json!({"account": acc.id, "day": d.to_string(), "error": e.to_string()}),
                    );
                }
            }
        }
    }
    let days_s: Vec<String> = days.iter().map(|d| d.to_string()).collect();
    Ok(JobReport {
        clean: differences == 0 && errors == 0,
        idle: false,
        counts: json!({"accounts": accounts.len(), "days": days_s, "lines": lines_n,
            "differences": differences, "revised_days": revised, "errors": errors,
            "not_reconciled": unreconciled.len()}),
        detail: json!({"days": detail,
            "not_reconciled": unreconciled.iter().map(|(m, d)| format!("{m}/{d}")).collect::<Vec<_>>()}),
        summary: format!(
            "provider-reconcile: {} accounts × {} days, {lines_n} lines, {differences} differences, {revised} revised days, {errors} errors; {} deployments not reconciled",
            accounts.len(),
            days.len(),
            unreconciled.len()
        ),
    })
}

struct DayOutcome {
    lines: u64,
    differences: u64,
    revised: bool,
    tollgate_pico: i128,
    provider_pico: i128,
    drift_bps: i64,
}

async fn reconcile_day(
    ctx: &JobContext,
    http: &reqwest::Client,
    acc: &ProviderAccountRow,
    day: NaiveDate,
    now: DateTime<Utc>,
) -> Result<DayOutcome, FetchError> {
    let kind = ProviderKind::parse(&acc.kind)
        .ok_or_else(|| FetchError::Other(format!("unknown kind {}", acc.kind)))?;
    let key = ctx
        .settings
        .encryption_key
        .ok_or_else(|| FetchError::Other("keys.encryption_key is not configured".into()))?;
    let enc = ctx
        .store
        .provider_admin_key(&acc.id)
        .await?
        .ok_or_else(|| FetchError::Other("account is gone".into()))?;
    let admin_key = domain::secret::decrypt(&key, &enc).map_err(|_| {
        FetchError::Other("its admin key cannot be decrypted with the configured key".into())
    })?;
    let links = ctx.store.resolved_links(&acc.id).await?;
    let start = Utc.from_utc_datetime(&day.and_hms_opt(0, 0, 0).expect("midnight"));
    let end = start + Duration::days(1);
    let client = Client {
        http,
        kind,
        base: acc.api_base_url.trim_end_matches('/').to_string(),
        admin_key: admin_key.expose().to_string(),
    };
    let refs: BTreeSet<&str> = links.iter().map(|l| l.provider_ref.as_str()).collect();
    let provider = client.fetch_day(&refs, start, end).await?;

    // The ledger's side.
    let rows = ctx
        .store
        .recon_ledger(&links, start, end, invoice::EDGE_SECS)
        .await?;
    let mut sums: BTreeMap<(String, Class), LineSums> = BTreeMap::new();
    let reported: BTreeSet<Class> = invoice::usage_quantities(kind, &Value::Null)
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    for r in &rows {
        let mut classes = invoice::ledger_classes(kind, &r.charges);
        if kind == ProviderKind::OpenAi {
            classes.push((Class::Requests, r.requests, 0));
        }
        for (class, q, p) in classes {
            let s = sums.entry((r.upstream_model.clone(), class)).or_default();
            if r.edge != 0 {
                s.edge_qty += q;
            }
            if r.edge != 2 {
                s.tollgate_qty += q;
                s.tollgate_pico += p;
            }
        }
    }
    for ((model, class), q) in &provider.qty {
        let s = sums.entry((model.clone(), *class)).or_default();
        s.provider_qty = Some(*q);
    }
    for ((model, class), p) in &provider.pico {
        sums.entry((model.clone(), *class))
            .or_default()
            .provider_pico += *p;
    }
    for ((_, class), s) in sums.iter_mut() {
        if reported.contains(class) && s.provider_qty.is_none() {
            // Reported kind, no row: the provider counted none.
            s.provider_qty = Some(0);
        }
    }
    sums.retain(|_, s| {
        s.tollgate_qty != 0
            || s.provider_qty.unwrap_or(0) != 0
            || s.tollgate_pico != 0
            || s.provider_pico != 0
            || s.edge_qty != 0
    });
    let lines = invoice::compare(sums);
    let is_final = now >= end + Duration::hours(FINAL_AFTER_HOURS);
    let saved = ctx
        .store
        .save_recon_day(&acc.id, day, now, is_final, &provider.digest, &lines)
        .await?;
    let tollgate_pico: i128 = lines.iter().map(|l| l.sums.tollgate_pico).sum();
    let provider_pico: i128 = lines.iter().map(|l| l.sums.provider_pico).sum();
    let drift = invoice::drift_bps(tollgate_pico, provider_pico);
    let differences = lines.iter().filter(|l| l.finding.is_difference()).count() as u64;
    if saved == store::DaySaved::Revised {
        let _ = ctx
            .store
            .add_notice(
                None,
                "provider_day_revised",
                &format!(
                    "provider account {}: the provider revised {day}; its comparison was replaced",
                    acc.id
                ),
                &json!({"account": acc.id, "day": day.to_string()}),
            )
            .await;
    }
    if drift > i64::from(acc.drift_alert_bps) {
        let payload = json!({"kind": "provider_drift", "account": acc.id, "day": day.to_string(),
            "tollgate_usd": domain::money::pico_shown(tollgate_pico),
            "provider_usd": domain::money::pico_shown(provider_pico),
            "drift_bps": drift, "threshold_bps": acc.drift_alert_bps,
            "differences": lines.iter().filter(|l| l.finding.is_difference()).map(|l| json!({
                "model": l.model, "class": l.class.as_str(), "finding": l.finding.as_str(),
                "tollgate_qty": l.sums.tollgate_qty, "provider_qty": l.sums.provider_qty,
                "difference_usd": domain::money::pico_shown(l.sums.provider_pico - l.sums.tollgate_pico)})).collect::<Vec<_>>()});
        let notice = format!(
            "provider account {}: {day} drifts {:.2} % (tollgate {}, provider {})",
            acc.id,
            drift as f64 / 100.0,
            domain::money::pico_shown(tollgate_pico),
            domain::money::pico_shown(provider_pico)
        );
        // The day is stored already: an alert that cannot be recorded is
        // logged, and the next run records it.
        if let Err(e) = ctx
            .store
            .record_drift_alert(
                &acc.id,
                day,
                &payload,
                &notice,
                ctx.settings.webhook_url.is_some(),
                now,
            )
            .await
        {
            tracing::warn!(account = %acc.id, day = %day, error = %e, "provider drift alert not recorded");
        }
    }
    Ok(DayOutcome {
        lines: lines.len() as u64,
        differences,
        revised: saved == store::DaySaved::Revised,
        tollgate_pico,
        provider_pico,
        drift_bps: drift,
    })
}

/// What the provider reported for the account's deployments on a day.
struct ProviderDay {
    qty: BTreeMap<(String, Class), i64>,
    pico: BTreeMap<(String, Class), i128>,
    /// Of the figures above, to tell a revision from a re-run.
    digest: String,
}

struct Client<'a> {
    http: &'a reqwest::Client,
    kind: ProviderKind,
    base: String,
    admin_key: String,
}

impl Client<'_> {
    async fn fetch_day(
        &self,
        refs: &BTreeSet<&str>,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<ProviderDay, FetchError> {
        let mut qty: BTreeMap<(String, Class), i64> = BTreeMap::new();
        let mut pico: BTreeMap<(String, Class), i128> = BTreeMap::new();
        match self.kind {
            ProviderKind::OpenAi => {
                // A `proj_…` reference is a project, anything else an API key.
                let by_project = refs.iter().any(|r| r.starts_with("proj_"));
                let ref_field = if by_project {
                    "project_id"
                } else {
                    "api_key_id"
                };
                let (s, e) = (start.timestamp().to_string(), end.timestamp().to_string());
                let usage = self
                    .pages(
                        "/organization/usage/completions",
                        &[
                            ("start_time", s.as_str()),
                            ("end_time", e.as_str()),
                            ("bucket_width", "1h"),
                            ("group_by", ref_field),
                            ("group_by", "model"),
                        ],
                    )
                    .await?;
                for r in usage {
                    let (Some(rf), Some(model)) = (r[ref_field].as_str(), r["model"].as_str())
                    else {
                        continue;
                    };
                    if !refs.contains(rf) {
                        continue;
                    }
                    for (c, q) in invoice::usage_quantities(self.kind, &r) {
                        *qty.entry((model.to_string(), c)).or_default() += q;
                    }
                }
                let costs = self
                    .pages(
                        "/organization/costs",
                        &[
                            ("start_time", s.as_str()),
                            ("end_time", e.as_str()),
                            ("bucket_width", "1d"),
                            ("group_by", "line_item"),
                            ("group_by", ref_field),
                        ],
                    )
                    .await?;
                for r in costs {
                    if !r[ref_field].as_str().is_some_and(|x| refs.contains(x)) {
                        continue;
                    }
                    // A line without a model (a fee tollgate does not
                    // know) is kept, as `other` of no model.
                    let (model, class) = r["line_item"]
                        .as_str()
                        .and_then(invoice::openai_line_item)
                        .unwrap_or((NO_MODEL.to_string(), Class::Other));
                    let v = r["amount"]["value"]
                        .as_f64()
                        .ok_or_else(|| FetchError::Other("a cost without amount.value".into()))?;
                    *pico.entry((model, class)).or_default() += invoice::usd_f64_to_pico(v);
                }
            }
            ProviderKind::Anthropic => {
                let (s, e) = (
                    start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    end.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                );
                let usage = self
                    .pages(
                        "/organizations/usage_report/messages",
                        &[
                            ("starting_at", s.as_str()),
                            ("ending_at", e.as_str()),
                            ("bucket_width", "1h"),
                            ("group_by[]", "workspace_id"),
                            ("group_by[]", "model"),
                        ],
                    )
                    .await?;
                for r in usage {
                    let (Some(ws), Some(model)) = (r["workspace_id"].as_str(), r["model"].as_str())
                    else {
                        continue;
                    };
                    if !refs.contains(ws) {
                        continue;
                    }
                    for (c, q) in invoice::usage_quantities(self.kind, &r) {
                        *qty.entry((model.to_string(), c)).or_default() += q;
                    }
                }
                let costs = self
                    .pages(
                        "/organizations/cost_report",
                        &[
                            ("starting_at", s.as_str()),
                            ("ending_at", e.as_str()),
                            ("group_by[]", "workspace_id"),
                            ("group_by[]", "description"),
                        ],
                    )
                    .await?;
                for r in costs {
                    if !r["workspace_id"].as_str().is_some_and(|x| refs.contains(x)) {
                        continue;
                    }
                    let model = r["model"].as_str().unwrap_or(NO_MODEL);
                    let cents = r["amount"].as_str().ok_or_else(|| {
                        FetchError::Other("a cost without an amount string".into())
                    })?;
                    let p = invoice::decimal_to_pico(cents, invoice::PICO_PER_CENT)
                        .ok_or_else(|| FetchError::Other(format!("amount {cents:?}")))?;
                    *pico
                        .entry((model.to_string(), invoice::anthropic_cost_class(&r)))
                        .or_default() += p;
                }
            }
        }
        let mut h = Sha256::new();
        for ((m, c), q) in &qty {
            h.update(format!("q|{m}|{}|{q}\n", c.as_str()));
        }
        for ((m, c), p) in &pico {
            h.update(format!("p|{m}|{}|{p}\n", c.as_str()));
        }
        let digest = h
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>();
        Ok(ProviderDay { qty, pico, digest })
    }

    /// Every result of every bucket of every page.
    async fn pages(&self, path: &str, query: &[(&str, &str)]) -> Result<Vec<Value>, FetchError> {
        let mut out = Vec::new();
        let mut page: Option<String> = None;
        let limit = PAGE_LIMIT.to_string();
        for _ in 0..MAX_PAGES {
            let mut q: Vec<(&str, &str)> = query.to_vec();
            let is_cost_1d = path.ends_with("/costs") || path.ends_with("/cost_report");
            if !is_cost_1d {
                q.push(("limit", limit.as_str()));
            }
            if let Some(p) = page.as_deref() {
                q.push(("page", p));
            }
            let body = self.get(path, &q).await?;
            let data = body["data"]
                .as_array()
                .ok_or_else(|| FetchError::Other(format!("{path}: an answer without `data`")))?;
            for bucket in data {
                if let Some(rs) = bucket["results"].as_array() {
                    out.extend(rs.iter().cloned());
                }
            }
            if body["has_more"].as_bool() != Some(true) {
                return Ok(out);
            }
            page = Some(
                body["next_page"]
                    .as_str()
                    .ok_or_else(|| {
                        FetchError::Other(format!("{path}: has_more without next_page"))
                    })?
                    .to_string(),
            );
        }
        Err(FetchError::Other(format!(
            "{path}: more than {MAX_PAGES} pages"
        )))
    }

    /// One page, retried politely on 429, 5xx and dropped connections.
    async fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, FetchError> {
        let url = format!("{}{path}", self.base);
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            let req = self.http.get(&url).query(query);
            let req = match self.kind {
                ProviderKind::OpenAi => req.bearer_auth(&self.admin_key),
                ProviderKind::Anthropic => req
                    .header("x-api-key", &self.admin_key)
                    .header("anthropic-version", "2023-06-01"),
            };
            let wait = match req.send().await {
                Ok(r) if r.status().is_success() => {
                    return r
                        .json::<Value>()
                        .await
                        .map_err(|e| FetchError::Other(format!("{path}: {}", e.without_url())));
                }
                Ok(r) if matches!(r.status().as_u16(), 401 | 403) => {
                    return Err(FetchError::Auth(r.status().as_u16()));
                }
                Ok(r) if r.status().as_u16() == 429 || r.status().is_server_error() => {
                    last = format!("{path} answered {}", r.status());
                    r.headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(|s| s.min(MAX_RETRY_AFTER_SECS))
                        .unwrap_or(1 << attempt)
                }
                Ok(r) => {
                    return Err(FetchError::Other(format!("{path} answered {}", r.status())));
                }
                Err(e) => {
                    last = format!("{path}: {}", e.without_url());
                    1 << attempt
                }
            };
            if attempt + 1 < ATTEMPTS {
                tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
            }
        }
        Err(FetchError::Other(format!("{last} ({ATTEMPTS} attempts)")))
    }
}
