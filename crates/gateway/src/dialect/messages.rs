//! The Anthropic Messages dialect (`POST /v1/messages`, and
//! `/v1/messages/count_tokens`): a request read into chat completions, a
//! chat answer written back as a Message, and the Message events (`Out`)
//! for a translated stream and for the end of a native one the gateway cut.

use super::Edge;
use domain::request::InvalidField;
use serde_json::{json, Map, Value};

fn bad(param: impl Into<String>, message: impl Into<String>) -> InvalidField {
    InvalidField {
        param: param.into(),
        message: message.into(),
    }
}

/// The chat completions request a Messages request asks for. `max_tokens`
/// is required, as Anthropic requires it, except for `count_tokens`.
pub fn to_chat(body: &Value, need_max_tokens: bool) -> Result<Value, InvalidField> {
    match to_chat_native(body, need_max_tokens)? {
        (_, Some(server_tool)) => Err(server_tool),
        (chat, None) => Ok(chat),
    }
}

/// As [`to_chat`], with a server tool (one the provider runs: web search,
/// web fetch, code execution) left out of the chat request and named: the
/// request goes only to a provider that speaks Messages natively.
pub fn to_chat_native(
    body: &Value,
    need_max_tokens: bool,
) -> Result<(Value, Option<InvalidField>), InvalidField> {
    let mut server_tool = None;
    let obj = body
        .as_object()
        .ok_or_else(|| bad("", "request body must be a JSON object"))?;
    let mut chat = Map::new();
    if let Some(m) = obj.get("model") {
        chat.insert("model".into(), m.clone());
    }
    match obj.get("max_tokens") {
        None | Some(Value::Null) if need_max_tokens => {
            return Err(bad("max_tokens", "max_tokens: field required"))
        }
        None | Some(Value::Null) => {}
        Some(v) => match v.as_i64() {
            Some(n) if (1..=1_000_000).contains(&n) => {
                chat.insert("max_tokens".into(), json!(n));
            }
            _ => {
                return Err(bad(
                    "max_tokens",
                    "max_tokens must be an integer from 1 to 1000000",
                ))
            }
        },
    }
    let mut messages = Vec::new();
    match obj.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(Value::Array(blocks)) => {
            let mut text = String::new();
            for (i, b) in blocks.iter().enumerate() {
                match b.get("text").and_then(Value::as_str) {
                    Some(t) if b["type"] == "text" => text.push_str(t),
                    _ => {
                        return Err(bad(
                            format!("system[{i}]"),
                            "system blocks must be text blocks",
                        ))
                    }
                }
            }
            messages.push(json!({"role": "system", "content": text}));
        }
        Some(_) => {
            return Err(bad(
                "system",
                "system must be a string or an array of text blocks",
            ))
        }
    }
    let msgs = match obj.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        _ => return Err(bad("messages", "messages must be a non-empty array")),
    };
    for (i, m) in msgs.iter().enumerate() {
        message(m, i, &mut messages)?;
    }
    chat.insert("messages".into(), Value::Array(messages));
    match obj.get("stop_sequences") {
        None | Some(Value::Null) => {}
        Some(Value::Array(s)) if s.iter().all(Value::is_string) => {
            chat.insert("stop".into(), Value::Array(s.clone()));
        }
        Some(_) => {
            return Err(bad(
                "stop_sequences",
                "stop_sequences must be an array of strings",
            ))
        }
    }
    match obj.get("temperature") {
        None | Some(Value::Null) => {}
        Some(v) if v.as_f64().is_some_and(|t| (0.0..=1.0).contains(&t)) => {
            chat.insert("temperature".into(), v.clone());
        }
        Some(_) => {
            return Err(bad(
                "temperature",
                "temperature must be a number from 0 to 1",
            ))
        }
    }
    if let Some(v) = obj.get("top_p").filter(|v| !v.is_null()) {
        chat.insert("top_p".into(), v.clone());
    }
    if let Some(s) = obj.get("stream").filter(|v| !v.is_null()) {
        chat.insert("stream".into(), s.clone());
        if s == &Value::Bool(true) {
            chat.insert("stream_options".into(), json!({"include_usage": true}));
        }
    }
    if let Some(u) = obj
        .get("metadata")
        .and_then(|m| m.get("user_id"))
        .filter(|u| u.is_string())
    {
        chat.insert("user".into(), u.clone());
    }
    if let Some(tools) = obj.get("tools").filter(|v| !v.is_null()) {
        chat.insert("tools".into(), tools_to_chat(tools, &mut server_tool)?);
    }
    if let Some(tc) = obj.get("tool_choice").filter(|v| !v.is_null()) {
        let kind = tc.get("type").and_then(Value::as_str);
        let choice = match kind {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => match tc.get("name").and_then(Value::as_str) {
                Some(n) => json!({"type": "function", "function": {"name": n}}),
                None => return Err(bad("tool_choice.name", "a tool choice needs a name")),
            },
            _ => {
                return Err(bad(
                    "tool_choice.type",
                    "tool_choice.type must be auto, any, tool or none",
                ))
            }
        };
        chat.insert("tool_choice".into(), choice);
        if tc.get("disable_parallel_tool_use") == Some(&Value::Bool(true)) {
            chat.insert("parallel_tool_calls".into(), json!(false));
        }
    }
    if obj.get("mcp_servers").is_some_and(|v| !v.is_null()) {
        server_tool.get_or_insert_with(|| {
            bad(
                "mcp_servers",
                "MCP servers are called by the provider: only a model whose provider serves Messages natively offers them",
            )
        });
    }
    Ok((Value::Object(chat), server_tool))
}

