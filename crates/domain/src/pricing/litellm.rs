//! Reading LiteLLM's price catalog (`model_prices_and_context_window.json`)
//! into price sheets, and the diff against the sheets in force
//! (docs/billing.md, "Importing prices"). Pure: the caller reads the
//! models and their sheets, and stores the new sheets.
//!
//! LiteLLM prices are floats in USD per token; a sheet's are integer µUSD per
//! million tokens (USD/token × 10¹²). A float is read as the shortest decimal
//! that prints it (Rust's `{:e}`, the same as Python's `repr`), and that
//! decimal must convert exactly: at most 12 fractional digits of USD per
//! token (6 for a per-call fee in USD). Anything finer is refused unless
//! `round` is asked for (then rounded half up).

use super::sheet::{InputTier, PriceSheet, TokenPrices, ToolFees};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The LiteLLM base fields and the sheet component each becomes.
pub const TOKEN_FIELDS: &[(&str, &str)] = &[
    ("input_cost_per_token", "input"),
    ("output_cost_per_token", "output"),
    ("cache_read_input_token_cost", "cached_input"),
    ("cache_creation_input_token_cost", "cache_write_5m"),
    (
        "cache_creation_input_token_cost_above_1hr",
        "cache_write_1h",
    ),
    // OpenAI's 12-hour write. Its 30-minute write is LiteLLM's base write
    // price (`cache_creation_input_token_cost`, as in LiteLLM's own cost
    // calculator): a sheet's `cache_write_30m` falls back to
    // `cache_write_5m`, so it is not set twice.
    (
        "cache_creation_input_token_cost_above_12hr",
        "cache_write_12h",
    ),
    ("input_cost_per_audio_token", "audio_input"),
    ("output_cost_per_audio_token", "audio_output"),
    ("input_cost_per_image_token", "image_input"),
    ("output_cost_per_image_token", "image_output"),
];

/// LiteLLM's service-tier suffixes and the service tier each prices (the
/// name the provider reports as `service_tier`).
pub const SERVICE_SUFFIXES: &[(&str, &str)] = &[
    ("_priority", "priority"),
    ("_flex", "flex"),
    ("_batches", "batch"),
];

/// The web-search fee: `search_context_cost_per_query`, an object of USD per
/// query by search context size; the medium size (the default) is taken.
pub const SEARCH_FIELD: &str = "search_context_cost_per_query";
pub const SEARCH_SIZE: &str = "search_context_size_medium";

/// One price a model's entry cannot give exactly (or at all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    pub model: String,
    pub field: String,
    pub reason: String,
}

/// One changed component of a model's sheet (`null`: absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub model: String,
    pub field: String,
    pub old: Option<i64>,
    pub new: Option<i64>,
}

/// A price field of a matched entry that tollgate does not map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnknownField {
    pub model: String,
    pub entry: String,
    pub field: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Matched {
    pub model: String,
    pub entry: String,
}

/// A catalog model as the import sees it.
#[derive(Debug, Clone)]
pub struct CatalogModel {
    pub id: String,
    pub upstream_model: String,
    /// The sheet in force now (the two base prices when it has none).
    pub current: PriceSheet,
}

/// What an import would do (or did).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Plan {
    pub matched: Vec<Matched>,
    pub changes: Vec<Change>,
    pub unmatched_models: Vec<String>,
    pub unknown_fields: Vec<UnknownField>,
    pub refused: Vec<Refused>,
    /// The new sheet of each model whose prices differ from the file's.
    #[serde(skip)]
    pub new_sheets: Vec<(String, PriceSheet)>,
}

/// USD (a LiteLLM float) × 10^`scale` as an integer: exact on the shortest
/// decimal that prints the float, or refused naming why; rounded half up
/// when `round`.
pub fn scaled(v: f64, scale: i32, round: bool) -> Result<i64, String> {
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{v} is not a price (negative or not a number)"));
    }
    // "7.5e-8": digits 75, exponent -8 - 1 → value = 75 × 10^(-9).
    let s = format!("{v:e}");
    let (mant, exp) = s.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    let mut n: i128 = digits.parse().map_err(|_| format!("{v} is too long"))?;
    // value = n × 10^(exp - frac.len()), scaled by 10^scale.
    let mut pow = exp - frac.len() as i32 + scale;
    if pow >= 0 {
        while pow > 0 {
            n = n
                .checked_mul(10)
                .ok_or_else(|| format!("{v} is too large"))?;
            pow -= 1;
        }
        return i64::try_from(n).map_err(|_| format!("{v} is too large"));
    }
    let mut div: i128 = 1;
    while pow < 0 {
        div = div.saturating_mul(10);
        pow += 1;
    }
    if n % div != 0 && !round {
        return Err(format!(
            "{v} USD is not a whole number of 10^-{scale} USD (pass round to round it)"
        ));
    }
    let q = (n + div / 2) / div;
    i64::try_from(q).map_err(|_| format!("{v} is too large"))
}

