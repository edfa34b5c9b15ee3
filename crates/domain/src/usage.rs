//! A settled request as the ledger stores it. It travels as JSON from the
//! gateway through the Redis outbox (so a crash loses nothing) to Postgres.

use serde::{Deserialize, Serialize};

pub mod breakdown;
mod json;
mod raw;

pub use breakdown::Breakdown;
pub use raw::{RawUsage, RAW_USAGE_CAP};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageEvent {
    pub request_id: String,
    pub tenant_id: String,
    pub app_id: String,
    pub key_id: String,
    pub model: String,
    /// `YYYY-MM` of the hold, platform time.
    pub period: String,
    /// `YYYY-MM-DD` of the settle, platform time.
    pub day: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// The cost in whole micro-USD, rounded up (what the Redis counters
    /// took).
    pub cost_micro: i64,
    /// The exact cost in pico-USD (10⁻¹² USD): tokens × µUSD per million
    /// tokens per component, plus fees (0 in events from before it was kept:
    /// `cost_micro` × 10⁶ then).
    #[serde(default)]
    pub cost_pico: i64,
    pub est_tokens: i64,
    pub est_cost_micro: i64,
    pub overrun_tokens: i64,
    pub overrun_cost_micro: i64,
    /// `ok`, `upstream_error`, `client_closed`, `cut_off`, `expired`.
    pub status: String,
    pub stream: bool,
    /// Whose count was settled: `provider` (the provider's usage),
    /// `counted` (tokens the gateway counted), `estimated` (the estimate).
    #[serde(default = "provider")]
    pub usage_source: String,
    pub replica: String,
    pub started_at_ms: i64,
    pub settled_at_ms: i64,
    /// The deployment of the model that answered (None before deployments
    /// existed, and for requests no deployment answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// Set when the provider's report was not billed as reported (above
    /// the sanity bound, negative, malformed): what it said, for finance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anomaly: Option<UsageAnomaly>,
    /// What the request was billed for, by component, when it was more
    /// than plain input and output (cached input, cache writes, reasoning,
    /// audio, tool calls, a served service tier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breakdown: Option<Breakdown>,
    /// The exact cost by component (quantity and pico-USD each), adding up
    /// to `cost_pico`; None in events from before components were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charges: Option<crate::charges::Charges>,
    /// The provider's `usage` object as it sent it, on every request it
    /// sent one for (None otherwise, and in events from before it was
    /// kept): without the served tier or search calls the gateway reads
    /// from beside it (those are in `breakdown`). Capped ([`RawUsage`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_usage: Option<RawUsage>,
    /// Tags and end user (absent in events stored before attribution).
    #[serde(default, flatten)]
    pub attribution: crate::attribution::Attribution,
}

impl UsageEvent {
    /// The exact cost the books count: `cost_pico`, or for an event that
    /// has none (from before it was kept, an expired hold billed at its
    /// estimate) its micro-USD as pico-USD.
    pub fn exact_cost_pico(&self) -> i64 {
        if self.cost_pico > 0 {
            self.cost_pico
        } else {
            self.cost_micro.saturating_mul(1_000_000)
        }
    }
}

/// A provider report the sanity bound overruled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageAnomaly {
    /// `input_above_bound`, `output_above_cap`, `negative`, `malformed`.
    pub kind: String,
    /// The provider's `usage` object as the settle read it (with the
    /// served tier and search calls merged in; the event's `raw_usage` is
    /// the object as sent).
    pub reported: serde_json::Value,
}

impl UsageEvent {
    pub fn total_tokens(&self) -> i64 {
        self.input_tokens + self.output_tokens
    }
}

fn provider() -> String {
    "provider".into()
}

/// Largest amount any settle may carry (tokens or micro-USD): the hold
/// scripts compute in Lua numbers, which are doubles, exact up to 2^53.
pub const MAX_SETTLE_AMOUNT: i64 = (1 << 53) - 1;

/// The input estimate's documented error (docs/providers.md): the provider
/// may count up to this percent more input than the gateway's estimate…
pub const INPUT_ERROR_PCT: i64 = 50;
/// …plus this many tokens: a provider-side system prompt or chat template,
/// tool-schema formatting, a small image the estimate does not see.
pub const INPUT_ERROR_TOKENS: i64 = 1_024;

/// Most input tokens a settle books for an input estimate of `est_input`.
pub fn input_allowance(est_input: i64) -> i64 {
    let est = est_input.clamp(0, MAX_SETTLE_AMOUNT);
    est.checked_mul(INPUT_ERROR_PCT)
        .map(|x| x / 100)
        .and_then(|x| x.checked_add(est))
        .and_then(|x| x.checked_add(INPUT_ERROR_TOKENS))
        .map_or(MAX_SETTLE_AMOUNT, |x| x.min(MAX_SETTLE_AMOUNT))
}

