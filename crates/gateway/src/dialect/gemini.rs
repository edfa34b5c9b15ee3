//! Google's Gemini API dialect (`POST /v1beta/models/{model}:generateContent`,
//! `:streamGenerateContent?alt=sse`, `:countTokens`), translated to chat
//! completions for every chat model (docs/clients.md, "Gemini API"):
//! `contents` / `parts` to messages, `systemInstruction` to a system
//! message, `generationConfig.maxOutputTokens` to the cap, function
//! declarations to chat tools; the answer back as `candidates` with
//! `usageMetadata`, streamed as one `GenerateContentResponse` per event.

use super::Edge;
use domain::request::InvalidField;
use serde_json::{json, Map, Value};

fn bad(param: impl Into<String>, message: impl Into<String>) -> InvalidField {
    InvalidField {
        param: param.into(),
        message: message.into(),
    }
}

/// A call's model and method from the path's last part
/// (`gemini-2.5-pro:streamGenerateContent`).
pub fn split_call(rest: &str) -> Option<(&str, &str)> {
    let (model, method) = rest.rsplit_once(':')?;
    (!model.is_empty() && !model.contains('/')).then_some((model, method))
}

/// The text and parts of one `Content`.
fn parts_of(c: &Value, at: &str) -> Result<Vec<Value>, InvalidField> {
    match c.get("parts") {
        Some(Value::Array(p)) => Ok(p.clone()),
        _ => Err(bad(format!("{at}.parts"), "parts must be an array")),
    }
}

fn text_of(parts: &[Value]) -> String {
    parts.iter().filter_map(|p| p["text"].as_str()).collect()
}

/// The chat completions request a Gemini request asks for; a hosted tool
/// (one Google runs) refused, naming it (`:countTokens`).
pub fn to_chat(body: &Value, model: &str, stream: bool) -> Result<Value, InvalidField> {
    match to_chat_native(body, model, stream)? {
        (_, Some(hosted)) => Err(hosted),
        (chat, None) => Ok(chat),
    }
}

