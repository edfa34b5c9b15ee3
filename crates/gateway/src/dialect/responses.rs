//! The OpenAI Responses dialect (`POST /v1/responses`): a request read into
//! chat completions, a chat answer written back as a Response object, and
//! the Response object and events themselves (`Out`), built the same way
//! for a translated stream and for the end of a native one the gateway cut.
//! Stateless: `previous_response_id`, `conversation`, `background` and
//! `store: true` are refused, naming the field.

use super::responses_tools::{tools_to_chat, Left, TOOL_SEARCH};
use super::Edge;
use domain::request::InvalidField;
use serde_json::{json, Map, Value};

fn bad(param: impl Into<String>, message: impl Into<String>) -> InvalidField {
    InvalidField {
        param: param.into(),
        message: message.into(),
    }
}

/// Fields a stateless gateway cannot honour.
const STATEFUL: &[(&str, &str)] = &[
    (
        "previous_response_id",
        "responses are not stored: send the whole conversation in input",
    ),
    (
        "conversation",
        "conversations are not stored: send the whole conversation in input",
    ),
    ("background", "background responses are not supported"),
    ("prompt", "stored prompt templates are not supported"),
];

/// A Responses request read for the core: its chat completions request,
/// and what a chat provider cannot take (docs/clients.md, "Responses tools").
pub struct Read {
    pub chat: Value,
    /// The first tool or input item with no chat equivalent: refused (400,
    /// naming it) unless the model's provider serves Responses natively.
    pub untranslated: Option<InvalidField>,
    /// The client's `custom` tools, offered to chat as functions of one
    /// string `input`: their calls go back as `custom_tool_call` items.
    pub custom_tools: Vec<String>,
    /// The client executes `tool_search` (offered to chat as a function):
    /// its calls go back as `tool_search_call` items.
    pub tool_search: bool,
}

/// The chat completions request a Responses request asks for; refused when
/// any of it has no chat equivalent (the tests' strict reading).
#[cfg(test)]
pub fn to_chat(body: &Value) -> Result<Value, InvalidField> {
    let r = read(body)?;
    match r.untranslated {
        Some(e) => Err(e),
        None => Ok(r.chat),
    }
}

/// A Responses request read: malformed is refused at once; what only a
/// native provider takes is left out of the chat request and named.
pub fn read(body: &Value) -> Result<Read, InvalidField> {
    let mut left = Left::default();
    let chat = read_into(body, &mut left)?;
    Ok(Read {
        chat,
        untranslated: left.untranslated,
        custom_tools: left.custom,
        tool_search: left.tool_search,
    })
}