/// One message: its text and images, `tool_use` blocks (an assistant's
/// calls) and `tool_result` blocks (a user's answers to them, which chat
/// puts in `tool` messages ahead of the user's other content).
fn message(m: &Value, i: usize, out: &mut Vec<Value>) -> Result<(), InvalidField> {
    // Claude Code puts `system` turns among the messages too.
    let role = match m.get("role").and_then(Value::as_str) {
        Some(r @ ("user" | "assistant" | "system")) => r,
        _ => {
            return Err(bad(
                format!("messages[{i}].role"),
                "role must be user, assistant or system",
            ))
        }
    };
    let blocks = match m.get("content") {
        Some(Value::String(s)) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Some(Value::Array(b)) => b,
        _ => {
            return Err(bad(
                format!("messages[{i}].content"),
                "content must be a string or an array of content blocks",
            ))
        }
    };
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("messages[{i}].content[{j}]");
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                let t = b["text"]
                    .as_str()
                    .ok_or_else(|| bad(format!("{at}.text"), "text must be a string"))?;
                parts.push(json!({"type": "text", "text": t}));
            }
            Some("image") => {
                let src = &b["source"];
                let url = match src["type"].as_str() {
                    Some("base64") => format!(
                        "data:{};base64,{}",
                        src["media_type"].as_str().unwrap_or("image/png"),
                        src["data"].as_str().unwrap_or("")
                    ),
                    Some("url") => src["url"].as_str().unwrap_or("").to_string(),
                    _ => {
                        return Err(bad(
                            format!("{at}.source.type"),
                            "image source must be base64 or url",
                        ))
                    }
                };
                parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
            }
            Some("tool_use") if role == "assistant" => {
                let (Some(id), Some(name)) = (b["id"].as_str(), b["name"].as_str()) else {
                    return Err(bad(
                        format!("{at}.id"),
                        "a tool_use block needs id and name",
                    ));
                };
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": input.to_string()}}));
            }
            Some("tool_result") if role == "user" => {
                let Some(id) = b["tool_use_id"].as_str() else {
                    return Err(bad(
                        format!("{at}.tool_use_id"),
                        "a tool_result block needs tool_use_id",
                    ));
                };
                let content = match &b["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                    Value::Null => String::new(),
                    _ => {
                        return Err(bad(
                            format!("{at}.content"),
                            "tool_result content must be a string or blocks",
                        ))
                    }
                };
                out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            // Earlier thinking: nothing a chat provider can take back.
            Some("thinking" | "redacted_thinking") => {}
            _ => {
                return Err(bad(
                    format!("{at}.type"),
                    format!(
                        "content block type {} is not supported in a {role} message",
                        b["type"]
                    ),
                ))
            }
        }
    }
    if role == "assistant" {
        let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
        let mut msg = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
        if !calls.is_empty() {
            msg["tool_calls"] = Value::Array(calls);
        }
        out.push(msg);
    } else if role == "system" {
        let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
        out.push(json!({"role": "system", "content": text}));
    } else if !parts.is_empty() {
        out.push(json!({"role": "user", "content": parts}));
    }
    Ok(())
}