/// As [`to_chat`], with a hosted tool (`googleSearch`, `codeExecution`,
/// `urlContext`, …) left out of the chat request and named: the request
/// is refused after the policy has spoken (403 `tool_not_allowed` first,
/// as in the other dialects; docs/clients.md, "Gemini CLI and the Gemini
/// API").
pub fn to_chat_native(
    body: &Value,
    model: &str,
    stream: bool,
) -> Result<(Value, Option<InvalidField>), InvalidField> {
    let mut hosted = None;
    let obj = body
        .as_object()
        .ok_or_else(|| bad("", "request body must be a JSON object"))?;
    let mut chat = Map::new();
    chat.insert("model".into(), json!(model));
    let mut messages = Vec::new();
    if let Some(si) = obj
        .get("systemInstruction")
        .or_else(|| obj.get("system_instruction"))
    {
        let parts = parts_of(si, "systemInstruction")?;
        messages.push(json!({"role": "system", "content": text_of(&parts)}));
    }
    let Some(contents) = obj.get("contents").and_then(Value::as_array) else {
        return Err(bad("contents", "contents must be an array"));
    };
    if contents.is_empty() {
        return Err(bad("contents", "contents must not be empty"));
    }
    for (i, c) in contents.iter().enumerate() {
        let at = format!("contents[{i}]");
        let role = match c.get("role").and_then(Value::as_str) {
            None | Some("user") => "user",
            Some("model") => "assistant",
            Some(_) => return Err(bad(format!("{at}.role"), "role must be user or model")),
        };
        let mut content = Vec::new();
        let mut calls = Vec::new();
        for (j, p) in parts_of(c, &at)?.iter().enumerate() {
            let pat = format!("{at}.parts[{j}]");
            if let Some(t) = p.get("text").and_then(Value::as_str) {
                content.push(json!({"type": "text", "text": t}));
            } else if let Some(d) = p.get("inlineData").or_else(|| p.get("inline_data")) {
                let mime = d["mimeType"]
                    .as_str()
                    .or(d["mime_type"].as_str())
                    .unwrap_or("");
                if !mime.starts_with("image/") {
                    return Err(bad(pat, "only image inlineData is supported"));
                }
                let url = format!("data:{mime};base64,{}", d["data"].as_str().unwrap_or(""));
                content.push(json!({"type": "image_url", "image_url": {"url": url}}));
            } else if let Some(f) = p.get("functionCall") {
                let name = f["name"].as_str().unwrap_or("");
                calls.push(json!({"id": call_id(name), "type": "function", "function": {
                    "name": name, "arguments": f.get("args").cloned().unwrap_or(json!({})).to_string()}}));
            } else if let Some(f) = p.get("functionResponse") {
                let name = f["name"].as_str().unwrap_or("");
                messages.push(json!({"role": "tool", "tool_call_id": call_id(name),
                    "content": f.get("response").cloned().unwrap_or(Value::Null).to_string()}));
            } else if p.get("thought").is_some() || p.get("thoughtSignature").is_some() {
                // The model's earlier thinking: nothing a chat provider takes.
            } else {
                return Err(bad(
                    pat,
                    "part must be text, inlineData, functionCall or functionResponse",
                ));
            }
        }
        if content.is_empty() && calls.is_empty() {
            continue;
        }
        let mut m = if role == "assistant" {
            let t: String = content.iter().filter_map(|p| p["text"].as_str()).collect();
            json!({"role": "assistant", "content": if t.is_empty() { Value::Null } else { json!(t) }})
        } else {
            json!({"role": "user", "content": content})
        };
        if !calls.is_empty() {
            m["tool_calls"] = Value::Array(calls);
        }
        messages.push(m);
    }
    chat.insert("messages".into(), Value::Array(messages));
    // Google's service tiers are the chat providers' names (the policy,
    // 403 `service_tier_not_allowed`, has spoken: `proxy::extras`).
    if let Some(tier) = domain::extras::gemini_tier(body)? {
        chat.insert("service_tier".into(), json!(tier));
    }
    // Content cached at Google is read by Google only: a chat provider would
    // answer without it, and the gateway cannot size it for the hold.
    for f in ["cachedContent", "cached_content"] {
        if obj.get(f).is_some_and(|v| !v.is_null()) {
            return Err(bad(
                f,
                "cachedContent names content cached at Google, which only Google's own API reads; tollgate translates every Gemini request to chat completions: send the content in contents",
            ));
        }
    }
    let g = obj
        .get("generationConfig")
        .or_else(|| obj.get("generation_config"));
    if let Some(g) = g.and_then(Value::as_object) {
        if let Some(v) = g.get("maxOutputTokens").filter(|v| !v.is_null()) {
            match v.as_i64() {
                Some(n) if (1..=1_000_000).contains(&n) => {
                    chat.insert("max_tokens".into(), json!(n));
                }
                _ => {
                    return Err(bad(
                        "generationConfig.maxOutputTokens",
                        "maxOutputTokens must be an integer from 1 to 1000000",
                    ))
                }
            }
        }
        for (from, to) in [
            ("temperature", "temperature"),
            ("topP", "top_p"),
            ("stopSequences", "stop"),
        ] {
            if let Some(v) = g.get(from).filter(|v| !v.is_null()) {
                chat.insert(to.into(), v.clone());
            }
        }
        // Structured output: JSON, of a schema when one is given.
        match g.get("responseMimeType").and_then(Value::as_str) {
            None | Some("text/plain") => {}
            Some("application/json") => {
                let schema = g
                    .get("responseJsonSchema")
                    .or_else(|| g.get("responseSchema"))
                    .filter(|s| s.is_object());
                let format = match schema {
                    Some(s) => json!({"type": "json_schema",
                        "json_schema": {"name": "response", "schema": lower_types(s)}}),
                    None => json!({"type": "json_object"}),
                };
                chat.insert("response_format".into(), format);
            }
            Some(other) => {
                return Err(bad(
                    "generationConfig.responseMimeType",
                    format!(
                    "responseMimeType {other:?} is not supported: text/plain or application/json"
                ),
                ))
            }
        }
        // Audio or image answers are billed at their own rates and cannot
        // come back through the chat translation: refused, not dropped.
        let modalities = g
            .get("responseModalities")
            .or_else(|| g.get("response_modalities"));
        for m in modalities.and_then(Value::as_array).into_iter().flatten() {
            if !m.as_str().is_some_and(|m| m.eq_ignore_ascii_case("text")) {
                return Err(bad(
                    "generationConfig.responseModalities",
                    format!("response modality {m} is not supported: tollgate translates every Gemini request to chat completions, which answer in text"),
                ));
            }
        }
        if let Some(n) = g
            .get("candidateCount")
            .and_then(Value::as_i64)
            .filter(|n| *n != 1)
        {
            return Err(bad(
                "generationConfig.candidateCount",
                format!("candidateCount {n} is not supported: one candidate"),
            ));
        }
    }
    if let Some(tools) = obj.get("tools").filter(|v| !v.is_null()) {
        let Some(list) = tools.as_array() else {
            return Err(bad("tools", "tools must be an array"));
        };
        let mut out = Vec::new();
        for (i, t) in list.iter().enumerate() {
            let Some(fields) = t.as_object() else {
                return Err(bad(format!("tools[{i}]"), "a tool must be an object"));
            };
            // One `Tool` may carry several fields: every one is read, none
            // dropped.
            for (field, v) in fields {
                match field.as_str() {
                    "functionDeclarations" | "function_declarations" => {
                        for d in v.as_array().into_iter().flatten() {
                            out.push(function_tool(d));
                        }
                    }
                    f if domain::extras::gemini_hosted_kind(f).is_some() => {
                        // googleSearch, codeExecution, urlContext …: Google
                        // runs them. The policy (403 `tool_not_allowed`)
                        // speaks first; allowed, a chat provider cannot run
                        // them (no provider serves this dialect natively).
                        hosted.get_or_insert_with(|| bad(
                            format!("tools[{i}].{f}"),
                            format!("the hosted tool {f:?} runs at the provider: only a model whose provider serves the Gemini API natively offers it, and tollgate translates every Gemini request to chat completions"),
                        ));
                    }
                    f => {
                        return Err(bad(
                            format!("tools[{i}].{f}"),
                            format!(
                                "the tool {f:?} is not supported: only function declarations are"
                            ),
                        ))
                    }
                }
            }
        }
        if !out.is_empty() {
            chat.insert("tools".into(), Value::Array(out));
        }
    }
    if stream {
        chat.insert("stream".into(), json!(true));
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok((Value::Object(chat), hosted))
}

/// A function declaration as a chat function tool.
fn function_tool(d: &Value) -> Value {
    let mut f = json!({"name": d["name"]});
    if let Some(x) = d.get("description") {
        f["description"] = x.clone();
    }
    if let Some(p) = d
        .get("parameters")
        .or_else(|| d.get("parametersJsonSchema"))
    {
        f["parameters"] = lower_types(p);
    }
    json!({"type": "function", "function": f})
}

/// Gemini's OpenAPI schema types are upper case (`OBJECT`, `STRING`);
/// JSON Schema's are lower case.
fn lower_types(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| match (k.as_str(), x) {
                    ("type", Value::String(t)) => (k.clone(), json!(t.to_lowercase())),
                    _ => (k.clone(), lower_types(x)),
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(lower_types).collect()),
        _ => v.clone(),
    }
}

