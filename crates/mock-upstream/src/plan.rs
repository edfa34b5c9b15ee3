//! What one answer is made of, stream or not: its kind, its token counts,
//! its pacing and faults, and the usage it reports.

use std::time::Duration;

use serde_json::Value;

use crate::Personality;

/// One output token: a single BPE token in both cl100k and o200k.
pub(crate) const TOKEN: &str = " hello";

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Chat,
    Text,
}

/// Everything needed to write one answer, stream or not.
pub(crate) struct Plan {
    pub kind: Kind,
    pub id: String,
    pub created: u64,
    pub model: String,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub finish_reason: &'static str,
    pub chunk_delay: Duration,
    pub disconnect_after: Option<u32>,
    pub include_usage: bool,
    /// Hidden reasoning tokens: generated and billed, never sent.
    pub reasoning_tokens: u32,
    pub personality: Personality,
    /// How the prompt is reported billed.
    pub caching: crate::directives::Caching,
    /// The delta field a chat stream's output goes in.
    pub output: crate::directives::OutputField,
}

impl Plan {
    pub fn usage(&self) -> Value {
        let mut u = self.personality.usage(
            self.prompt_tokens,
            self.completion_tokens,
            self.reasoning_tokens,
        );
        self.caching.chat(&mut u, self.prompt_tokens);
        if self.output == crate::directives::OutputField::Audio && self.kind == Kind::Chat {
            // Audio steps alternate transcript (text) and data (audio).
            let (audio, text) = audio_split(self.completion_tokens);
            u["completion_tokens_details"]["audio_tokens"] = audio.into();
            u["completion_tokens_details"]["text_tokens"] = text.into();
        }
        u
    }
}

/// (audio tokens, text tokens) of an audio answer of `n` steps: even steps
/// send a transcript piece (one text token), odd ones one audio token.
pub(crate) fn audio_split(n: u32) -> (u32, u32) {
    (n / 2, n - n / 2)
}