fn tools_to_chat(tools: &Value, server: &mut Option<InvalidField>) -> Result<Value, InvalidField> {
    let Some(list) = tools.as_array() else {
        return Err(bad("tools", "tools must be an array"));
    };
    let mut out = Vec::new();
    for (i, t) in list.iter().enumerate() {
        match t.get("type").and_then(Value::as_str) {
            None | Some("custom") => {}
            Some(other) if domain::extras::hosted_kind(other).is_some() => {
                server.get_or_insert_with(|| bad(
                    format!("tools[{i}].type"),
                    format!("server tool {other:?} runs at the provider: only a model whose provider serves Messages natively offers it"),
                ));
                continue;
            }
            Some(other) => {
                return Err(bad(
                    format!("tools[{i}].type"),
                    format!("server tool {other:?} is not supported; only client tools are"),
                ))
            }
        }
        let Some(name) = t.get("name").and_then(Value::as_str) else {
            return Err(bad(format!("tools[{i}].name"), "a tool needs a name"));
        };
        let schema = t.get("input_schema").cloned().ok_or_else(|| {
            bad(
                format!("tools[{i}].input_schema"),
                "a tool needs an input_schema",
            )
        })?;
        let mut f = json!({"name": name, "parameters": schema});
        if let Some(d) = t.get("description").filter(|d| !d.is_null()) {
            f["description"] = d.clone();
        }
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(Value::Array(out))
}

/// Anthropic's stop reason for a chat finish reason.
fn stop_reason(finish: Option<&str>) -> &'static str {
    match finish {
        Some("length") => "max_tokens",
        Some("tool_calls" | "function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

/// A chat completion answer as a Message.
pub fn from_chat(chat: &Value, edge: &Edge) -> Value {
    let choice = &chat["choices"][0];
    let msg = &choice["message"];
    let mut content = Vec::new();
    if let Some(t) = msg["content"].as_str().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": t}));
    }
    for call in msg["tool_calls"].as_array().into_iter().flatten() {
        let input: Value = call["function"]["arguments"]
            .as_str()
            .and_then(|a| serde_json::from_str(a).ok())
            .unwrap_or_else(|| json!({}));
        content.push(json!({"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": input}));
    }
    let (input, output) = super::usage_of(super::Dialect::Chat, chat).unwrap_or((0, 0));
    json!({
        "id": message_id(edge), "type": "message", "role": "assistant", "model": edge.model,
        "content": content, "stop_reason": stop_reason(choice["finish_reason"].as_str()),
        "stop_sequence": null, "usage": {"input_tokens": input, "output_tokens": output},
    })
}

fn message_id(edge: &Edge) -> String {
    let suffix = edge
        .request_id
        .strip_prefix("req_")
        .unwrap_or(&edge.request_id);
    format!("msg_{suffix}")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    Text,
    Tool(i64),
}

/// A Message being streamed: which content block is open, and the events.
pub struct Out {
    id: String,
    model: String,
    /// Input tokens announced in `message_start` (the estimate; the
    /// provider's count follows in `message_delta`).
    est_input: i64,
    started: bool,
    open: Option<(usize, Block)>,
    next_index: usize,
    pub usage: Option<(i64, i64)>,
    pub finish: Option<String>,
    pub failed: Option<String>,
    pub cut_reason: Option<String>,
    events: String,
}

impl Out {
    pub fn new(edge: &Edge, est_input: i64) -> Out {
        Out {
            id: message_id(edge),
            model: edge.model.clone(),
            est_input,
            started: false,
            open: None,
            next_index: 0,
            usage: None,
            finish: None,
            failed: None,
            cut_reason: None,
            events: String::new(),
        }
    }

    /// Takes up a provider's own stream at its open block (a native stream
    /// the gateway ends).
    pub fn continue_from(&mut self, open_block: Option<usize>) {
        self.started = true;
        self.open = open_block.map(|i| (i, Block::Text));
    }

    pub fn take_events(&mut self) -> String {
        std::mem::take(&mut self.events)
    }

    fn event(&mut self, ty: &str, mut data: Value) {
        data["type"] = json!(ty);
        self.events
            .push_str(&format!("event: {ty}\ndata: {data}\n\n"));
    }

    pub fn start(&mut self) {
        if self.started {
            return;
        }
        self.started = true;
        let m = json!({"id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": self.est_input, "output_tokens": 0}});
        self.event("message_start", json!({"message": m}));
    }

    fn close_block(&mut self) {
        if let Some((i, _)) = self.open.take() {
            self.event("content_block_stop", json!({"index": i}));
        }
    }

    fn open_block(&mut self, kind: Block, block: Value) -> usize {
        self.close_block();
        let i = self.next_index;
        self.next_index += 1;
        self.open = Some((i, kind));
        self.event(
            "content_block_start",
            json!({"index": i, "content_block": block}),
        );
        i
    }

    pub fn text_delta(&mut self, text: &str) {
        let i = match self.open {
            Some((i, Block::Text)) => i,
            _ => self.open_block(Block::Text, json!({"type": "text", "text": ""})),
        };
        self.event(
            "content_block_delta",
            json!({"index": i, "delta": {"type": "text_delta", "text": text}}),
        );
    }

    pub fn tool_delta(&mut self, index: i64, call: &Value) {
        let i = match self.open {
            Some((i, Block::Tool(c))) if c == index => i,
            _ => {
                let id = call["id"]
                    .as_str()
                    .map_or_else(|| format!("toolu_{}", self.next_index), str::to_string);
                let name = call["function"]["name"].as_str().unwrap_or("");
                self.open_block(
                    Block::Tool(index),
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                )
            }
        };
        if let Some(args) = call["function"]["arguments"]
            .as_str()
            .filter(|a| !a.is_empty())
        {
            self.event(
                "content_block_delta",
                json!({"index": i, "delta": {"type": "input_json_delta", "partial_json": args}}),
            );
        }
    }

    /// The end: the open block closed, `message_delta` (stop reason and
    /// usage), `message_stop`; or Anthropic's `error` event if the stream
    /// broke.
    pub fn finish_events(&mut self) {
        self.start();
        self.close_block();
        if let Some(msg) = self.failed.clone() {
            self.event(
                "error",
                json!({"error": {"type": "api_error", "message": msg}}),
            );
            return;
        }
        let reason = if self.cut_reason.is_some() {
            "max_tokens"
        } else {
            stop_reason(self.finish.as_deref())
        };
        let (input, output) = self.usage.unwrap_or((self.est_input, 0));
        let mut d = json!({"delta": {"stop_reason": reason, "stop_sequence": null},
            "usage": {"input_tokens": input, "output_tokens": output}});
        if let Some(r) = &self.cut_reason {
            d["tollgate_reason"] = json!(r);
        }
        self.event("message_delta", d);
        self.event("message_stop", json!({}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge() -> Edge {
        Edge {
            dialect: super::super::Dialect::Messages,
            native: false,
            model: "claude".into(),
            request_id: "req_x".into(),
            custom_tools: Vec::new(),
            tool_search: false,
            json_array: false,
        }
    }

    #[test]
    fn system_stop_sequences_and_tools_are_translated() {
        let c = to_chat(
            &json!({"model": "m", "max_tokens": 10, "system": [{"type": "text", "text": "sys"}],
            "stop_sequences": ["END"], "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": "get", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"}}),
            true,
        )
        .unwrap();
        assert_eq!(
            c["messages"][0],
            json!({"role": "system", "content": "sys"})
        );
        assert_eq!(c["messages"][1], json!({"role": "user", "content": "hi"}));
        assert_eq!(c["stop"], json!(["END"]));
        assert_eq!(c["max_tokens"], 10);
        assert_eq!(
            c["tools"][0]["function"]["parameters"],
            json!({"type": "object"})
        );
        assert_eq!(c["tool_choice"], "required");
        assert!(domain::request::validate(domain::request::Endpoint::ChatCompletions, &c).is_ok());
    }

    #[test]
    fn tool_use_and_tool_result_round_trip_into_chat() {
        let c = to_chat(&json!({"model": "m", "max_tokens": 10, "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "text", "text": "let me"},
                {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {"type": "text", "text": "thanks"}]},
        ]}), true)
        .unwrap();
        let m = c["messages"].as_array().unwrap();
        assert_eq!(m[1]["content"], "let me");
        assert_eq!(m[1]["tool_calls"][0]["id"], "toolu_1");
        assert_eq!(
            m[1]["tool_calls"][0]["function"]["arguments"],
            "{\"city\":\"Paris\"}"
        );
        assert_eq!(
            m[2],
            json!({"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"})
        );
        assert_eq!(m[3]["role"], "user");
    }

    #[test]
    fn bad_requests_name_the_field() {
        for (body, param) in [
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
                "max_tokens",
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": []}),
                "messages",
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "boss", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"model": "m", "max_tokens": 5, "temperature": 1.5, "messages": [{"role": "user", "content": "x"}]}),
                "temperature",
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use"}]}]}),
                "messages[0].content[0].type",
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "web_search_20250305", "name": "w"}]}),
                "tools[0].type",
            ),
        ] {
            assert_eq!(to_chat(&body, true).unwrap_err().param, param, "{body}");
        }
        // count_tokens needs no max_tokens.
        assert!(to_chat(
            &json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
            false
        )
        .is_ok());
    }

    #[test]
    fn a_chat_answer_becomes_a_message() {
        let chat = json!({"choices": [{"message": {"content": "hi", "tool_calls": [{"id": "c1",
            "function": {"name": "get", "arguments": "{\"a\":1}"}}]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3}});
        let m = from_chat(&chat, &edge());
        assert_eq!(m["id"], "msg_x");
        assert_eq!(m["model"], "claude");
        assert_eq!(m["content"][0], json!({"type": "text", "text": "hi"}));
        assert_eq!(m["content"][1]["input"], json!({"a": 1}));
        assert_eq!(m["stop_reason"], "tool_use");
        assert_eq!(m["usage"], json!({"input_tokens": 7, "output_tokens": 3}));
    }

    #[test]
    fn a_cut_stream_ends_with_max_tokens_then_message_stop() {
        let mut o = Out::new(&edge(), 9);
        o.start();
        o.text_delta("a");
        o.cut_reason = Some("tenant_monthly_budget_exhausted".into());
        o.usage = Some((9, 1));
        o.finish_events();
        let ev = o.take_events();
        let types: Vec<&str> = ev
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(
            types,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert!(ev.contains("\"stop_reason\":\"max_tokens\""), "{ev}");
    }
}