/// Gemini's calls carry no ids: a call and its response meet by name.
fn call_id(name: &str) -> String {
    format!("call_{name}")
}

fn finish_reason(finish: Option<&str>, cut: bool) -> &'static str {
    match finish {
        _ if cut => "MAX_TOKENS",
        Some("length") => "MAX_TOKENS",
        Some("content_filter") => "SAFETY",
        _ => "STOP",
    }
}

fn usage_metadata((input, output): (i64, i64)) -> Value {
    json!({"promptTokenCount": input, "candidatesTokenCount": output,
        "totalTokenCount": input + output})
}

fn response_id(edge: &Edge) -> String {
    edge.request_id
        .strip_prefix("req_")
        .unwrap_or(&edge.request_id)
        .to_string()
}

fn call_part(name: &str, arguments: &str) -> Value {
    let args: Value = serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
    json!({"functionCall": {"name": name, "args": args}})
}

/// A chat completion answer as a `GenerateContentResponse`.
pub fn from_chat(chat: &Value, edge: &Edge) -> Value {
    let choice = &chat["choices"][0];
    let msg = &choice["message"];
    let mut parts = Vec::new();
    if let Some(t) = msg["content"].as_str().filter(|t| !t.is_empty()) {
        parts.push(json!({"text": t}));
    }
    for call in msg["tool_calls"].as_array().into_iter().flatten() {
        parts.push(call_part(
            call["function"]["name"].as_str().unwrap_or(""),
            call["function"]["arguments"].as_str().unwrap_or("{}"),
        ));
    }
    let usage = super::usage_of(super::Dialect::Chat, chat).unwrap_or((0, 0));
    json!({
        "candidates": [{"content": {"role": "model", "parts": parts},
            "finishReason": finish_reason(choice["finish_reason"].as_str(), false), "index": 0}],
        "usageMetadata": usage_metadata(usage),
        "modelVersion": edge.model,
        "responseId": response_id(edge),
    })
}

