//! Splitting an upstream SSE byte stream into events, and reading what the
//! gateway needs from a chat/completion chunk (text deltas, final usage).

use bytes::{Bytes, BytesMut};
use serde::Deserialize;

/// Buffers bytes and yields complete events (terminated by a blank line),
/// each with its terminator, exactly as received.
#[derive(Default)]
pub struct SseSplitter {
    buf: BytesMut,
}

impl SseSplitter {
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    pub fn next_event(&mut self) -> Option<Bytes> {
        let b = &self.buf[..];
        let mut i = 0;
        while i + 1 < b.len() {
            if b[i] == b'\n' && b[i + 1] == b'\n' {
                return Some(self.buf.split_to(i + 2).freeze());
            }
            if b[i] == b'\n' && b[i + 1] == b'\r' && b.get(i + 2) == Some(&b'\n') {
                return Some(self.buf.split_to(i + 3).freeze());
            }
            i += 1;
        }
        None
    }

    /// What is left when the upstream closes (an event without terminator).
    pub fn rest(&mut self) -> Option<Bytes> {
        (!self.buf.is_empty()).then(|| self.buf.split().freeze())
    }

    /// Bytes buffered that are not yet a whole event.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// An event with its terminating blank line, adding what is missing (an
/// upstream that closed without it), so the client parses it as an event.
pub fn terminated(ev: Bytes) -> Bytes {
    if ev.ends_with(b"\n\n") || ev.ends_with(b"\n\r\n") {
        return ev;
    }
    let mut out = BytesMut::from(&ev[..]);
    out.extend_from_slice(if ev.ends_with(b"\n") { b"\n" } else { b"\n\n" });
    out.freeze()
}

/// The `data:` payload of an event; None for comments and other fields.
pub fn data_of(event: &[u8]) -> Option<&[u8]> {
    let text = event
        .strip_suffix(b"\n\n")
        .or_else(|| event.strip_suffix(b"\n\r\n"))
        .unwrap_or(event);
    let line = text
        .split(|&c| c == b'\n')
        .find(|l| l.starts_with(b"data:"))?;
    let d = &line[5..];
    let d = d.strip_prefix(b" ").unwrap_or(d);
    Some(d.strip_suffix(b"\r").unwrap_or(d))
}

/// A provider's usage, read leniently: any JSON it sends is kept and
/// bounded at the settle (`domain::usage::bill`), never dropped for being
/// absurd.
pub type Usage = domain::usage::Reported;

#[derive(Debug, Default, Deserialize)]
pub struct Chunk {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub object: Option<String>,
    #[serde(default)]
    pub created: Option<i64>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub choices: Option<Vec<ChoiceDelta>>,
    #[serde(default)]
    pub usage: Option<Usage>,
    /// The service tier the provider served the request at (OpenAI sends
    /// it on every chunk); the usage is priced at it.
    #[serde(default)]
    pub service_tier: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ChoiceDelta {
    #[serde(default)]
    pub delta: Option<Delta>,
    /// Legacy completions stream text here.
    #[serde(default)]
    pub text: Option<String>,
}

/// One choice's delta. Every field that can carry output is metered
/// (`generated_text`): text `content`, `reasoning_content` / `reasoning`,
/// `refusal`, tool calls (their whole JSON), `audio` (transcript as text,
/// base64 data by [`AUDIO_B64_CHARS_PER_TOKEN`]), and any field the parser
/// does not know — kept as its JSON text and counted whole, as text, like
/// the native meter counts an unknown event: a provider's new output kind
/// is overcounted, never let through unmetered. Read field by field (no
/// `serde(flatten)`, which would buffer every delta): the plain text delta
/// allocates only its `content`, as before.
#[derive(Debug, Default)]
pub struct Delta {
    pub content: Option<String>,
    pub reasoning_content: Option<String>,
    pub reasoning: Option<String>,
    pub refusal: Option<String>,
    pub tool_calls: Option<serde_json::Value>,
    pub function_call: Option<serde_json::Value>,
    pub audio: Option<AudioDelta>,
    /// Fields not known here (`images` included): a string as its text,
    /// anything else as its JSON text; null ones carry nothing.
    pub unknown: Vec<String>,
}

/// OpenAI's streamed `delta.audio` (`ChoiceDeltaAudio`): `id`, `data`
/// (base64 audio), `transcript`, `expires_at`. Unknown fields are kept
/// whole, as in [`Delta`].
#[derive(Debug, Default)]
pub struct AudioDelta {
    pub transcript: Option<String>,
    pub data: Option<String>,
    pub unknown: Vec<String>,
}

/// Base64 characters of streamed audio counted as one output token. Audio
/// is streamed as 24 kHz 16-bit mono PCM (OpenAI streams `pcm16` only):
/// 48,000 bytes, 64,000 base64 characters a second. OpenAI bills gpt-4o
/// audio output at about one token per 20–25 ms; the meter assumes one per
/// 10 ms (at least twice the provider's rate): 480 PCM bytes, 640 base64
/// characters, per token, rounded up per piece. docs/providers.md.
pub const AUDIO_B64_CHARS_PER_TOKEN: usize = 640;

/// An unknown field's JSON text longer than this is bounded
/// (`TokenizerFamily::upper_bound`, one token per byte) rather than
/// tokenized: a base64 image does not cost milliseconds of BPE on a worker.
pub const UNKNOWN_TOKENIZED_MAX_BYTES: usize = 64 * 1024;

/// Tokens of audio `data` (base64) by [`AUDIO_B64_CHARS_PER_TOKEN`].
pub fn audio_data_tokens(b64: &str) -> u64 {
    b64.len().div_ceil(AUDIO_B64_CHARS_PER_TOKEN) as u64
}

mod delta_de {
    use super::{AudioDelta, Delta};
    use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
    use serde::Deserialize;
    use std::fmt;

