//! The prompt's billing as each provider reports it (`Caching`, from the
//! `[mock:cached=N]` … directives), in the field names of the providers'
//! own SDK types: OpenAI `CompletionUsage.prompt_tokens_details` (the
//! cached part *inside* `prompt_tokens`), DeepSeek's
//! `prompt_cache_hit_tokens` / `prompt_cache_miss_tokens`, Responses
//! `input_tokens_details.cached_tokens` (inside `input_tokens`), Anthropic
//! `Usage` (`input_tokens` *without* `cache_read_input_tokens` and
//! `cache_creation_input_tokens`, the write split by TTL in
//! `cache_creation`, searches in `server_tool_use`). OpenAI's writes:
//! chat's unsplit `prompt_tokens_details.cache_write_tokens` (every write
//! knob), Responses' `input_tokens_details.cache_write_tokens` split in
//! `cache_write_tokens_details.{ttl_30m_tokens, ttl_12h_tokens}` (the
//! 30-minute and 12-hour knobs; a 5-minute or 1-hour knob's write is the
//! unsplit rest). Anthropic has no 30-minute or 12-hour write: those knobs'
//! tokens are plain input there.

use crate::directives::Caching;
use crate::ledger::Counts;
use serde_json::{json, Map, Value};

/// A prompt's parts, each at most what is left of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parts {
    read: u32,
    w5m: u32,
    w1h: u32,
    w30m: u32,
    w12h: u32,
    /// Neither read nor written.
    rest: u32,
}

impl Parts {
    fn openai(&self) -> Counts {
        Counts {
            uncached: self.rest.into(),
            cached: self.read.into(),
            w5m: self.w5m.into(),
            w1h: self.w1h.into(),
            w30m: self.w30m.into(),
            w12h: self.w12h.into(),
            ..Counts::default()
        }
    }

    fn written(&self) -> u32 {
        self.w5m + self.w1h + self.w30m + self.w12h
    }
}

impl Caching {
    /// The parts of a prompt of `prompt` tokens.
    fn parts(&self, prompt: u32) -> Parts {
        let mut left = prompt;
        let mut take = |n: u32| {
            let t = n.min(left);
            left -= t;
            t
        };
        let read = take(self.cached);
        let w5m = take(self.write_5m);
        let w1h = take(self.write_1h);
        let w30m = take(self.write_30m);
        let w12h = take(self.write_12h);
        Parts {
            read,
            w5m,
            w1h,
            w30m,
            w12h,
            rest: left,
        }
    }

    /// What a chat / legacy completion answer reports of a prompt, as the
    /// usage ledger counts it: DeepSeek's miss is everything not read (its
    /// writes are not reported apart); OpenAI's every write knob is a write.
    pub(crate) fn chat_counts(&self, prompt: u32) -> Counts {
        let p = self.parts(prompt);
        if self.deepseek {
            return Counts {
                uncached: (prompt - p.read).into(),
                cached: p.read.into(),
                ..Counts::default()
            };
        }
        p.openai()
    }

    /// What a Responses answer reports: the chat split, and its
    /// `web_search_call` items.
    pub(crate) fn responses_counts(&self, prompt: u32) -> Counts {
        Counts {
            web_search: self.web_search.into(),
            ..self.parts(prompt).openai()
        }
    }

    /// What an Anthropic answer reports: 30-minute and 12-hour knobs are
    /// plain input there.
    pub(crate) fn anthropic_counts(&self, prompt: u32) -> Counts {
        let p = self.parts(prompt);
        Counts {
            uncached: (p.rest + p.w30m + p.w12h).into(),
            cached: p.read.into(),
            w5m: p.w5m.into(),
            w1h: p.w1h.into(),
            web_search: self.web_search.into(),
            ..Counts::default()
        }
    }

    /// Adds the cached part to an OpenAI chat `usage` (or DeepSeek's).
    pub fn chat(&self, u: &mut Value, prompt: u32) {
        let p = self.parts(prompt);
        if self.deepseek {
            u["prompt_cache_hit_tokens"] = json!(p.read);
            u["prompt_cache_miss_tokens"] = json!(prompt - p.read);
        } else if p.read + p.written() > 0 {
            let mut d = json!({"cached_tokens": p.read, "audio_tokens": 0});
            if p.written() > 0 {
                d["cache_write_tokens"] = json!(p.written());
            }
            u["prompt_tokens_details"] = d;
        }
    }

    /// A Responses `usage`.
    pub fn responses(&self, prompt: u32, output: u32) -> Value {
        let p = self.parts(prompt);
        let mut details = json!({"cached_tokens": p.read});
        if p.written() > 0 {
            details["cache_write_tokens"] = json!(p.written());
        }
        if p.w30m + p.w12h > 0 {
            details["cache_write_tokens_details"] =
                json!({"ttl_30m_tokens": p.w30m, "ttl_12h_tokens": p.w12h});
        }
        json!({"input_tokens": prompt, "input_tokens_details": details,
            "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + output})
    }

    /// The input side of an Anthropic `usage`.
    pub fn anthropic_input(&self, prompt: u32) -> Map<String, Value> {
        let p = self.parts(prompt);
        let mut u = Map::new();
        u.insert("input_tokens".into(), json!(p.rest + p.w30m + p.w12h));
        u.insert("cache_read_input_tokens".into(), json!(p.read));
        u.insert("cache_creation_input_tokens".into(), json!(p.w5m + p.w1h));
        u.insert(
            "cache_creation".into(),
            json!({"ephemeral_5m_input_tokens": p.w5m, "ephemeral_1h_input_tokens": p.w1h}),
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
        let p = c.parts(1000);
        assert_eq!((p.read, p.w5m, p.w1h, p.rest), (900, 100, 0, 0));
        let p = c.parts(50);
        assert_eq!((p.read, p.w5m, p.rest), (50, 0, 0));
        let u = c.anthropic(1000, 5);
        assert_eq!(u["input_tokens"], 0);
        assert_eq!(u["cache_read_input_tokens"], 900);
        assert_eq!(u["cache_creation"]["ephemeral_5m_input_tokens"], 100);
    }

    /// OpenAI's writes as its SDK types name them: chat unsplit, Responses
    /// split by TTL; an Anthropic answer keeps those tokens as input.
    #[test]
    fn openai_writes_are_reported_by_ttl() {
        let c = Caching {
            cached: 100,
            write_30m: 200,
            write_12h: 300,
            ..Default::default()
        };
        let mut u = json!({"prompt_tokens": 1000, "completion_tokens": 5});
        c.chat(&mut u, 1000);
        assert_eq!(u["prompt_tokens_details"]["cache_write_tokens"], 500);
        let r = c.responses(1000, 5);
        let d = &r["input_tokens_details"];
        assert_eq!(d["cache_write_tokens"], 500);
        assert_eq!(d["cache_write_tokens_details"]["ttl_30m_tokens"], 200);
        assert_eq!(d["cache_write_tokens_details"]["ttl_12h_tokens"], 300);
        let a = c.anthropic(1000, 5);
        assert_eq!(
            (
                a["input_tokens"].as_u64(),
                a["cache_creation_input_tokens"].as_u64()
            ),
            (Some(900), Some(0))
        );
    }
}