fn read_into(body: &Value, left: &mut Left) -> Result<Value, InvalidField> {
    let obj = body
        .as_object()
        .ok_or_else(|| bad("", "request body must be a JSON object"))?;
    for (field, why) in STATEFUL {
        if obj
            .get(*field)
            .is_some_and(|v| !v.is_null() && v != &Value::Bool(false))
        {
            return Err(bad(*field, format!("{field} is not supported: {why}")));
        }
    }
    if obj.get("store") == Some(&Value::Bool(true)) {
        return Err(bad(
            "store",
            "store: true is not supported: responses are not stored (send store: false or omit it)",
        ));
    }
    let mut chat = Map::new();
    if let Some(m) = obj.get("model") {
        chat.insert("model".into(), m.clone());
    }
    let mut messages = Vec::new();
    match obj.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(_) => return Err(bad("instructions", "instructions must be a string")),
    }
    match obj.get("input") {
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                input_item(item, i, &mut messages, left)?;
            }
        }
        _ => {
            return Err(bad(
                "input",
                "input must be a string or a non-empty array of input items",
            ))
        }
    }
    chat.insert("messages".into(), Value::Array(messages));
    match obj.get("max_output_tokens") {
        None | Some(Value::Null) => {}
        Some(v) => match v.as_i64() {
            Some(n) if (1..=1_000_000).contains(&n) => {
                chat.insert("max_tokens".into(), json!(n));
            }
            _ => {
                return Err(bad(
                    "max_output_tokens",
                    "max_output_tokens must be an integer from 1 to 1000000",
                ))
            }
        },
    }
    for f in [
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "user",
        "stream",
    ] {
        if let Some(v) = obj.get(f).filter(|v| !v.is_null()) {
            chat.insert(f.into(), v.clone());
        }
    }
    if obj.get("stream") == Some(&Value::Bool(true)) {
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(e) = obj.get("reasoning").and_then(|r| r.get("effort")) {
        chat.insert("reasoning_effort".into(), e.clone());
    }
    if let Some(tools) = obj.get("tools").filter(|v| !v.is_null()) {
        chat.insert("tools".into(), tools_to_chat(tools, left)?);
    }
    // Tools a client-run tool search loaded earlier in the conversation
    // are offered from then on, as the provider would.
    let loaded = std::mem::take(&mut left.loaded);
    if !loaded.is_empty() {
        let more = tools_to_chat(&Value::Array(loaded), left)?;
        let list = chat.entry("tools").or_insert_with(|| json!([]));
        if let Some(list) = list.as_array_mut() {
            for t in more.as_array().into_iter().flatten() {
                let name = &t["function"]["name"];
                if !list.iter().any(|x| &x["function"]["name"] == name) {
                    list.push(t.clone());
                }
            }
        }
    }
    if let Some(tc) = obj.get("tool_choice").filter(|v| !v.is_null()) {
        chat.insert("tool_choice".into(), tool_choice_to_chat(tc)?);
    }
    if let Some(format) = obj.get("text").and_then(|t| t.get("format")) {
        match format["type"].as_str() {
            Some("text") | None => {}
            Some("json_object") => {
                chat.insert("response_format".into(), json!({"type": "json_object"}));
            }
            Some("json_schema") => {
                let mut schema = format.clone();
                if let Some(o) = schema.as_object_mut() {
                    o.remove("type");
                }
                chat.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": schema}),
                );
            }
            Some(other) => {
                return Err(bad(
                    "text.format.type",
                    format!("text format {other:?} is not supported"),
                ))
            }
        }
    }
    Ok(Value::Object(chat))
}

