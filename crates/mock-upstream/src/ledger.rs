//! What the mock served, as a provider's billing sees it: every answered
//! chat completion, completion, Responses and Messages request adds the
//! usage its answer reported to the client to a slot keyed by (arrival
//! millisecond on the mock clock, api key, model). The admin APIs
//! (`admin.rs`) sum the slots into their buckets; keeping the arrival to
//! the millisecond is what lets `published_until` hide traffic after an
//! instant, and under load (many requests a millisecond) slots stay few.
//!
//! Also the mock clock (real clock + `POST /mock/clock` offset) and the
//! admin settings (`POST /mock/admin`).

use std::collections::{BTreeMap, HashMap};
use std::ops::AddAssign;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::http::{header::AUTHORIZATION, HeaderMap};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Usage of one request, or a sum of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub requests: u64,
    /// Input neither read from nor written to the cache.
    pub uncached: u64,
    /// Cache reads.
    pub cached: u64,
    /// Cache writes by TTL: Anthropic's 5m / 1h, OpenAI's 30m / 12h knobs.
    pub w5m: u64,
    pub w1h: u64,
    pub w30m: u64,
    pub w12h: u64,
    pub output: u64,
    pub web_search: u64,
}

impl Counts {
    pub fn writes(&self) -> u64 {
        self.w5m + self.w1h + self.w30m + self.w12h
    }
}

impl AddAssign for Counts {
    fn add_assign(&mut self, o: Counts) {
        self.requests += o.requests;
        self.uncached += o.uncached;
        self.cached += o.cached;
        self.w5m += o.w5m;
        self.w1h += o.w1h;
        self.w30m += o.w30m;
        self.w12h += o.w12h;
        self.output += o.output;
        self.web_search += o.web_search;
    }
}

/// A provider-side identity of an api key.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct KeyIdentity {
    pub id: Option<String>,
    pub workspace: Option<String>,
}

/// µUSD per million tokens (per call for `web_search`); missing = 0.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Prices {
    pub input: u64,
    pub cached_input: u64,
    pub cache_write_5m: u64,
    pub cache_write_1h: u64,
    /// OpenAI's 30-minute and 12-hour writes (`[mock:cache_write_30m=N]` …).
    pub cache_write_30m: u64,
    pub cache_write_12h: u64,
    pub output: u64,
    pub web_search: u64,
}

/// `GET` / `POST /mock/admin`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct Settings {
    pub admin_key: String,
    pub keys: BTreeMap<String, KeyIdentity>,
    pub prices: BTreeMap<String, Prices>,
    pub extra_input_pct: BTreeMap<String, u32>,
    pub published_until: Option<DateTime<Utc>>,
    pub fail_next: u32,
    pub page_size: Option<usize>,
}

pub(crate) const DEFAULT_ADMIN_KEY: &str = "sk-admin-mock";

impl Default for Settings {
    fn default() -> Self {
        Settings {
            admin_key: DEFAULT_ADMIN_KEY.into(),
            keys: BTreeMap::new(),
            prices: BTreeMap::new(),
            extra_input_pct: BTreeMap::new(),
            published_until: None,
            fail_next: 0,
            page_size: None,
        }
    }
}

/// Merges a JSON object into `map`: `null` clears it, an entry's `null`
/// removes that entry, any other entry replaces it.
fn merge<T: serde::de::DeserializeOwned>(
    map: &mut BTreeMap<String, T>,
    name: &str,
    v: &Value,
) -> Result<(), String> {
    match v {
        Value::Null => map.clear(),
        Value::Object(o) => {
            for (k, e) in o {
                if e.is_null() {
                    map.remove(k);
                } else {
                    let t = serde_json::from_value(e.clone())
                        .map_err(|e| format!("{name}.{k}: {e}"))?;
                    map.insert(k.clone(), t);
                }
            }
        }
        _ => return Err(format!("{name} must be an object")),
    }
    Ok(())
}

