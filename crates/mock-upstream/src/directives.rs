//! `[mock:key=value]` directives found in the last user message, so tests can steer
//! the mock through the gateway (which forwards bodies, not headers).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 429 `rate_limit_exceeded` with `retry-after: 1`.
    RateLimit,
    /// 500 `server_error`.
    Server,
    /// 400 `invalid_request_error` whose message names the provider-side
    /// model and organisation, as real providers' do.
    BadRequest,
    /// Stream: send this many token chunks, then abort the connection.
    /// Non-stream: abort without a response.
    DisconnectAfter(u32),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Directives {
    pub output_tokens: Option<u32>,
    pub latency_ms: Option<u64>,
    pub chunk_delay_ms: Option<u64>,
    pub fault: Option<Fault>,
    /// Behave like a provider that never reports usage (`[mock:no_usage]`).
    pub no_usage: bool,
    /// Answer with a call of the request's first tool (`[mock:tool_call]`).
    pub tool_call: bool,
    /// How the prompt is reported billed (`[mock:cached=N]` …).
    pub caching: Caching,
    /// Which delta field a chat stream carries its output in.
    pub output: OutputField,
}

/// Where a chat stream puts its output: `delta.content` (the default),
/// `delta.audio` (`[mock:audio]`: transcript and base64 PCM pieces, as
/// OpenAI streams `"modalities":["text","audio"]`), or a delta field no
/// gateway knows (`[mock:unknown_delta]`: `delta.x_future_field`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OutputField {
    #[default]
    Content,
    Audio,
    Unknown,
}

/// How the provider reports the prompt billed, in its own dialect's shape
/// (`caching.rs`): `[mock:cached=N]` tokens read from the prompt cache,
/// `[mock:cache_write_5m=N]` / `[mock:cache_write_1h=N]` written to it
/// (Anthropic's TTLs), `[mock:cache_write_30m=N]` / `[mock:cache_write_12h=N]`
/// (OpenAI's),
/// `[mock:web_search=N]` server-side searches run, `[mock:deepseek]`
/// DeepSeek's hit/miss field names, `[mock:split_late]` an
/// Anthropic-compatible host that reports the whole prompt as input in
/// `message_start` and the cache split only in `message_delta`,
/// `[mock:served_tier=…]` the tier an OpenAI chat answer says it served.
/// Each part is at most what is left of the prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caching {
    pub cached: u32,
    pub write_5m: u32,
    pub write_1h: u32,
    pub write_30m: u32,
    pub write_12h: u32,
    pub web_search: u32,
    pub deepseek: bool,
    pub split_late: bool,
    /// `[mock:served_tier=default|priority|flex]`: the `service_tier` an
    /// OpenAI answer says it was served at (whatever was asked).
    pub served_tier: Option<&'static str>,
}

impl Directives {
    /// Scan `text` for directives; unknown or malformed ones are ignored, later ones win.
    pub fn parse(text: &str) -> Self {
        let mut d = Directives::default();
        d.scan(text);
        d
    }

    pub fn scan(&mut self, mut text: &str) {
        while let Some(start) = text.find("[mock:") {
            text = &text[start + 6..];
            let Some(end) = text.find(']') else { return };
            let (key, value) = text[..end].split_once('=').unwrap_or((&text[..end], ""));
            let (key, value) = (key.trim(), value.trim());
            match key {
                "output_tokens" => self.output_tokens = value.parse().ok().or(self.output_tokens),
                "latency_ms" => self.latency_ms = value.parse().ok().or(self.latency_ms),
                "chunk_delay_ms" => {
                    self.chunk_delay_ms = value.parse().ok().or(self.chunk_delay_ms)
                }
                "fault" => self.fault = parse_fault(value).or(self.fault),
                "no_usage" => self.no_usage = true,
                "tool_call" => self.tool_call = true,
                "cached" => self.caching.cached = value.parse().unwrap_or(self.caching.cached),
                "cache_write_5m" => {
                    self.caching.write_5m = value.parse().unwrap_or(self.caching.write_5m)
                }
                "cache_write_1h" => {
                    self.caching.write_1h = value.parse().unwrap_or(self.caching.write_1h)
                }
                "cache_write_30m" => {
                    self.caching.write_30m = value.parse().unwrap_or(self.caching.write_30m)
                }
                "cache_write_12h" => {
                    self.caching.write_12h = value.parse().unwrap_or(self.caching.write_12h)
                }
                "web_search" => {
                    self.caching.web_search = value.parse().unwrap_or(self.caching.web_search)
                }
                "deepseek" => self.caching.deepseek = true,
                "split_late" => self.caching.split_late = true,
                "served_tier" => {
                    self.caching.served_tier = match value {
                        "default" => Some("default"),
                        "priority" => Some("priority"),
                        "flex" => Some("flex"),
                        _ => self.caching.served_tier,
                    }
                }
                "audio" => self.output = OutputField::Audio,
                "unknown_delta" => self.output = OutputField::Unknown,
                _ => {}
            }
            text = &text[end + 1..];
        }
    }
}

