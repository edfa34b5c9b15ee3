//! Reconciliation with the provider's invoice (docs/billing.md, "Closing
//! against the provider's invoice"): what the provider's usage and cost
//! reports say, put in the ledger's terms, compared with the ledger per
//! account × day × model × class, each difference classified, and an
//! adjustment split across departments. Pure: the job fetches, the store
//! reads and writes, this decides.

use crate::money::apportion;
use crate::pricing::{Charges, Component};
use serde_json::Value;
use std::collections::BTreeMap;

/// Pico-USD per cent.
pub const PICO_PER_CENT: i128 = 10_000_000_000;

/// How long before a day's end (and before its start) a request tollgate
/// started may be dated on the other side of midnight by the provider: the
/// provider dates a request when it receives it (or when a retry reaches
/// it), tollgate when the client's request arrived. Differences no larger
/// than the traffic started in these windows are `day_edge`.
pub const EDGE_SECS: i64 = 120;

/// The kind of provider account, which decides the report shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    OpenAi,
    Anthropic,
}

impl ProviderKind {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "openai" => Some(Self::OpenAi),
            "anthropic" => Some(Self::Anthropic),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
        }
    }
}

/// What a line compares: a quantity the provider reports and bills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// Requests served (OpenAI's `num_model_requests`; Anthropic reports none).
    Requests,
    /// Uncached input tokens (OpenAI counts audio input in them too).
    Input,
    CachedInput,
    /// Cache writes, every TTL (OpenAI reports one number).
    CacheWrite,
    CacheWrite5m,
    CacheWrite1h,
    /// Output tokens, reasoning included (OpenAI counts audio output in them too).
    Output,
    AudioInput,
    AudioOutput,
    /// Web-search calls.
    WebSearch,
    /// A cost line the gateway does not know (no quantity).
    Other,
}

