//! Virtual keys by keyed hash, the part of the catalog that is large (a
//! million keys) and changes often. It is updated one key at a time from
//! catalog notifications, never copied whole on a change; a key it does not
//! know is looked up in Postgres (once per hash at a time, within a global
//! rate, remembered briefly when unknown), so a key works on every replica
//! from the moment its create call returns.

use crate::catalog::{AppEntry, Index, TenantEntry};
use crate::metrics_names as m;
pub use crate::refused_key::{KeyState, RefusedKey, REFUSALS_RECORDED_PER_SEC};
use chrono::{DateTime, Utc};
use domain::keys::MissBudget;
use domain::limits::{self, Limits};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use store::{KeyRow, Store};
use tokio::sync::OnceCell;

#[derive(Debug)]
pub struct KeyEntry {
    pub id: String,
    pub tenant: Arc<TenantEntry>,
    pub app: Arc<AppEntry>,
    /// The key's own limits and allowed models, boxed and only when it has
    /// any: most of a million keys have neither, and a pointer is 8 or 16
    /// bytes where nine empty limits are 144 and an empty set 48. A key's
    /// allowed models are a short list: a slice, searched in order.
    own_limits: Option<Box<Limits>>,
    allowed_models: Option<Box<[String]>>,
    /// For a previous secret after a rotation, the earlier of the key's
    /// expiry and its grace end.
    pub expires_at: Option<DateTime<Utc>>,
    /// A previous secret whose `expires_at` is its grace end: once that
    /// passes, it is refused as rotated (on every replica at once, by time).
    pub rotated: bool,
    /// The key's own default tags and required tag keys, over its app's
    /// (none for most keys: a pointer, not an empty policy, per key).
    pub attribution: Option<Arc<domain::attribution::Policy>>,
}

impl KeyEntry {
    /// The key of `row` joined with its tenant and app in `index` (None when
    /// the index holds neither).
    pub(crate) fn from_row(row: &KeyRow, index: &Index) -> Option<KeyEntry> {
        let (tenant, app) = index.tenant_and_app(&row.tenant_id, &row.app_id)?;
        Some(KeyEntry {
            id: row.id.to_string(),
            tenant,
            app,
            own_limits: (row.limits != Limits::NONE).then(|| Box::new(row.limits.clone())),
            allowed_models: row.allowed_models.clone().map(Vec::into_boxed_slice),
            expires_at: row.expires_at,
            rotated: row.rotated_out(),
            attribution: (!row.attribution.is_empty()).then(|| Arc::new(row.attribution.clone())),
        })
    }

    /// The same key under a newer tenant or app entry.
    pub(crate) fn rejoined(&self, tenant: Arc<TenantEntry>, app: Arc<AppEntry>) -> KeyEntry {
        KeyEntry {
            id: self.id.clone(),
            tenant,
            app,
            own_limits: self.own_limits.clone(),
            allowed_models: self.allowed_models.clone(),
            expires_at: self.expires_at,
            rotated: self.rotated,
            attribution: self.attribution.clone(),
        }
    }

    /// The key's own limits ([`Limits::NONE`] when it has none).
    pub fn limits(&self) -> &Limits {
        self.own_limits.as_deref().unwrap_or(&Limits::NONE)
    }

    /// Limits of tenant, app and key: the order the hold engine expects.
    pub fn scope_limits(&self) -> [&Limits; 3] {
        [&self.tenant.limits, &self.app.limits, self.limits()]
    }

    /// What budgets are checked against in `month` (docs/design.md §3): base +
    /// approved grants unexpired at `now` + the tenant's outstanding
    /// borrowed quota of that month.
    pub fn effective_limits(&self, now: DateTime<Utc>, month: &str) -> [Limits; 3] {
        [
            self.tenant.effective(now, month),
            limits::effective(&self.app.limits, &self.app.grants, Default::default(), now),
            self.limits().clone(),
        ]
    }

