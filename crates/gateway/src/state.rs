//! The catalog as the hot path holds it: the [`Index`] of tenants, apps and
//! models (swapped in atomically) and the [`KeyIndex`] of virtual keys
//! (changed one key at a time), kept current from Postgres. Loaded whole at
//! start and after the listener was lost; otherwise each `tollgate_config`
//! notification names what changed and only that is read again.

use crate::catalog::Index;
use crate::key_index::{KeyEntry, KeyIndex, MissTuning, RefusedKey, Resolved};
use arc_swap::ArcSwap;
use rustc_hash::FxHashSet as HashSet;
use std::sync::Arc;
use std::time::Duration;
use store::{CatalogChange, CatalogParts, Store, TenantScope};

pub struct CatalogCache {
    index: ArcSwap<Index>,
    keys: KeyIndex,
    secret_key: [u8; 32],
    /// Deployments' health and in-flight counts, kept across reloads.
    pub board: Arc<crate::upstream::Board>,
    /// Held across each read-and-apply, so a read made earlier is never
    /// applied over one made later (the listener and a request that met a
    /// new tenant both apply).
    updating: tokio::sync::Mutex<()>,
}

/// A burst of changes larger than this is applied as one full load.
const MAX_DELTAS: usize = 4096;

impl CatalogCache {
    pub fn new(secret_key: [u8; 32]) -> Self {
        Self::with_miss_tuning(secret_key, MissTuning::default())
    }

    pub fn with_miss_tuning(secret_key: [u8; 32], tuning: MissTuning) -> Self {
        Self {
            index: ArcSwap::from_pointee(Index::default()),
            keys: KeyIndex::new(tuning),
            secret_key,
            board: Default::default(),
            updating: tokio::sync::Mutex::new(()),
        }
    }

    pub fn get(&self) -> arc_swap::Guard<Arc<Index>> {
        self.index.load()
    }

    /// The virtual keys (counts of the miss path in `keys().stats`).
    pub fn keys(&self) -> &KeyIndex {
        &self.keys
    }

    /// The usable key with this keyed hash: from the index, else looked up
    /// in Postgres (see [`KeyIndex::resolve`]); else who it was if it
    /// exists but was revoked or has expired, else nothing.
    pub async fn key(
        &self,
        store: &Store,
        hash: &[u8; 32],
    ) -> Result<Arc<KeyEntry>, Option<Arc<RefusedKey>>> {
        match self.keys.resolve(store, &self.get(), hash).await {
            Resolved::Key(k) => Ok(k),
            Resolved::Refused(r) => Err(Some(r)),
            Resolved::Unknown => Err(None),
            Resolved::LoadTenant(t) => {
                let loaded = {
                    let _g = self.updating.lock().await;
                    self.apply_tenant(store, &t).await
                };
                if let Err(e) = loaded {
                    tracing::warn!(error = %e, "tenant load for a new key failed");
                    return Err(None);
                }
                match self.keys.resolve(store, &self.get(), hash).await {
                    Resolved::Key(k) => Ok(k),
                    Resolved::Refused(r) => Err(Some(r)),
                    _ => Err(None),
                }
            }
        }
    }

    /// Loads everything again (at start, and after the listener was lost).
    pub async fn reload(&self, store: &Store) -> Result<(), store::StoreError> {
        let _g = self.updating.lock().await;
        self.reload_locked(store).await
    }

    async fn reload_locked(&self, store: &Store) -> Result<(), store::StoreError> {
        let mut c = store.load_catalog(&TenantScope::system()).await?;
        let keys = std::mem::take(&mut c.keys);
        let (k, m) = (keys.len(), c.models.len());
        let index = Arc::new(Index::build_on(c, &self.secret_key, &self.board));
        self.index.store(index.clone());
        self.keys.replace_all(&index, keys);
        tracing::debug!(keys = k, models = m, "catalog loaded");
        Ok(())
    }