impl Class {
    pub const ALL: [Class; 11] = [
        Class::Requests,
        Class::Input,
        Class::CachedInput,
        Class::CacheWrite,
        Class::CacheWrite5m,
        Class::CacheWrite1h,
        Class::Output,
        Class::AudioInput,
        Class::AudioOutput,
        Class::WebSearch,
        Class::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Requests => "requests",
            Class::Input => "input",
            Class::CachedInput => "cached_input",
            Class::CacheWrite => "cache_write",
            Class::CacheWrite5m => "cache_write_5m",
            Class::CacheWrite1h => "cache_write_1h",
            Class::Output => "output",
            Class::AudioInput => "audio_input",
            Class::AudioOutput => "audio_output",
            Class::WebSearch => "web_search",
            Class::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// The classes a ledger row's charges fall in for a provider: the
/// quantity and the pico-USD of each (a quantity can count in one class
/// while its dollars are in another: OpenAI's uncached input tokens
/// include audio, whose dollars are the "audio input" line).
pub fn ledger_classes(kind: ProviderKind, c: &Charges) -> Vec<(Class, i64, i128)> {
    use Component as K;
    let q = |k: K| c.quantity_of(k);
    let p = |k: K| i128::from(c.pico_of(k));
    let mut out = Vec::with_capacity(8);
    match kind {
        ProviderKind::OpenAi => {
            out.push((
                Class::Input,
                q(K::Input) + q(K::ImageInput) + q(K::AudioInput),
                p(K::Input) + p(K::ImageInput),
            ));
            out.push((Class::CachedInput, q(K::CachedInput), p(K::CachedInput)));
            let writes = [
                K::CacheWrite5m,
                K::CacheWrite1h,
                K::CacheWrite30m,
                K::CacheWrite12h,
            ];
            out.push((
                Class::CacheWrite,
                writes.iter().map(|&k| q(k)).sum(),
                writes.iter().map(|&k| p(k)).sum(),
            ));
            out.push((
                Class::Output,
                q(K::Output) + q(K::ImageOutput) + q(K::AudioOutput),
                p(K::Output) + p(K::ImageOutput),
            ));
            out.push((Class::AudioInput, q(K::AudioInput), p(K::AudioInput)));
            out.push((Class::AudioOutput, q(K::AudioOutput), p(K::AudioOutput)));
        }
        ProviderKind::Anthropic => {
            out.push((
                Class::Input,
                q(K::Input) + q(K::ImageInput),
                p(K::Input) + p(K::ImageInput),
            ));
            out.push((Class::CachedInput, q(K::CachedInput), p(K::CachedInput)));
            // Anthropic's writes are 5-minute or 1-hour; a row priced with
            // another TTL (none should be) counts with the 5-minute ones.
            out.push((
                Class::CacheWrite5m,
                q(K::CacheWrite5m) + q(K::CacheWrite30m),
                p(K::CacheWrite5m) + p(K::CacheWrite30m),
            ));
            out.push((
                Class::CacheWrite1h,
                q(K::CacheWrite1h) + q(K::CacheWrite12h),
                p(K::CacheWrite1h) + p(K::CacheWrite12h),
            ));
            out.push((
                Class::Output,
                q(K::Output) + q(K::ImageOutput),
                p(K::Output) + p(K::ImageOutput),
            ));
        }
    }
    out.push((Class::WebSearch, q(K::WebSearch), p(K::WebSearch)));
    out
}

fn int(v: &Value, path: &[&str]) -> i64 {
    let mut v = v;
    for p in path {
        v = &v[*p];
    }
    v.as_i64()
        .or_else(|| v.as_f64().map(|f| f as i64))
        .unwrap_or(0)
}

/// The quantities of one result of a provider's usage report, by class.
/// OpenAI: `/v1/organization/usage/completions`; Anthropic:
/// `/v1/organizations/usage_report/messages` (field names from the
/// providers' API references).
pub fn usage_quantities(kind: ProviderKind, r: &Value) -> Vec<(Class, i64)> {
    match kind {
        ProviderKind::OpenAi => vec![
            (Class::Requests, int(r, &["num_model_requests"])),
            (Class::Input, int(r, &["input_uncached_tokens"])),
            (Class::CachedInput, int(r, &["input_cached_tokens"])),
            (Class::CacheWrite, int(r, &["input_cache_write_tokens"])),
            (Class::Output, int(r, &["output_tokens"])),
            (Class::AudioInput, int(r, &["input_audio_tokens"])),
            (Class::AudioOutput, int(r, &["output_audio_tokens"])),
        ],
        ProviderKind::Anthropic => vec![
            (Class::Input, int(r, &["uncached_input_tokens"])),
            (Class::CachedInput, int(r, &["cache_read_input_tokens"])),
            (
                Class::CacheWrite5m,
                int(r, &["cache_creation", "ephemeral_5m_input_tokens"]),
            ),
            (
                Class::CacheWrite1h,
                int(r, &["cache_creation", "ephemeral_1h_input_tokens"]),
            ),
            (Class::Output, int(r, &["output_tokens"])),
            (
                Class::WebSearch,
                int(r, &["server_tool_use", "web_search_requests"]),
            ),
        ],
    }
}

/// The model and class of an OpenAI cost line item (`"gpt-4o, input"`,
/// `"gpt-4o, cached input"`, …). A line item without a model is `None`.
pub fn openai_line_item(item: &str) -> Option<(String, Class)> {
    let (model, what) = item.rsplit_once(", ")?;
    let class = match what.trim().to_ascii_lowercase().as_str() {
        "input" | "text input" | "image input" => Class::Input,
        "cached input" => Class::CachedInput,
        "cache write" | "cached input write" => Class::CacheWrite,
        "output" | "text output" | "image output" => Class::Output,
        "audio input" => Class::AudioInput,
        "audio output" => Class::AudioOutput,
        "web search" | "web search tool call" => Class::WebSearch,
        _ => Class::Other,
    };
    Some((model.trim().to_string(), class))
}

/// The class of an Anthropic cost report result (`token_type`, or
/// `cost_type` `web_search`).
pub fn anthropic_cost_class(r: &Value) -> Class {
    match r["token_type"].as_str() {
        Some("uncached_input_tokens") => Class::Input,
        Some("cache_read_input_tokens") => Class::CachedInput,
        Some("cache_creation.ephemeral_5m_input_tokens") => Class::CacheWrite5m,
        Some("cache_creation.ephemeral_1h_input_tokens") => Class::CacheWrite1h,
        Some("output_tokens") => Class::Output,
        _ if r["cost_type"].as_str() == Some("web_search") => Class::WebSearch,
        _ => Class::Other,
    }
}

/// A decimal string of `unit_pico`-sized units (a power of ten) as exact pico-USD
/// (Anthropic's cost report: cents as a decimal string, `"12.3456"`).
/// Digits beyond the pico are dropped (rounded half up). None: not a
/// decimal number.
pub fn decimal_to_pico(s: &str, unit_pico: i128) -> Option<i128> {
    let s = s.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let (int_part, frac) = s.split_once('.').unwrap_or((s, ""));
    if int_part.is_empty() && frac.is_empty()
        || !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: i128 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().ok()?
    };
    let mut v = whole.checked_mul(unit_pico)?;
    // The fraction, digit by digit, in units of unit_pico (a power of
    // ten); the first digit below a pico rounds half up.
    let mut scale = unit_pico;
    for d in frac.bytes() {
        let d = i128::from(d - b'0');
        if scale > 1 {
            scale /= 10;
            v = v.checked_add(d * scale)?;
        } else {
            if d >= 5 {
                v += 1;
            }
            break;
        }
    }
    Some(if neg { -v } else { v })
}

/// US dollars as a JSON number (OpenAI's `amount.value`) in pico-USD,
/// rounded to the nearest pico (a double keeps 15–17 significant digits:
/// exact to the pico below $1,000).
pub fn usd_f64_to_pico(v: f64) -> i128 {
    (v * 1e12).round() as i128
}

/// Both sides of one line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineSums {
    pub tollgate_qty: i64,
    /// None: the provider reports no quantity for it (a cost line only).
    pub provider_qty: Option<i64>,
    /// Tollgate's quantity started within [`EDGE_SECS`] of either edge of
    /// the day (those before its start are not in `tollgate_qty`).
    pub edge_qty: i64,
    pub tollgate_pico: i128,
    pub provider_pico: i128,
}