/// The most a settle may book: input, output and cost. Every settle names
/// one; the quota store clamps to it (checked, in Rust) before any script
/// runs, so no report can wrap a counter or go negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub input: i64,
    pub output: i64,
    pub cost: i64,
}

impl Bound {
    /// Only the limits every amount has: non-negative, exact in Lua. For
    /// settles whose amounts the gateway computed itself (an expired hold
    /// closed at its estimate).
    pub const SAFE: Bound = Bound {
        input: MAX_SETTLE_AMOUNT,
        output: MAX_SETTLE_AMOUNT,
        cost: MAX_SETTLE_AMOUNT,
    };

    /// A request's bound: its input estimate plus the documented error, and
    /// the output cap the provider was sent; `cost_of` prices that pair.
    pub fn for_request(est_input: i64, cap_sent: i64, cost_of: impl Fn(i64, i64) -> i64) -> Bound {
        let input = input_allowance(est_input);
        let output = cap_sent.clamp(0, MAX_SETTLE_AMOUNT);
        Bound {
            input,
            output,
            cost: cost_of(input, output).clamp(0, MAX_SETTLE_AMOUNT),
        }
    }

    /// (input, output, cost) clamped into `[0, bound]`.
    pub fn clamp(&self, input: i64, output: i64, cost: i64) -> (i64, i64, i64) {
        let c = |v: i64, b: i64| v.clamp(0, b.clamp(0, MAX_SETTLE_AMOUNT));
        (
            c(input, self.input),
            c(output, self.output),
            c(cost, self.cost),
        )
    }
}

/// One count as a provider reported it, read leniently (any JSON value) so
/// that an absurd report is seen and bounded rather than silently dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// An integer (saturated to the i128 range; floats are truncated).
    Number(i128),
    /// Absent or null.
    Missing,
    /// Not a number at all (a string that does not parse, an object, NaN).
    Malformed,
}

impl Count {
    pub fn of(v: Option<&serde_json::Value>) -> Count {
        use serde_json::Value;
        match v {
            None | Some(Value::Null) => Count::Missing,
            Some(Value::Number(n)) => {
                if let Some(i) = n.as_i64() {
                    Count::Number(i as i128)
                } else if let Some(u) = n.as_u64() {
                    Count::Number(u as i128)
                } else {
                    match n.as_f64() {
                        // `as` saturates: 1e300 becomes i128::MAX.
                        Some(f) if f.is_finite() => Count::Number(f.trunc() as i128),
                        _ => Count::Malformed,
                    }
                }
            }
            Some(Value::String(s)) => s
                .trim()
                .parse::<i128>()
                .map_or(Count::Malformed, Count::Number),
            Some(_) => Count::Malformed,
        }
    }
}

/// A provider's `usage` object: the JSON the settle reads (the served tier
/// and search calls merged in, kept whole for finance when it is
/// anomalous), the two counts the gateway settles on, and the object's text
/// as the provider sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reported {
    pub raw: serde_json::Value,
    pub input: Count,
    pub output: Count,
    /// The object as the provider sent it, when the reader kept it apart
    /// from `raw` (its scanned text, or the object before the gateway
    /// merged anything into it). None: `raw` is the object as sent, and
    /// [`Reported::take_sent`] serialises it.
    pub sent: Option<RawUsage>,
}

impl Reported {
    pub fn from_json(raw: serde_json::Value) -> Reported {
        let input = Count::of(raw.get("prompt_tokens"));
        let output = Count::of(raw.get("completion_tokens"));
        Reported {
            raw,
            input,
            output,
            sent: None,
        }
    }

    /// `self` with the text of the object as sent (see `sent`).
    pub fn with_sent(mut self, sent: Option<RawUsage>) -> Reported {
        self.sent = sent;
        self
    }

    /// The object as the provider sent it, for the ledger row: the kept
    /// text (moved out, not copied), else `raw` serialised once.
    pub fn take_sent(&mut self) -> RawUsage {
        self.sent.take().unwrap_or_else(|| RawUsage::of(&self.raw))
    }
}

impl<'de> Deserialize<'de> for Reported {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(d).map(Reported::from_json)
    }
}

/// What a report is billed at, and why it was not taken as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Billed {
    pub input: i64,
    pub output: i64,
    pub anomaly: Option<AnomalyKind>,
}

/// Why a provider's report was not billed as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnomalyKind {
    /// Input above the estimate plus its documented error.
    InputAboveBound,
    /// Output above the cap the provider was sent.
    OutputAboveCap,
    /// A negative count.
    Negative,
    /// A count that is not a number.
    Malformed,
}

impl AnomalyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AnomalyKind::InputAboveBound => "input_above_bound",
            AnomalyKind::OutputAboveCap => "output_above_cap",
            AnomalyKind::Negative => "negative",
            AnomalyKind::Malformed => "malformed",
        }
    }
}