    #[derive(Deserialize)]
    #[serde(field_identifier, rename_all = "snake_case")]
    enum DeltaField {
        Role,
        Content,
        ReasoningContent,
        Reasoning,
        Refusal,
        ToolCalls,
        FunctionCall,
        Audio,
        #[serde(other)]
        Other,
    }

    #[derive(Deserialize)]
    #[serde(field_identifier, rename_all = "snake_case")]
    enum AudioField {
        Id,
        ExpiresAt,
        Transcript,
        Data,
        #[serde(other)]
        Other,
    }

    /// An unknown field's value as JSON text, or nothing for null.
    fn unknown<'de, A: MapAccess<'de>>(
        map: &mut A,
        into: &mut Vec<String>,
    ) -> Result<(), A::Error> {
        // A string is its text; anything else its JSON text.
        match map.next_value::<serde_json::Value>()? {
            serde_json::Value::Null => {}
            serde_json::Value::String(s) => into.push(s),
            v => into.push(v.to_string()),
        }
        Ok(())
    }

    fn once<T, E: de::Error>(
        slot: &mut Option<T>,
        v: Option<T>,
        name: &'static str,
    ) -> Result<(), E> {
        // A field twice is refused, as derive(Deserialize) does: the whole
        // event is then counted (stream::read_event), nothing is lost.
        if slot.is_some() {
            return Err(E::duplicate_field(name));
        }
        *slot = v;
        Ok(())
    }

    impl<'de> Deserialize<'de> for Delta {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Delta;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a chat delta object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Delta, A::Error> {
                    let mut out = Delta::default();
                    while let Some(k) = map.next_key::<DeltaField>()? {
                        match k {
                            DeltaField::Role => {
                                map.next_value::<IgnoredAny>()?;
                            }
                            DeltaField::Content => {
                                once(&mut out.content, map.next_value()?, "content")?
                            }
                            DeltaField::ReasoningContent => once(
                                &mut out.reasoning_content,
                                map.next_value()?,
                                "reasoning_content",
                            )?,
                            DeltaField::Reasoning => {
                                once(&mut out.reasoning, map.next_value()?, "reasoning")?
                            }
                            DeltaField::Refusal => {
                                once(&mut out.refusal, map.next_value()?, "refusal")?
                            }
                            DeltaField::ToolCalls => {
                                let v: Option<serde_json::Value> = map.next_value()?;
                                once(
                                    &mut out.tool_calls,
                                    v.filter(|v| !v.is_null()),
                                    "tool_calls",
                                )?
                            }
                            DeltaField::FunctionCall => {
                                let v: Option<serde_json::Value> = map.next_value()?;
                                once(
                                    &mut out.function_call,
                                    v.filter(|v| !v.is_null()),
                                    "function_call",
                                )?
                            }
                            DeltaField::Audio => once(&mut out.audio, map.next_value()?, "audio")?,
                            DeltaField::Other => unknown(&mut map, &mut out.unknown)?,
                        }
                    }
                    Ok(out)
                }
            }
            d.deserialize_map(V)
        }
    }

