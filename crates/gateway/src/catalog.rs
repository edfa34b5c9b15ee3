//! The in-memory index the hot path reads: virtual keys by keyed hash, with
//! their app and tenant limits, and models with prices and upstreams. Rebuilt
//! from Postgres on every `tollgate_config` notification (and every 30 s as a
//! safety net), then swapped in atomically.

use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};
use domain::fairq::Priority;
use domain::limits::{self, Limits};
use domain::pricing::Price;
use domain::secret::{self, Secret};
use domain::tokens::TokenizerFamily;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use store::{Catalog, Store, TenantScope};

#[derive(Debug)]
pub struct TenantEntry {
    pub id: String,
    pub limits: Limits,
    pub allowed_models: Option<HashSet<String>>,
    pub clamp_max_tokens: bool,
    pub grants: Vec<Grant>,
    pub priority: Priority,
    pub may_borrow: bool,
    pub borrow_cap_tokens: i64,
    /// Outstanding borrowed quota by period (`YYYY-MM` → tokens, micro-USD).
    /// Loaded from Postgres; the borrower also sets it the moment a borrow
    /// lands, so the request that asked can retry before the reload.
    pub borrowed: RwLock<HashMap<String, (i64, i64)>>,
}

impl TenantEntry {
    /// Borrowed quota outstanding in `month` (tokens, micro-USD).
    pub fn borrowed_in(&self, month: &str) -> (i64, i64) {
        let b = self.borrowed.read().expect("borrowed lock");
        b.get(month).copied().unwrap_or((0, 0))
    }

    /// Sets the outstanding borrowed quota of `month` (absolute, as read
    /// from Postgres: setting it twice is harmless).
    pub fn set_borrowed(&self, month: &str, tokens: i64, cost_micro: i64) {
        let mut b = self.borrowed.write().expect("borrowed lock");
        b.insert(month.to_string(), (tokens, cost_micro));
    }

    /// The tenant's own effective limits in `month`: base + unexpired
    /// grants + borrowed.
    pub fn effective(&self, now: DateTime<Utc>, month: &str) -> Limits {
        let (tokens, cost_micro) = self.borrowed_in(month);
        let borrowed = limits::Borrowed { tokens, cost_micro };
        limits::effective(&self.limits, &self.grants, borrowed, now)
    }

    /// Unexpired grants (tokens, micro-USD).
    pub fn granted(&self, now: DateTime<Utc>) -> (i64, i64) {
        limits::granted(&self.grants, now)
    }
}

/// An approved temporary grant (counts until it expires).
pub use domain::limits::Grant;

#[derive(Debug)]
pub struct AppEntry {
    pub id: String,
    pub limits: Limits,
    pub allowed_models: Option<HashSet<String>>,
    pub grants: Vec<Grant>,
}

#[derive(Debug)]
pub struct KeyEntry {
    pub id: String,
    pub tenant: Arc<TenantEntry>,
    pub app: Arc<AppEntry>,
    pub limits: Limits,
    pub allowed_models: Option<HashSet<String>>,
    pub expires_at: Option<DateTime<Utc>>,
}

impl KeyEntry {
    /// Limits of tenant, app and key: the order the hold engine expects.
    pub fn scope_limits(&self) -> [&Limits; 3] {
        [&self.tenant.limits, &self.app.limits, &self.limits]
    }

    /// What budgets are checked against in `month` (docs/design.md §3): base +
    /// approved grants unexpired at `now` + the tenant's outstanding
    /// borrowed quota of that month.
    pub fn effective_limits(&self, now: DateTime<Utc>, month: &str) -> [Limits; 3] {
        [
            self.tenant.effective(now, month),
            limits::effective(&self.app.limits, &self.app.grants, Default::default(), now),
            self.limits.clone(),
        ]
    }

    /// A model is usable only if tenant, app and key all allow it.
    pub fn may_use(&self, model: &str) -> bool {
        [
            &self.tenant.allowed_models,
            &self.app.allowed_models,
            &self.allowed_models,
        ]
        .iter()
        .all(|a| a.as_ref().is_none_or(|set| set.contains(model)))
    }