impl Settings {
    /// Applies a `POST /mock/admin` body; nothing changes on error.
    pub fn apply(&mut self, patch: &Map<String, Value>) -> Result<(), String> {
        let mut s = self.clone();
        for (k, v) in patch {
            match k.as_str() {
                "admin_key" => {
                    s.admin_key = v.as_str().ok_or("admin_key must be a string")?.into();
                }
                "keys" => merge(&mut s.keys, k, v)?,
                "prices" => merge(&mut s.prices, k, v)?,
                "extra_input_pct" => merge(&mut s.extra_input_pct, k, v)?,
                "published_until" => {
                    s.published_until = match v {
                        Value::Null => None,
                        Value::String(t) => Some(
                            DateTime::parse_from_rfc3339(t)
                                .map_err(|e| format!("published_until: {e}"))?
                                .with_timezone(&Utc),
                        ),
                        _ => return Err("published_until must be RFC 3339 or null".into()),
                    }
                }
                "fail_next" => {
                    s.fail_next = v
                        .as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or("fail_next must be a count")?;
                }
                "page_size" => {
                    s.page_size = match v {
                        Value::Null => None,
                        _ => Some(
                            v.as_u64()
                                .filter(|n| *n > 0)
                                .ok_or("page_size must be a positive count or null")?
                                as usize,
                        ),
                    }
                }
                other => return Err(format!("unknown admin setting {other:?}")),
            }
        }
        *self = s;
        Ok(())
    }

    /// The provider-side (api key id, workspace id) of an api key: as set
    /// in `keys`, else `key_` / `wrkspc_` + the first 12 hex digits of the
    /// key's SHA-256.
    pub fn identity(&self, key: &str) -> (String, String) {
        let set = self.keys.get(key);
        let id = set.and_then(|k| k.id.clone());
        let ws = set.and_then(|k| k.workspace.clone());
        if let (Some(id), Some(ws)) = (&id, &ws) {
            return (id.clone(), ws.clone());
        }
        let digest = Sha256::digest(key.as_bytes());
        let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        (
            id.unwrap_or_else(|| format!("key_{hex}")),
            ws.unwrap_or_else(|| format!("wrkspc_{hex}")),
        )
    }
}

/// One slot of recorded usage, as a report reads it.
pub(crate) struct Row {
    pub at_ms: i64,
    pub key: String,
    pub model: String,
    pub counts: Counts,
}

#[derive(Default)]
struct State {
    settings: Settings,
    key_ids: HashMap<String, u32>,
    keys: Vec<String>,
    model_ids: HashMap<String, u32>,
    models: Vec<String>,
    /// (arrival ms on the mock clock, key, model) → usage.
    slots: HashMap<(i64, u32, u32), Counts>,
}

fn intern(ids: &mut HashMap<String, u32>, names: &mut Vec<String>, s: &str) -> u32 {
    if let Some(i) = ids.get(s) {
        return *i;
    }
    let i = names.len() as u32;
    ids.insert(s.to_owned(), i);
    names.push(s.to_owned());
    i
}

#[derive(Default)]
pub(crate) struct Ledger {
    offset_secs: AtomicI64,
    state: Mutex<State>,
}

/// When a request arrived (mock clock) and with which api key.
#[derive(Debug, Clone)]
pub(crate) struct Arrival {
    pub at_ms: i64,
    pub key: String,
}

impl Ledger {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn offset_secs(&self) -> i64 {
        self.offset_secs.load(Relaxed)
    }

    pub fn set_offset_secs(&self, s: i64) {
        self.offset_secs.store(s, Relaxed);
    }

