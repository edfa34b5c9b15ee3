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
}

#[derive(Debug, Default, Deserialize)]
pub struct ChoiceDelta {
    #[serde(default)]
    pub delta: Option<Delta>,
    /// Legacy completions stream text here.
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Delta {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub reasoning_content: Option<String>,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub refusal: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<serde_json::Value>,
    #[serde(default)]
    pub function_call: Option<serde_json::Value>,
}

impl Chunk {
    /// Every generated text in the chunk: content, reasoning, tool arguments.
    pub fn generated_text(&self, out: &mut String) {
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
            }
        }
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
        c.generated_text(&mut t);
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