    /// The tightest per-request cap of the three scopes.
    pub fn cap(&self, f: impl Fn(&Limits) -> Option<i64>) -> Option<i64> {
        self.scope_limits().into_iter().filter_map(f).min()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    Chat,
    Embedding,
}

#[derive(Debug)]
pub struct ModelEntry {
    pub id: String,
    pub kind: ModelKind,
    /// Without trailing slash, e.g. `https://api.deepseek.com/v1`.
    pub base_url: String,
    /// `base_url` + each endpoint's path, parsed once here rather than on
    /// every request (URL parsing showed in the profile); None when the
    /// base URL does not parse, and the request then fails upstream.
    pub endpoint_urls: [Option<http::Uri>; 3],
    pub upstream_model: String,
    pub api_key: Option<Secret>,
    pub price: Price,
    pub tokenizer: TokenizerFamily,
    pub default_max_output: i64,
    /// The cheaper model a tenant past its daily soft limit is sent to.
    pub degrade_to: Option<String>,
    /// Most concurrent upstream requests across replicas (None: no pool).
    pub pool_capacity: Option<i64>,
    /// Core tenants' guaranteed slots of that pool: (tenant, slots).
    pub guarantees: Vec<(String, i64)>,
    /// How the provider behaves: the cap field it reads, hidden reasoning,
    /// native dialects (one value, so it can move to a deployment whole).
    pub profile: domain::provider::ProviderProfile,
}

#[derive(Default)]
pub struct Index {
    pub keys: HashMap<[u8; 32], Arc<KeyEntry>>,
    pub models: HashMap<String, Arc<ModelEntry>>,
    pub tenant_ids: Vec<String>,
    /// Tenants by id (the borrower and the reclaim job read these).
    pub tenants: HashMap<String, Arc<TenantEntry>>,
}

fn set(v: Option<Vec<String>>) -> Option<HashSet<String>> {
    v.map(|v| v.into_iter().collect())
}

impl Index {
    pub fn build(c: Catalog, secret_key: &[u8; 32]) -> Index {
        let tenants: HashMap<String, Arc<TenantEntry>> = c
            .tenants
            .into_iter()
            .map(|t| {
                let e = TenantEntry {
                    id: t.id.clone(),
                    limits: t.limits,
                    allowed_models: set(t.allowed_models),
                    clamp_max_tokens: t.clamp_max_tokens,
                    grants: grants_of(&c.grants, &t.id, None),
                    priority: Priority::parse(&t.priority),
                    may_borrow: t.may_borrow,
                    borrow_cap_tokens: t.borrow_cap_tokens,
                    borrowed: RwLock::new(
                        c.borrowed
                            .iter()
                            .filter(|b| b.tenant_id == t.id)
                            .map(|b| (b.period.clone(), (b.tokens, b.cost_micro)))
                            .collect(),
                    ),
                };
                (t.id, Arc::new(e))
            })
            .collect();
        let apps: HashMap<(String, String), Arc<AppEntry>> = c
            .apps
            .into_iter()
            .map(|a| {
                let e = AppEntry {
                    id: a.id.clone(),
                    limits: a.limits,
                    allowed_models: set(a.allowed_models),
                    grants: grants_of(&c.grants, &a.tenant_id, Some(&a.id)),
                };
                ((a.tenant_id, a.id), Arc::new(e))
            })
            .collect();
        let mut keys = HashMap::with_capacity(c.keys.len());
        for k in c.keys {
            let (Some(tenant), Some(app)) = (
                tenants.get(&k.tenant_id),
                apps.get(&(k.tenant_id.clone(), k.app_id.clone())),
            ) else {
                continue;
            };
            let Ok(hash) = <[u8; 32]>::try_from(k.key_hash.as_slice()) else {
                continue;
            };
            keys.insert(
                hash,
                Arc::new(KeyEntry {
                    id: k.id.to_string(),
                    tenant: tenant.clone(),
                    app: app.clone(),
                    limits: k.limits,
                    allowed_models: set(k.allowed_models),
                    expires_at: k.expires_at,
                }),
            );
        }
        let mut models = HashMap::new();
        for m in c.models {
            let api_key = match m
                .upstream_api_key_enc
                .as_deref()
                .map(|b| secret::decrypt(secret_key, b))
            {
                None => None,
                Some(Ok(s)) => Some(s),
                Some(Err(_)) => {
                    // Served without a key would leak nothing but fail upstream;
                    // refusing the model makes the misconfiguration visible.
                    tracing::error!(model = %m.id, "upstream key cannot be decrypted with the configured key; model disabled");
                    continue;
                }
            };
            let entry = ModelEntry {
                tokenizer: TokenizerFamily::for_model(m.tokenizer.as_deref(), &m.upstream_model),
                id: m.id.clone(),
                kind: if m.kind == "embedding" {
                    ModelKind::Embedding
                } else {
                    ModelKind::Chat
                },
                endpoint_urls: crate::upstream::endpoint_urls(&m.upstream_base_url),
                base_url: m.upstream_base_url.trim_end_matches('/').to_string(),
                upstream_model: m.upstream_model,
                api_key,
                price: Price {
                    input_micro_per_mtok: m.input_price_micro_per_mtok,
                    output_micro_per_mtok: m.output_price_micro_per_mtok,
                },
                default_max_output: m.default_max_output_tokens,
                degrade_to: m.degrade_to,
                pool_capacity: m.pool_capacity.map(i64::from),
                guarantees: c
                    .guarantees
                    .iter()
                    .filter(|g| g.model_id == m.id)
                    .map(|g| (g.tenant_id.clone(), i64::from(g.slots)))
                    .collect(),
                profile: m.profile,
            };
            models.insert(m.id, Arc::new(entry));
        }
        let mut tenant_ids: Vec<String> = tenants.keys().cloned().collect();
        tenant_ids.sort();
        Index {
            keys,
            models,
            tenant_ids,
            tenants,
        }
    }
}

pub struct CatalogCache {
    index: ArcSwap<Index>,
    secret_key: [u8; 32],
}

impl CatalogCache {
    pub fn new(secret_key: [u8; 32]) -> Self {
        Self {
            index: ArcSwap::from_pointee(Index::default()),
            secret_key,
        }
    }