    /// The budgets of `Limits::budgets` (tenant's, app's, key's) that count
    /// a request of this key to `model` at `now`, in the order the hold
    /// takes them (docs/limits.md).
    pub fn budgets(
        &self,
        model: &str,
        clock: &domain::period::PlatformClock,
        now: DateTime<Utc>,
    ) -> Vec<domain::chain_budgets::Applied> {
        let limits = self.effective_limits(now, &clock.month(now));
        let limits = [&limits[0], &limits[1], &limits[2]];
        domain::chain_budgets::applicable(limits, &self.app.id, &self.id, model, clock, now)
    }

    /// A model is usable only if tenant, app and key all allow it.
    pub fn may_use(&self, model: &str) -> bool {
        let ok = |a: Option<&HashSet<String>>| a.is_none_or(|set| set.contains(model));
        ok(self.tenant.allowed_models.as_ref())
            && ok(self.app.allowed_models.as_ref())
            && self
                .allowed_models
                .as_deref()
                .is_none_or(|list| list.iter().any(|m| m == model))
    }

    /// The tightest per-request cap of the three scopes.
    pub fn cap(&self, f: impl Fn(&Limits) -> Option<i64>) -> Option<i64> {
        self.scope_limits().into_iter().filter_map(f).min()
    }
}

const SHARDS: usize = 64;

/// Bounds of the lookups made for keys the index does not know.
#[derive(Debug, Clone)]
pub struct MissTuning {
    /// Postgres lookups a second across all unknown keys (a token bucket).
    pub lookups_per_sec: u32,
    pub burst: u32,
    /// An unknown key is answered 401 without a lookup for this long.
    pub negative_ttl: Duration,
    /// Most unknown keys remembered; past it the oldest half is forgotten.
    pub negative_capacity: usize,
}

impl Default for MissTuning {
    fn default() -> Self {
        Self {
            lookups_per_sec: 100,
            burst: 100,
            negative_ttl: Duration::from_secs(2),
            negative_capacity: 100_000,
        }
    }
}

/// Counts of the miss path since start (also exported as metrics).
#[derive(Debug, Default)]
pub struct MissStats {
    /// Postgres lookups made for keys the index did not know.
    pub lookups: AtomicU64,
    /// Of those, keys that were found and usable.
    pub found: AtomicU64,
    /// Unknown keys answered from the negative cache.
    pub negative_hits: AtomicU64,
    /// Unknown keys refused without a lookup: the rate bound was reached.
    pub refused: AtomicU64,
}

/// Unusable keys remembered; past it the older half is forgotten (a
/// forgotten key is looked up again within the miss budget).
const REFUSED_CAPACITY: usize = 100_000;

#[derive(Debug, Clone)]
enum Lookup {
    Found(Arc<KeyEntry>),
    Refused(Arc<RefusedKey>),
    Unknown,
    /// A usable key of a tenant or app this replica's index does not hold
    /// yet (created a moment ago).
    TenantUnknown(String),
}

/// What [`KeyIndex::resolve`] found.
#[derive(Debug)]
pub enum Resolved {
    Key(Arc<KeyEntry>),
    /// A key that exists but was revoked or has expired.
    Refused(Arc<RefusedKey>),
    /// Unknown, or not looked up (rate bound).
    Unknown,
    /// Usable, but its tenant (named) must be loaded into the index first.
    LoadTenant(String),
}

type Shard = RwLock<HashMap<[u8; 32], Arc<KeyEntry>>>;

/// Unusable keys by hash, with when each was learned.
type RefusedKeys = HashMap<[u8; 32], (Instant, Arc<RefusedKey>)>;

pub struct KeyIndex {
    shards: Box<[Shard]>,
    /// Bumped by every change applied from Postgres (a key delta, a full
    /// load). A miss lookup caches its answer only if no change was applied
    /// while it ran, so a slow lookup cannot put back a key just revoked.
    epoch: AtomicU64,
    negative: Mutex<HashMap<[u8; 32], Instant>>,
    /// Keys known to be unusable, by hash, with when they were learned.
    refused: Mutex<RefusedKeys>,
    inflight: Mutex<HashMap<[u8; 32], Arc<OnceCell<Lookup>>>>,
    budget: Mutex<MissBudget>,
    origin: Instant,
    tuning: MissTuning,
    pub stats: MissStats,
}