/// What a line's difference is (docs/billing.md, "How differences are classified").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Finding {
    /// Same quantity, same dollars.
    Match,
    /// Same quantity, dollars within a cent.
    Rounding,
    /// The quantities differ by no more than the traffic at the day's edges.
    DayEdge,
    /// Same quantity, dollars a cent or more apart: the price sheet is not
    /// the invoiced rate.
    Price,
    /// The provider counted more on a model where it also served requests
    /// tollgate did not send (or on a model tollgate never used).
    OutsideTraffic,
    /// Tollgate counted more than the provider reports.
    NotBilled,
    /// The provider counted more, with no sign of outside traffic.
    ProviderMore,
}

impl Finding {
    pub fn as_str(self) -> &'static str {
        match self {
            Finding::Match => "match",
            Finding::Rounding => "rounding",
            Finding::DayEdge => "day_edge",
            Finding::Price => "price",
            Finding::OutsideTraffic => "outside_traffic",
            Finding::NotBilled => "not_billed",
            Finding::ProviderMore => "provider_more",
        }
    }

    pub fn parse(s: &str) -> Option<Finding> {
        [
            Finding::Match,
            Finding::Rounding,
            Finding::DayEdge,
            Finding::Price,
            Finding::OutsideTraffic,
            Finding::NotBilled,
            Finding::ProviderMore,
        ]
        .into_iter()
        .find(|f| f.as_str() == s)
    }

    /// A difference finance should look at: not a match, a sub-cent
    /// rounding or traffic at the day's edge (expected, not errors).
    pub fn is_difference(self) -> bool {
        !matches!(self, Finding::Match | Finding::Rounding | Finding::DayEdge)
    }
}

