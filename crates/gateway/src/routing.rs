//! Which deployment of a model a request goes to, and the retries before
//! its first byte (docs/routing.md). The rules are `domain::routing`'s; each
//! deployment's live state (health, in-flight count, metrics) is
//! `upstream::deployment`'s; this module makes the attempts.

use crate::catalog::ModelEntry;
use crate::key_index::KeyEntry;
use crate::upstream::{self, now_ms, Deployment, Live};
use crate::Gateway;
use domain::request::Endpoint;
use domain::routing::{self as rules, Admit, Attempt, Candidate, HealthPolicy, RetryPolicy};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Retry and health tuning (`[routing]` in the configuration).
#[derive(Debug, Clone)]
pub struct RoutingTuning {
    pub retry: RetryPolicy,
    pub health: HealthPolicy,
    /// Timeout to response headers of one attempt, when the request's own
    /// timeout is longer.
    pub attempt_timeout: Duration,
    /// Period of the active probe of ejected deployments (None: passive only).
    pub probe_every: Option<Duration>,
}

impl Default for RoutingTuning {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            health: HealthPolicy::default(),
            attempt_timeout: Duration::from_secs(30),
            probe_every: None,
        }
    }
}

pub const RETRIES: &str = "tollgate_upstream_retries_total";
pub const FALLBACKS: &str = "tollgate_model_fallbacks_total";

static ROLLS: AtomicU64 = AtomicU64::new(0);

fn candidate(d: &Deployment, now: u64, panic: bool) -> Candidate {
    let under_cap = d.max_inflight.is_none_or(|cap| d.live.inflight() < cap);
    Candidate {
        weight: d.weight,
        priority: d.priority,
        usable: under_cap && (panic || d.live.health().admits(now) != Admit::No),
    }
}

/// Any deployment of the model could take a request now.
pub fn any_usable(model: &ModelEntry) -> bool {
    let now = now_ms();
    model
        .deployments
        .iter()
        .any(|d| d.weight > 0 && candidate(d, now, false).usable)
}