/// One input item: a message, a function call the model made earlier, or
/// a function call's output.
fn input_item(
    item: &Value,
    i: usize,
    out: &mut Vec<Value>,
    left: &mut Left,
) -> Result<(), InvalidField> {
    let kind = item.get("type").and_then(Value::as_str);
    match kind {
        None | Some("message") => {
            let role = item.get("role").and_then(Value::as_str);
            let role = match role {
                Some(r @ ("user" | "assistant" | "system" | "developer")) => r,
                _ => {
                    return Err(bad(
                        format!("input[{i}].role"),
                        "role must be one of user, assistant, system, developer",
                    ))
                }
            };
            let content = match item.get("content") {
                Some(Value::String(s)) => Value::String(s.clone()),
                Some(Value::Array(parts)) => {
                    let mut chat_parts = Vec::new();
                    for (j, p) in parts.iter().enumerate() {
                        chat_parts.push(content_part(p, &format!("input[{i}].content[{j}]"))?);
                    }
                    if role == "assistant" {
                        // Chat assistant messages take text only.
                        Value::String(
                            chat_parts
                                .iter()
                                .filter_map(|p| p["text"].as_str())
                                .collect(),
                        )
                    } else {
                        Value::Array(chat_parts)
                    }
                }
                _ => {
                    return Err(bad(
                        format!("input[{i}].content"),
                        "content must be a string or an array of content parts",
                    ))
                }
            };
            // Most chat providers know `system`, not OpenAI's `developer`.
            let role = if role == "developer" { "system" } else { role };
            out.push(json!({"role": role, "content": content}));
        }
        Some(ty @ ("function_call" | "custom_tool_call")) => {
            let (Some(call_id), Some(name)) = (
                item.get("call_id").and_then(Value::as_str),
                item.get("name").and_then(Value::as_str),
            ) else {
                return Err(bad(
                    format!("input[{i}].call_id"),
                    "a function_call item needs call_id and name",
                ));
            };
            // A custom tool's call: the function of one string `input`
            // it was offered to chat as.
            let args = if ty == "custom_tool_call" {
                json!({"input": item.get("input").and_then(Value::as_str).unwrap_or("")})
                    .to_string()
            } else {
                item.get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or("{}")
                    .to_string()
            };
            let call = json!({"id": call_id, "type": "function",
                "function": {"name": name, "arguments": args}});
            // Consecutive calls are one assistant turn.
            match out.last_mut() {
                Some(last) if last["role"] == "assistant" && last.get("tool_calls").is_some() => {
                    last["tool_calls"].as_array_mut().expect("array").push(call);
                }
                _ => out.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
            }
        }
        Some("tool_search_call") if item["execution"] == "client" => {
            let call_id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
            let args = match item.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(v) if !v.is_null() => v.to_string(),
                _ => "{}".to_string(),
            };
            let call = json!({"id": call_id, "type": "function",
                "function": {"name": TOOL_SEARCH, "arguments": args}});
            match out.last_mut() {
                Some(last) if last["role"] == "assistant" && last.get("tool_calls").is_some() => {
                    last["tool_calls"].as_array_mut().expect("array").push(call);
                }
                _ => out.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
            }
        }
        Some("tool_search_output") if item["execution"] == "client" => {
            let call_id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
            let tools = item.get("tools").cloned().unwrap_or_else(|| json!([]));
            out.push(json!({"role": "tool", "tool_call_id": call_id,
                "content": json!({"tools": tools}).to_string()}));
            left.loaded.extend(tools.as_array().into_iter().flatten().cloned());
        }
        Some("function_call_output" | "custom_tool_call_output") => {
            let Some(call_id) = item.get("call_id").and_then(Value::as_str) else {
                return Err(bad(
                    format!("input[{i}].call_id"),
                    "a function_call_output item needs call_id",
                ));
            };
            let output = match item.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect(),
                _ => return Err(bad(format!("input[{i}].output"), "output must be a string")),
            };
            out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
        }
        // The model's earlier reasoning: nothing a chat provider can take.
        Some("reasoning") => {}
        // Items of tools chat has no equivalent of (`local_shell_call`,
        // `tool_search_call`, …): only a native provider takes them.
        Some(other) => left.untranslated(
            format!("input[{i}].type"),
            format!("input item type {other:?} has no chat equivalent: only a model whose provider serves Responses natively takes it"),
        ),
    }
    Ok(())
}

fn content_part(p: &Value, at: &str) -> Result<Value, InvalidField> {
    match p.get("type").and_then(Value::as_str) {
        Some("input_text" | "output_text" | "text" | "refusal") => {
            let text = p
                .get("text")
                .or_else(|| p.get("refusal"))
                .and_then(Value::as_str)
                .ok_or_else(|| bad(format!("{at}.text"), "text must be a string"))?;
            Ok(json!({"type": "text", "text": text}))
        }
        Some("input_image") => {
            let url = p
                .get("image_url")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(format!("{at}.image_url"), "image_url must be a string"))?;
            let mut img = json!({"url": url});
            if let Some(d) = p.get("detail") {
                img["detail"] = d.clone();
            }
            Ok(json!({"type": "image_url", "image_url": img}))
        }
        _ => Err(bad(
            format!("{at}.type"),
            "content part type must be input_text, output_text or input_image",
        )),
    }
}

fn tool_choice_to_chat(tc: &Value) -> Result<Value, InvalidField> {
    match tc {
        Value::String(s) if ["auto", "none", "required"].contains(&s.as_str()) => Ok(tc.clone()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o.get("name").and_then(Value::as_str).unwrap_or_default();
            Ok(json!({"type": "function", "function": {"name": name}}))
        }
        _ => Err(bad(
            "tool_choice",
            "tool_choice must be auto, none, required or a function",
        )),
    }
}