/// Classifies one line. `outside`: the provider reports more requests (or
/// any traffic) on the line's model than tollgate sent.
pub fn classify(s: &LineSums, outside: bool) -> Finding {
    let dq = s.provider_qty.map_or(0, |p| p - s.tollgate_qty);
    let dp = s.provider_pico - s.tollgate_pico;
    if dq == 0 {
        return if dp == 0 {
            Finding::Match
        } else if dp.abs() < PICO_PER_CENT {
            Finding::Rounding
        } else {
            Finding::Price
        };
    }
    if dq.abs() <= s.edge_qty {
        Finding::DayEdge
    } else if dq > 0 && outside {
        Finding::OutsideTraffic
    } else if dq < 0 {
        Finding::NotBilled
    } else {
        Finding::ProviderMore
    }
}

/// One compared line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub model: String,
    pub class: Class,
    pub sums: LineSums,
    pub finding: Finding,
}

/// Every line of a day: the union of both sides' (model, class), each
/// classified. A model is `outside` when the provider served more requests
/// on it than tollgate sent (a kind that reports requests), or tollgate sent
/// it nothing at all.
pub fn compare(sums: BTreeMap<(String, Class), LineSums>) -> Vec<Line> {
    let mut outside: BTreeMap<&str, bool> = BTreeMap::new();
    for ((model, class), s) in &sums {
        let o = outside.entry(model.as_str()).or_insert(false);
        if *class == Class::Requests && s.provider_qty.unwrap_or(0) > s.tollgate_qty + s.edge_qty {
            *o = true;
        }
    }
    for (model, o) in outside.iter_mut() {
        let tollgate_any = sums
            .iter()
            .any(|((m, _), s)| m == model && (s.tollgate_qty != 0 || s.tollgate_pico != 0));
        if !tollgate_any {
            *o = true;
        }
    }
    sums.iter()
        .map(|((model, class), s)| Line {
            model: model.clone(),
            class: *class,
            sums: *s,
            finding: classify(s, outside.get(model.as_str()).copied().unwrap_or(false)),
        })
        .collect()
}

/// A department's (or the unallocated line's) share of an adjustment.
pub const UNALLOCATED: &str = "";

/// Splits an adjustment across departments pro rata to their exact cost
/// (largest remainder, pico-USD: the shares add up to the amount exactly).
/// No cost at all (or allocation `unallocated`): the whole amount on the
/// unallocated line (tenant `""`).
pub fn allocate(
    amount_pico: i128,
    costs: &[(String, i128)],
    pro_rata: bool,
) -> Vec<(String, i128)> {
    let weights: Vec<i128> = costs.iter().map(|(_, c)| (*c).max(0)).collect();
    if !pro_rata || weights.iter().all(|w| *w == 0) {
        return vec![(UNALLOCATED.to_string(), amount_pico)];
    }
    apportion(amount_pico, &weights)
        .into_iter()
        .zip(costs)
        .filter(|(share, _)| *share != 0)
        .map(|(share, (t, _))| (t.clone(), share))
        .collect()
}