/// µUSD per million tokens of a USD-per-token float.
pub fn per_mtok(v: f64, round: bool) -> Result<i64, String> {
    scaled(v, 12, round)
}

/// A LiteLLM price field, split: the base field, the whole-request tier
/// (input tokens) and the service tier.
fn split_field(f: &str) -> Option<(&'static str, Option<i64>, Option<&'static str>)> {
    let mut rest = f;
    let mut service = None;
    for (suffix, name) in SERVICE_SUFFIXES {
        if let Some(r) = rest.strip_suffix(suffix) {
            rest = r;
            service = Some(*name);
            break;
        }
    }
    let mut tier = None;
    if let Some(r) = rest.strip_suffix("k_tokens") {
        if let Some(i) = r.rfind("_above_") {
            let n: i64 = r[i + "_above_".len()..].parse().ok()?;
            tier = Some(n * 1000);
            rest = &r[..i];
        }
    }
    let (_, component) = TOKEN_FIELDS.iter().find(|(lf, _)| *lf == rest)?;
    Some((component, tier, service))
}

fn set(p: &mut TokenPrices, component: &str, v: i64) {
    match component {
        "input" => p.input = v,
        "output" => p.output = v,
        "cached_input" => p.cached_input = Some(v),
        "cache_write_5m" => p.cache_write_5m = Some(v),
        "cache_write_1h" => p.cache_write_1h = Some(v),
        "cache_write_12h" => p.cache_write_12h = Some(v),
        "audio_input" => p.audio_input = Some(v),
        "audio_output" => p.audio_output = Some(v),
        "image_input" => p.image_input = Some(v),
        "image_output" => p.image_output = Some(v),
        _ => unreachable!("a TOKEN_FIELDS component"),
    }
}

/// Components a tier or service tier does not price: its parent's (LiteLLM
/// prices a component without a tiered price at the untiered one).
fn inherit(child: &BTreeMap<&'static str, i64>, parent: &TokenPrices) -> TokenPrices {
    let mut p = parent.clone();
    for (c, v) in child {
        set(&mut p, c, *v);
    }
    p
}

/// Whether a LiteLLM field is a price (its name says cost or multiplier);
/// the others (`max_tokens`, `supports_*`, `mode`, …) describe the model.
fn is_price_field(f: &str) -> bool {
    f.contains("cost") || f.contains("multiplier")
}

/// An entry's refused prices: (field, why).
pub type FieldErrors = Vec<(String, String)>;

