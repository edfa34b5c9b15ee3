//! Provider personalities: the ways real OpenAI-compatible providers differ
//! from the API they claim to speak, so tollgate's budget promise is tested
//! against them rather than against an ideal provider.
//!
//! - `max_tokens_only`: reads only `max_tokens` (older vLLM, several
//!   OpenAI-compatible hosts); a request that sends only
//!   `max_completion_tokens` gets the mock's full default length.
//! - `max_completion_tokens_only`: reads only `max_completion_tokens`
//!   (OpenAI's reasoning models).
//! - `hidden_reasoning=N`: thinks N tokens it never streams or returns,
//!   reports them in `usage.completion_tokens` and
//!   `usage.completion_tokens_details.reasoning_tokens`; reasoning counts
//!   against the output cap, as OpenAI's does.
//! - `absurd_usage=huge|max|negative|float|text`: reports usage no real
//!   answer has (2^63, i64::MAX, −1,616, 1e30, a string).
//!
//! - `body_bytes=N`: pads a non-stream answer to at least N bytes.
//! - `unterminated`: streams its whole answer as one event and closes
//!   without the event's closing blank line (no finish, usage or `[DONE]`).
//!
//! Set for every request with `tollgate-dev mock-upstream --personality a,b=N`
//! ([`MockConfig::personality`](crate::MockConfig)), or per request with
//! directives in the last user message: `[mock:personality=max_tokens_only]`,
//! `[mock:hidden_reasoning=600]`, `[mock:absurd_usage=huge]`.

use serde_json::{json, Value};

/// Which request field the provider reads as the output cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CapReading {
    /// `max_completion_tokens`, else `max_tokens` (what OpenAI documents).
    #[default]
    Either,
    MaxTokensOnly,
    MaxCompletionTokensOnly,
}

/// A usage report no real answer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absurd {
    /// completion_tokens = 2^63 (above i64::MAX).
    Huge,
    /// completion_tokens = i64::MAX.
    Max,
    /// prompt_tokens = −1,616.
    Negative,
    /// completion_tokens = 1e30.
    Float,
    /// completion_tokens = "many".
    Text,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Personality {
    pub reads: CapReading,
    /// Reasoning tokens generated, billed and never shown.
    pub hidden_reasoning: u32,
    pub absurd: Option<Absurd>,
    /// Non-stream answers padded to at least this many bytes.
    pub body_bytes: Option<u32>,
    /// Streams end with one unterminated event carrying the whole answer.
    pub unterminated: bool,
}

