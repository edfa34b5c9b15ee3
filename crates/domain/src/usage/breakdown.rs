//! The usage breakdown: what a provider bills a request for, read from its
//! `usage` object in any of the shapes providers send (the field names are
//! the official SDKs' types: openai `CompletionUsage` and `ResponseUsage`,
//! anthropic `Usage`, google-genai `UsageMetadata`, DeepSeek's and
//! OpenRouter's additions).
//!
//! The traps (docs/billing.md, "What a request is billed for"):
//! - OpenAI's `prompt_tokens` / `input_tokens` and Gemini's
//!   `promptTokenCount` include the cached part; Anthropic's `input_tokens`
//!   excludes both cache reads and cache writes.
//! - DeepSeek reports `prompt_cache_hit_tokens` / `prompt_cache_miss_tokens`
//!   beside a `prompt_tokens` that is their sum.
//! - Anthropic splits cache writes by TTL in `cache_creation`
//!   (`ephemeral_5m_input_tokens`, `ephemeral_1h_input_tokens`); a total in
//!   `cache_creation_input_tokens` without the split is a 5-minute write.
//! - OpenAI's writes (`cache_write_tokens`, inside the prompt total) live
//!   30 minutes or 12 hours (`prompt_cache_options.ttl`): Responses splits
//!   them in `input_tokens_details.cache_write_tokens_details`
//!   (`ttl_30m_tokens`, `ttl_12h_tokens`); chat completions has no split and
//!   no TTL but 30 minutes. A write the split does not cover is a
//!   30-minute write (the default TTL).
//! - Reasoning, audio and image tokens are *of* the totals, not beside them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A request's usage by component. Every count is a number of tokens (or
/// calls) ≥ 0. `input` is the uncached input only; the whole prompt is
/// [`Breakdown::total_input`]. `reasoning`, `audio_*` and `image_*` are
/// parts of `input` / `output`, priced at their own rate where the price
/// sheet has one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breakdown {
    /// Input read neither from nor into a cache.
    #[serde(default)]
    pub input: i64,
    /// Input read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input: i64,
    /// Input written to a cache that lives ~5 minutes (Anthropic's default
    /// TTL; a write whose TTL the provider does not say).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_5m: i64,
    /// Input written to a cache that lives an hour (Anthropic `ttl: "1h"`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_1h: i64,
    /// Input written to OpenAI's cache for 30 minutes (its default TTL;
    /// every chat completions write).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_30m: i64,
    /// Input written to OpenAI's cache for 12 hours (Responses
    /// `prompt_cache_options.ttl: "12h"`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_12h: i64,
    /// All output, reasoning and audio included.
    #[serde(default)]
    pub output: i64,
    /// Of `output`: hidden reasoning.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning: i64,
    /// Of `input` (uncached): audio.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub audio_input: i64,
    /// Of `output`: audio.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub audio_output: i64,
    /// Of `input` (uncached): images.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub image_input: i64,
    /// Of `output`: images.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub image_output: i64,
    /// Server-side web searches the provider ran (Anthropic
    /// `server_tool_use.web_search_requests`, Responses `web_search_call`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub web_search_calls: i64,
    /// The service tier the provider says it served (`priority`, `flex`,
    /// `default`, `standard`, `batch` …), which can differ from the one asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_tier: Option<String>,
    /// The provider's own price of the request, where it sends one
    /// (OpenRouter's `usage.cost`, USD), in micro-USD: kept for
    /// reconciliation, never billed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_cost_micro: Option<i64>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// A count as a non-negative integer; anything else (absent, negative,
/// not a number) is 0 — the totals are checked separately
/// (`usage::bill`), and a breakdown that does not add up to them is not
/// used (`Breakdown::fits`).
fn n(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::Number(x)) => x
            .as_i64()
            .or_else(|| x.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
            .unwrap_or(0)
            .max(0),
        Some(Value::String(s)) => s.trim().parse::<i64>().unwrap_or(0).max(0),
        _ => 0,
    }
}

/// `v[key]` of a sub-object (`prompt_tokens_details.cached_tokens`).
fn sub<'a>(v: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    v.and_then(|o| o.get(key))
}