fn shard_of(hash: &[u8; 32]) -> usize {
    // The hash is an HMAC: its bytes are already uniform.
    hash[0] as usize % SHARDS
}

impl KeyIndex {
    pub fn new(tuning: MissTuning) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            epoch: AtomicU64::new(0),
            negative: Mutex::default(),
            refused: Mutex::default(),
            inflight: Mutex::default(),
            budget: Mutex::new(MissBudget::new(tuning.lookups_per_sec, tuning.burst, 0.0)),
            origin: Instant::now(),
            tuning,
            stats: MissStats::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().expect("key shard").len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key if the index knows it, joined with the tenant and app of
    /// `index` (an entry built against an older tenant or app is rebuilt).
    pub fn get(&self, index: &Index, hash: &[u8; 32]) -> Option<Arc<KeyEntry>> {
        let shard = &self.shards[shard_of(hash)];
        let cur = shard.read().expect("key shard").get(hash).cloned()?;
        let (tenant, app) = index.tenant_and_app(&cur.tenant.id, &cur.app.id)?;
        if Arc::ptr_eq(&tenant, &cur.tenant) && Arc::ptr_eq(&app, &cur.app) {
            return Some(cur);
        }
        let fresh = Arc::new(cur.rejoined(tenant, app));
        let mut w = shard.write().expect("key shard");
        // Replace only what we read: a key removed meanwhile stays removed.
        if w.get(hash).is_some_and(|e| Arc::ptr_eq(e, &cur)) {
            w.insert(*hash, fresh.clone());
        }
        Some(fresh)
    }