impl Personality {
    /// Parses `--personality` (comma-separated traits); None names the
    /// first trait it does not know.
    pub fn parse(spec: &str) -> Result<Personality, String> {
        let mut p = Personality::default();
        for t in spec.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (k, v) = t.split_once('=').unwrap_or((t, ""));
            if !p.set(k.trim(), v.trim()) {
                return Err(format!("unknown personality trait {t:?}"));
            }
        }
        Ok(p)
    }

    /// Applies `[mock:personality=…]`, `[mock:hidden_reasoning=N]` and
    /// `[mock:absurd_usage=…]` directives found in `text`.
    pub fn scan(&mut self, mut text: &str) {
        while let Some(start) = text.find("[mock:") {
            text = &text[start + 6..];
            let Some(end) = text.find(']') else { return };
            let (k, v) = text[..end].split_once('=').unwrap_or((&text[..end], ""));
            match k.trim() {
                "personality" => {
                    for t in v.split(',') {
                        let (k, v) = t.split_once('=').unwrap_or((t, ""));
                        self.set(k.trim(), v.trim());
                    }
                }
                k @ ("hidden_reasoning" | "absurd_usage" | "body_bytes" | "unterminated") => {
                    self.set(k, v.trim());
                }
                _ => {}
            }
            text = &text[end + 1..];
        }
    }

    fn set(&mut self, key: &str, value: &str) -> bool {
        match key {
            "honest" | "either" => self.reads = CapReading::Either,
            "max_tokens_only" => self.reads = CapReading::MaxTokensOnly,
            "max_completion_tokens_only" => self.reads = CapReading::MaxCompletionTokensOnly,
            "hidden_reasoning" => match value.parse() {
                Ok(n) => self.hidden_reasoning = n,
                Err(_) => return false,
            },
            "body_bytes" => match value.parse() {
                Ok(n) => self.body_bytes = Some(n),
                Err(_) => return false,
            },
            "unterminated" => self.unterminated = true,
            "absurd_usage" => {
                self.absurd = Some(match value {
                    "huge" | "" => Absurd::Huge,
                    "max" => Absurd::Max,
                    "negative" => Absurd::Negative,
                    "float" => Absurd::Float,
                    "text" => Absurd::Text,
                    _ => return false,
                })
            }
            _ => return false,
        }
        true
    }

    /// The cap this provider obeys, of the two fields a request may carry.
    pub fn cap(&self, max_tokens: Option<u32>, max_completion_tokens: Option<u32>) -> Option<u32> {
        match self.reads {
            CapReading::Either => max_completion_tokens.or(max_tokens),
            CapReading::MaxTokensOnly => max_tokens,
            CapReading::MaxCompletionTokensOnly => max_completion_tokens,
        }
    }

    /// Splits what the provider may generate under `cap` into hidden
    /// reasoning first, then visible output of at most `wanted` tokens.
    pub fn split(&self, cap: Option<u32>, wanted: u32) -> (u32, u32) {
        let cap = cap.unwrap_or(u32::MAX);
        let reasoning = self.hidden_reasoning.min(cap);
        (reasoning, wanted.min(cap - reasoning))
    }

    /// The `usage` object this provider reports.
    pub fn usage(&self, prompt: u32, visible: u32, reasoning: u32) -> Value {
        let completion = visible + reasoning;
        let mut u = json!({
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        });
        if self.hidden_reasoning > 0 {
            u["completion_tokens_details"] = json!({"reasoning_tokens": reasoning});
        }
        match self.absurd {
            None => {}
            Some(Absurd::Huge) => {
                u["completion_tokens"] = json!(1u64 << 63);
                u["total_tokens"] = json!((1u64 << 63) + prompt as u64);
            }
            Some(Absurd::Max) => {
                u["completion_tokens"] = json!(i64::MAX);
                u["total_tokens"] = json!(i64::MAX);
            }
            Some(Absurd::Negative) => {
                u["prompt_tokens"] = json!(-1616);
                u["total_tokens"] = json!(completion as i64 - 1616);
            }
            Some(Absurd::Float) => u["completion_tokens"] = json!(1e30),
            Some(Absurd::Text) => u["completion_tokens"] = json!("many"),
        }
        u
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traits_parse_from_the_command_line_and_directives() {
        let p = Personality::parse("max_tokens_only, hidden_reasoning=600").unwrap();
        assert_eq!(p.reads, CapReading::MaxTokensOnly);
        assert_eq!(p.hidden_reasoning, 600);
        assert!(Personality::parse("polite").is_err());
        let mut p = Personality::default();
        p.scan("hi [mock:personality=max_completion_tokens_only] [mock:absurd_usage=negative]");
        assert_eq!(p.reads, CapReading::MaxCompletionTokensOnly);
        assert_eq!(p.absurd, Some(Absurd::Negative));
    }

    #[test]
    fn each_reads_its_own_cap_field() {
        let either = Personality::default();
        let mt = Personality::parse("max_tokens_only").unwrap();
        let mct = Personality::parse("max_completion_tokens_only").unwrap();
        assert_eq!(either.cap(Some(10), Some(40)), Some(40));
        assert_eq!(mt.cap(None, Some(40)), None);
        assert_eq!(mt.cap(Some(10), Some(40)), Some(10));
        assert_eq!(mct.cap(Some(10), None), None);
    }

    #[test]
    fn hidden_reasoning_counts_against_the_cap_and_is_reported() {
        let p = Personality::parse("hidden_reasoning=600").unwrap();
        assert_eq!(p.split(Some(1000), 50), (600, 50));
        assert_eq!(p.split(Some(620), 50), (600, 20));
        assert_eq!(p.split(Some(100), 50), (100, 0));
        let u = p.usage(10, 50, 600);
        assert_eq!(u["completion_tokens"], 650);
        assert_eq!(u["completion_tokens_details"]["reasoning_tokens"], 600);
    }

    #[test]
    fn absurd_usage_is_absurd() {
        let p = Personality::parse("absurd_usage=huge").unwrap();
        assert_eq!(
            p.usage(1, 2, 0)["completion_tokens"].as_u64(),
            Some(1 << 63)
        );
        let p = Personality::parse("absurd_usage=negative").unwrap();
        assert_eq!(p.usage(1, 2, 0)["prompt_tokens"], -1616);
    }
}