/// The top-level fields of a usage object the breakdown reads, found in one
/// pass over its keys (this runs on every settle: one pass, not a lookup
/// per field and shape).
#[derive(Default)]
struct Fields<'a> {
    prompt_tokens: Option<&'a Value>,
    completion_tokens: Option<&'a Value>,
    prompt_details: Option<&'a Value>,
    completion_details: Option<&'a Value>,
    cache_hit: Option<&'a Value>,
    input_tokens: Option<&'a Value>,
    input_details: Option<&'a Value>,
    output_tokens: Option<&'a Value>,
    output_details: Option<&'a Value>,
    cache_read: Option<&'a Value>,
    cache_creation_total: Option<&'a Value>,
    cache_creation: Option<&'a Value>,
    server_tool_use: Option<&'a Value>,
    g_prompt: Option<&'a Value>,
    g_candidates: Option<&'a Value>,
    g_cached: Option<&'a Value>,
    g_thoughts: Option<&'a Value>,
    g_tool_prompt: Option<&'a Value>,
    g_prompt_details: Option<&'a Value>,
    g_candidates_details: Option<&'a Value>,
    service_tier: Option<&'a Value>,
    cost: Option<&'a Value>,
}

impl<'a> Fields<'a> {
    fn of(u: &'a Value) -> Fields<'a> {
        let mut f = Fields::default();
        let Some(obj) = u.as_object() else {
            return f;
        };
        for (k, v) in obj {
            let slot = match k.as_str() {
                "prompt_tokens" => &mut f.prompt_tokens,
                "completion_tokens" => &mut f.completion_tokens,
                "prompt_tokens_details" => &mut f.prompt_details,
                "completion_tokens_details" => &mut f.completion_details,
                "prompt_cache_hit_tokens" => &mut f.cache_hit,
                "input_tokens" => &mut f.input_tokens,
                "input_tokens_details" => &mut f.input_details,
                "output_tokens" => &mut f.output_tokens,
                "output_tokens_details" => &mut f.output_details,
                "cache_read_input_tokens" => &mut f.cache_read,
                "cache_creation_input_tokens" => &mut f.cache_creation_total,
                "cache_creation" => &mut f.cache_creation,
                "server_tool_use" => &mut f.server_tool_use,
                "promptTokenCount" => &mut f.g_prompt,
                "candidatesTokenCount" => &mut f.g_candidates,
                "cachedContentTokenCount" => &mut f.g_cached,
                "thoughtsTokenCount" => &mut f.g_thoughts,
                "toolUsePromptTokenCount" => &mut f.g_tool_prompt,
                "promptTokensDetails" => &mut f.g_prompt_details,
                "candidatesTokensDetails" => &mut f.g_candidates_details,
                "service_tier" => &mut f.service_tier,
                "cost" => &mut f.cost,
                _ => continue,
            };
            *slot = Some(v);
        }
        f
    }
}

impl Breakdown {
    /// Every input token: uncached, read from and written to caches.
    pub fn total_input(&self) -> i64 {
        self.input
            .saturating_add(self.cached_input)
            .saturating_add(self.cache_write_5m)
            .saturating_add(self.cache_write_1h)
            .saturating_add(self.cache_write_30m)
            .saturating_add(self.cache_write_12h)
    }

    /// Input and output as one breakdown with nothing cached, for a request
    /// billed without a usable report (the estimate, the counted output,
    /// the sanity bound).
    pub fn plain(input: i64, output: i64) -> Breakdown {
        Breakdown {
            input: input.max(0),
            output: output.max(0),
            ..Default::default()
        }
    }

    /// Reads a provider's `usage` object, whichever provider's shape it
    /// has. The shape is told by its field names, so one reader serves
    /// every dialect and a provider that borrows another's API.
    pub fn read(u: &Value) -> Breakdown {
        let f = Fields::of(u);
        let mut b = if f.g_prompt.is_some() || f.g_candidates.is_some() {
            Self::gemini(&f)
        } else if f.prompt_tokens.is_some() || f.completion_tokens.is_some() {
            Self::openai_chat(&f)
        } else if f.cache_read.is_some()
            || f.cache_creation_total.is_some()
            || f.cache_creation.is_some()
            || (f.server_tool_use.is_some() && f.input_details.is_none())
        {
            Self::anthropic(&f)
        } else {
            // Responses (`input_tokens_details`), or a bare
            // `input_tokens`/`output_tokens`, which both read alike.
            Self::openai_responses(&f)
        };
        // The base service (OpenAI's `default`, Anthropic's `standard`) is
        // the sheet's base prices: no tier to keep.
        if let Some(t) = f
            .service_tier
            .and_then(Value::as_str)
            .filter(|t| !matches!(*t, "default" | "standard" | "auto" | ""))
        {
            b.served_tier = Some(t.to_string());
        }
        if let Some(c) = f.cost.and_then(Value::as_f64) {
            if c.is_finite() && c >= 0.0 {
                b.provider_cost_micro = Some((c * 1e6).round() as i64);
            }
        }
        b
    }

