//! Token estimates with a real BPE tokenizer for the model family.
//!
//! OpenAI families use their own encodings (o200k for gpt-4o/o-series/gpt-4.1+,
//! cl100k for gpt-4/3.5 and embeddings). Other families (DeepSeek, Qwen,
//! MiniMax, Llama…) ship tokenizers we cannot load offline; we count with
//! cl100k and add a safety margin, because an estimate that is low lets a
//! request overrun its hold (docs/design.md §4 bounds that overrun by this error).

use crate::bpe::CountingBpe;
use serde_json::Value;
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerFamily {
    O200k,
    Cl100k,
    /// Non-OpenAI model: cl100k count + `OTHER_MARGIN_PCT` percent.
    Other,
}

/// Extra percent added to cl100k counts for non-OpenAI families.
pub const OTHER_MARGIN_PCT: u64 = 10;
/// Chat format overhead (OpenAI cookbook): per message and reply priming.
const PER_MESSAGE: u64 = 4;
const REPLY_PRIMING: u64 = 3;

impl TokenizerFamily {
    /// Picks the family from an explicit setting or the upstream model name.
    pub fn for_model(explicit: Option<&str>, model: &str) -> Self {
        match explicit {
            Some("o200k") | Some("o200k_base") => return Self::O200k,
            Some("cl100k") | Some("cl100k_base") => return Self::Cl100k,
            Some("other") => return Self::Other,
            _ => {}
        }
        let m = model.to_ascii_lowercase();
        let o200k = [
            "gpt-4o",
            "gpt-4.1",
            "gpt-4.5",
            "gpt-5",
            "o1",
            "o3",
            "o4",
            "chatgpt-4o",
        ];
        if o200k.iter().any(|p| m.starts_with(p)) {
            Self::O200k
        } else if m.starts_with("gpt-") || m.starts_with("text-embedding") {
            Self::Cl100k
        } else {
            Self::Other
        }
    }

    /// Tokens in `text`, counted with the family's tables.
    pub fn count(self, text: &str) -> u64 {
        if text.is_empty() {
            return 0;
        }
        self.count_fresh(text)
    }

    /// [`Self::count`], remembered in the process's table
    /// (crate::count_cache) under `scope` (one tenant's: a tenant never
    /// learns from a count's speed what another sent): a text of at least
    /// `count_cache::MIN_BYTES` counted before in the scope is looked up,
    /// not counted.
    pub fn count_remembered(self, scope: u64, text: &str) -> u64 {
        if text.len() < crate::count_cache::MIN_BYTES {
            return self.count(text);
        }
        let cache = crate::count_cache::global();
        let h = cache.hash(scope, self as u8, text);
        if let Some(n) = cache.get(h) {
            return n;
        }
        let n = self.count_fresh(text);
        cache.put(h, n);
        n
    }

    fn count_fresh(self, text: &str) -> u64 {
        match self {
            Self::O200k => o200k().count(text),
            Self::Cl100k => cl100k().count(text),
            Self::Other => {
                let n = cl100k().count(text);
                n + (n * OTHER_MARGIN_PCT).div_ceil(100)
            }
        }
    }

    /// An upper bound on [`Self::count`] that costs nothing to compute: a
    /// byte-level BPE token is at least one byte, so a text never has more
    /// tokens than bytes (non-OpenAI families add their margin on top). For
    /// long inputs, where the exact count costs ~60 ms of CPU per MB: it
    /// never underestimates, so a hold on it never overruns; it overestimates
    /// by the text's bytes per token (≈ 4× for English, ≈ 2–3× for Chinese),
    /// and the provider's count settles the request anyway.
    pub fn upper_bound(self, text: &str) -> u64 {
        let n = text.len() as u64;
        match self {
            Self::Other => n + (n * OTHER_MARGIN_PCT).div_ceil(100),
            _ => n,
        }
    }

    fn count_as(self, text: &str, counting: Counting) -> u64 {
        match counting {
            Counting::Exact => self.count(text),
            Counting::Remembered(scope) => self.count_remembered(scope, text),
            Counting::UpperBound => self.upper_bound(text),
        }
    }

    /// Loads these families' tables now rather than on the first request.
    /// Only the families the catalog's models use: each table is tens of
    /// megabytes of memory, and a family nobody uses is loaded on first use.
    pub fn warm_up(families: impl IntoIterator<Item = Self>) {
        for f in families {
            let _ = f.count("warm");
        }
    }
}