/// A streamed answer: one `GenerateContentResponse` per SSE event, the
/// tool calls (whose arguments arrive in pieces) whole in the last one
/// with the finish reason and the usage.
pub struct Out {
    model: String,
    id: String,
    /// Chat tool-call index → (name, arguments so far).
    calls: Vec<(i64, String, String)>,
    pub usage: Option<(i64, i64)>,
    pub finish: Option<String>,
    pub failed: Option<String>,
    pub cut_reason: Option<String>,
    events: String,
    /// Written as a JSON array (`[`, `,\r\n` between, `]`), not as SSE.
    array: bool,
    /// Elements written so far (the array's opening bracket is written).
    elements: usize,
}

impl Out {
    pub fn new(edge: &Edge) -> Out {
        Out {
            array: edge.json_array,
            elements: 0,
            model: edge.model.clone(),
            id: response_id(edge),
            calls: Vec::new(),
            usage: None,
            finish: None,
            failed: None,
            cut_reason: None,
            events: String::new(),
        }
    }

    pub fn take_events(&mut self) -> String {
        std::mem::take(&mut self.events)
    }

    fn chunk(&mut self, parts: Vec<Value>, last: bool) {
        let mut cand = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        let mut c = json!({"modelVersion": self.model, "responseId": self.id});
        if last {
            cand["finishReason"] = json!(finish_reason(
                self.finish.as_deref(),
                self.cut_reason.is_some()
            ));
            if let Some(u) = self.usage {
                c["usageMetadata"] = usage_metadata(u);
            }
        }
        c["candidates"] = json!([cand]);
        self.element(&c);
    }

    /// One `GenerateContentResponse` (or error) of the stream: an SSE
    /// event, or the array's next element.
    fn element(&mut self, v: &Value) {
        if self.array {
            self.events
                .push_str(if self.elements == 0 { "[" } else { ",\r\n" });
            self.events.push_str(&v.to_string());
        } else {
            self.events.push_str(&format!("data: {v}\n\n"));
        }
        self.elements += 1;
    }

    pub fn text_delta(&mut self, text: &str) {
        self.chunk(vec![json!({"text": text})], false);
    }

    pub fn tool_delta(&mut self, index: i64, call: &Value) {
        let args = call["function"]["arguments"].as_str().unwrap_or("");
        match self.calls.iter_mut().find(|(i, _, _)| *i == index) {
            Some((_, _, a)) => a.push_str(args),
            None => self.calls.push((
                index,
                call["function"]["name"].as_str().unwrap_or("").to_string(),
                args.to_string(),
            )),
        }
    }

    /// The last event: the calls, the finish reason and the usage; or,
    /// when the provider broke off, Google's error shape.
    pub fn finish_events(&mut self) {
        if let Some(msg) = self.failed.take() {
            let e = json!({"error": {"code": 502, "message": msg, "status": "UNAVAILABLE"}});
            self.element(&e);
        } else {
            let parts: Vec<Value> = std::mem::take(&mut self.calls)
                .iter()
                .map(|(_, n, a)| call_part(n, a))
                .collect();
            self.chunk(parts, true);
        }
        if self.array {
            self.events.push(']');
        }
    }
}