    /// Applies a burst of notifications: tenants and models first (keys
    /// join them), then all key changes in one query.
    pub async fn apply(
        &self,
        store: &Store,
        changes: Vec<CatalogChange>,
    ) -> Result<(), store::StoreError> {
        let _g = self.updating.lock().await;
        if changes.len() > MAX_DELTAS {
            return self.reload_locked(store).await;
        }
        let mut tenants = HashSet::default();
        let mut keys = HashSet::default();
        let (mut models, mut config) = (false, false);
        for c in changes {
            match c {
                CatalogChange::Key(h) => {
                    keys.insert(h);
                }
                CatalogChange::Tenant(t) => {
                    tenants.insert(t);
                }
                CatalogChange::Models => models = true,
                CatalogChange::Config => config = true,
            }
        }
        if config {
            let c = store
                .load_catalog_parts(&TenantScope::system(), CatalogParts::CONFIG)
                .await?;
            self.index
                .store(Arc::new(Index::build_on(c, &self.secret_key, &self.board)));
        } else {
            for t in &tenants {
                self.apply_tenant(store, t).await?;
            }
            if models {
                let c = store
                    .load_catalog_parts(&TenantScope::system(), CatalogParts::MODELS)
                    .await?;
                let part = Index::build_on(c, &self.secret_key, &self.board);
                let next = self.get().with_models(part);
                self.index.store(Arc::new(next));
            }
        }
        if !keys.is_empty() {
            let list: Vec<[u8; 32]> = keys.iter().copied().collect();
            let rows = store.keys_by_hash(&list).await?;
            self.keys.apply(&self.get(), &keys, rows);
        }
        Ok(())
    }

    /// Reads one tenant (its apps, grants and borrowed quota) again; the
    /// caller holds `updating`.
    async fn apply_tenant(&self, store: &Store, tenant: &str) -> Result<(), store::StoreError> {
        let Some(scope) = TenantScope::system().narrow_to(tenant) else {
            return Ok(());
        };
        let c = store
            .load_catalog_parts(&scope, CatalogParts::TENANT)
            .await?;
        let part = Index::build_on(c, &self.secret_key, &self.board);
        let next = self.get().with_tenant(tenant, part);
        self.index.store(Arc::new(next));
        Ok(())
    }

    /// Keeps the index current: LISTEN for changes and apply each burst;
    /// after the connection is lost, LISTEN again and load everything
    /// (serving the last index meanwhile). `listening`, when given, has
    /// been LISTENing since before the index was last loaded (at start), so
    /// no change can have been missed and the first load is not repeated:
    /// with a million keys a second load at start took seconds, and the
    /// changes of those seconds (a revocation) waited behind it.
    pub fn spawn_listener(
        self: Arc<Self>,
        store: Store,
        listening: Option<store::ConfigListener>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut ready = listening;
            loop {
                let listener = match ready.take() {
                    Some(l) => Ok(l),
                    None => match store.config_listener().await {
                        Ok(l) => {
                            // Load after LISTEN is in place so no change is missed.
                            if let Err(e) = self.reload(&store).await {
                                tracing::warn!(error = %e, "catalog load failed");
                            }
                            Ok(l)
                        }
                        Err(e) => Err(e),
                    },
                };
                match listener {
                    Ok(mut listener) => {
                        loop {
                            let first = match listener.recv().await {
                                Ok(n) => n,
                                Err(e) => {
                                    tracing::warn!(error = %e, "config listener lost; reconnecting");
                                    break;
                                }
                            };
                            let mut changes = vec![CatalogChange::parse(first.payload())];
                            while let Some(n) = listener.next_buffered() {
                                if changes.len() <= MAX_DELTAS {
                                    changes.push(CatalogChange::parse(n.payload()));
                                }
                            }
                            if let Err(e) = self.apply(&store, changes).await {
                                // A change not applied is not retried from the
                                // notification: load everything instead.
                                tracing::warn!(error = %e, "catalog change not applied; loading all");
                                if let Err(e) = self.reload(&store).await {
                                    tracing::warn!(error = %e, "catalog load failed");
                                    break;
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
