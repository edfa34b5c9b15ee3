//! The in-memory index the hot path reads: tenants and apps with their
//! limits, models with prices and deployments (an [`Index`], built whole
//! from a catalog read and swapped in atomically by
//! [`CatalogCache`](crate::state::CatalogCache)). Virtual keys are the key
//! index's ([`crate::key_index`]).

use chrono::{DateTime, Utc};
use domain::fairq::Priority;
use domain::limits::{self, Limits};
use domain::pricing::Price;
use domain::secret::{self, Secret};
use domain::tokens::TokenizerFamily;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::{Arc, RwLock};

use store::Catalog;

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
    /// Its own cap on requests waiting in the fair queue (per replica);
    /// None: the platform's `fair.queue_max_per_tenant`.
    pub max_queued_requests: Option<usize>,
    /// Its own cap on open streamed answers (per replica); None: the
    /// platform's `fair.max_open_streams_per_tenant`.
    pub max_open_streams: Option<usize>,
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
    /// Default tags and required tag keys (docs/billing.md).
    pub attribution: domain::attribution::Policy,
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
    /// What holds are priced at (input, output): the dearest of the sheet
    /// in force when the catalog was read.
    pub price: Price,
    /// What requests are billed at: the base sheet and every dated one.
    pub prices: domain::pricing::PriceBook,
    pub tokenizer: TokenizerFamily,
    /// How its provider counts an image's input tokens (by the upstream
    /// model's name, once here rather than on every request).
    pub media: domain::media::Media,
    pub default_max_output: i64,
    /// The cheaper model a tenant past its daily soft limit is sent to.
    pub degrade_to: Option<String>,
    /// Most concurrent upstream requests across replicas (None: no pool).
    pub pool_capacity: Option<i64>,
    /// Core tenants' guaranteed slots of that pool: (tenant, slots).
    pub guarantees: Vec<(String, i64)>,
    /// The deployments serving it (enabled ones; at least one unless every
    /// one is disabled). The fields above describe the first.
    pub deployments: Vec<crate::upstream::Deployment>,
    /// Models tried in order when every deployment is down.
    pub fallbacks: Vec<String>,
    /// How the provider behaves: the cap field it reads, hidden reasoning,
    /// native dialects (one value, so it can move to a deployment whole).
    pub profile: domain::provider::ProviderProfile,
}

#[derive(Default)]
pub struct Index {
    pub models: HashMap<String, Arc<ModelEntry>>,
    /// Apps by tenant, then by app id.
    pub apps: HashMap<String, HashMap<String, Arc<AppEntry>>>,
    pub tenant_ids: Vec<String>,
    /// Tenants by id (the borrower and the reclaim job read these).
    pub tenants: HashMap<String, Arc<TenantEntry>>,
    /// Model aliases in the order they are tried (`domain::alias::sort`).
    pub aliases: Arc<[domain::alias::ModelAlias]>,
}

fn set(v: Option<Vec<String>>) -> Option<HashSet<String>> {
    v.map(|v| v.into_iter().collect())
}

impl Index {
    pub fn build(c: Catalog, secret_key: &[u8; 32]) -> Index {
        Self::build_on(c, secret_key, &crate::upstream::Board::default())
    }