    /// OpenAI chat `CompletionUsage` (DeepSeek's hit/miss fields too):
    /// `prompt_tokens` includes the cached part.
    fn openai_chat(f: &Fields) -> Breakdown {
        let prompt = n(f.prompt_tokens);
        let cached = match f.cache_hit {
            // DeepSeek: hit + miss = prompt.
            Some(hit) => n(Some(hit)),
            None => n(sub(f.prompt_details, "cached_tokens")),
        };
        // Chat completions writes live 30 minutes (`prompt_cache_options.ttl`
        // takes only "30m" there) and are reported unsplit.
        let written = n(sub(f.prompt_details, "cache_write_tokens"));
        let cached = cached.min(prompt);
        let written = written.min(prompt - cached);
        Breakdown {
            input: prompt - cached - written,
            cached_input: cached,
            cache_write_30m: written,
            output: n(f.completion_tokens),
            reasoning: n(sub(f.completion_details, "reasoning_tokens")),
            audio_input: n(sub(f.prompt_details, "audio_tokens")),
            audio_output: n(sub(f.completion_details, "audio_tokens")),
            image_input: n(sub(f.prompt_details, "image_tokens")),
            image_output: n(sub(f.completion_details, "image_tokens")),
            ..Default::default()
        }
    }

    /// OpenAI Responses `ResponseUsage`: `input_tokens` includes the cached
    /// part.
    fn openai_responses(f: &Fields) -> Breakdown {
        let prompt = n(f.input_tokens);
        let cached = n(sub(f.input_details, "cached_tokens")).min(prompt);
        // `cache_write_tokens`, split by TTL in `cache_write_tokens_details`;
        // what the split does not cover is a 30-minute write (the default).
        let by_ttl = sub(f.input_details, "cache_write_tokens_details");
        let ttl_12h = n(sub(by_ttl, "ttl_12h_tokens"));
        let split = n(sub(by_ttl, "ttl_30m_tokens")).saturating_add(ttl_12h);
        let written = n(sub(f.input_details, "cache_write_tokens"))
            .max(split)
            .min(prompt - cached);
        let w12 = ttl_12h.min(written);
        Breakdown {
            input: prompt - cached - written,
            cached_input: cached,
            cache_write_30m: written - w12,
            cache_write_12h: w12,
            output: n(f.output_tokens),
            reasoning: n(sub(f.output_details, "reasoning_tokens")),
            // Counted by the gateway from the answer's `web_search_call`
            // items (`dialect::native::answer_usage`).
            web_search_calls: n(sub(f.server_tool_use, "web_search_requests")),
            ..Default::default()
        }
    }

    /// Anthropic `Usage`: `input_tokens` excludes cache reads and writes.
    fn anthropic(f: &Fields) -> Breakdown {
        let split_5m = sub(f.cache_creation, "ephemeral_5m_input_tokens");
        let split_1h = sub(f.cache_creation, "ephemeral_1h_input_tokens");
        let (w5, w1) = if split_5m.is_some() || split_1h.is_some() {
            (n(split_5m), n(split_1h))
        } else {
            (n(f.cache_creation_total), 0)
        };
        Breakdown {
            input: n(f.input_tokens),
            cached_input: n(f.cache_read),
            cache_write_5m: w5,
            cache_write_1h: w1,
            output: n(f.output_tokens),
            web_search_calls: n(sub(f.server_tool_use, "web_search_requests")),
            ..Default::default()
        }
    }