    impl<'de> Deserialize<'de> for AudioDelta {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = AudioDelta;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a chat audio delta object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AudioDelta, A::Error> {
                    let mut out = AudioDelta::default();
                    while let Some(k) = map.next_key::<AudioField>()? {
                        match k {
                            AudioField::Id | AudioField::ExpiresAt => {
                                map.next_value::<IgnoredAny>()?;
                            }
                            AudioField::Transcript => {
                                once(&mut out.transcript, map.next_value()?, "transcript")?
                            }
                            AudioField::Data => once(&mut out.data, map.next_value()?, "data")?,
                            AudioField::Other => unknown(&mut map, &mut out.unknown)?,
                        }
                    }
                    Ok(out)
                }
            }
            d.deserialize_map(V)
        }
    }
}

impl Chunk {
    /// Every generated text in the chunk into `out` — content, reasoning,
    /// refusal, tool calls, audio transcripts, unknown fields' JSON — for
    /// the tokenizer; returns the tokens counted by rule rather than by the
    /// tokenizer (audio data, unknown fields too long to tokenize), and of
    /// those the audio data's (billed at the audio price when the stream
    /// ends without the provider's report).
    pub fn generated_text(
        &self,
        out: &mut String,
        family: domain::tokens::TokenizerFamily,
    ) -> (u64, u64) {
        let unknown = |u: &String, out: &mut String| {
            if u.len() > UNKNOWN_TOKENIZED_MAX_BYTES {
                family.upper_bound(u)
            } else {
                out.push_str(u);
                0
            }
        };
        let (mut ruled, mut audio) = (0, 0);
        for c in self.choices.iter().flatten() {
            if let Some(t) = &c.text {
                out.push_str(t);
            }
            if let Some(d) = &c.delta {
                for t in [&d.content, &d.reasoning_content, &d.reasoning, &d.refusal]
                    .into_iter()
                    .flatten()
                {
                    out.push_str(t);
                }
                for call in [&d.tool_calls, &d.function_call].into_iter().flatten() {
                    out.push_str(&call.to_string());
                }
                if let Some(a) = &d.audio {
                    if let Some(t) = &a.transcript {
                        out.push_str(t);
                    }
                    if let Some(b) = &a.data {
                        audio += audio_data_tokens(b);
                    }
                    ruled += a.unknown.iter().map(|u| unknown(u, out)).sum::<u64>();
                }
                ruled += d.unknown.iter().map(|u| unknown(u, out)).sum::<u64>();
            }
        }
        (ruled + audio, audio)
    }

    /// The provider's extra usage chunk (`choices: []` + usage).
    pub fn is_usage_only(&self) -> bool {
        self.usage.is_some() && self.choices.as_ref().is_none_or(|c| c.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_events_across_arbitrary_chunk_boundaries() {
        let mut s = SseSplitter::default();
        s.push(b"data: {\"a\":1}\n");
        assert!(s.next_event().is_none());
        s.push(b"\ndata: [DO");
        assert_eq!(&s.next_event().unwrap()[..], b"data: {\"a\":1}\n\n");
        assert!(s.next_event().is_none());
        s.push(b"NE]\n\n: keep-alive\n\n");
        let e = s.next_event().unwrap();
        assert_eq!(data_of(&e), Some(&b"[DONE]"[..]));
        let e = s.next_event().unwrap();
        assert_eq!(data_of(&e), None);
        assert!(s.rest().is_none());
    }

    #[test]
    fn reads_text_and_usage() {
        let c: Chunk = serde_json::from_str(
            r#"{"choices":[{"delta":{"content":"hi","reasoning_content":" there"}}],"usage":null}"#,
        )
        .unwrap();
        let mut t = String::new();
        c.generated_text(&mut t, domain::tokens::TokenizerFamily::O200k);
        assert_eq!(t, "hi there");
        assert!(!c.is_usage_only());
        let u: Chunk = serde_json::from_str(
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}"#,
        )
        .unwrap();
        assert!(u.is_usage_only());
        assert_eq!(u.usage.unwrap().output, domain::usage::Count::Number(5));
        // Usage no integer type holds still parses (and is bounded later).
        let huge: Chunk = serde_json::from_str(
            r#"{"choices":[],"usage":{"prompt_tokens":-3,"completion_tokens":9223372036854775808}}"#,
        )
        .unwrap();
        assert_eq!(
            huge.usage.unwrap().output,
            domain::usage::Count::Number(1 << 63)
        );
    }

    #[test]
    fn an_unterminated_event_is_terminated() {
        assert_eq!(
            &terminated(Bytes::from_static(b"data: x"))[..],
            b"data: x\n\n"
        );
        assert_eq!(
            &terminated(Bytes::from_static(b"data: x\n"))[..],
            b"data: x\n\n"
        );
        assert_eq!(
            &terminated(Bytes::from_static(b"data: x\n\n"))[..],
            b"data: x\n\n"
        );
    }
}