/// A chat completion answer as a Response object.
pub fn from_chat(chat: &Value, edge: &Edge) -> Value {
    let mut out = Out::new(edge, chat["created"].as_i64().unwrap_or(0));
    let choice = &chat["choices"][0];
    let msg = &choice["message"];
    if let Some(text) = msg["content"].as_str().filter(|t| !t.is_empty()) {
        out.text_delta(text);
    }
    for (i, call) in msg["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        out.tool_delta(i as i64, call);
    }
    out.close_items();
    out.finish = choice["finish_reason"].as_str().map(str::to_string);
    out.usage = super::usage_of(super::Dialect::Chat, chat);
    out.response(out.status())
}

/// A Response being written: its items, usage and ending, and the events
/// announcing each change (with their sequence numbers).
pub struct Out {
    id: String,
    model: String,
    created_at: i64,
    seq: u64,
    pub output: Vec<Value>,
    /// Output index of the message item still receiving text.
    open_text: Option<usize>,
    /// Chat tool-call index → output index, for calls still open.
    open_calls: Vec<(i64, usize)>,
    /// The client's custom tools, and the function arguments of their open
    /// calls by output index (written as `input` when the call closes).
    custom_tools: Vec<String>,
    custom_args: Vec<(usize, String)>,
    /// The client runs `tool_search`: the arguments of its open calls.
    tool_search: bool,
    search_args: Vec<(usize, String)>,
    pub usage: Option<(i64, i64)>,
    pub finish: Option<String>,
    /// The stream broke: the response failed.
    pub failed: Option<String>,
    /// The gateway stopped the stream: the reason code.
    pub cut_reason: Option<String>,
    events: String,
}

impl Out {
    pub fn new(edge: &Edge, created_at: i64) -> Out {
        let suffix = edge
            .request_id
            .strip_prefix("req_")
            .unwrap_or(&edge.request_id);
        Out {
            id: format!("resp_{suffix}"),
            model: edge.model.clone(),
            created_at,
            seq: 0,
            output: Vec::new(),
            open_text: None,
            open_calls: Vec::new(),
            custom_tools: edge.custom_tools.clone(),
            tool_search: edge.tool_search,
            search_args: Vec::new(),
            custom_args: Vec::new(),
            usage: None,
            finish: None,
            failed: None,
            cut_reason: None,
            events: String::new(),
        }
    }

    /// Takes up the identity and sequence of a provider's own stream (a
    /// native stream the gateway ends).
    pub fn continue_from(
        &mut self,
        id: Option<&str>,
        model: Option<&str>,
        created: i64,
        next_seq: u64,
    ) {
        if let Some(id) = id {
            self.id = id.to_string();
        }
        if let Some(m) = model {
            self.model = m.to_string();
        }
        self.created_at = created;
        self.seq = next_seq;
    }

    /// The events written since the last call.
    pub fn take_events(&mut self) -> String {
        std::mem::take(&mut self.events)
    }

    fn event(&mut self, ty: &str, mut data: Value) {
        data["type"] = json!(ty);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        self.events
            .push_str(&format!("event: {ty}\ndata: {data}\n\n"));
    }

    pub fn start(&mut self) {
        let r = self.response("in_progress");
        self.event("response.created", json!({"response": r}));
        let r = self.response("in_progress");
        self.event("response.in_progress", json!({"response": r}));
    }

    fn item_id(&self, prefix: &str) -> String {
        let base = self.id.strip_prefix("resp_").unwrap_or(&self.id);
        format!("{prefix}_{base}_{}", self.output.len())
    }