/// The day's drift: |provider − tollgate| dollars over the provider's, in
/// basis points (the provider billing nothing while tollgate counted
/// something is 10,000).
pub fn drift_bps(tollgate_pico: i128, provider_pico: i128) -> i64 {
    let d = (provider_pico - tollgate_pico).abs();
    if d == 0 {
        return 0;
    }
    if provider_pico <= 0 {
        return 10_000;
    }
    i64::try_from(d.saturating_mul(10_000) / provider_pico).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cents_and_dollars_become_exact_pico() {
        assert_eq!(
            decimal_to_pico("12.3456", PICO_PER_CENT),
            Some(123_456_000_000)
        );
        assert_eq!(decimal_to_pico("0.0000000001", PICO_PER_CENT), Some(1));
        assert_eq!(decimal_to_pico("7", PICO_PER_CENT), Some(70_000_000_000));
        assert_eq!(decimal_to_pico("-0.5", PICO_PER_CENT), Some(-5_000_000_000));
        // A digit below the pico rounds half up.
        assert_eq!(decimal_to_pico("0.00000000015", PICO_PER_CENT), Some(2));
        assert_eq!(decimal_to_pico("0.00000000014", PICO_PER_CENT), Some(1));
        assert_eq!(decimal_to_pico("1e3", PICO_PER_CENT), None);
        assert_eq!(decimal_to_pico("", PICO_PER_CENT), None);
        assert_eq!(usd_f64_to_pico(0.123456789012), 123_456_789_012);
        assert_eq!(usd_f64_to_pico(41230.0), 41_230_000_000_000_000);
    }

    #[test]
    fn report_fields_land_in_their_classes() {
        let o = json!({"num_model_requests": 3, "input_uncached_tokens": 100,
            "input_cached_tokens": 40, "input_cache_write_tokens": 7, "output_tokens": 9,
            "input_audio_tokens": 0, "output_audio_tokens": 0, "input_tokens": 147});
        let q: BTreeMap<_, _> = usage_quantities(ProviderKind::OpenAi, &o)
            .into_iter()
            .collect();
        assert_eq!(q[&Class::Requests], 3);
        assert_eq!(q[&Class::Input], 100);
        assert_eq!(q[&Class::CacheWrite], 7);
        let a = json!({"uncached_input_tokens": 5, "cache_read_input_tokens": 6,
            "cache_creation": {"ephemeral_5m_input_tokens": 7, "ephemeral_1h_input_tokens": 8},
            "output_tokens": 9, "server_tool_use": {"web_search_requests": 2}});
        let q: BTreeMap<_, _> = usage_quantities(ProviderKind::Anthropic, &a)
            .into_iter()
            .collect();
        assert_eq!(
            (
                q[&Class::Input],
                q[&Class::CachedInput],
                q[&Class::CacheWrite5m]
            ),
            (5, 6, 7)
        );
        assert_eq!((q[&Class::CacheWrite1h], q[&Class::WebSearch]), (8, 2));
        assert!(!q.contains_key(&Class::Requests));
        assert_eq!(
            openai_line_item("gpt-4o-2024-08-06, cached input"),
            Some(("gpt-4o-2024-08-06".into(), Class::CachedInput))
        );
        assert_eq!(
            openai_line_item("gpt-4o, fine-tuning hours").map(|x| x.1),
            Some(Class::Other)
        );
        assert_eq!(openai_line_item("Assistants file search"), None);
        assert_eq!(
            anthropic_cost_class(
                &json!({"token_type": "cache_creation.ephemeral_1h_input_tokens"})
            ),
            Class::CacheWrite1h
        );
        assert_eq!(
            anthropic_cost_class(&json!({"cost_type": "web_search", "token_type": null})),
            Class::WebSearch
        );
    }

    #[test]
    fn ledger_charges_fall_in_the_providers_classes() {
        let mut c = Charges::default();
        c.set(Component::Input, 100, 250);
        c.set(Component::AudioInput, 10, 400);
        c.set(Component::CacheWrite30m, 5, 50);
        c.set(Component::CacheWrite5m, 2, 20);
        c.set(Component::Output, 7, 70);
        let o: BTreeMap<_, _> = ledger_classes(ProviderKind::OpenAi, &c)
            .into_iter()
            .map(|(k, q, p)| (k, (q, p)))
            .collect();
        // Audio is in OpenAI's uncached input tokens, its dollars its own line.
        assert_eq!(o[&Class::Input], (110, 250));
        assert_eq!(o[&Class::AudioInput], (10, 400));
        assert_eq!(o[&Class::CacheWrite], (7, 70));
        let total_pico: i128 = ledger_classes(ProviderKind::OpenAi, &c)
            .iter()
            .map(|x| x.2)
            .sum();
        assert_eq!(
            total_pico,
            c.total_pico(),
            "every pico in exactly one class"
        );
        let a: BTreeMap<_, _> = ledger_classes(ProviderKind::Anthropic, &c)
            .into_iter()
            .map(|(k, q, p)| (k, (q, p)))
            .collect();
        assert_eq!(a[&Class::CacheWrite5m], (7, 70));
    }

    fn sums(t: i64, p: Option<i64>, edge: i64, tp: i128, pp: i128) -> LineSums {
        LineSums {
            tollgate_qty: t,
            provider_qty: p,
            edge_qty: edge,
            tollgate_pico: tp,
            provider_pico: pp,
        }
    }

    #[test]
    fn each_difference_is_named() {
        assert_eq!(
            classify(&sums(10, Some(10), 0, 5, 5), false),
            Finding::Match
        );
        assert_eq!(
            classify(&sums(10, Some(10), 0, 5, 5 + PICO_PER_CENT - 1), false),
            Finding::Rounding
        );
        assert_eq!(
            classify(&sums(10, Some(10), 0, 5, 5 + PICO_PER_CENT), false),
            Finding::Price
        );
        assert_eq!(classify(&sums(10, None, 0, 5, 5), false), Finding::Match);
        assert_eq!(
            classify(&sums(10, Some(13), 3, 5, 9), false),
            Finding::DayEdge
        );
        assert_eq!(
            classify(&sums(10, Some(14), 3, 5, 9), false),
            Finding::ProviderMore
        );
        assert_eq!(
            classify(&sums(10, Some(14), 3, 5, 9), true),
            Finding::OutsideTraffic
        );
        assert_eq!(
            classify(&sums(10, Some(4), 3, 5, 2), true),
            Finding::NotBilled
        );
    }

    #[test]
    fn a_model_with_more_requests_at_the_provider_is_outside_traffic() {
        let mut m = BTreeMap::new();
        m.insert(
            ("a".to_string(), Class::Requests),
            sums(10, Some(12), 0, 0, 0),
        );
        m.insert(
            ("a".to_string(), Class::Input),
            sums(100, Some(130), 0, 100, 130),
        );
        m.insert(
            ("b".to_string(), Class::Requests),
            sums(10, Some(10), 0, 0, 0),
        );
        m.insert(
            ("b".to_string(), Class::Input),
            sums(100, Some(102), 0, 100, 102),
        );
        m.insert(("c".to_string(), Class::Input), sums(0, Some(50), 0, 0, 50));
        let lines = compare(m);
        let f = |model: &str, class| {
            lines
                .iter()
                .find(|l| l.model == model && l.class == class)
                .unwrap()
                .finding
        };
        assert_eq!(f("a", Class::Requests), Finding::OutsideTraffic);
        assert_eq!(f("a", Class::Input), Finding::OutsideTraffic);
        assert_eq!(f("b", Class::Input), Finding::ProviderMore);
        assert_eq!(f("c", Class::Input), Finding::OutsideTraffic);
    }

    #[test]
    fn an_adjustment_splits_pro_rata_and_adds_up() {
        let costs = vec![
            ("a".to_string(), 300),
            ("b".to_string(), 100),
            ("z".into(), 0),
        ];
        let s = allocate(1001, &costs, true);
        assert_eq!(s, vec![("a".to_string(), 751), ("b".to_string(), 250)]);
        let s = allocate(-1001, &costs, true);
        assert_eq!(s.iter().map(|x| x.1).sum::<i128>(), -1001);
        assert_eq!(allocate(5, &costs, false), vec![(String::new(), 5)]);
        assert_eq!(allocate(5, &[], true), vec![(String::new(), 5)]);
    }

    #[test]
    fn drift_in_basis_points() {
        assert_eq!(drift_bps(100, 100), 0);
        assert_eq!(drift_bps(98, 100), 200);
        assert_eq!(drift_bps(5, 0), 10_000);
    }
}
