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

    pub fn count(self, text: &str) -> u64 {
        if text.is_empty() {
            return 0;
        }
        match self {
            Self::O200k => o200k().count(text),
            Self::Cl100k => cl100k().count(text),
            Self::Other => {
                let n = cl100k().count(text);
                n + (n * OTHER_MARGIN_PCT).div_ceil(100)
            }
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
    let mut n = REPLY_PRIMING;
    let mut buf = String::new();
    for m in messages {
        n += PER_MESSAGE;
        buf.clear();
        collect_text(m, &mut buf);
        n += family.count(&buf);
    }
    n
}

/// Input tokens of `tools`/`functions` definitions (the model reads them too).
pub fn json_tokens(family: TokenizerFamily, v: &Value) -> u64 {
    family.count(&v.to_string())
}

/// Input tokens of a legacy completion `prompt` or an embeddings `input`:
/// a string, an array of strings, or token arrays.
pub fn prompt_tokens(family: TokenizerFamily, input: &Value) -> u64 {
    match input {
        Value::String(s) => family.count(s),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Number(_) => 1,
                Value::Array(toks) => toks.len() as u64,
                other => prompt_tokens(family, other),
            })
            .sum(),
        _ => 0,
    }
}

fn collect_text(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(a) => a.iter().for_each(|x| collect_text(x, out)),
        Value::Object(o) => {
            for (k, x) in o {
                // Image parts are priced by the provider separately; their URLs
                // and detail flags are not text the model reads as tokens.
                if k == "image_url" || k == "type" {
                    continue;
                }
                collect_text(x, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