    /// As `build`, the deployments' live state taken from (and kept on) `board`.
    pub fn build_on(c: Catalog, secret_key: &[u8; 32], board: &crate::upstream::Board) -> Index {
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
                    max_queued_requests: t.max_queued_requests.map(|v| v.max(0) as usize),
                    max_open_streams: t.max_open_streams.map(|v| v.max(0) as usize),
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
        let mut apps: HashMap<String, HashMap<String, Arc<AppEntry>>> = HashMap::default();
        for a in c.apps {
            let e = AppEntry {
                id: a.id.clone(),
                limits: a.limits,
                allowed_models: set(a.allowed_models),
                grants: grants_of(&c.grants, &a.tenant_id, Some(&a.id)),
                attribution: a.attribution,
            };
            apps.entry(a.tenant_id)
                .or_default()
                .insert(a.id, Arc::new(e));
        }
        let mut rows_of: HashMap<&str, Vec<&store::DeploymentRow>> = HashMap::default();
        for d in &c.routing.deployments {
            rows_of.entry(d.model_id.as_str()).or_default().push(d);
        }
        let mut fallbacks_of: HashMap<String, Vec<String>> =
            c.routing.fallbacks.iter().cloned().collect();
        let mut sheets_of: HashMap<&str, Vec<domain::pricing::sheet::DatedSheet>> =
            HashMap::default();
        for s in &c.price_sheets {
            // Checked when stored; a sheet that no longer reads (a field
            // renamed since) is left out, loudly, rather than priced wrong.
            match domain::pricing::PriceSheet::from_json(&s.sheet) {
                Ok(sheet) => sheets_of.entry(s.model_id.as_str()).or_default().push(
                    domain::pricing::sheet::DatedSheet {
                        from_ms: s.effective_from.timestamp_millis(),
                        deployment: (!s.deployment.is_empty()).then(|| s.deployment.clone()),
                        sheet: Arc::new(sheet),
                    },
                ),
                Err(e) => {
                    tracing::error!(model = %s.model_id, error = %e, "price sheet unreadable; left out")
                }
            }
        }
        let mut models = HashMap::default();
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
            let deployments = match rows_of.get(m.id.as_str()) {
                None => vec![crate::upstream::Deployment {
                    name: Arc::from("default"),
                    base_url: m.upstream_base_url.trim_end_matches('/').to_string(),
                    endpoint_urls: crate::upstream::endpoint_urls(&m.upstream_base_url),
                    upstream_model: m.upstream_model.clone(),
                    api_key: api_key.clone(),
                    weight: 1,
                    priority: 0,
                    max_inflight: None,
                    profile: None,
                    live: board.live(&m.id, "default"),
                }],
                Some(rows) => rows
                    .iter()
                    .filter(|d| d.enabled)
                    .filter_map(|d| deployment(d, secret_key, board))
                    .collect(),
            };
            let prices = domain::pricing::PriceBook::new(
                domain::pricing::PriceSheet::two(
                    m.input_price_micro_per_mtok,
                    m.output_price_micro_per_mtok,
                ),
                sheets_of.remove(m.id.as_str()).unwrap_or_default(),
            );
            // Holds are priced at the dearest input and output of the
            // model's own sheet in force now.
            let no_tier: [&str; 0] = [];
            let price = prices
                .at(chrono::Utc::now().timestamp_millis(), None)
                .hold_price(no_tier, 0);
            let entry = ModelEntry {
                prices,
                deployments,
                fallbacks: fallbacks_of.remove(&m.id).unwrap_or_default(),
                tokenizer: TokenizerFamily::for_model(m.tokenizer.as_deref(), &m.upstream_model),
                media: domain::media::Media::for_model(&m.upstream_model),
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
                price,
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
        board.retain(|model, name| {
            models
                .get(model)
                .is_some_and(|m: &Arc<ModelEntry>| m.deployments.iter().any(|d| &*d.name == name))
        });
        let mut tenant_ids: Vec<String> = tenants.keys().cloned().collect();
        tenant_ids.sort();
        let mut aliases = c.aliases;
        domain::alias::sort(&mut aliases);
        Index {
            models,
            apps,
            tenant_ids,
            tenants,
            aliases: aliases.into(),
        }
    }

    /// The catalog model serving `asked` for `tenant`: the model of that
    /// id, else the model of the alias that wins (docs/clients.md, "Model
    /// aliases").
    pub fn model_for(&self, tenant: &str, asked: &str) -> Option<&Arc<ModelEntry>> {
        self.models.get(asked).or_else(|| {
            let a = domain::alias::resolve(&self.aliases, tenant, asked)?;
            self.models.get(&a.model)
        })
    }

    /// A key's tenant and app entries.
    pub fn tenant_and_app(
        &self,
        tenant: &str,
        app: &str,
    ) -> Option<(Arc<TenantEntry>, Arc<AppEntry>)> {
        let t = self.tenants.get(tenant)?;
        let a = self.apps.get(tenant)?.get(app)?;
        Some((t.clone(), a.clone()))
    }

    /// This index with one tenant (and its apps) replaced by what `part`
    /// holds of it: nothing when it was deleted.
    pub(crate) fn with_tenant(&self, tenant: &str, mut part: Index) -> Index {
        let mut tenants = self.tenants.clone();
        let mut apps = self.apps.clone();
        tenants.remove(tenant);
        apps.remove(tenant);
        if let Some(t) = part.tenants.remove(tenant) {
            tenants.insert(tenant.to_string(), t);
        }
        if let Some(a) = part.apps.remove(tenant) {
            apps.insert(tenant.to_string(), a);
        }
        Index::assemble(self.models.clone(), self.aliases.clone(), apps, tenants)
    }

    /// This index with every model replaced by `part`'s.
    pub(crate) fn with_models(&self, part: Index) -> Index {
        Index::assemble(
            part.models,
            part.aliases,
            self.apps.clone(),
            self.tenants.clone(),
        )
    }

    fn assemble(
        models: HashMap<String, Arc<ModelEntry>>,
        aliases: Arc<[domain::alias::ModelAlias]>,
        apps: HashMap<String, HashMap<String, Arc<AppEntry>>>,
        tenants: HashMap<String, Arc<TenantEntry>>,
    ) -> Index {
        let mut tenant_ids: Vec<String> = tenants.keys().cloned().collect();
        tenant_ids.sort();
        Index {
            models,
            apps,
            tenant_ids,
            tenants,
            aliases,
        }
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

/// A deployment row as the hot path reads it; None (logged) when its
/// provider key cannot be decrypted: served without its key it would only
/// fail upstream, and skipping it makes the misconfiguration visible.
fn deployment(
    d: &store::DeploymentRow,
    secret_key: &[u8; 32],
    board: &crate::upstream::Board,
) -> Option<crate::upstream::Deployment> {
    let api_key = match d
        .upstream_api_key_enc
        .as_deref()
        .map(|b| secret::decrypt(secret_key, b))
    {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(_)) => {
            tracing::error!(model = %d.model_id, deployment = %d.name,
                "deployment key cannot be decrypted with the configured key; deployment skipped");
            return None;
        }
    };
    Some(crate::upstream::Deployment {
        name: Arc::from(d.name.as_str()),
        base_url: d.upstream_base_url.trim_end_matches('/').to_string(),
        endpoint_urls: crate::upstream::endpoint_urls(&d.upstream_base_url),
        upstream_model: d.upstream_model.clone(),
        api_key,
        weight: d.weight.max(0) as u32,
        priority: d.priority.max(0) as u32,
        max_inflight: d.max_inflight.map(|n| n.max(1) as u32),
        profile: d.profile.clone(),
        live: board.live(&d.model_id, &d.name),
    })
}