    /// The mock clock: the real clock plus the offset.
    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::seconds(self.offset_secs())
    }

    /// The request's arrival: now, and the `Authorization: Bearer X` or
    /// `x-api-key: X` value ("" when neither).
    pub fn arrival(&self, headers: &HeaderMap) -> Arrival {
        let bearer = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let key = bearer
            .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
            .unwrap_or("")
            .trim();
        Arrival {
            at_ms: self.now().timestamp_millis(),
            key: key.to_owned(),
        }
    }

    /// Records one answered request; the model's `extra_input_pct` raises
    /// its uncached input (rounded up) here, not in the answer.
    pub fn record(&self, arrival: &Arrival, model: &str, mut counts: Counts) {
        counts.requests = 1;
        let mut st = self.state();
        if let Some(pct) = st.settings.extra_input_pct.get(model) {
            counts.uncached = (counts.uncached * (100 + u64::from(*pct))).div_ceil(100);
        }
        let st = &mut *st;
        let k = intern(&mut st.key_ids, &mut st.keys, &arrival.key);
        let m = intern(&mut st.model_ids, &mut st.models, model);
        *st.slots.entry((arrival.at_ms, k, m)).or_default() += counts;
    }

    pub fn settings(&self) -> Settings {
        self.state().settings.clone()
    }

    pub fn update(&self, patch: &Map<String, Value>) -> Result<Settings, String> {
        let mut st = self.state();
        st.settings.apply(patch)?;
        Ok(st.settings.clone())
    }

    /// Takes one of `fail_next`: true if this admin request must fail.
    pub fn take_failure(&self) -> bool {
        let mut st = self.state();
        if st.settings.fail_next > 0 {
            st.settings.fail_next -= 1;
            return true;
        }
        false
    }

    /// Slots arriving in `[from_ms, to_ms)` and at or before
    /// `published_until`, with the settings they are reported under.
    pub fn rows(&self, from_ms: i64, to_ms: i64) -> (Vec<Row>, Settings) {
        let st = self.state();
        let until = st
            .settings
            .published_until
            .map_or(i64::MAX, |t| t.timestamp_millis());
        let to_ms = to_ms.min(until.saturating_add(1));
        let rows = st
            .slots
            .iter()
            .filter(|((at, _, _), _)| (from_ms..to_ms).contains(at))
            .map(|(&(at_ms, k, m), c)| Row {
                at_ms,
                key: st.keys[k as usize].clone(),
                model: st.models[m as usize].clone(),
                counts: *c,
            })
            .collect();
        (rows, st.settings.clone())
    }

    /// `POST /mock/reset`: no traffic, clock offset 0, default settings.
    pub fn reset(&self) {
        *self.state() = State::default();
        self.set_offset_secs(0);
    }
}

/// A stream's recording, made when it is dropped (finished, cut, or the
/// peer gone) with the output tokens it handed to the connection.
pub(crate) struct Recording {
    pub ledger: Arc<Ledger>,
    pub arrival: Arrival,
    pub model: String,
    pub counts: Counts,
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.ledger.record(&self.arrival, &self.model, self.counts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_defaults_to_the_keys_hash() {
        let mut s = Settings::default();
        let (id, ws) = s.identity("sk-a");
        assert!(id.starts_with("key_") && id.len() == 16, "{id}");
        assert_eq!(ws, format!("wrkspc_{}", &id[4..]));
        let patch = serde_json::json!({"keys": {"sk-a": {"id": "key_a"}}});
        s.apply(patch.as_object().unwrap()).unwrap();
        assert_eq!(s.identity("sk-a"), ("key_a".into(), ws));
        let bad = serde_json::json!({"page_size": 0, "admin_key": "x"});
        assert!(s.apply(bad.as_object().unwrap()).is_err());
        assert_eq!(s.admin_key, DEFAULT_ADMIN_KEY);
    }

    #[test]
    fn extra_input_rounds_up_per_request() {
        let l = Ledger::default();
        let patch = serde_json::json!({"extra_input_pct": {"m": 2}});
        l.update(patch.as_object().unwrap()).unwrap();
        let a = Arrival {
            at_ms: 5,
            key: "k".into(),
        };
        let c = Counts {
            uncached: 101,
            ..Counts::default()
        };
        l.record(&a, "m", c);
        l.record(&a, "m", c);
        l.record(&a, "other", c);
        let (rows, _) = l.rows(0, 10);
        let m: u64 = rows
            .iter()
            .filter(|r| r.model == "m")
            .map(|r| r.counts.uncached)
            .sum();
        // ceil(101 × 1.02) = ceil(103.02) = 104, twice.
        assert_eq!(m, 208);
        let o: u64 = rows
            .iter()
            .filter(|r| r.model == "other")
            .map(|r| r.counts.uncached)
            .sum();
        assert_eq!(o, 101);
    }
}
