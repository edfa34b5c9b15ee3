//! The prompt's billing as each provider reports it (`Caching`, from the
//! `[mock:cached=N]` … directives), in the field names of the providers'
//! own SDK types: OpenAI `CompletionUsage.prompt_tokens_details` (the
//! cached part *inside* `prompt_tokens`), DeepSeek's
//! `prompt_cache_hit_tokens` / `prompt_cache_miss_tokens`, Responses
//! `input_tokens_details.cached_tokens` (inside `input_tokens`), Anthropic
//! `Usage` (`input_tokens` *without* `cache_read_input_tokens` and
//! `cache_creation_input_tokens`, the write split by TTL in
//! `cache_creation`, searches in `server_tool_use`).

use crate::directives::Caching;
use serde_json::{json, Map, Value};

impl Caching {
    /// (read, written 5 min, written 1 h, the rest) of a prompt of
    /// `prompt` tokens, each part at most what is left.
    fn parts(&self, prompt: u32) -> (u32, u32, u32, u32) {
        let read = self.cached.min(prompt);
        let w5 = self.write_5m.min(prompt - read);
        let w1 = self.write_1h.min(prompt - read - w5);
        (read, w5, w1, prompt - read - w5 - w1)
    }

    /// Adds the cached part to an OpenAI chat `usage` (or DeepSeek's).
    pub fn chat(&self, u: &mut Value, prompt: u32) {
        let (read, w5, w1, _) = self.parts(prompt);
        if self.deepseek {
            u["prompt_cache_hit_tokens"] = json!(read);
            u["prompt_cache_miss_tokens"] = json!(prompt - read);
        } else if read + w5 + w1 > 0 {
            let mut d = json!({"cached_tokens": read, "audio_tokens": 0});
            if w5 + w1 > 0 {
                d["cache_write_tokens"] = json!(w5 + w1);
            }
            u["prompt_tokens_details"] = d;
        }
    }

    /// A Responses `usage`.
    pub fn responses(&self, prompt: u32, output: u32) -> Value {
        let (read, _, _, _) = self.parts(prompt);
        json!({"input_tokens": prompt, "input_tokens_details": {"cached_tokens": read},
            "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + output})
    }

    /// The input side of an Anthropic `usage`.
    pub fn anthropic_input(&self, prompt: u32) -> Map<String, Value> {
        let (read, w5, w1, rest) = self.parts(prompt);
        let mut u = Map::new();
        u.insert("input_tokens".into(), json!(rest));
        u.insert("cache_read_input_tokens".into(), json!(read));
        u.insert("cache_creation_input_tokens".into(), json!(w5 + w1));
        u.insert(
            "cache_creation".into(),
            json!({"ephemeral_5m_input_tokens": w5, "ephemeral_1h_input_tokens": w1}),
        );
        if self.web_search > 0 {
            u.insert(
                "server_tool_use".into(),
                json!({"web_search_requests": self.web_search}),
            );
        }
        u
    }

    /// An Anthropic non-stream answer's `usage`.
    pub fn anthropic(&self, prompt: u32, output: u32) -> Value {
        let mut u = self.anthropic_input(prompt);
        u.insert("output_tokens".into(), json!(output));
        Value::Object(u)
    }

    /// `message_start`'s usage: the input as the provider counts it (a
    /// `split_late` host: the whole prompt, no split yet).
    pub fn anthropic_start(&self, prompt: u32) -> Value {
        if self.split_late {
            return json!({"input_tokens": prompt, "output_tokens": 1});
        }
        self.anthropic(prompt, 1)
    }

    /// `message_delta`'s usage: the output (and, from a `split_late` host,
    /// the whole input split at last).
    pub fn anthropic_delta(&self, prompt: u32, output: u32) -> Value {
        if self.split_late {
            return self.anthropic(prompt, output);
        }
        json!({"output_tokens": output})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_never_exceed_the_prompt() {
        let c = Caching {
            cached: 900,
            write_5m: 200,
            ..Default::default()
        };
        assert_eq!(c.parts(1000), (900, 100, 0, 0));
        assert_eq!(c.parts(50), (50, 0, 0, 0));
        let u = c.anthropic(1000, 5);
        assert_eq!(u["input_tokens"], 0);
        assert_eq!(u["cache_read_input_tokens"], 900);
        assert_eq!(u["cache_creation"]["ephemeral_5m_input_tokens"], 100);
    }
}