/// One model as `GET /v1beta/models` lists it.
pub fn model_object(id: &str) -> Value {
    json!({"name": format!("models/{id}"), "baseModelId": id, "version": "tollgate",
        "displayName": id,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"]})
}

/// A Gemini client's key: `x-goog-api-key` or `?key=`, read as an
/// `x-api-key` (a bearer token works as it is).
pub(crate) fn gemini_key(
    mut headers: axum::http::HeaderMap,
    query: Option<&str>,
) -> axum::http::HeaderMap {
    if headers.contains_key(axum::http::header::AUTHORIZATION) || headers.contains_key("x-api-key")
    {
        return headers;
    }
    let from_query = query.and_then(|q| {
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == "key")
            .map(|(_, v)| v.to_string())
    });
    let key = headers
        .get("x-goog-api-key")
        .cloned()
        .or_else(|| from_query.and_then(|k| axum::http::HeaderValue::from_str(&k).ok()));
    if let Some(k) = key {
        headers.insert("x-api-key", k);
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge() -> Edge {
        Edge {
            dialect: super::super::Dialect::Gemini,
            native: false,
            model: "gemini-2.5-pro".into(),
            request_id: "req_g1".into(),
            custom_tools: Vec::new(),
            tool_search: false,
            json_array: false,
        }
    }

    #[test]
    fn gemini_cli_requests_read_as_chat() {
        assert_eq!(
            split_call("gemini-2.5-pro:streamGenerateContent"),
            Some(("gemini-2.5-pro", "streamGenerateContent"))
        );
        assert_eq!(split_call("nocolon"), None);
        let body = json!({
            "systemInstruction": {"parts": [{"text": "be brief"}]},
            "contents": [
                {"role": "user", "parts": [{"text": "list files"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {"dir": "."}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"files": ["a"]}}}]},
            ],
            "generationConfig": {"maxOutputTokens": 64, "temperature": 0.2},
            "tools": [{"functionDeclarations": [{"name": "ls", "parameters": {"type": "OBJECT",
                "properties": {"dir": {"type": "STRING"}}}}]}],
        });
        let c = to_chat(&body, "gemini-2.5-pro", true).unwrap();
        assert_eq!(c["model"], "gemini-2.5-pro");
        assert_eq!(c["max_tokens"], 64);
        assert_eq!(c["stream_options"]["include_usage"], true);
        let m = c["messages"].as_array().unwrap();
        assert_eq!(m[0]["role"], "system");
        assert_eq!(m[2]["tool_calls"][0]["id"], "call_ls");
        assert_eq!(
            (m[3]["role"].as_str(), m[3]["tool_call_id"].as_str()),
            (Some("tool"), Some("call_ls"))
        );
        assert_eq!(
            c["tools"][0]["function"]["parameters"]["properties"]["dir"]["type"],
            "string"
        );
        let e = to_chat(
            &json!({"contents": [{"parts": [{"text": "x"}]}], "tools": [{"googleSearch": {}}]}),
            "m",
            false,
        )
        .unwrap_err();
        assert_eq!(e.param, "tools[0].googleSearch");
        assert!(e.message.contains("natively"), "{}", e.message);
        assert_eq!(
            to_chat(&json!({"contents": []}), "m", false)
                .unwrap_err()
                .param,
            "contents"
        );
        // Gemini CLI's model router asks for JSON of a schema.
        let c = to_chat(
            &json!({"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {
                "responseMimeType": "application/json", "topK": 64,
                "thinkingConfig": {"includeThoughts": true},
                "responseJsonSchema": {"type": "OBJECT", "properties": {"score": {"type": "INTEGER"}}}}}),
            "m",
            false,
        )
        .unwrap();
        assert_eq!(c["response_format"]["type"], "json_schema");
        assert_eq!(
            c["response_format"]["json_schema"]["schema"]["properties"]["score"]["type"],
            "integer"
        );
        let e = to_chat(
            &json!({"contents": [{"parts": [{"text": "x"}]}],
                "generationConfig": {"responseMimeType": "text/x.enum"}}),
            "m",
            false,
        )
        .unwrap_err();
        assert_eq!(e.param, "generationConfig.responseMimeType");
    }

    /// Fields that change what Google bills are carried or refused, never
    /// dropped: `serviceTier` becomes the chat `service_tier`; cached
    /// content and audio or image answers cannot be translated.
    #[test]
    fn cost_fields_are_carried_or_refused() {
        let base = |extra: Value| {
            let mut b = json!({"contents": [{"parts": [{"text": "x"}]}]});
            for (k, v) in extra.as_object().unwrap() {
                b[k] = v.clone();
            }
            b
        };
        let c = to_chat(&base(json!({"serviceTier": "PRIORITY"})), "m", false).unwrap();
        assert_eq!(c["service_tier"], "priority");
        let c = to_chat(&base(json!({"serviceTier": "standard"})), "m", false).unwrap();
        assert!(c.get("service_tier").is_none());
        let e = to_chat(
            &base(json!({"cachedContent": "cachedContents/abc"})),
            "m",
            false,
        )
        .unwrap_err();
        assert_eq!(e.param, "cachedContent");
        let e = to_chat(
            &base(json!({"generationConfig": {"responseModalities": ["TEXT", "AUDIO"]}})),
            "m",
            false,
        )
        .unwrap_err();
        assert_eq!(e.param, "generationConfig.responseModalities");
        let ok = base(json!({"generationConfig": {"responseModalities": ["TEXT"]}}));
        assert!(to_chat(&ok, "m", false).is_ok());
    }

    /// A hosted tool is left out of the chat request and named (refused
    /// after the policy has spoken); its function declarations, in the same
    /// `Tool` or another, still translate; a tool field Google runs that
    /// tollgate has no policy name for is refused at once.
    #[test]
    fn hosted_tools_are_named_never_dropped() {
        let body = json!({"contents": [{"parts": [{"text": "x"}]}], "tools": [
            {"functionDeclarations": [{"name": "ls", "parameters": {"type": "OBJECT"}}]},
            {"function_declarations": [{"name": "cat"}], "codeExecution": {}},
            {"urlContext": {}},
        ]});
        let (chat, hosted) = to_chat_native(&body, "m", false).unwrap();
        let names: Vec<&str> = chat["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["ls", "cat"]);
        let hosted = hosted.expect("the hosted tool is named");
        assert_eq!(hosted.param, "tools[1].codeExecution");
        assert!(hosted.message.contains("natively"), "{}", hosted.message);
        // countTokens reads with `to_chat`: refused at once.
        assert_eq!(
            to_chat(&body, "m", false).unwrap_err().param,
            "tools[1].codeExecution"
        );
        for field in ["googleMaps", "computerUse", "retrieval"] {
            let b = json!({"contents": [{"parts": [{"text": "x"}]}], "tools": [{field: {}}]});
            let e = to_chat_native(&b, "m", false).unwrap_err();
            assert_eq!(e.param, format!("tools[0].{field}"));
        }
        let plain = json!({"contents": [{"parts": [{"text": "x"}]}],
            "tools": [{"functionDeclarations": [{"name": "ls"}]}]});
        assert!(to_chat_native(&plain, "m", false).unwrap().1.is_none());
    }

    #[test]
    fn answers_and_streams_are_gemini_shaped() {
        let chat = json!({"choices": [{"message": {"content": "hi", "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "ls", "arguments": "{\"dir\":\".\"}"}}]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2}});
        let a = from_chat(&chat, &edge());
        assert_eq!(a["candidates"][0]["content"]["parts"][0]["text"], "hi");
        assert_eq!(
            a["candidates"][0]["content"]["parts"][1]["functionCall"]["args"]["dir"],
            "."
        );
        assert_eq!(a["usageMetadata"]["totalTokenCount"], 7);
        let mut o = Out::new(&edge());
        o.text_delta(" hello");
        o.finish = Some("length".into());
        o.usage = Some((5, 1));
        o.cut_reason = Some("tenant_monthly_budget_exhausted".into());
        o.finish_events();
        let ev = o.take_events();
        let last: Value = serde_json::from_str(
            ev.trim_end()
                .rsplit("\n\n")
                .next()
                .unwrap()
                .strip_prefix("data: ")
                .unwrap(),
        )
        .unwrap();
        assert_eq!(last["candidates"][0]["finishReason"], "MAX_TOKENS");
        assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 1);
    }

    #[test]
    fn without_alt_sse_a_stream_is_one_json_array() {
        let mut e = edge();
        e.json_array = true;
        let mut o = Out::new(&e);
        o.text_delta(" hello");
        let mut body = o.take_events();
        o.text_delta(" world");
        o.finish = Some("stop".into());
        o.usage = Some((5, 2));
        o.finish_events();
        body.push_str(&o.take_events());
        let all: Vec<Value> = serde_json::from_str(&body).unwrap();
        assert_eq!(all.len(), 3, "{body}");
        assert_eq!(
            all[1]["candidates"][0]["content"]["parts"][0]["text"],
            " world"
        );
        assert_eq!(all[2]["candidates"][0]["finishReason"], "STOP");
        assert_eq!(all[2]["usageMetadata"]["totalTokenCount"], 7);
        assert!(body.starts_with("[{") && body.contains("},\r\n{") && body.ends_with("}]"));
    }
}
