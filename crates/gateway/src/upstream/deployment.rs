//! The deployments of a model as the hot path reads them, and each one's
//! live state on this replica (health, in-flight count, idle connections,
//! metrics), which outlives catalog reloads.

use domain::provider::ProviderProfile;
use domain::routing::{self as rules, Health};
use domain::secret::Secret;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// One deployment of a model, as the hot path reads it.
#[derive(Debug)]
pub struct Deployment {
    pub name: Arc<str>,
    pub base_url: String,
    /// `base_url` + each endpoint's path, parsed once.
    pub endpoint_urls: super::EndpointUrls,
    pub upstream_model: String,
    pub api_key: Option<Secret>,
    pub weight: u32,
    pub priority: u32,
    pub max_inflight: Option<u32>,
    /// None: the model's profile applies.
    pub profile: Option<ProviderProfile>,
    pub live: Arc<Live>,
}

/// A deployment's state on this replica.
pub struct Live {
    pub(crate) model: String,
    pub(crate) name: String,
    health: Mutex<Health>,
    pub(crate) inflight: AtomicU32,
    metrics: OnceLock<Meters>,
    /// Idle connections to a plain-http upstream.
    pub conns: Arc<super::Idle>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("name", &self.name)
            .field("inflight", &self.inflight)
            .finish_non_exhaustive()
    }
}

/// Metric handles, registered once per deployment (first use: the
/// recorder is installed by then), so the hot path formats no labels.
pub(crate) struct Meters {
    pub(crate) requests: metrics::Counter,
    pub(crate) errors: metrics::Counter,
    pub(crate) rate_limited: metrics::Counter,
    pub(crate) ejections: metrics::Counter,
    pub(crate) seconds: metrics::Histogram,
    pub(crate) ejected: metrics::Gauge,
}

pub const REQUESTS: &str = "tollgate_deployment_requests_total";
pub const ERRORS: &str = "tollgate_deployment_errors_total";
pub const RATE_LIMITED: &str = "tollgate_deployment_rate_limited_total";
pub const EJECTIONS: &str = "tollgate_deployment_ejections_total";
pub const SECONDS: &str = "tollgate_deployment_upstream_seconds";
pub const EJECTED: &str = "tollgate_deployment_ejected";

impl Live {
    pub(crate) fn new(model: &str, name: &str) -> Self {
        Self {
            model: model.to_string(),
            name: name.to_string(),
            health: Mutex::new(Health::default()),
            inflight: AtomicU32::new(0),
            metrics: OnceLock::new(),
            conns: Arc::default(),
        }
    }

    pub(crate) fn meters(&self) -> &Meters {
        self.metrics.get_or_init(|| {
            let l = [
                ("model", self.model.clone()),
                ("deployment", self.name.clone()),
            ];
            Meters {
                requests: metrics::counter!(REQUESTS, &l),
                errors: metrics::counter!(ERRORS, &l),
                rate_limited: metrics::counter!(RATE_LIMITED, &l),
                ejections: metrics::counter!(EJECTIONS, &l),
                seconds: metrics::histogram!(SECONDS, &l),
                ejected: metrics::gauge!(EJECTED, &l),
            }
        })
    }

    pub(crate) fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn snapshot(&self) -> Health {
        *self.health()
    }

    pub fn inflight(&self) -> u32 {
        self.inflight.load(Ordering::Relaxed)
    }
}

/// Every deployment's live state, by (model, deployment), kept across
/// catalog reloads so a reload forgets no ejection.
#[derive(Default)]
pub struct Board {
    live: Mutex<HashMap<(String, String), Arc<Live>>>,
}

impl Board {
    /// The live state of a deployment (new if unknown).
    pub fn live(&self, model: &str, name: &str) -> Arc<Live> {
        let mut m = self.live.lock().unwrap_or_else(|p| p.into_inner());
        m.entry((model.to_string(), name.to_string()))
            .or_insert_with(|| Arc::new(Live::new(model, name)))
            .clone()
    }

    /// Forgets deployments no longer in the catalog.
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) {
        let mut m = self.live.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|(model, name), _| keep(model, name));
    }
}

impl rules::HealthView for Board {
    fn deployments(&self, model: &str) -> Vec<rules::DeploymentHealth> {
        let now = now_ms();
        let m = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = m
            .iter()
            .filter(|((md, _), _)| md == model)
            .map(|((_, name), l)| l.snapshot().describe(name, l.inflight(), now))
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }
}

/// Milliseconds since this process's first call: the health clock.
pub fn now_ms() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_millis() as u64
}