    pub fn text_delta(&mut self, text: &str) {
        let idx = match self.open_text {
            Some(i) => i,
            None => {
                let item = json!({"id": self.item_id("msg"), "type": "message", "status": "in_progress",
                    "role": "assistant", "content": []});
                self.output.push(item.clone());
                let i = self.output.len() - 1;
                self.open_text = Some(i);
                self.event(
                    "response.output_item.added",
                    json!({"output_index": i, "item": item}),
                );
                let part =
                    json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
                self.output[i]["content"] = json!([part.clone()]);
                let item_id = self.output[i]["id"].clone();
                self.event("response.content_part.added",
                    json!({"item_id": item_id, "output_index": i, "content_index": 0, "part": part}));
                i
            }
        };
        let item_id = self.output[idx]["id"].clone();
        let t = &mut self.output[idx]["content"][0]["text"];
        *t = json!(format!("{}{text}", t.as_str().unwrap_or("")));
        self.event(
            "response.output_text.delta",
            json!({"item_id": item_id, "output_index": idx,
            "content_index": 0, "delta": text, "logprobs": []}),
        );
    }

    /// A chat tool-call delta (`{index?, id?, function: {name?, arguments?}}`)
    /// at chat index `index`.
    pub fn tool_delta(&mut self, index: i64, call: &Value) {
        let pos = self
            .open_calls
            .iter()
            .find(|(c, _)| *c == index)
            .map(|(_, o)| *o);
        let idx = match pos {
            Some(o) => o,
            None => {
                self.close_text();
                let call_id = call["id"]
                    .as_str()
                    .map_or_else(|| self.item_id("call"), str::to_string);
                let name = call["function"]["name"].as_str().unwrap_or("");
                let custom = self.custom_tools.iter().any(|t| t == name);
                let search = self.tool_search && name == TOOL_SEARCH;
                let item = if search {
                    json!({"id": self.item_id("tsc"), "type": "tool_search_call",
                        "call_id": call_id, "execution": "client", "arguments": {},
                        "status": "in_progress"})
                } else if custom {
                    json!({"id": self.item_id("ctc"), "type": "custom_tool_call",
                        "call_id": call_id, "name": name, "input": ""})
                } else {
                    json!({"id": self.item_id("fc"), "type": "function_call", "status": "in_progress",
                        "call_id": call_id, "name": name, "arguments": ""})
                };
                self.output.push(item.clone());
                let o = self.output.len() - 1;
                if search {
                    self.search_args.push((o, String::new()));
                } else if custom {
                    self.custom_args.push((o, String::new()));
                }
                self.open_calls.push((index, o));
                self.event(
                    "response.output_item.added",
                    json!({"output_index": o, "item": item}),
                );
                o
            }
        };
        if let Some(args) = call["function"]["arguments"]
            .as_str()
            .filter(|a| !a.is_empty())
        {
            // A custom call's input is inside the JSON arguments: read
            // whole when the call closes.
            let buffered = self
                .custom_args
                .iter_mut()
                .chain(self.search_args.iter_mut());
            if let Some((_, buf)) = buffered.into_iter().find(|(o, _)| *o == idx) {
                buf.push_str(args);
                return;
            }
            let item_id = self.output[idx]["id"].clone();
            let a = &mut self.output[idx]["arguments"];
            *a = json!(format!("{}{args}", a.as_str().unwrap_or("")));
            self.event(
                "response.function_call_arguments.delta",
                json!({"item_id": item_id, "output_index": idx, "delta": args}),
            );
        }
    }

    fn close_text(&mut self) {
        let Some(i) = self.open_text.take() else {
            return;
        };
        let item_id = self.output[i]["id"].clone();
        let part = self.output[i]["content"][0].clone();
        self.event(
            "response.output_text.done",
            json!({"item_id": item_id, "output_index": i,
            "content_index": 0, "text": part["text"], "logprobs": []}),
        );
        self.event(
            "response.content_part.done",
            json!({"item_id": item_id, "output_index": i, "content_index": 0, "part": part}),
        );
        self.output[i]["status"] = json!("completed");
        let item = self.output[i].clone();
        self.event(
            "response.output_item.done",
            json!({"output_index": i, "item": item}),
        );
    }