    /// Gemini `UsageMetadata`: `promptTokenCount` includes the cached
    /// part; thoughts are billed as output but counted beside the
    /// candidates.
    fn gemini(f: &Fields) -> Breakdown {
        let prompt = n(f.g_prompt).saturating_add(n(f.g_tool_prompt));
        let cached = n(f.g_cached).min(prompt);
        let thoughts = n(f.g_thoughts);
        let modality = |list: Option<&Value>, m: &str| -> i64 {
            list.and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter(|d| d.get("modality").and_then(Value::as_str) == Some(m))
                        .map(|d| n(d.get("tokenCount")))
                        .sum()
                })
                .unwrap_or(0)
        };
        Breakdown {
            input: prompt - cached,
            cached_input: cached,
            output: n(f.g_candidates).saturating_add(thoughts),
            reasoning: thoughts,
            audio_input: modality(f.g_prompt_details, "AUDIO"),
            audio_output: modality(f.g_candidates_details, "AUDIO"),
            image_input: modality(f.g_prompt_details, "IMAGE"),
            image_output: modality(f.g_candidates_details, "IMAGE"),
            ..Default::default()
        }
    }

    /// Whether this breakdown adds up to the totals a request is billed at
    /// (after the sanity bound): only then are its components priced;
    /// otherwise the totals are, as plain input and output.
    pub fn fits(&self, input: i64, output: i64) -> bool {
        self.total_input() == input
            && self.output == output
            && self.reasoning <= self.output
            && self.audio_output.saturating_add(self.image_output) <= self.output
            && self.audio_input.saturating_add(self.image_input) <= self.input
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_chat_counts_the_cached_part_inside_the_prompt() {
        // The SDK's CompletionUsage: 1,000 prompt tokens of which 900 cached.
        let b = Breakdown::read(&json!({"prompt_tokens": 1000, "completion_tokens": 50,
            "total_tokens": 1050,
            "prompt_tokens_details": {"cached_tokens": 900, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 20, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}));
        assert_eq!(
            (b.input, b.cached_input, b.output, b.reasoning),
            (100, 900, 50, 20)
        );
        assert_eq!(b.total_input(), 1000);
        assert!(b.fits(1000, 50));
    }

    #[test]
    fn responses_searches_counted_from_the_answers_items_stay_a_responses_usage() {
        // The gateway adds the `web_search_call` items it counted as
        // `server_tool_use`; the cached part stays inside `input_tokens`.
        let b = Breakdown::read(&json!({"input_tokens": 1000, "output_tokens": 10,
            "input_tokens_details": {"cached_tokens": 900},
            "server_tool_use": {"web_search_requests": 2}}));
        assert_eq!((b.input, b.cached_input, b.web_search_calls), (100, 900, 2));
    }

    /// OpenAI's writes by TTL, with the SDK's field names: chat's
    /// `prompt_tokens_details.cache_write_tokens` (30 minutes, the only TTL
    /// chat has), Responses' `input_tokens_details.cache_write_tokens`
    /// split in `cache_write_tokens_details.{ttl_30m_tokens, ttl_12h_tokens}`.
    #[test]
    fn openai_writes_are_split_by_ttl() {
        let b = Breakdown::read(&json!({"prompt_tokens": 1000, "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 300}}));
        assert_eq!(
            (b.input, b.cached_input, b.cache_write_30m, b.cache_write_5m),
            (100, 600, 300, 0)
        );
        let b = Breakdown::read(&json!({"input_tokens": 1000, "output_tokens": 5,
            "input_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 700,
                "cache_write_tokens_details": {"ttl_30m_tokens": 200, "ttl_12h_tokens": 500}},
            "output_tokens_details": {"reasoning_tokens": 0}}));
        assert_eq!(
            (
                b.input,
                b.cached_input,
                b.cache_write_30m,
                b.cache_write_12h
            ),
            (200, 100, 200, 500)
        );
        assert!(b.fits(1000, 5));
        // No split: a 30-minute write; a split short of the total: the
        // rest is 30-minute.
        let b = Breakdown::read(&json!({"input_tokens": 1000, "output_tokens": 5,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 400}}));
        assert_eq!((b.cache_write_30m, b.cache_write_12h), (400, 0));
        let b = Breakdown::read(&json!({"input_tokens": 1000, "output_tokens": 5,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 400,
                "cache_write_tokens_details": {"ttl_30m_tokens": 0, "ttl_12h_tokens": 150}}}));
        assert_eq!((b.cache_write_30m, b.cache_write_12h), (250, 150));
        // A split above the prompt is clamped to it.
        let b = Breakdown::read(&json!({"input_tokens": 100, "output_tokens": 5,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 100,
                "cache_write_tokens_details": {"ttl_30m_tokens": 0, "ttl_12h_tokens": 900}}}));
        assert_eq!((b.input, b.cache_write_30m, b.cache_write_12h), (0, 0, 100));
    }

    #[test]
    fn deepseek_reports_hits_and_misses() {
        let b = Breakdown::read(&json!({"prompt_tokens": 50000, "completion_tokens": 1000,
            "prompt_cache_hit_tokens": 45000, "prompt_cache_miss_tokens": 5000}));
        assert_eq!((b.input, b.cached_input, b.output), (5000, 45000, 1000));
    }

    #[test]
    fn responses_count_the_cached_part_inside_the_input() {
        let b = Breakdown::read(&json!({"input_tokens": 100000, "output_tokens": 1000,
            "input_tokens_details": {"cached_tokens": 90000},
            "output_tokens_details": {"reasoning_tokens": 600}, "total_tokens": 101000}));
        assert_eq!(
            (b.input, b.cached_input, b.output, b.reasoning),
            (10000, 90000, 1000, 600)
        );
    }

    #[test]
    fn anthropic_input_excludes_cache_reads_and_writes() {
        let b = Breakdown::read(&json!({"input_tokens": 2000, "output_tokens": 1000,
            "cache_read_input_tokens": 80000, "cache_creation_input_tokens": 5000,
            "cache_creation": {"ephemeral_5m_input_tokens": 5000, "ephemeral_1h_input_tokens": 0},
            "server_tool_use": {"web_search_requests": 5}, "service_tier": "standard"}));
        assert_eq!(
            (
                b.input,
                b.cached_input,
                b.cache_write_5m,
                b.cache_write_1h,
                b.output
            ),
            (2000, 80000, 5000, 0, 1000)
        );
        assert_eq!(b.web_search_calls, 5);
        // The base service is no tier.
        assert_eq!(b.served_tier, None);
        let p = Breakdown::read(
            &json!({"input_tokens": 1, "output_tokens": 1, "service_tier": "priority"}),
        );
        assert_eq!(p.served_tier.as_deref(), Some("priority"));
        assert_eq!(b.total_input(), 87000);
        // The 1-hour split.
        let b = Breakdown::read(&json!({"input_tokens": 2000, "output_tokens": 1000,
            "cache_creation_input_tokens": 50000,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 50000}}));
        assert_eq!((b.cache_write_5m, b.cache_write_1h), (0, 50000));
        // A write without the split is a 5-minute write.
        let b = Breakdown::read(&json!({"input_tokens": 10, "output_tokens": 1,
            "cache_creation_input_tokens": 300}));
        assert_eq!((b.cache_write_5m, b.cache_write_1h), (300, 0));
    }

    #[test]
    fn gemini_includes_the_cached_part_and_counts_thoughts_as_output() {
        let b = Breakdown::read(
            &json!({"promptTokenCount": 3000, "candidatesTokenCount": 200,
            "cachedContentTokenCount": 2000, "thoughtsTokenCount": 300, "totalTokenCount": 3500,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 2742},
                {"modality": "IMAGE", "tokenCount": 258}]}),
        );
        assert_eq!(
            (b.input, b.cached_input, b.output, b.reasoning),
            (1000, 2000, 500, 300)
        );
        assert_eq!(b.image_input, 258);
    }

    #[test]
    fn openrouters_cost_is_kept_and_absurd_parts_are_clamped() {
        let b = Breakdown::read(
            &json!({"prompt_tokens": 10, "completion_tokens": 2, "cost": 0.000123}),
        );
        assert_eq!(b.provider_cost_micro, Some(123));
        // More cached than the whole prompt: at most the prompt.
        let b = Breakdown::read(&json!({"prompt_tokens": 10, "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 99}}));
        assert_eq!((b.input, b.cached_input), (0, 10));
        // Negative or malformed parts are none.
        let b = Breakdown::read(&json!({"prompt_tokens": 10, "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": -5}}));
        assert_eq!((b.input, b.cached_input), (10, 0));
        assert!(!Breakdown::plain(10, 2).fits(11, 2));
    }
}