/// How an input is counted: with the real tokenizer, or bounded from above
/// in constant time per text ([`TokenizerFamily::upper_bound`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    Exact,
    /// Exact, remembered per text within a scope
    /// ([`TokenizerFamily::count_remembered`]; the scope is a tenant's,
    /// `count_cache::scope`).
    Remembered(u64),
    UpperBound,
}

/// Bodies above this size are long inputs: counting them exactly costs
/// milliseconds of CPU (about 15 ms at this size), so the gateway bounds
/// them instead or counts them off its async workers.
pub const LONG_INPUT_BYTES: usize = 256 * 1024;

/// The counting a request body of `body_bytes` gets when the gateway may
/// bound long inputs: exact below [`LONG_INPUT_BYTES`], the upper bound above.
pub fn counting_for(body_bytes: usize) -> Counting {
    if body_bytes > LONG_INPUT_BYTES {
        Counting::UpperBound
    } else {
        Counting::Exact
    }
}

pub use crate::context::{
    body_limit, context_window, largest_body_limit, BODY_BYTES_PER_CONTEXT_TOKEN,
};

/// The counting tables (crate::bpe), each built once from a temporary
/// tiktoken-rs `CoreBPE` that is dropped: a third of its memory.
pub(crate) fn o200k() -> &'static CountingBpe {
    static T: OnceLock<CountingBpe> = OnceLock::new();
    T.get_or_init(|| {
        let core = tiktoken_rs::o200k_base().expect("o200k_base ships with tiktoken-rs");
        CountingBpe::from_core(core, crate::bpe::O200K_PATTERN)
    })
}

pub(crate) fn cl100k() -> &'static CountingBpe {
    static T: OnceLock<CountingBpe> = OnceLock::new();
    T.get_or_init(|| {
        let core = tiktoken_rs::cl100k_base().expect("cl100k_base ships with tiktoken-rs");
        CountingBpe::from_core(core, crate::bpe::CL100K_PATTERN)
    })
}

/// Input tokens of a chat `messages` array: every text the model reads —
/// contents (string or text parts), names, tool calls and their arguments.
pub fn chat_input_tokens(family: TokenizerFamily, messages: &[Value]) -> u64 {
    chat_input_tokens_as(family, messages, Counting::Exact)
}

/// [`chat_input_tokens`], counted exactly or bounded from above.
pub fn chat_input_tokens_as(
    family: TokenizerFamily,
    messages: &[Value],
    counting: Counting,
) -> u64 {
    chat_input_tokens_with_media(family, None, messages, counting)
}

/// [`chat_input_tokens_as`] with the media of the messages — images,
/// audio, files — counted by `media`'s rules (`crate::images`,
/// `crate::media`), in the same walk; None: images are not counted, audio
/// and files are read as text.
pub fn chat_input_tokens_with_media(
    family: TokenizerFamily,
    media: Option<crate::media::Media>,
    messages: &[Value],
    counting: Counting,
) -> u64 {
    let mut n = REPLY_PRIMING;
    let mut buf = String::new();
    let mut media_tokens = 0u64;
    for m in messages {
        n += PER_MESSAGE;
        buf.clear();
        collect_text(m, &mut buf, media, &mut media_tokens);
        n += family.count_as(&buf, counting);
    }
    n.saturating_add(media_tokens)
}

/// Input tokens of `tools`/`functions` definitions (the model reads them too).
pub fn json_tokens(family: TokenizerFamily, v: &Value) -> u64 {
    json_tokens_as(family, v, Counting::Exact)
}

/// [`json_tokens`], counted exactly or bounded from above.
pub fn json_tokens_as(family: TokenizerFamily, v: &Value, counting: Counting) -> u64 {
    family.count_as(&v.to_string(), counting)
}

/// Input tokens of a legacy completion `prompt` or an embeddings `input`:
/// a string, an array of strings, or token arrays.
pub fn prompt_tokens(family: TokenizerFamily, input: &Value) -> u64 {
    prompt_tokens_as(family, input, Counting::Exact)
}

/// [`prompt_tokens`], counted exactly or bounded from above.
pub fn prompt_tokens_as(family: TokenizerFamily, input: &Value, counting: Counting) -> u64 {
    match input {
        Value::String(s) => family.count_as(s, counting),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Number(_) => 1,
                Value::Array(toks) => toks.len() as u64,
                other => prompt_tokens_as(family, other, counting),
            })
            .sum(),
        _ => 0,
    }
}