/// A deployment taken for one attempt: its in-flight slot, given back on drop.
pub struct Taken {
    live: Arc<Live>,
    pub name: Arc<str>,
    started: Instant,
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.live.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Picks a deployment not yet tried and takes an in-flight slot on it. In
/// `panic` (no deployment of the model is healthy and it has no usable
/// fallback) health is ignored: an ejected or parked deployment is still
/// tried rather than refusing without asking anyone, as Envoy's panic
/// routing does; one that is really down fails at once anyway.
fn take(
    model: &ModelEntry,
    tried: &mut u64,
    policy: &HealthPolicy,
    panic: bool,
) -> Option<(usize, Taken)> {
    let deps = &model.deployments;
    loop {
        let now = now_ms();
        let roll = rules::spread(ROLLS.fetch_add(1, Ordering::Relaxed));
        let i = rules::pick(
            deps.len(),
            |i| candidate(&deps[i], now, panic),
            *tried,
            roll,
        )?;
        *tried |= 1u64 << i;
        let d = &deps[i];
        let n = d.live.inflight.fetch_add(1, Ordering::Relaxed);
        let taken = Taken {
            live: d.live.clone(),
            name: d.name.clone(),
            started: Instant::now(),
        };
        if d.max_inflight.is_some_and(|cap| n >= cap) {
            continue; // another request took the last slot first
        }
        let mut h = d.live.health();
        match h.admits(now) {
            Admit::Yes => {}
            Admit::Probe if h.begin_probe(now, policy) => {}
            _ if panic => {}
            _ => continue,
        }
        return Some((i, taken));
    }
}

fn report(taken: &Taken, outcome: Attempt, policy: &HealthPolicy) {
    let meters = taken.live.meters();
    meters.requests.increment(1);
    let now = now_ms();
    let mut h = taken.live.health();
    match outcome {
        Attempt::Answered => {
            meters.seconds.record(taken.started.elapsed().as_secs_f64());
            h.on_success();
        }
        Attempt::RateLimited { retry_after_ms } => {
            meters.rate_limited.increment(1);
            h.park(now, retry_after_ms.unwrap_or(1_000));
        }
        a if a.is_failure() => {
            meters.errors.increment(1);
            if h.on_failure(now, policy) {
                meters.ejections.increment(1);
                tracing::warn!(model = %taken.live.model, deployment = %taken.live.name,
                    failures = h.failures, "deployment ejected");
            }
        }
        // A 4xx other than 429: the request's fault; the deployment answered.
        _ => h.on_success(),
    }
    meters
        .ejected
        .set(if matches!(h.state, rules::State::Healthy) {
            0.0
        } else {
            1.0
        });
}

/// What the routed call came to. Made once per request and taken apart at
/// once: boxing the answer would cost an allocation per request.
#[allow(clippy::large_enum_variant)]
pub enum Routed {
    /// Response headers from one deployment (2xx, or the last refusal when
    /// no retry was left), with the deployment that sent them.
    Response(upstream::Response, Taken),
    /// No deployment could be reached; why (never a URL or a key).
    Unreachable(String),
}

/// Sends the request to a deployment of `model`, retrying another on a
/// connect error, a timeout to headers, a 429 or a 5xx while tries and the
/// total deadline last. Nothing has reached the client yet: the caller
/// holds the one hold this request has, whichever deployment answers.
/// `large_of`: the tenant of a body above the tokenize pool's threshold,
/// whose turn in that pool writes it for each deployment tried.
pub async fn send(
    gw: &Gateway,
    model: &ModelEntry,
    endpoint: Endpoint,
    body: &mut Value,
    header_timeout: Duration,
    native: Option<domain::provider::Dialect>,
    large_of: Option<&str>,
) -> Routed {
    let t = &gw.cfg.routing;
    let t0 = Instant::now();
    let mut tried = 0u64;
    let mut tries = 0u32;
    let mut last = String::from("no deployment of the model is available");
    let panic = !any_usable(model);
    while let Some((i, taken)) = take(model, &mut tried, &t.health, panic) {
        let d = &model.deployments[i];
        tries += 1;
        if tries > 1 {
            metrics::counter!(RETRIES, "model" => model.id.clone()).increment(1);
        }
        let req = match native {
            // The provider's own dialect: its model name, the body as is.
            Some(dialect) => {
                body["model"] = Value::String(d.upstream_model.clone());
                let bytes = gw.tokenize.serialise(large_of, body).await;
                upstream::native_request(d, dialect, bytes)
            }
            None => {
                for_deployment(body, d);
                let bytes = gw.tokenize.serialise(large_of, body).await;
                upstream::request(d, endpoint, bytes)
            }
        };
        let req = match req {
            Ok(r) => r,
            Err(why) => {
                report(&taken, Attempt::ConnectFailed, &t.health);
                last = why.to_string();
                continue;
            }
        };
        let floor = Duration::from_millis(100);
        let within =
            t.retry
                .attempt_timeout(header_timeout.min(t.attempt_timeout), t0.elapsed(), floor);
        let (outcome, resp) = match tokio::time::timeout(
            within,
            gw.upstream.send(&d.live.conns, req, large_of.is_some()),
        )
        .await
        {
            Ok(Ok(r)) => (attempt_of(&r), Some(r)),
            Ok(Err(e)) => {
                last = upstream::error_chain(&*e);
                (Attempt::ConnectFailed, None)
            }
            Err(_) => {
                last = "no response headers within the timeout".to_string();
                (Attempt::TimedOut, None)
            }
        };
        report(&taken, outcome, &t.health);
        let again = t.retry.again(tries, t0.elapsed(), outcome)
            && rules::pick(
                model.deployments.len(),
                |j| candidate(&model.deployments[j], now_ms(), panic),
                tried,
                0,
            )
            .is_some();
        match resp {
            Some(r) if !again => return Routed::Response(r, taken),
            // Dropped unread: a refusal's body is not worth a pooled connection.
            Some(r) => {
                tracing::info!(model = %model.id, deployment = %d.name, status = r.status().as_u16(),
                    "upstream refused before the first byte; retrying on another deployment");
            }
            None => {
                tracing::warn!(model = %model.id, deployment = %d.name, error = %last,
                    "upstream unreachable");
                if !again {
                    break;
                }
            }
        }
    }
    Routed::Unreachable(last)
}

fn attempt_of(r: &upstream::Response) -> Attempt {
    let s = r.status();
    if s.is_success() {
        return Attempt::Answered;
    }
    if s.as_u16() == 429 {
        let retry_after_ms = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
            .map(|secs| secs.saturating_mul(1_000));
        return Attempt::RateLimited { retry_after_ms };
    }
    Attempt::Status(s.as_u16())
}

/// Makes the body what this deployment must see: its own model name and, when
/// it has a profile of its own, the output cap in the profile's field(s).
fn for_deployment(body: &mut Value, d: &Deployment) {
    body["model"] = Value::String(d.upstream_model.clone());
    if let Some(p) = &d.profile {
        let fields = ["max_tokens", "max_completion_tokens"];
        let cap = fields
            .iter()
            .find_map(|f| body.get(*f).filter(|v| !v.is_null()).cloned());
        if let (Some(cap), Some(obj)) = (cap, body.as_object_mut()) {
            for f in fields {
                obj.remove(f);
            }
            for f in p.cap_field.fields() {
                obj.insert((*f).to_string(), cap.clone());
            }
        }
    }
}

/// The model that serves a request for `model`: itself while any of its
/// deployments can take it; else the first of its fallbacks the key may use
/// whose deployments can (checked for the same kind of model).
pub fn serving_model(gw: &Gateway, key: &KeyEntry, model: Arc<ModelEntry>) -> Arc<ModelEntry> {
    if model.fallbacks.is_empty() || any_usable(&model) {
        return model;
    }
    let index = gw.catalog.get();
    let fallback = model.fallbacks.iter().find_map(|id| {
        let f = index.models.get(id)?;
        (f.kind == model.kind && key.may_use(&f.id) && any_usable(f)).then(|| f.clone())
    });
    match fallback {
        Some(f) => {
            metrics::counter!(FALLBACKS, "model" => model.id.clone(), "fallback" => f.id.clone())
                .increment(1);
            f
        }
        None => model,
    }
}

/// One active probe round: every ejected deployment due for its probe gets
/// `GET {base}/models`; an answer puts it back, a failure ejects it again.
pub async fn probe_round(gw: &Gateway) {
    let index = gw.catalog.get();
    let policy = &gw.cfg.routing.health;
    for model in index.models.values() {
        for d in &model.deployments {
            let now = now_ms();
            let due = {
                let mut h = d.live.health();
                !matches!(h.state, rules::State::Healthy) && h.begin_probe(now, policy)
            };
            if !due {
                continue;
            }
            d.live.inflight.fetch_add(1, Ordering::Relaxed);
            let taken = Taken {
                live: d.live.clone(),
                name: d.name.clone(),
                started: Instant::now(),
            };
            let outcome = match upstream::probe(d) {
                Some(req) => {
                    let sent = gw.upstream.send(&d.live.conns, req, false);
                    match tokio::time::timeout(gw.cfg.routing.attempt_timeout, sent).await {
                        Ok(Ok(r)) if r.status().is_success() => Attempt::Answered,
                        Ok(Ok(r)) => attempt_of(&r),
                        Ok(Err(_)) => Attempt::ConnectFailed,
                        Err(_) => Attempt::TimedOut,
                    }
                }
                None => Attempt::ConnectFailed,
            };
            report(&taken, outcome, policy);
        }
    }
}

/// Runs `probe_round` every `every` (the optional active probe).
pub fn spawn_prober(gw: Arc<Gateway>, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            probe_round(&gw).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ModelKind;
    use crate::upstream::Board;
    use domain::provider::ProviderProfile;

    fn model(weights: &[(u32, u32, Option<u32>)]) -> ModelEntry {
        let board = Board::default();
        let deployments = weights
            .iter()
            .enumerate()
            .map(|(i, &(weight, priority, max_inflight))| Deployment {
                name: Arc::from(format!("d{i}").as_str()),
                base_url: "http://127.0.0.1:9/v1".into(),
                endpoint_urls: upstream::endpoint_urls("http://127.0.0.1:9/v1"),
                upstream_model: "m".into(),
                api_key: None,
                weight,
                priority,
                max_inflight,
                profile: None,
                live: board.live("m", &format!("d{i}")),
            })
            .collect();
        ModelEntry {
            id: "m".into(),
            kind: ModelKind::Chat,
            base_url: "http://127.0.0.1:9/v1".into(),
            endpoint_urls: upstream::endpoint_urls("http://127.0.0.1:9/v1"),
            upstream_model: "m".into(),
            api_key: None,
            price: domain::pricing::Price {
                input_micro_per_mtok: 0,
                output_micro_per_mtok: 0,
            },
            prices: Default::default(),
            tokenizer: domain::tokens::TokenizerFamily::Cl100k,
            media: domain::media::Media::for_model("m"),
            default_max_output: 16,
            degrade_to: None,
            pool_capacity: None,
            guarantees: Vec::new(),
            deployments,
            fallbacks: Vec::new(),
            profile: ProviderProfile::default(),
        }
    }

    #[test]
    fn the_in_flight_cap_is_held_until_the_request_is_done() {
        let m = model(&[(1, 0, Some(1)), (1, 1, None)]);
        let p = HealthPolicy::default();
        let (i, first) = take(&m, &mut 0, &p, false).unwrap();
        assert_eq!(i, 0);
        let (j, _second) = take(&m, &mut 0, &p, false).unwrap();
        assert_eq!(j, 1, "d0 is at its cap: the fallback priority serves");
        drop(first);
        assert_eq!(
            take(&m, &mut 0, &p, false).unwrap().0,
            0,
            "the slot came back"
        );
        assert_eq!(m.deployments[0].live.inflight(), 0);
    }

    #[test]
    fn failures_eject_a_deployment_and_the_rest_serve() {
        let m = model(&[(1, 0, None), (1, 0, None)]);
        let p = HealthPolicy::default();
        let mut tried = 0;
        let (i, t) = take(&m, &mut tried, &p, false).unwrap();
        for _ in 0..p.eject_after {
            report(&t, Attempt::ConnectFailed, &p);
        }
        drop(t);
        assert!(any_usable(&m));
        for _ in 0..50 {
            assert_ne!(take(&m, &mut 0, &p, false).unwrap().0, i, "ejected");
        }
        let (_, t) = take(&m, &mut 0, &p, false).unwrap();
        report(&t, Attempt::Status(503), &p);
        report(&t, Attempt::Status(503), &p);
        report(&t, Attempt::Status(503), &p);
        drop(t);
        assert!(!any_usable(&m), "every deployment ejected");
        assert!(take(&m, &mut 0, &p, false).is_none());
    }

    /// Routing's CPU per request (pick + slot + health report), one
    /// deployment against three. A timing, not a check:
    /// `cargo test -p tollgate-gateway --release -- --ignored --nocapture routing_cost`.
    #[test]
    #[ignore = "a timing, run by hand"]
    fn routing_cost() {
        let p = HealthPolicy::default();
        let per_request = |m: &ModelEntry| {
            let n = 500_000u32;
            let t0 = Instant::now();
            for _ in 0..n {
                let (_, t) = take(m, &mut 0, &p, false).unwrap();
                report(&t, Attempt::Answered, &p);
            }
            t0.elapsed().as_nanos() as f64 / f64::from(n)
        };
        let one = model(&[(1, 0, None)]);
        let three = model(&[(3, 0, None), (1, 0, None), (1, 1, Some(100))]);
        per_request(&one);
        let (a, b) = (per_request(&one), per_request(&three));
        println!(
            "routing per request: one deployment {a:.0} ns, three {b:.0} ns, difference {:.0} ns",
            b - a
        );
    }
}