    pub fn close_items(&mut self) {
        self.close_text();
        for (_, o) in std::mem::take(&mut self.open_calls) {
            let item_id = self.output[o]["id"].clone();
            if let Some(k) = self.search_args.iter().position(|(i, _)| *i == o) {
                // A tool search's arguments are an object, sent whole.
                let (_, args) = self.search_args.swap_remove(k);
                let args = serde_json::from_str::<Value>(&args)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({}));
                self.output[o]["arguments"] = args;
                self.output[o]["status"] = json!("completed");
                let item = self.output[o].clone();
                self.event(
                    "response.output_item.done",
                    json!({"output_index": o, "item": item}),
                );
                continue;
            }
            if let Some(k) = self.custom_args.iter().position(|(i, _)| *i == o) {
                let (_, args) = self.custom_args.swap_remove(k);
                let input = super::responses_tools::custom_input(&args);
                self.event(
                    "response.custom_tool_call_input.delta",
                    json!({"item_id": item_id, "output_index": o, "delta": input}),
                );
                self.event(
                    "response.custom_tool_call_input.done",
                    json!({"item_id": item_id, "output_index": o, "input": input}),
                );
                self.output[o]["input"] = json!(input);
                let item = self.output[o].clone();
                self.event(
                    "response.output_item.done",
                    json!({"output_index": o, "item": item}),
                );
                continue;
            }
            let args = self.output[o]["arguments"].clone();
            let name = self.output[o]["name"].clone();
            self.event(
                "response.function_call_arguments.done",
                json!({"item_id": item_id, "output_index": o, "arguments": args, "name": name}),
            );
            self.output[o]["status"] = json!("completed");
            let item = self.output[o].clone();
            self.event(
                "response.output_item.done",
                json!({"output_index": o, "item": item}),
            );
        }
    }

    /// `completed`, or `incomplete` when the output ran into its cap (the
    /// provider's, or the budget's), or `failed`.
    pub fn status(&self) -> &'static str {
        if self.failed.is_some() {
            "failed"
        } else if matches!(self.finish.as_deref(), Some("length" | "content_filter"))
            || self.cut_reason.is_some()
        {
            "incomplete"
        } else {
            "completed"
        }
    }

    /// The closing event: `response.completed`, `response.incomplete`
    /// (reason `max_output_tokens`) or `response.failed`.
    pub fn finish_events(&mut self) {
        self.close_items();
        let status = self.status();
        let r = self.response(status);
        self.event(&format!("response.{status}"), json!({"response": r}));
    }

    pub fn response(&self, status: &str) -> Value {
        let usage = self.usage.map(|(i, o)| {
            json!({"input_tokens": i, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": o, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": i + o})
        });
        let incomplete = (status == "incomplete").then(|| {
            let reason = if self.finish.as_deref() == Some("content_filter") {
                "content_filter"
            } else {
                "max_output_tokens"
            };
            json!({"reason": reason})
        });
        let error = self
            .failed
            .as_ref()
            .map(|m| json!({"code": "server_error", "message": m}));
        let mut r = json!({
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "model": self.model, "output": self.output,
            "usage": usage, "incomplete_details": incomplete, "error": error,
            "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
            "text": {"format": {"type": "text"}}, "store": false, "metadata": {},
        });
        if let Some(reason) = &self.cut_reason {
            r["tollgate_reason"] = json!(reason);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge() -> Edge {
        Edge {
            dialect: super::super::Dialect::Responses,
            native: false,
            model: "m".into(),
            request_id: "req_abc".into(),
            custom_tools: Vec::new(),
            tool_search: false,
            json_array: false,
        }
    }

    #[test]
    fn a_string_input_with_instructions_becomes_two_messages() {
        let c = to_chat(
            &json!({"model": "m", "input": "hi", "instructions": "be brief",
            "max_output_tokens": 50, "stream": true}),
        )
        .unwrap();
        assert_eq!(
            c["messages"][0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(c["messages"][1], json!({"role": "user", "content": "hi"}));
        assert_eq!(c["max_tokens"], 50);
        assert_eq!(c["stream_options"]["include_usage"], true);
        assert!(domain::request::validate(domain::request::Endpoint::ChatCompletions, &c).is_ok());
    }

    #[test]
    fn function_calls_and_outputs_become_tool_messages() {
        let c = to_chat(&json!({"model": "m", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {"type": "function_call", "call_id": "c1", "name": "get", "arguments": "{\"q\":1}"},
            {"type": "function_call", "call_id": "c2", "name": "get", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        ], "tools": [{"type": "function", "name": "get", "parameters": {"type": "object"}}],
           "tool_choice": {"type": "function", "name": "get"}}))
        .unwrap();
        let m = c["messages"].as_array().unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(
            m[0]["content"][0],
            json!({"type": "text", "text": "weather?"})
        );
        assert_eq!(m[1]["tool_calls"].as_array().unwrap().len(), 2);
        assert_eq!(m[1]["tool_calls"][0]["function"]["arguments"], "{\"q\":1}");
        assert_eq!(
            m[2],
            json!({"role": "tool", "tool_call_id": "c1", "content": "sunny"})
        );
        assert_eq!(c["tools"][0]["function"]["name"], "get");
        assert_eq!(c["tool_choice"]["function"]["name"], "get");
    }

    #[test]
    fn stateful_and_unsupported_fields_are_refused_by_name() {
        for (body, param) in [
            (
                json!({"model": "m", "input": "x", "previous_response_id": "resp_1"}),
                "previous_response_id",
            ),
            (json!({"model": "m", "input": "x", "store": true}), "store"),
            (
                json!({"model": "m", "input": "x", "background": true}),
                "background",
            ),
            (json!({"model": "m"}), "input"),
            (
                json!({"model": "m", "input": "x", "max_output_tokens": 0}),
                "max_output_tokens",
            ),
            (
                json!({"model": "m", "input": [{"role": "boss", "content": "x"}]}),
                "input[0].role",
            ),
            (
                json!({"model": "m", "input": "x", "tools": [{"type": "teleport"}]}),
                "tools[0].type",
            ),
            (
                json!({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}),
                "input[0].type",
            ),
        ] {
            assert_eq!(to_chat(&body).unwrap_err().param, param, "{body}");
        }
        assert!(to_chat(&json!({"model": "m", "input": "x", "store": false})).is_ok());
        // Codex's request shape: a namespace of functions, a hosted tool,
        // developer messages. The hosted tool is named: refused unless the
        // provider serves Responses natively.
        let r = read(&json!({"model": "m", "input": [{"type": "message", "role": "developer",
            "content": [{"type": "input_text", "text": "rules"}]}], "tools": [
            {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "inner", "parameters": {}}]},
            {"type": "web_search", "external_web_access": false},
            {"type": "function", "name": "outer", "parameters": {}}]}))
        .unwrap();
        assert_eq!(r.untranslated.unwrap().param, "tools[1].type");
        let c = r.chat;
        let names: Vec<&str> = c["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["inner", "outer"]);
        assert_eq!(c["messages"][0]["role"], "system");
    }

    #[test]
    fn custom_tool_calls_go_to_chat_as_functions_and_come_back_as_custom_calls() {
        let body = json!({"model": "m", "input": [
            {"role": "user", "content": "patch it"},
            {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin"},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"},
        ], "tools": [{"type": "custom", "name": "apply_patch"}, {"type": "tool_search"}]});
        let r = read(&body).unwrap();
        assert_eq!(r.custom_tools, ["apply_patch"]);
        assert_eq!(r.untranslated.as_ref().unwrap().param, "tools[1].type");
        let m = &r.chat["messages"];
        assert_eq!(
            m[1]["tool_calls"][0]["function"]["arguments"],
            json!({"input": "*** Begin"}).to_string()
        );
        assert_eq!(
            (m[2]["role"].as_str(), m[2]["content"].as_str()),
            (Some("tool"), Some("done"))
        );
        // Strict for a chat provider.
        assert_eq!(to_chat(&body).unwrap_err().param, "tools[1].type");
        // The chat call of a custom tool is a custom_tool_call item.
        let mut e = edge();
        e.custom_tools = vec!["apply_patch".into()];
        let chat = json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "apply_patch",
             "arguments": "{\"input\":\"*** Begin Patch\"}"}}]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4}});
        let out = from_chat(&chat, &e);
        let item = &out["output"][0];
        assert_eq!(item["type"], "custom_tool_call", "{out}");
        assert_eq!(item["input"], "*** Begin Patch");
        assert_eq!(item["call_id"], "call_9");
        assert!(item.get("arguments").is_none());
    }

    #[test]
    fn a_chat_answer_becomes_a_response_with_usage_and_items() {
        let chat = json!({"created": 5, "choices": [{"message": {"content": "hello",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get", "arguments": "{}"}}]},
            "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3, "completion_tokens": 4}});
        let r = from_chat(&chat, &edge());
        assert_eq!(r["id"], "resp_abc");
        assert_eq!(r["status"], "completed");
        assert_eq!(r["output"][0]["content"][0]["text"], "hello");
        assert_eq!(r["output"][1]["type"], "function_call");
        assert_eq!(r["output"][1]["call_id"], "call_1");
        assert_eq!(r["usage"]["input_tokens"], 3);
        assert_eq!(r["usage"]["output_tokens"], 4);
        let cut = json!({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}]});
        let r = from_chat(&cut, &edge());
        assert_eq!(r["status"], "incomplete");
        assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
    }

    #[test]
    fn events_are_numbered_and_items_closed_before_the_end() {
        let mut o = Out::new(&edge(), 1);
        o.start();
        o.text_delta("he");
        o.text_delta("llo");
        o.finish = Some("length".into());
        o.usage = Some((2, 2));
        o.finish_events();
        let ev = o.take_events();
        let types: Vec<&str> = ev
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(
            types,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.incomplete"
            ]
        );
        let last: Value = serde_json::from_str(
            ev.lines()
                .rev()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(last["sequence_number"], 9);
        assert_eq!(last["response"]["output"][0]["content"][0]["text"], "hello");
        assert_eq!(last["response"]["usage"]["total_tokens"], 4);
    }

    #[test]
    fn codexs_client_tool_search_round_trips_through_chat() {
        let body = json!({"model": "m", "input": [
            {"role": "user", "content": "find a tool"},
            {"type": "tool_search_call", "call_id": "ts_1", "execution": "client",
             "arguments": {"query": "calendar"}, "status": "completed"},
            {"type": "tool_search_output", "call_id": "ts_1", "execution": "client",
             "status": "completed", "tools": [{"type": "function", "name": "cal_add",
             "parameters": {"type": "object"}}]}],
            "tools": [{"type": "tool_search", "execution": "client",
             "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}]});
        let r = read(&body).unwrap();
        assert!(r.untranslated.is_none());
        assert!(r.tool_search);
        let names: Vec<&str> = r.chat["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["tool_search", "cal_add"]);
        let m = r.chat["messages"].as_array().unwrap();
        assert_eq!(m[1]["tool_calls"][0]["function"]["name"], "tool_search");
        assert_eq!(
            m[1]["tool_calls"][0]["function"]["arguments"],
            r#"{"query":"calendar"}"#
        );
        assert_eq!(m[2]["role"], "tool");
        assert!(m[2]["content"].as_str().unwrap().contains("cal_add"));
        // The model's call comes back as a tool_search_call item, its
        // arguments an object.
        let mut e = edge();
        e.tool_search = true;
        let chat = json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_5", "type": "function", "function": {"name": "tool_search",
             "arguments": "{\"query\":\"mail\"}"}}]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4}});
        let out = from_chat(&chat, &e);
        let item = &out["output"][0];
        assert_eq!(item["type"], "tool_search_call", "{out}");
        assert_eq!(item["execution"], "client");
        assert_eq!(item["call_id"], "call_5");
        assert_eq!(item["arguments"], json!({"query": "mail"}));
        assert_eq!(item["status"], "completed");
        // A server-side tool search stays the provider's.
        let body = json!({"model": "m", "input": "x", "tools": [{"type": "tool_search"}]});
        assert_eq!(
            read(&body).unwrap().untranslated.unwrap().param,
            "tools[0].type"
        );
    }
}