fn collect_text(
    v: &Value,
    out: &mut String,
    media: Option<crate::media::Media>,
    media_tokens: &mut u64,
) {
    match v {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(a) => a
            .iter()
            .for_each(|x| collect_text(x, out, media, media_tokens)),
        Value::Object(o) => {
            // Media parts of other providers' chat dialects (vLLM's
            // `audio_url` / `video_url`, Mistral's `document_url`, …) and
            // OpenAI's reference to an earlier answer's audio (`audio: {id}`)
            // cannot be sized: held like a file, at the context window.
            if let Some(m) = media {
                let ty = o.get("type").and_then(Value::as_str);
                if ty.is_some_and(crate::media::is_unsized_part) {
                    *media_tokens = media_tokens.saturating_add(m.file_tokens);
                    return;
                }
            }
            for (k, x) in o {
                // Media parts are priced by the provider by its own rule
                // (`crate::images`, `crate::media`); their base64, URLs
                // and ids are not text the model reads as tokens.
                let tokens = match k.as_str() {
                    "type" => Some(0),
                    "image_url" => {
                        Some(media.map_or(0, |m| crate::images::part_tokens(m.images, x)))
                    }
                    "input_audio" if media.is_some() && x.is_object() => {
                        Some(crate::media::audio_part_tokens(x))
                    }
                    "file" if crate::media::is_file(x) => media.map(|m| m.file_tokens),
                    "audio" if x.get("id").is_some() => media.map(|m| m.file_tokens),
                    _ => None,
                };
                match tokens {
                    Some(t) => *media_tokens = media_tokens.saturating_add(t),
                    None => collect_text(x, out, media, media_tokens),
                }
            }
        }
        _ => {}
    }
}

/// What each key may still have counted by `count_tokens`: a bucket of
/// tokens per key, `per_minute` deep and refilled continuously, full for a
/// key not seen yet. A count is allowed while its key's bucket is above
/// zero and then takes what it counted (the bucket may go below zero: the
/// next counts wait for the refill), so one key can keep at most one
/// minute's allowance, plus one request, of the gateway's CPU counting.
/// Time is passed in (ms), so this is tested without a clock.
#[derive(Debug, Default)]
pub struct CountAllowances {
    left: std::collections::HashMap<String, (f64, i64)>,
}

/// Buckets kept before full ones (idle keys) are dropped.
const COUNT_ALLOWANCES_KEPT: usize = 10_000;

impl CountAllowances {
    fn level(&self, key: &str, per_minute: i64, now_ms: i64) -> f64 {
        let full = per_minute as f64;
        match self.left.get(key) {
            Some(&(left, at)) => {
                let refill = (now_ms - at).max(0) as f64 * full / 60_000.0;
                (left + refill).min(full)
            }
            None => full,
        }
    }

    /// `Ok` when `key` may have a count now; else the seconds until it may.
    pub fn may_count(&self, key: &str, per_minute: i64, now_ms: i64) -> Result<(), u64> {
        if per_minute <= 0 {
            return Err(60);
        }
        let level = self.level(key, per_minute, now_ms);
        if level > 0.0 {
            return Ok(());
        }
        let ms = (-level + 1.0) * 60_000.0 / per_minute as f64;
        Err(((ms / 1000.0).ceil() as u64).max(1))
    }