/// The sanity bound on what a provider reports. A count above its bound is
/// billed at the bound; a negative or malformed one is no report at all and
/// is billed at `fallback` (what the gateway knows without a report: the
/// input estimate, the output counted or held), itself within the bound.
/// Missing counts take the fallback too, without an anomaly.
pub fn bill(reported: &Reported, bound: &Bound, fallback: (i64, i64)) -> Billed {
    let mut anomaly = None;
    let mut one = |c: Count, max: i64, fallback: i64, above: AnomalyKind| -> i64 {
        let max = max.clamp(0, MAX_SETTLE_AMOUNT);
        let fallback = fallback.clamp(0, max);
        match c {
            Count::Missing => fallback,
            Count::Malformed => {
                anomaly = anomaly.or(Some(AnomalyKind::Malformed));
                fallback
            }
            Count::Number(n) if n < 0 => {
                anomaly = anomaly.or(Some(AnomalyKind::Negative));
                fallback
            }
            Count::Number(n) if n > max as i128 => {
                anomaly = anomaly.or(Some(above));
                max
            }
            Count::Number(n) => n as i64,
        }
    };
    let input = one(
        reported.input,
        bound.input,
        fallback.0,
        AnomalyKind::InputAboveBound,
    );
    let output = one(
        reported.output,
        bound.output,
        fallback.1,
        AnomalyKind::OutputAboveCap,
    );
    Billed {
        input,
        output,
        anomaly,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bound() -> Bound {
        Bound::for_request(100, 40, |i, o| i + 2 * o)
    }

    #[test]
    fn the_allowance_is_half_the_estimate_plus_a_fixed_margin() {
        assert_eq!(input_allowance(100), 100 + 50 + 1_024);
        assert_eq!(input_allowance(-5), 1_024);
        assert_eq!(input_allowance(i64::MAX), MAX_SETTLE_AMOUNT);
        let b = bound();
        assert_eq!((b.input, b.output, b.cost), (1_174, 40, 1_174 + 80));
    }

    #[test]
    fn sane_reports_are_billed_as_reported() {
        let r = Reported::from_json(json!({"prompt_tokens": 120, "completion_tokens": 40}));
        assert_eq!(
            bill(&r, &bound(), (100, 7)),
            Billed {
                input: 120,
                output: 40,
                anomaly: None
            }
        );
        // No counts: the fallback, no anomaly.
        let r = Reported::from_json(json!({}));
        assert_eq!(bill(&r, &bound(), (100, 7)).output, 7);
        assert_eq!(bill(&r, &bound(), (100, 7)).anomaly, None);
    }

    #[test]
    fn absurd_reports_are_billed_at_the_bound() {
        for raw in [
            json!({"prompt_tokens": 10, "completion_tokens": 9223372036854775808u64}),
            json!({"prompt_tokens": 10, "completion_tokens": i64::MAX}),
            json!({"prompt_tokens": 10, "completion_tokens": 1e300}),
            json!({"prompt_tokens": 10, "completion_tokens": 41}),
        ] {
            let b = bill(&Reported::from_json(raw.clone()), &bound(), (100, 7));
            assert_eq!((b.input, b.output), (10, 40), "{raw}");
            assert_eq!(b.anomaly, Some(AnomalyKind::OutputAboveCap), "{raw}");
        }
        let b = bill(
            &Reported::from_json(json!({"prompt_tokens": u64::MAX, "completion_tokens": 3})),
            &bound(),
            (100, 7),
        );
        assert_eq!((b.input, b.output), (1_174, 3));
        assert_eq!(b.anomaly, Some(AnomalyKind::InputAboveBound));
    }

    #[test]
    fn negative_or_malformed_counts_are_no_report() {
        let b = bill(
            &Reported::from_json(json!({"prompt_tokens": -1616, "completion_tokens": 5})),
            &bound(),
            (100, 7),
        );
        assert_eq!(
            (b.input, b.output, b.anomaly),
            (100, 5, Some(AnomalyKind::Negative))
        );
        let b = bill(
            &Reported::from_json(json!({"prompt_tokens": 3, "completion_tokens": "lots"})),
            &bound(),
            (100, 7),
        );
        assert_eq!(
            (b.input, b.output, b.anomaly),
            (3, 7, Some(AnomalyKind::Malformed))
        );
        // Numeric strings are read as numbers.
        let b = bill(
            &Reported::from_json(json!({"prompt_tokens": "3", "completion_tokens": "4"})),
            &bound(),
            (100, 7),
        );
        assert_eq!((b.input, b.output, b.anomaly), (3, 4, None));
    }

    #[test]
    fn clamping_never_leaves_the_safe_range() {
        let (i, o, c) = Bound::SAFE.clamp(i64::MAX, -3, i64::MIN);
        assert_eq!((i, o, c), (MAX_SETTLE_AMOUNT, 0, 0));
        assert_eq!(bound().clamp(5_000, 41, 1), (1_174, 40, 1));
    }
}
