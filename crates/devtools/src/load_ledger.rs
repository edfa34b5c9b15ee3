//! `tollgate-dev load-ledger`: a synthetic month of usage for capacity
//! planning and benchmarks. Events go through the ledger's own write
//! (`Store::insert_usage_events`, rollups included) in the batch size the
//! gateway's ledger writer uses, from a fixed seed, so two runs of the same
//! arguments write the same books.

use anyhow::Context;
use chrono::{NaiveDate, TimeZone, Utc};
use domain::attribution::Attribution;
use domain::pricing::Price;
use domain::pricing::{Charges, Component};
use domain::usage::{RawUsage, UsageEvent};
use domain::Limits;
use std::io::Write;
use std::time::Instant;
use store::{AppRow, Store, TenantRow, TenantScope};

#[derive(Debug, Clone)]
pub struct LoadPlan {
    pub events: u64,
    pub tenants: u32,
    pub apps: u32,
    /// End users the events are spread over (`user-00000`…; 0: none).
    pub end_users: u32,
    /// `YYYY-MM`.
    pub period: String,
    /// Events per insert (the ledger writer's batch).
    pub batch: usize,
    /// Inserts in flight at once (one connection each). The events, and
    /// which batch each is in, do not depend on it.
    pub parallel: usize,
    /// Print progress to stderr.
    pub progress: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LoadReport {
    pub events_written: u64,
    pub seconds: f64,
}

impl LoadReport {
    pub fn events_per_sec(&self) -> f64 {
        self.events_written as f64 / self.seconds.max(1e-9)
    }
}

/// The models, their prices and their cached-input price (µUSD per
/// million tokens; OpenAI's list prices).
const MODELS: [(&str, Price, i64); 2] = [
    (
        "gpt-4o-mini",
        Price {
            input_micro_per_mtok: 150_000,
            output_micro_per_mtok: 600_000,
        },
        75_000,
    ),
    (
        "gpt-4o",
        Price {
            input_micro_per_mtok: 2_500_000,
            output_micro_per_mtok: 10_000_000,
        },
        1_250_000,
    ),
];

/// A small deterministic generator (SplitMix64): synthetic, not secret.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

pub fn tenant_id(i: u32) -> String {
    format!("load-{i:05}")
}

/// Creates the tenants `load-00000`… and their apps `app-0`… that do not
/// exist yet (audited, like any other creation).
async fn ensure_scopes(store: &Store, tenants: u32, apps: u32) -> anyhow::Result<()> {
    let existing: std::collections::HashSet<String> = store
        .tenant_ids(&TenantScope::system())
        .await?
        .into_iter()
        .collect();
    for t in 0..tenants {
        let id = tenant_id(t);
        if existing.contains(&id) {
            continue;
        }
        store
            .create_tenant(
                "load-ledger",
                &TenantRow {
                    id: id.clone(),
                    name: format!("Load tenant {t}"),
                    cost_center: format!("CC-{t:05}"),
                    priority: "standard".into(),
                    limits: Limits::default(),
                    may_borrow: false,
                    borrow_cap_tokens: 0,
                    allowed_models: None,
                    clamp_max_tokens: false,
                    max_queued_requests: None,
                    max_open_streams: None,
                },
            )
            .await?;
        for a in 0..apps {
            store
                .create_app(
                    "load-ledger",
                    &AppRow {
                        tenant_id: id.clone(),
                        id: format!("app-{a}"),
                        name: format!("App {a}"),
                        limits: Limits::default(),
                        allowed_models: None,
                        attribution: Default::default(),
                    },
                )
                .await?;
        }
    }
    Ok(())
}

/// The `n`-th synthetic event of the plan: spread over tenants, apps, four
/// keys per app, two models and the plan's end users, and in time order
/// over the month like a gateway's traffic (the `n`-th of `events` starts
/// in the `n`-th equal slice of the month, at a random moment in it), so
/// the ledger's time-ordered indexes grow at their end as they do in
/// production. Half the requests read part of their prompt from the
/// provider's cache: each row carries its charge components (input, cached
/// input, output), its exact cost and the provider's usage object, like a
/// settled request's.
fn event(plan: &LoadPlan, first_day: NaiveDate, days: u32, n: u64, rng: &mut Mix) -> UsageEvent {
    let t = rng.below(u64::from(plan.tenants)) as u32;
    let a = rng.below(u64::from(plan.apps.max(1)));
    let k = rng.below(4);
    let (model, price, cached_price) = &MODELS[rng.below(MODELS.len() as u64) as usize];
    let input = 20 + rng.below(2000) as i64;
    let output = 1 + rng.below(800) as i64;
    let cached = if rng.below(2) == 0 {
        input * rng.below(91) as i64 / 100
    } else {
        0
    };
    let end_user =
        (plan.end_users > 0).then(|| format!("user-{:05}", rng.below(u64::from(plan.end_users))));
    let mut charges = Charges::default();
    let per = |tokens: i64, micro_per_mtok: i64| i128::from(tokens) * i128::from(micro_per_mtok);
    charges.set(
        Component::Input,
        input - cached,
        per(input - cached, price.input_micro_per_mtok),
    );
    charges.set(Component::CachedInput, cached, per(cached, *cached_price));
    charges.set(
        Component::Output,
        output,
        per(output, price.output_micro_per_mtok),
    );
    let pico = i64::try_from(charges.total_pico()).expect("a small request's cost");
    // Micro-USD rounded up, as the gateway books a request's whole micro-USD.
    let cost = (pico + 999_999) / 1_000_000;
    let raw = format!(
        r#"{{"prompt_tokens":{input},"completion_tokens":{output},"total_tokens":{},"prompt_tokens_details":{{"cached_tokens":{cached}}}}}"#,
        input + output
    );
    let month_ms = u128::from(days) * 86_400_000;
    let events = u128::from(plan.events.max(1));
    let slice = (month_ms / events).max(1) as u64;
    let offset =
        ((u128::from(n) * month_ms / events) as u64 + rng.below(slice)).min(month_ms as u64 - 1);
    let month_start = Utc
        .from_utc_datetime(&first_day.and_hms_opt(0, 0, 0).expect("midnight"))
        .timestamp_millis();
    let started = month_start + offset as i64;
    let day = first_day + chrono::Days::new(offset / 86_400_000);
    UsageEvent {
        // The gateway's id form, carrying the start: the request log is in
        // id order. Stable for a plan, so a second run of it adds nothing.
        request_id: domain::request_id::at_millis(started, n),
        tenant_id: tenant_id(t),
        app_id: format!("app-{a}"),
        key_id: format!("load-key-{t:05}-{a}-{k}"),
        model: model.to_string(),
        period: plan.period.clone(),
        day: day.format("%Y-%m-%d").to_string(),
        input_tokens: input,
        output_tokens: output,
        cost_micro: cost,
        cost_pico: pico,
        est_tokens: input + output,
        est_cost_micro: cost,
        overrun_tokens: 0,
        overrun_cost_micro: 0,
        status: "ok".into(),
        stream: n.is_multiple_of(3),
        usage_source: "provider".into(),
        replica: "load-ledger".into(),
        started_at_ms: started,
        settled_at_ms: started + 500,
        anomaly: None,
        deployment: None,
        breakdown: None,
        charges: Some(charges),
        raw_usage: RawUsage::parse(&raw),
        attribution: Attribution {
            end_user,
            ..Default::default()
        },
    }
}

/// Writes the plan's events; returns how many were new and how long it took.
/// One task generates the batches in order; `plan.parallel` writers store
/// them, each through `Store::insert_usage_events` (events and rollups in
/// one statement, as the gateway's ledger writer does).
pub async fn load(store: &Store, plan: &LoadPlan) -> anyhow::Result<LoadReport> {
    let first_day = domain::period::parse_month(&plan.period)
        .and_then(|(y, m)| NaiveDate::from_ymd_opt(y, m, 1))
        .context("--period must be YYYY-MM")?;
    anyhow::ensure!(plan.tenants > 0, "--tenants must be at least 1");
    let next_month = first_day + chrono::Months::new(1);
    let days = (next_month - first_day).num_days() as u32;
    ensure_scopes(store, plan.tenants, plan.apps).await?;
    let started = Instant::now();
    let parallel = plan.parallel.max(1);
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<UsageEvent>>(parallel * 2);
    let rx = std::sync::Arc::new(tokio::sync::Mutex::new(rx));
    let writers: Vec<_> = (0..parallel)
        .map(|_| {
            let (store, rx) = (store.clone(), rx.clone());
            tokio::spawn(async move {
                let mut written = 0u64;
                loop {
                    let next = rx.lock().await.recv().await;
                    let Some(events) = next else { break };
                    written += store.insert_usage_events(&events).await?;
                }
                anyhow::Ok(written)
            })
        })
        .collect();
    let mut rng = Mix(0x7011_6a7e ^ u64::from(plan.tenants) << 32 ^ u64::from(plan.apps));
    let (mut n, mut last_print) = (0u64, Instant::now());
    let batch = plan.batch.max(1);
    while n < plan.events {
        let take = (plan.events - n).min(batch as u64);
        let events: Vec<UsageEvent> = (0..take)
            .map(|i| event(plan, first_day, days, n + i, &mut rng))
            .collect();
        if tx.send(events).await.is_err() {
            break; // a writer failed: its error is reported below
        }
        n += take;
        if plan.progress && (last_print.elapsed().as_millis() >= 500 || n == plan.events) {
            last_print = Instant::now();
            let rate = n as f64 / started.elapsed().as_secs_f64().max(1e-9);
            let pct = n * 100 / plan.events.max(1);
            let bar = "#".repeat((pct / 5) as usize);
            eprint!(
                "\r[{bar:<20}] {pct:3}% {n}/{} events, {rate:.0} events/s",
                plan.events
            );
            let _ = std::io::stderr().flush();
        }
    }
    drop(tx);
    let mut written = 0;
    for w in writers {
        written += w.await.context("ledger writer task")??;
    }
    if plan.progress {
        eprintln!();
    }
    Ok(LoadReport {
        events_written: written,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Keys per `Store::load_keys` statement.
const KEY_BATCH: usize = 2_000;

/// Creates `keys` fresh keys spread round-robin over the tenants
/// `load-00000`… (app `app-0`), creating those that are missing. The
/// plaintexts are generated like any key's and dropped: the catalog only
/// ever holds keyed hashes. Returns how many keys were created.
pub async fn load_keys(
    store: &Store,
    pepper: &[u8],
    keys: u64,
    tenants: u32,
) -> anyhow::Result<u64> {
    anyhow::ensure!(tenants > 0, "--tenants must be at least 1");
    ensure_scopes(store, tenants, 1).await?;
    let (started, mut done) = (Instant::now(), 0u64);
    while done < keys {
        let take = (keys - done).min(KEY_BATCH as u64);
        let batch: Vec<store::NewKey> = (done..done + take)
            .map(|i| {
                let key = domain::keys::generate();
                store::NewKey {
                    tenant_id: tenant_id((i % u64::from(tenants)) as u32),
                    app_id: "app-0".into(),
                    name: format!("load-key-{i}"),
                    prefix: domain::keys::display_prefix(&key),
                    key_hash: domain::keys::keyed_hash(pepper, &key),
                    limits: Limits::default(),
                    allowed_models: None,
                    expires_at: None,
                    attribution: Default::default(),
                }
            })
            .collect();
        store.load_keys("load-keys", &batch).await?;
        done += take;
        let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-9);
        eprint!("\r{done}/{keys} keys, {rate:.0} keys/s");
        let _ = std::io::stderr().flush();
    }
    eprintln!();
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;

    fn plan(events: u64) -> LoadPlan {
        LoadPlan {
            events,
            tenants: 3,
            apps: 2,
            end_users: 5,
            period: "2026-02".into(),
            batch: 500,
            parallel: 1,
            progress: false,
        }
    }

    /// Time order over the whole month, every day used, each event's day the
    /// UTC date of its start, all inside February 2026.
    #[test]
    fn events_run_through_the_month_in_time_order() {
        let p = plan(1000);
        let first = NaiveDate::from_ymd_opt(2026, 2, 1).unwrap();
        let mut rng = Mix(7);
        let evs: Vec<UsageEvent> = (0..p.events)
            .map(|n| event(&p, first, 28, n, &mut rng))
            .collect();
        assert!(evs
            .windows(2)
            .all(|w| w[0].started_at_ms < w[1].started_at_ms && w[0].request_id < w[1].request_id));
        for e in &evs {
            let at = domain::request_id::time_of(&e.request_id).unwrap();
            assert_eq!(at.timestamp_millis(), e.started_at_ms, "{}", e.request_id);
        }
        let start = Utc
            .with_ymd_and_hms(2026, 2, 1, 0, 0, 0)
            .unwrap()
            .timestamp_millis();
        let end = Utc
            .with_ymd_and_hms(2026, 3, 1, 0, 0, 0)
            .unwrap()
            .timestamp_millis();
        assert!(evs.iter().all(|e| (start..end).contains(&e.started_at_ms)));
        for e in &evs {
            let date = DateTime::from_timestamp_millis(e.started_at_ms)
                .unwrap()
                .date_naive();
            assert_eq!(e.day, date.format("%Y-%m-%d").to_string());
        }
        let days: std::collections::BTreeSet<&str> = evs.iter().map(|e| e.day.as_str()).collect();
        assert_eq!(days.len(), 28);
        assert_eq!(evs[0].day, "2026-02-01");
        assert_eq!(evs[999].day, "2026-02-28");
        // More events than milliseconds in the month still stay inside it.
        let p = plan(3_000_000_000);
        let last = event(&p, first, 28, p.events - 1, &mut rng);
        assert!(last.started_at_ms < end && last.day == "2026-02-28");
    }

    /// Each row is priced by component like a settled request: its parts
    /// add up to its tokens and its exact cost, the cached part at the
    /// cached price; the provider's usage object says the same; the end
    /// users are the plan's.
    #[test]
    fn events_carry_their_charges_and_usage() {
        let p = plan(2000);
        let first = NaiveDate::from_ymd_opt(2026, 2, 1).unwrap();
        let mut rng = Mix(11);
        let mut cached_rows = 0;
        for n in 0..p.events {
            let e = event(&p, first, 28, n, &mut rng);
            let ch = e.charges.as_ref().unwrap();
            let (i, c, o) = (
                ch.quantity_of(Component::Input),
                ch.quantity_of(Component::CachedInput),
                ch.quantity_of(Component::Output),
            );
            assert_eq!((i + c, o), (e.input_tokens, e.output_tokens));
            let (input, cached, output) = match e.model.as_str() {
                "gpt-4o-mini" => (150_000, 75_000, 600_000),
                _ => (2_500_000, 1_250_000, 10_000_000),
            };
            assert_eq!(e.cost_pico, i * input + c * cached + o * output);
            assert_eq!(e.cost_micro, (e.cost_pico + 999_999) / 1_000_000);
            let raw: serde_json::Value =
                serde_json::from_str(e.raw_usage.as_ref().unwrap().as_str()).unwrap();
            assert_eq!(raw["prompt_tokens"], e.input_tokens);
            assert_eq!(raw["prompt_tokens_details"]["cached_tokens"], c);
            let u = e.attribution.end_user.as_deref().unwrap();
            assert!(("user-00000"..="user-00004").contains(&u), "{u}");
            cached_rows += usize::from(c > 0);
        }
        assert!((700..1300).contains(&cached_rows), "{cached_rows}");
    }
}