    /// The key, from the index or else from Postgres.
    pub async fn resolve(&self, store: &Store, index: &Index, hash: &[u8; 32]) -> Resolved {
        if let Some(k) = self.get(index, hash) {
            return Resolved::Key(k);
        }
        if let Some(r) = self.refused_key(hash) {
            return Resolved::Refused(r);
        }
        if self.negatively_cached(hash) {
            self.stats.negative_hits.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(m::KEY_MISSES, "result" => "negative_cache").increment(1);
            return Resolved::Unknown;
        }
        let cell = {
            let mut f = self.inflight.lock().expect("inflight");
            f.entry(*hash).or_default().clone()
        };
        let answer = cell
            .get_or_init(|| self.look_up(store, index, hash))
            .await
            .clone();
        {
            let mut f = self.inflight.lock().expect("inflight");
            if f.get(hash).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                f.remove(hash);
            }
        }
        match answer {
            Lookup::Found(k) => Resolved::Key(k),
            Lookup::Refused(r) => Resolved::Refused(r),
            Lookup::Unknown => Resolved::Unknown,
            Lookup::TenantUnknown(t) => Resolved::LoadTenant(t),
        }
    }

    /// Seconds since the index started (the refusal recording bound's clock).
    pub fn second(&self) -> u64 {
        self.origin.elapsed().as_secs()
    }

    fn refused_key(&self, hash: &[u8; 32]) -> Option<Arc<RefusedKey>> {
        let r = self.refused.lock().expect("refused keys");
        r.get(hash).map(|(_, k)| k.clone())
    }

    /// Remembers an unusable key (the one already remembered for this hash
    /// in the same state, if any, so its recording bound carries on; an
    /// expired key revoked later is remembered as revoked).
    pub fn remember_refused(&self, hash: &[u8; 32], k: RefusedKey) -> Arc<RefusedKey> {
        let mut r = self.refused.lock().expect("refused keys");
        if let Some((_, old)) = r.get(hash).filter(|(_, old)| old.state == k.state) {
            return old.clone();
        }
        if r.len() >= REFUSED_CAPACITY {
            let mut ages: Vec<Instant> = r.values().map(|(t, _)| *t).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            r.retain(|_, (t, _)| *t > cut);
        }
        let k = Arc::new(k);
        r.insert(*hash, (Instant::now(), k.clone()));
        k
    }

    fn negatively_cached(&self, hash: &[u8; 32]) -> bool {
        let neg = self.negative.lock().expect("negative cache");
        neg.get(hash)
            .is_some_and(|t| t.elapsed() < self.tuning.negative_ttl)
    }

    fn remember_unknown(&self, hash: &[u8; 32]) {
        let mut neg = self.negative.lock().expect("negative cache");
        if neg.len() >= self.tuning.negative_capacity {
            let ttl = self.tuning.negative_ttl;
            neg.retain(|_, t| t.elapsed() < ttl / 2);
            if neg.len() >= self.tuning.negative_capacity {
                neg.clear();
            }
        }
        neg.insert(*hash, Instant::now());
    }

    /// One Postgres lookup (the single flight of this hash runs it).
    async fn look_up(&self, store: &Store, index: &Index, hash: &[u8; 32]) -> Lookup {
        let allowed = {
            let now = self.origin.elapsed().as_secs_f64();
            self.budget.lock().expect("miss budget").take(now)
        };
        if !allowed {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(m::KEY_MISSES, "result" => "refused").increment(1);
            return Lookup::Unknown;
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        self.stats.lookups.fetch_add(1, Ordering::Relaxed);
        let (row, revoked) = match store.key_by_hash(hash).await {
            Ok(Some(found)) => found,
            Ok(None) => {
                metrics::counter!(m::KEY_MISSES, "result" => "unknown").increment(1);
                self.remember_unknown(hash);
                return Lookup::Unknown;
            }
            Err(e) => {
                tracing::warn!(error = %e, "key lookup failed");
                metrics::counter!(m::KEY_MISSES, "result" => "error").increment(1);
                return Lookup::Unknown;
            }
        };
        // Revoked or expired: remembered with who it was.
        let expired = row.expires_at.is_some_and(|t| t <= chrono::Utc::now());
        if revoked || expired {
            metrics::counter!(m::KEY_MISSES, "result" => "unusable").increment(1);
            let id = row.id.to_string();
            let k = RefusedKey::new(
                &row.tenant_id,
                &row.app_id,
                &id,
                KeyState::of_row(revoked, &row),
            );
            return Lookup::Refused(self.remember_refused(hash, k));
        }
        // The tenant or app may be newer than this replica's index (created
        // a moment ago); the caller then loads it and asks again.
        let Some(entry) = KeyEntry::from_row(&row, index) else {
            metrics::counter!(m::KEY_MISSES, "result" => "unknown_tenant").increment(1);
            return Lookup::TenantUnknown(row.tenant_id);
        };
        metrics::counter!(m::KEY_MISSES, "result" => "found").increment(1);
        self.stats.found.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(entry);
        let mut w = self.shards[shard_of(hash)].write().expect("key shard");
        if self.epoch.load(Ordering::Acquire) == epoch {
            w.insert(*hash, entry.clone());
        }
        Lookup::Found(entry)
    }

    /// Applies what Postgres says now of these hashes: `rows` are the keys
    /// among them, usable or not, with whether each was revoked
    /// (`Store::keys_by_hash`); a usable one is (re)inserted, any other
    /// hash removed — and remembered as refused, with why, when this index
    /// held it (or it is a previous secret past its grace).
    pub fn apply(&self, index: &Index, hashes: &HashSet<[u8; 32]>, rows: Vec<(KeyRow, bool)>) {
        let now = chrono::Utc::now();
        let mut found: HashMap<[u8; 32], (KeyRow, bool)> =
            HashMap::with_capacity_and_hasher(rows.len(), Default::default());
        for (r, revoked) in rows {
            if let Ok(h) = <[u8; 32]>::try_from(r.key_hash.as_slice()) {
                found.insert(h, (r, revoked));
            }
        }
        {
            let mut neg = self.negative.lock().expect("negative cache");
            for h in hashes {
                neg.remove(h);
            }
        }
        for h in hashes {
            let row = found.get(h);
            // Why the key of this hash may not be used now, if it may not.
            let refused = row.and_then(|(r, revoked)| {
                let lapsed = r.expires_at.is_some_and(|t| t <= now);
                (*revoked || lapsed).then(|| KeyState::of_row(*revoked, r))
            });
            let entry = row
                .filter(|_| refused.is_none())
                .and_then(|(r, _)| KeyEntry::from_row(r, index))
                .map(Arc::new);
            let mut w = self.shards[shard_of(h)].write().expect("key shard");
            self.epoch.fetch_add(1, Ordering::AcqRel);
            match entry {
                Some(e) => {
                    w.insert(*h, e);
                    self.refused.lock().expect("refused keys").remove(h);
                }
                None => {
                    let removed = w.remove(h);
                    drop(w);
                    match (row, refused) {
                        (Some((r, _)), Some(state))
                            if removed.is_some() || state == KeyState::Rotated =>
                        {
                            let id = r.id.to_string();
                            self.remember_refused(
                                h,
                                RefusedKey::new(&r.tenant_id, &r.app_id, &id, state),
                            );
                        }
                        (None, _) => {
                            if let Some(old) = removed {
                                // No key has this secret any more: a previous
                                // secret a later rotation replaced (or a row
                                // deleted, told as revoked).
                                let state = if old.rotated {
                                    KeyState::Rotated
                                } else {
                                    KeyState::Revoked
                                };
                                self.remember_refused(
                                    h,
                                    RefusedKey::new(&old.tenant.id, &old.app.id, &old.id, state),
                                );
                            }
                        }
                        // Usable, but its tenant or app is not in this
                        // index yet (the miss lookup loads it on first use).
                        _ => {}
                    }
                }
            };
        }
    }

    /// Replaces every key (a full load: at start and after the listener
    /// was lost). Each shard is swapped whole, so a key never disappears
    /// in between.
    pub fn replace_all(&self, index: &Index, rows: Vec<KeyRow>) {
        let mut maps: Vec<HashMap<[u8; 32], Arc<KeyEntry>>> =
            (0..SHARDS).map(|_| HashMap::default()).collect();
        for r in rows {
            let Ok(h) = <[u8; 32]>::try_from(r.key_hash.as_slice()) else {
                continue;
            };
            if let Some(e) = KeyEntry::from_row(&r, index) {
                maps[shard_of(&h)].insert(h, Arc::new(e));
            }
        }
        self.epoch.fetch_add(1, Ordering::AcqRel);
        for (shard, map) in self.shards.iter().zip(maps) {
            let mut w = shard.write().expect("key shard");
            self.epoch.fetch_add(1, Ordering::AcqRel);
            *w = map;
        }
        self.negative.lock().expect("negative cache").clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A million keys live in the index: an entry stays a few pointers
    /// (bench/results/2026-12-01-re-run-of-the-catalog-part-with.md). Nine
    /// inline limits (144 bytes) or an inline set (48) would fail this.
    #[test]
    fn a_key_entry_stays_compact() {
        let size = std::mem::size_of::<KeyEntry>();
        assert!(size <= 96, "KeyEntry is {size} bytes");
    }

    #[test]
    fn an_unusable_keys_refusals_are_recorded_a_few_a_second() {
        let k = RefusedKey::new("t", "a", "k", KeyState::Revoked);
        let first: Vec<bool> = (0..REFUSALS_RECORDED_PER_SEC + 3)
            .map(|_| k.may_record(7))
            .collect();
        assert_eq!(
            first.iter().filter(|r| **r).count() as u32,
            REFUSALS_RECORDED_PER_SEC
        );
        assert!(first[..REFUSALS_RECORDED_PER_SEC as usize]
            .iter()
            .all(|r| *r));
        assert!(k.may_record(8), "the next second records again");
    }

    #[test]
    fn a_revoked_key_is_remembered_once_with_its_bound() {
        let ix = KeyIndex::new(MissTuning::default());
        let h = [7u8; 32];
        let a = ix.remember_refused(&h, RefusedKey::new("t", "a", "k", KeyState::Expired));
        let b = ix.remember_refused(&h, RefusedKey::new("t", "a", "k", KeyState::Expired));
        assert!(
            Arc::ptr_eq(&a, &b),
            "the same state: the first stays, with its count"
        );
        let c = ix.remember_refused(&h, RefusedKey::new("t", "a", "k", KeyState::Revoked));
        assert!(
            !Arc::ptr_eq(&a, &c),
            "revoked after it expired: said as revoked"
        );
        assert_eq!(ix.refused_key(&h).map(|k| k.state), Some(KeyState::Revoked));
    }
}