/// One entry's sheet and the price fields it has that tollgate does not map,
/// or every price refused.
pub fn sheet_of_entry(
    entry: &Map<String, Value>,
    round: bool,
) -> Result<(PriceSheet, Vec<String>), FieldErrors> {
    type Parts = BTreeMap<&'static str, i64>;
    let mut base: Parts = BTreeMap::new();
    let mut services: BTreeMap<&'static str, Parts> = BTreeMap::new();
    let mut tiers: BTreeMap<(Option<&'static str>, i64), Parts> = BTreeMap::new();
    let mut web_search = 0;
    let mut unknown = Vec::new();
    let mut refused = Vec::new();
    for (f, v) in entry {
        if f == SEARCH_FIELD {
            match v.get(SEARCH_SIZE).and_then(Value::as_f64) {
                Some(usd) => match scaled(usd, 6, round) {
                    Ok(m) => web_search = m,
                    Err(e) => refused.push((format!("{f}.{SEARCH_SIZE}"), e)),
                },
                None => unknown.push(f.clone()),
            }
            continue;
        }
        let Some((component, tier, service)) = split_field(f) else {
            if is_price_field(f) {
                unknown.push(f.clone());
            }
            continue;
        };
        let Some(usd) = v.as_f64() else {
            refused.push((f.clone(), "not a number".into()));
            continue;
        };
        let m = match per_mtok(usd, round) {
            Ok(m) => m,
            Err(e) => {
                refused.push((f.clone(), e));
                continue;
            }
        };
        let parts = match (tier, service) {
            (None, None) => &mut base,
            (None, Some(s)) => services.entry(s).or_default(),
            (Some(t), s) => tiers.entry((s, t)).or_default(),
        };
        parts.insert(component, m);
    }
    for req in ["input_cost_per_token", "output_cost_per_token"] {
        if !entry.contains_key(req) {
            refused.push((req.to_string(), "missing: a sheet needs it".into()));
        }
    }
    if !refused.is_empty() {
        return Err(refused);
    }
    let base = inherit(&base, &TokenPrices::default());
    // A service tier only tiered by input size still needs its base.
    for (s, _) in tiers.keys() {
        if let Some(s) = s {
            services.entry(s).or_default();
        }
    }
    let service_tiers: BTreeMap<String, TokenPrices> = services
        .iter()
        .map(|(s, parts)| (s.to_string(), inherit(parts, &base)))
        .collect();
    let tiers = tiers
        .iter()
        .map(|((s, above), parts)| {
            let parent = s.map_or(&base, |s| &service_tiers[s]);
            InputTier {
                above_input_tokens: *above,
                service_tier: s.map(str::to_string),
                prices: inherit(parts, parent),
            }
        })
        .collect();
    let sheet = PriceSheet {
        base,
        tiers,
        service_tiers,
        tool_fees: ToolFees { web_search },
        multiplier_ppm: None,
    };
    if let Err(e) = sheet.check() {
        return Err(vec![(e.field, e.message)]);
    }
    Ok((sheet, unknown))
}

/// The catalog's entry for an upstream model name: the exact key, then the
/// name without its `provider/` prefix, then the one key that is the name
/// behind a `provider/` prefix. Several such keys: ambiguous (Err lists them).
pub fn find_entry<'a>(
    catalog: &'a Map<String, Value>,
    upstream: &str,
) -> Result<Option<&'a str>, Vec<String>> {
    if let Some((k, _)) = catalog.get_key_value(upstream) {
        return Ok(Some(k));
    }
    if let Some((_, bare)) = upstream.split_once('/') {
        if let Some((k, _)) = catalog.get_key_value(bare) {
            return Ok(Some(k));
        }
    }
    let prefixed: Vec<&str> = catalog
        .keys()
        .filter(|k| k.split_once('/').is_some_and(|(_, rest)| rest == upstream))
        .map(String::as_str)
        .collect();
    match prefixed.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        many => Err(many.iter().map(|s| s.to_string()).collect()),
    }
}

/// A sheet as component → price, tiers named `tiers.<service>.<above>.` and
/// service tiers `service_tiers.<name>.` (so the order of tiers is no change).
pub fn flatten(s: &PriceSheet) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    fn put(out: &mut BTreeMap<String, i64>, at: &str, p: &TokenPrices) {
        let all = [
            ("input", Some(p.input)),
            ("output", Some(p.output)),
            ("cached_input", p.cached_input),
            ("cache_write_5m", p.cache_write_5m),
            ("cache_write_1h", p.cache_write_1h),
            ("cache_write_30m", p.cache_write_30m),
            ("cache_write_12h", p.cache_write_12h),
            ("audio_input", p.audio_input),
            ("audio_output", p.audio_output),
            ("image_input", p.image_input),
            ("image_output", p.image_output),
        ];
        for (n, v) in all {
            if let Some(v) = v {
                out.insert(format!("{at}{n}"), v);
            }
        }
    }
    put(&mut out, "", &s.base);
    for (n, p) in &s.service_tiers {
        put(&mut out, &format!("service_tiers.{n}."), p);
    }
    for t in &s.tiers {
        let at = match &t.service_tier {
            Some(sv) => format!("tiers.{sv}.{}.", t.above_input_tokens),
            None => format!("tiers.{}.", t.above_input_tokens),
        };
        put(&mut out, &at, &t.prices);
    }
    if s.tool_fees.web_search != 0 {
        out.insert("tool_fees.web_search".into(), s.tool_fees.web_search);
    }
    if let Some(m) = s.multiplier_ppm {
        out.insert("multiplier_ppm".into(), m);
    }
    out
}