    pub fn get(&self) -> arc_swap::Guard<Arc<Index>> {
        self.index.load()
    }

    pub async fn reload(&self, store: &Store) -> Result<(), store::StoreError> {
        let c = store.load_catalog(&TenantScope::system()).await?;
        let (k, m) = (c.keys.len(), c.models.len());
        self.index
            .store(Arc::new(Index::build(c, &self.secret_key)));
        tracing::debug!(keys = k, models = m, "catalog reloaded");
        Ok(())
    }

    /// Keeps the index current: LISTEN for changes, reload on each, and
    /// reconnect after a database outage (serving the last index meanwhile).
    pub fn spawn_listener(self: Arc<Self>, store: Store) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                match store.config_listener().await {
                    Ok(mut listener) => {
                        // Reload after LISTEN is in place so no change is missed.
                        if let Err(e) = self.reload(&store).await {
                            tracing::warn!(error = %e, "catalog reload failed");
                        }
                        loop {
                            tokio::select! {
                                n = listener.recv() => match n {
                                    Ok(_) => {
                                        // Coalesce a burst of changes into one reload.
                                        while listener.next_buffered().is_some() {}
                                        if let Err(e) = self.reload(&store).await {
                                            tracing::warn!(error = %e, "catalog reload failed");
                                        }
                                    }
                                    Err(e) => {
                                        tracing::warn!(error = %e, "config listener lost; reconnecting");
                                        break;
                                    }
                                },
                                _ = tokio::time::sleep(Duration::from_secs(30)) => {
                                    if let Err(e) = self.reload(&store).await {
                                        tracing::warn!(error = %e, "periodic catalog reload failed");
                                    }
                                }
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot listen for config changes"),
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    }
}

/// Grants of a tenant (app None) or of one of its apps.
fn grants_of(all: &[store::GrantRow], tenant: &str, app: Option<&str>) -> Vec<Grant> {
    all.iter()
        .filter(|g| g.tenant_id == tenant && g.app_id.as_deref() == app)
        .map(|g| Grant {
            tokens: g.tokens,
            cost_micro: g.cost_micro,
            expires_at: g.expires_at,
        })
        .collect()
}