/// A scripted tool call: `[mock:call=NAME:BASE64]` asks the model to call
/// the request's tool `NAME` with the base64-decoded text as its
/// arguments (a function's JSON arguments, or a custom tool's free-form
/// input), once: a conversation that already holds a tool result is
/// answered with text. How a coding agent's own tools (a shell command, a
/// patch) are driven through the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub name: String,
    pub args: String,
}

impl Call {
    /// The last well-formed `[mock:call=…]` in `text`.
    pub fn find(mut text: &str) -> Option<Call> {
        use base64::Engine;
        let mut found = None;
        while let Some(start) = text.find("[mock:call=") {
            text = &text[start + 11..];
            let Some(end) = text.find(']') else { break };
            if let Some((name, b64)) = text[..end].split_once(':') {
                let args = base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok());
                if let Some(args) = args.filter(|_| !name.trim().is_empty()) {
                    found = Some(Call {
                        name: name.trim().to_string(),
                        args,
                    });
                }
            }
            text = &text[end + 1..];
        }
        found
    }

    /// `[mock:call=NAME:BASE64]` for a test to put in a prompt.
    pub fn directive(name: &str, args: &str) -> String {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(args);
        format!("[mock:call={name}:{b64}]")
    }
}

pub(crate) fn parse_fault(value: &str) -> Option<Fault> {
    match value {
        "429" => Some(Fault::RateLimit),
        "500" => Some(Fault::Server),
        "400" => Some(Fault::BadRequest),
        _ => {
            let n = value.strip_prefix("disconnect_after=")?;
            n.trim().parse().ok().map(Fault::DisconnectAfter)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_several() {
        let d = Directives::parse(
            "hi [mock:output_tokens=5000] and [mock:latency_ms=200][mock:chunk_delay_ms=5] \
             [mock:fault=disconnect_after=10]",
        );
        assert_eq!(
            d,
            Directives {
                output_tokens: Some(5000),
                latency_ms: Some(200),
                chunk_delay_ms: Some(5),
                fault: Some(Fault::DisconnectAfter(10)),
                no_usage: false,
                tool_call: false,
                caching: Caching::default(),
                output: OutputField::Content,
            }
        );
        assert_eq!(Directives::parse("[mock:audio]").output, OutputField::Audio);
        assert_eq!(
            Directives::parse("[mock:unknown_delta]").output,
            OutputField::Unknown
        );
        let d = Directives::parse("[mock:cached=900] [mock:cache_write_1h=50][mock:deepseek]");
        assert_eq!(
            d.caching,
            Caching {
                cached: 900,
                write_1h: 50,
                deepseek: true,
                ..Default::default()
            }
        );
    }

    #[test]
    fn a_scripted_call_round_trips() {
        let d = Call::directive("apply_patch", "*** Begin Patch\n[x]\n");
        let text = format!("please {d} now [mock:call=bad:%%%]");
        assert_eq!(
            Call::find(&text),
            Some(Call {
                name: "apply_patch".into(),
                args: "*** Begin Patch\n[x]\n".into()
            })
        );
        assert_eq!(Call::find("[mock:call=:aGk=] [mock:call=x]"), None);
    }

    #[test]
    fn faults_and_garbage() {
        assert_eq!(
            Directives::parse("[mock:fault=429]").fault,
            Some(Fault::RateLimit)
        );
        assert_eq!(
            Directives::parse("[mock:fault=500]").fault,
            Some(Fault::Server)
        );
        let d = Directives::parse("[mock:fault=teapot] [mock:output_tokens=x] [mock:what] [mock:");
        assert_eq!(d, Directives::default());
        assert_eq!(
            Directives::parse("no directives here"),
            Directives::default()
        );
    }
}