    /// Takes `tokens` a count used from `key`'s bucket.
    pub fn spend(&mut self, key: &str, tokens: i64, per_minute: i64, now_ms: i64) {
        let level = self.level(key, per_minute, now_ms) - tokens.max(0) as f64;
        if self.left.len() >= COUNT_ALLOWANCES_KEPT && !self.left.contains_key(key) {
            // Drop the full buckets: a key not kept reads as full.
            let full = per_minute as f64;
            self.left.retain(|_, &mut (left, at)| {
                left + (now_ms - at).max(0) as f64 * full / 60_000.0 < full
            });
        }
        self.left.insert(key.to_string(), (level, now_ms));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn media_the_gateway_cannot_size_is_held_at_the_window() {
        let media = Some(crate::media::Media::for_model("gpt-4o"));
        let window = crate::media::FILE_INPUT_TOKENS;
        let count = |m: serde_json::Value| {
            chat_input_tokens_with_media(TokenizerFamily::O200k, media, &[m], Counting::Exact)
        };
        for part in [
            serde_json::json!({"type": "video_url", "video_url": {"url": "https://v.example.com/a.mp4"}}),
            serde_json::json!({"type": "document_url", "document_url": "https://d.example.com/a.pdf"}),
            serde_json::json!({"type": "file", "file": {"file_url": "https://d.example.com/a.pdf"}}),
        ] {
            let n = count(serde_json::json!({"role": "user", "content": [part.clone()]}));
            assert!(n >= window, "{part}: {n}");
        }
        let earlier = serde_json::json!({"role": "assistant", "audio": {"id": "audio_abc"}});
        assert!(count(earlier) >= window);
        // Plain text is untouched.
        let text = serde_json::json!({"role": "user", "content": [{"type": "text", "text": "hi"}]});
        assert!(count(text) < 20);
    }

    #[test]
    fn a_keys_count_allowance_refills_by_the_minute() {
        let mut a = CountAllowances::default();
        assert_eq!(a.may_count("k", 1_000, 0), Ok(()));
        // One large count may take it below zero ...
        a.spend("k", 1_600, 1_000, 0);
        assert!(a.may_count("k", 1_000, 0).is_err());
        // ... and the next waits for the refill: 600 short at 1,000 a minute.
        assert_eq!(a.may_count("k", 1_000, 30_000), Err(7));
        assert_eq!(a.may_count("k", 1_000, 37_000), Ok(()));
        // Another key is untouched.
        assert_eq!(a.may_count("other", 1_000, 0), Ok(()));
        // Never more than a minute's worth saved up.
        a.spend("k", 0, 1_000, 10_000_000);
        a.spend("k", 1_000, 1_000, 10_000_000);
        assert!(a.may_count("k", 1_000, 10_000_000).is_err());
        // No allowance at all.
        assert_eq!(a.may_count("k", 0, 0), Err(60));
    }

    use super::*;
    use serde_json::json;

    /// Counts found in the table are the counts: each text counted fresh,
    /// then remembered twice (a miss that fills the table, then a hit), in
    /// every family and two scopes.
    #[test]
    fn remembered_counts_equal_fresh_counts() {
        let texts: Vec<String> = (0..300)
            .map(|i| {
                format!(
                    "Message {i}: {} — 中文 {}",
                    "word ".repeat(i % 40),
                    i * 7919
                )
            })
            .collect();
        for f in [
            TokenizerFamily::O200k,
            TokenizerFamily::Cl100k,
            TokenizerFamily::Other,
        ] {
            for t in &texts {
                let fresh = f.count_fresh(t);
                for scope in [1, 2] {
                    assert_eq!(f.count_remembered(scope, t), fresh, "{f:?} first {t}");
                    assert_eq!(f.count_remembered(scope, t), fresh, "{f:?} again {t}");
                }
            }
        }
    }

    #[test]
    fn families_follow_the_model_name() {
        assert_eq!(
            TokenizerFamily::for_model(None, "gpt-4o-mini"),
            TokenizerFamily::O200k
        );
        assert_eq!(
            TokenizerFamily::for_model(None, "gpt-3.5-turbo"),
            TokenizerFamily::Cl100k
        );
        assert_eq!(
            TokenizerFamily::for_model(None, "deepseek-chat"),
            TokenizerFamily::Other
        );
        assert_eq!(
            TokenizerFamily::for_model(Some("o200k"), "x"),
            TokenizerFamily::O200k
        );
    }

    #[test]
    fn counts_are_real_bpe_counts() {
        // "hello world" is two tokens in both OpenAI encodings.
        assert_eq!(TokenizerFamily::O200k.count("hello world"), 2);
        assert_eq!(TokenizerFamily::Cl100k.count("hello world"), 2);
        assert_eq!(TokenizerFamily::Other.count("hello world"), 3);
        assert_eq!(TokenizerFamily::O200k.count(""), 0);
    }

    #[test]
    fn chat_estimate_covers_every_text_part() {
        let f = TokenizerFamily::O200k;
        let plain = chat_input_tokens(f, &[json!({"role":"user","content":"hello world"})]);
        // role "user" (1) + content (2) + newlines + 4 per message + 3 priming
        assert!((9..=12).contains(&plain), "{plain}");
        let parts = chat_input_tokens(
            f,
            &[json!({"role":"user","content":[{"type":"text","text":"hello world"}]})],
        );
        assert_eq!(parts, plain);
        let with_tool = chat_input_tokens(
            f,
            &[
                json!({"role":"assistant","tool_calls":[{"function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}),
            ],
        );
        assert!(with_tool > plain);
    }

    #[test]
    fn prompt_inputs_of_every_shape() {
        let f = TokenizerFamily::Cl100k;
        assert_eq!(prompt_tokens(f, &json!("hello world")), 2);
        assert_eq!(prompt_tokens(f, &json!(["hello world", "hello"])), 3);
        assert_eq!(prompt_tokens(f, &json!([[1, 2, 3], [4]])), 4);
    }

    /// A long prompt of every kind of text the gateway meets: English prose,
    /// Chinese, code, digits, whitespace runs, emoji.
    fn long_prompt(seed: u64, target_bytes: usize) -> String {
        const PARTS: [&str; 10] = [
            "The quarterly report shows revenue grew by 12.5% year over year. ",
            "多租户网关需要在流式请求中逐步扣减配额，避免超支。",
            "fn main() {\n    let x: Vec<u64> = (0..10).map(|i| i * i).collect();\n}\n",
            "3141592653589793238462643383279502884197169399375105820974944592 ",
            "          \t\t\n\n   ",
            "🚀🔥✨ émigré naïve café Ωμέγα Привет мир ",
            "SELECT tenant_id, SUM(cost_micro) FROM usage_events GROUP BY 1; ",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "请在一句话内回答：长上下文请求的令牌估计永远不能低于精确值。",
            "https://example.com/v1/chat/completions?model=gpt-4o&x=1 ",
        ];
        let mut out = String::with_capacity(target_bytes + 128);
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        while out.len() < target_bytes {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            out.push_str(PARTS[(x >> 33) as usize % PARTS.len()]);
        }
        out
    }

    #[test]
    fn a_long_prompts_bound_is_never_below_its_exact_count() {
        // ~32k and ~130k-token prompts of mixed text, every family, as chat
        // messages and as a completion prompt.
        for (seed, bytes) in [(1, 140_000), (2, 600_000)] {
            let text = long_prompt(seed, bytes);
            let msgs = [json!({"role": "user", "content": text})];
            for f in [
                TokenizerFamily::O200k,
                TokenizerFamily::Cl100k,
                TokenizerFamily::Other,
            ] {
                let exact = chat_input_tokens(f, &msgs);
                let bound = chat_input_tokens_as(f, &msgs, Counting::UpperBound);
                assert!(exact >= 30_000, "{f:?}: {exact} tokens is not long");
                assert!(bound >= exact, "{f:?}: bound {bound} < exact {exact}");
                let p = json!(text);
                assert!(prompt_tokens_as(f, &p, Counting::UpperBound) >= prompt_tokens(f, &p));
            }
        }
    }

    #[test]
    fn body_limits_follow_the_context_window() {
        let global = 4 << 20;
        assert_eq!(body_limit(global, "gpt-4o-mini"), global);
        assert_eq!(body_limit(global, "deepseek-chat"), global);
        // A 1M-token window takes 8 MB, a prompt filling it fits.
        assert_eq!(body_limit(global, "gpt-4.1-mini"), 8_380_608);
        assert!(body_limit(global, "gpt-4.1") >= 1_000_000 * 5);
        assert!(largest_body_limit(global) >= body_limit(global, "gemini-2.5-pro"));
        assert_eq!(largest_body_limit(64 << 20), 64 << 20);
    }

    #[test]
    fn long_inputs_are_bounded_short_ones_counted() {
        assert_eq!(counting_for(LONG_INPUT_BYTES), Counting::Exact);
        assert_eq!(counting_for(LONG_INPUT_BYTES + 1), Counting::UpperBound);
        assert_eq!(TokenizerFamily::O200k.upper_bound("héllo"), 6);
        assert_eq!(TokenizerFamily::Other.upper_bound(&"a".repeat(100)), 110);
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(64))]
        /// Any text (arbitrary Unicode, repeated to long lengths): the bound
        /// is never below the exact count, in every family.
        #[test]
        fn the_bound_never_underestimates(s in "\\PC{1,64}", reps in 1usize..2000) {
            let text = s.repeat(reps);
            for f in [TokenizerFamily::O200k, TokenizerFamily::Cl100k, TokenizerFamily::Other] {
                proptest::prop_assert!(f.upper_bound(&text) >= f.count(&text));
            }
        }
    }
}