/// The components that differ between two sheets, by field name.
pub fn diff(model: &str, old: &PriceSheet, new: &PriceSheet) -> Vec<Change> {
    let (a, b) = (flatten(old), flatten(new));
    let mut fields: Vec<&String> = a.keys().chain(b.keys()).collect();
    fields.sort();
    fields.dedup();
    fields
        .into_iter()
        .filter(|f| a.get(*f) != b.get(*f))
        .map(|f| Change {
            model: model.to_string(),
            field: f.clone(),
            old: a.get(f).copied(),
            new: b.get(f).copied(),
        })
        .collect()
}

/// What importing `catalog` (LiteLLM's JSON object) would change for
/// `models`. A model with a refused price keeps its sheet; a model's
/// `multiplier_ppm` (not a LiteLLM price) is kept.
pub fn plan(catalog: &Map<String, Value>, models: &[CatalogModel], round: bool) -> Plan {
    let mut p = Plan::default();
    for m in models {
        let key = match find_entry(catalog, &m.upstream_model) {
            Ok(Some(k)) => k,
            Ok(None) => {
                p.unmatched_models.push(m.id.clone());
                continue;
            }
            Err(keys) => {
                p.refused.push(Refused {
                    model: m.id.clone(),
                    field: String::new(),
                    reason: format!(
                        "upstream model {:?} matches several entries: {}",
                        m.upstream_model,
                        keys.join(", ")
                    ),
                });
                continue;
            }
        };
        p.matched.push(Matched {
            model: m.id.clone(),
            entry: key.to_string(),
        });
        let Some(entry) = catalog[key].as_object() else {
            p.refused.push(Refused {
                model: m.id.clone(),
                field: String::new(),
                reason: format!("entry {key:?} is not an object"),
            });
            continue;
        };
        match sheet_of_entry(entry, round) {
            Err(errs) => p
                .refused
                .extend(errs.into_iter().map(|(field, reason)| Refused {
                    model: m.id.clone(),
                    field,
                    reason,
                })),
            Ok((mut sheet, unknown)) => {
                p.unknown_fields
                    .extend(unknown.into_iter().map(|field| UnknownField {
                        model: m.id.clone(),
                        entry: key.to_string(),
                        field,
                    }));
                sheet.multiplier_ppm = m.current.multiplier_ppm;
                let changes = diff(&m.id, &m.current, &sheet);
                if !changes.is_empty() {
                    p.changes.extend(changes);
                    p.new_sheets.push((m.id.clone(), sheet));
                }
            }
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn usd_per_token_converts_exactly_or_is_refused() {
        assert_eq!(per_mtok(1.5e-07, false), Ok(150_000));
        assert_eq!(per_mtok(7.5e-08, false), Ok(75_000));
        assert_eq!(per_mtok(3e-06, false), Ok(3_000_000));
        assert_eq!(per_mtok(1.5e-05, false), Ok(15_000_000));
        assert_eq!(per_mtok(0.0, false), Ok(0));
        assert_eq!(per_mtok(2.0, false), Ok(2_000_000_000_000));
        // Float noise is not a price: 0.1 + 0.2 prints as 0.30000000000000004.
        assert_eq!(per_mtok(1e-12, false), Ok(1));
        assert!(per_mtok(1.5e-13, false).is_err());
        assert_eq!(per_mtok(1.5e-13, true), Ok(0));
        assert_eq!(per_mtok(2.5e-12, true), Ok(3));
        assert!(per_mtok(0.1 + 0.2, false).unwrap_err().contains("round"));
        assert_eq!(per_mtok(0.1 + 0.2, true), Ok(300_000_000_000));
        assert!(per_mtok(-1e-6, true).is_err());
        assert!(per_mtok(f64::NAN, true).is_err());
        // Real entries (databricks, derived from DBUs) carry float noise in
        // their decimal: refused, or rounded when asked.
        assert!(per_mtok(2.9999900000000002e-06, false).is_err());
        assert_eq!(per_mtok(2.9999900000000002e-06, true), Ok(2_999_990));
        assert_eq!(scaled(0.025, 6, false), Ok(25_000));
        assert!(scaled(1e-7, 6, false).is_err());
    }

    /// OpenAI's write TTLs as LiteLLM prices them (gpt-5.6's entry): the
    /// base write price is the 30-minute write, `_above_12hr` the 12-hour
    /// one, with its long-context and service-tier variants.
    #[test]
    fn openai_write_ttls_are_imported() {
        let e = obj(json!({
            "input_cost_per_token": 4e-06, "output_cost_per_token": 2e-05,
            "cache_creation_input_token_cost": 5e-06,
            "cache_creation_input_token_cost_above_12hr": 1e-05,
            "cache_creation_input_token_cost_above_12hr_priority": 2e-05,
            "input_cost_per_token_priority": 8e-06, "output_cost_per_token_priority": 4e-05,
            "input_cost_per_token_above_272k_tokens": 8e-06,
            "cache_creation_input_token_cost_above_12hr_above_272k_tokens": 2e-05,
        }));
        let (s, unknown) = sheet_of_entry(&e, false).unwrap();
        assert!(unknown.is_empty(), "{unknown:?}");
        assert_eq!(s.base.cache_write_5m, Some(5_000_000));
        assert_eq!(s.base.cache_write_30m, None, "the base write price");
        assert_eq!(s.base.cache_write_12h, Some(10_000_000));
        assert_eq!(
            s.service_tiers["priority"].cache_write_12h,
            Some(20_000_000)
        );
        let t = s.tiers.iter().find(|t| t.service_tier.is_none()).unwrap();
        assert_eq!(t.prices.cache_write_12h, Some(20_000_000));
        // Billed: a 30-minute write at the base write price.
        let b = crate::usage::Breakdown {
            cache_write_30m: 10,
            cache_write_12h: 10,
            ..Default::default()
        };
        assert_eq!(s.cost_pico(&b), 10 * 5_000_000 + 10 * 10_000_000);
    }

    #[test]
    fn the_fields_map_to_components_tiers_and_service_tiers() {
        let e = obj(json!({
            "input_cost_per_token": 3e-06, "output_cost_per_token": 1.5e-05,
            "cache_read_input_token_cost": 3e-07,
            "cache_creation_input_token_cost": 3.75e-06,
            "cache_creation_input_token_cost_above_1hr": 6e-06,
            "input_cost_per_audio_token": 4e-05, "output_cost_per_audio_token": 8e-05,
            "input_cost_per_token_above_200k_tokens": 6e-06,
            "output_cost_per_token_above_200k_tokens": 2.25e-05,
            "cache_creation_input_token_cost_above_1hr_above_200k_tokens": 1.2e-05,
            "input_cost_per_token_priority": 6e-06, "output_cost_per_token_priority": 3e-05,
            "input_cost_per_token_batches": 1.5e-06,
            "cache_read_input_token_cost_above_272k_tokens_flex": 1e-07,
            "search_context_cost_per_query": {"search_context_size_low": 0.01,
                "search_context_size_medium": 0.01, "search_context_size_high": 0.01},
            "input_cost_per_token_ultrafast": 1e-05,
            "output_cost_per_image": 0.04,
            "max_input_tokens": 200000, "mode": "chat", "supports_vision": true
        }));
        let (s, unknown) = sheet_of_entry(&e, false).unwrap();
        assert_eq!(s.base.input, 3_000_000);
        assert_eq!(s.base.output, 15_000_000);
        assert_eq!(s.base.cached_input, Some(300_000));
        assert_eq!(s.base.cache_write_5m, Some(3_750_000));
        assert_eq!(s.base.cache_write_1h, Some(6_000_000));
        assert_eq!(s.base.audio_input, Some(40_000_000));
        assert_eq!(s.base.audio_output, Some(80_000_000));
        assert_eq!(s.tool_fees.web_search, 10_000);
        // The long-context tier: its own prices, the rest the untiered ones.
        let t = s.tiers.iter().find(|t| t.service_tier.is_none()).unwrap();
        assert_eq!(t.above_input_tokens, 200_000);
        assert_eq!(t.prices.input, 6_000_000);
        assert_eq!(t.prices.output, 22_500_000);
        assert_eq!(t.prices.cache_write_1h, Some(12_000_000));
        assert_eq!(t.prices.cached_input, Some(300_000));
        // Service tiers: priority and batch priced, the rest inherited.
        let pr = &s.service_tiers["priority"];
        assert_eq!((pr.input, pr.output), (6_000_000, 30_000_000));
        assert_eq!(pr.cached_input, Some(300_000));
        let b = &s.service_tiers["batch"];
        assert_eq!((b.input, b.output), (1_500_000, 15_000_000));
        // A flex tier priced only above 272k still has its base (the default's).
        assert_eq!(s.service_tiers["flex"], s.base);
        let ft = s
            .tiers
            .iter()
            .find(|t| t.service_tier.as_deref() == Some("flex"))
            .unwrap();
        assert_eq!(ft.above_input_tokens, 272_000);
        assert_eq!(ft.prices.cached_input, Some(100_000));
        assert_eq!(ft.prices.input, 3_000_000);
        // The sheet prices a long served-at-flex request by the flex tier.
        assert_eq!(
            s.prices_for(Some("flex"), 300_000).cached_input,
            Some(100_000)
        );
        assert_eq!(
            unknown,
            vec!["input_cost_per_token_ultrafast", "output_cost_per_image"]
        );
        s.check().unwrap();
    }

    #[test]
    fn an_inexact_or_missing_price_refuses_the_entry_naming_the_field() {
        let e =
            obj(json!({"input_cost_per_token": 1.23456789e-13, "output_cost_per_token": 1e-06}));
        let errs = sheet_of_entry(&e, false).unwrap_err();
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].0, "input_cost_per_token");
        let (s, _) = sheet_of_entry(&e, true).unwrap();
        assert_eq!(s.base.input, 0);
        let e = obj(json!({"input_cost_per_token": 1e-06}));
        let errs = sheet_of_entry(&e, false).unwrap_err();
        assert_eq!(errs[0].0, "output_cost_per_token");
    }

    #[test]
    fn entries_match_by_upstream_name_then_without_the_provider_prefix() {
        let c = obj(json!({"gpt-4o-mini": {}, "openai/gpt-x": {}, "a/dup": {}, "b/dup": {}}));
        assert_eq!(find_entry(&c, "gpt-4o-mini"), Ok(Some("gpt-4o-mini")));
        assert_eq!(
            find_entry(&c, "openai/gpt-4o-mini"),
            Ok(Some("gpt-4o-mini"))
        );
        assert_eq!(find_entry(&c, "gpt-x"), Ok(Some("openai/gpt-x")));
        assert_eq!(find_entry(&c, "nope"), Ok(None));
        assert!(find_entry(&c, "dup").is_err());
    }

    #[test]
    fn the_plan_lists_changes_and_skips_equal_sheets() {
        let c = obj(json!({
            "m-a": {"input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06},
            "m-b": {"input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06,
                    "cache_read_input_token_cost": 1e-07, "foo_cost": 1.0},
            "m-c": {"input_cost_per_token": 1e-20, "output_cost_per_token": 2e-06}
        }));
        let mut multiplied = PriceSheet::two(1, 2);
        multiplied.multiplier_ppm = Some(1_100_000);
        let models = vec![
            CatalogModel {
                id: "a".into(),
                upstream_model: "m-a".into(),
                current: PriceSheet::two(1_000_000, 2_000_000),
            },
            CatalogModel {
                id: "b".into(),
                upstream_model: "m-b".into(),
                current: multiplied,
            },
            CatalogModel {
                id: "c".into(),
                upstream_model: "m-c".into(),
                current: PriceSheet::two(1, 2),
            },
            CatalogModel {
                id: "d".into(),
                upstream_model: "none".into(),
                current: PriceSheet::two(1, 2),
            },
        ];
        let p = plan(&c, &models, false);
        assert_eq!(p.matched.len(), 3);
        assert_eq!(p.unmatched_models, vec!["d"]);
        assert_eq!(p.refused.len(), 1);
        assert_eq!(p.refused[0].model, "c");
        assert_eq!(p.unknown_fields.len(), 1);
        assert_eq!(p.unknown_fields[0].field, "foo_cost");
        let fields: Vec<(&str, Option<i64>, Option<i64>)> = p
            .changes
            .iter()
            .map(|c| (c.field.as_str(), c.old, c.new))
            .collect();
        assert_eq!(
            fields,
            vec![
                ("cached_input", None, Some(100_000)),
                ("input", Some(1), Some(1_000_000)),
                ("output", Some(2), Some(2_000_000)),
            ]
        );
        assert!(p.changes.iter().all(|c| c.model == "b"));
        assert_eq!(p.new_sheets.len(), 1);
        assert_eq!(p.new_sheets[0].1.multiplier_ppm, Some(1_100_000));
    }
}
