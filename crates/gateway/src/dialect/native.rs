//! What the meter reads from a provider's native Responses or Messages
//! stream (pass-through): the output text of each event, the provider's
//! usage, and enough of the stream's identity to end it the dialect's own
//! clean way when the gateway cuts it. Events that repeat text already
//! counted (`*.done`, `response.completed`, `content_block_stop`) count
//! nothing; an event the reader does not know is counted whole, as text:
//! better to overcount than to let output through unmetered.

use super::{messages, responses, Dialect, Edge};
use crate::sse::data_of;
use bytes::Bytes;
use domain::tokens::TokenizerFamily;
use domain::usage::{Count, RawUsage, Reported};
use serde_json::Value;

/// The provider's usage object as the settle bills it (`Reported`, read
/// leniently so the sanity bound sees an absurd report): chat's
/// `prompt_tokens` / `completion_tokens`, or the `input_tokens` /
/// `output_tokens` of Responses and Messages (Anthropic's cached input
/// counted as input).
pub fn reported(dialect: Dialect, u: Value) -> Reported {
    match dialect {
        Dialect::Chat | Dialect::Gemini => Reported::from_json(u),
        Dialect::Responses => Reported {
            input: Count::of(u.get("input_tokens")),
            output: Count::of(u.get("output_tokens")),
            raw: u,
            sent: None,
        },
        Dialect::Messages => Reported {
            input: [
                "input_tokens",
                "cache_creation_input_tokens",
                "cache_read_input_tokens",
            ]
            .iter()
            .map(|k| Count::of(u.get(*k)))
            .fold(Count::Missing, add_counts),
            output: Count::of(u.get("output_tokens")),
            raw: u,
            sent: None,
        },
    }
}

/// Two counts added: malformed wins, missing is nothing.
fn add_counts(a: Count, b: Count) -> Count {
    match (a, b) {
        (Count::Malformed, _) | (_, Count::Malformed) => Count::Malformed,
        (Count::Missing, x) | (x, Count::Missing) => x,
        (Count::Number(x), Count::Number(y)) => Count::Number(x.saturating_add(y)),
    }
}

/// The `usage` of a whole answer, read without building the rest of it.
#[derive(serde::Deserialize)]
pub struct UsageOnly {
    #[serde(default)]
    pub usage: Option<Value>,
    /// The tier the provider served the request at (OpenAI's answers carry
    /// it beside the usage, Anthropic's inside it).
    #[serde(default)]
    pub service_tier: Option<String>,
    /// A Responses answer's output items, their types only: its hosted
    /// tools' calls (`web_search_call`) are billed by the call.
    #[serde(default)]
    pub output: Option<Vec<ItemType>>,
}

/// An output item's type, the rest skipped.
#[derive(serde::Deserialize)]
pub struct ItemType {
    #[serde(rename = "type", default)]
    pub ty: Option<String>,
}

/// The provider's usage in a whole answer in `dialect`, if it sent one.
/// A Responses answer's `web_search_call` items are counted into it as
/// `server_tool_use.web_search_requests` (Anthropic's name; OpenAI reports
/// the calls only as items), which the price sheet bills at the fee.
pub fn answer_usage(dialect: Dialect, body: &[u8]) -> Option<Reported> {
    if dialect != Dialect::Responses {
        // The usage and the tier found without parsing the content; a body
        // the scan cannot read plainly is parsed below.
        if let Some(u) = scanned_usage(body) {
            return u.map(|(u, sent)| reported(dialect, u).with_sent(sent));
        }
    }
    let UsageOnly {
        usage,
        service_tier,
        output,
    } = serde_json::from_slice::<UsageOnly>(body).ok()?;
    let usage = usage?;
    // The object as sent, before the tier and the searches go in.
    let sent = usage.is_object().then(|| RawUsage::of(&usage));
    let mut u = with_served_tier(usage, service_tier.as_deref());
    if dialect == Dialect::Responses {
        let searches = output.map_or(0, |items| {
            items
                .iter()
                .filter(|i| i.ty.as_deref() == Some(WEB_SEARCH_CALL))
                .count()
        });
        with_search_calls(&mut u, searches);
    }
    u.is_object().then(|| reported(dialect, u).with_sent(sent))
}

/// [`answer_usage`] of an answer without output items to count, by
/// `domain::json_scan`: `Some(None)` for an answer without a usage object,
/// `None` when the answer must be parsed instead (the scan could not read
/// it, or a member is not what [`UsageOnly`] takes). With the usage, its
/// text as the provider sent it: the scanned bytes, copied (they parsed, so
/// they are JSON), not the value serialised again.
fn scanned_usage(body: &[u8]) -> Option<Option<(Value, Option<RawUsage>)>> {
    let [usage, tier, output] =
        domain::json_scan::top_level(body, ["usage", "service_tier", "output"])?;
    if output.is_some() {
        // `UsageOnly` reads output items: the parser decides, as before.
        return None;
    }
    let tier: Option<String> = match tier {
        Some(t) => serde_json::from_slice(t).ok()?,
        None => None,
    };
    let (usage, text): (Option<Value>, &[u8]) = match usage {
        Some(u) => (serde_json::from_slice(u).ok()?, u),
        None => (None, &[]),
    };
    Some(usage.filter(Value::is_object).map(|u| {
        (
            with_served_tier(u, tier.as_deref()),
            RawUsage::from_parsed(text),
        )
    }))
}

/// A Responses output item of a hosted web search.
const WEB_SEARCH_CALL: &str = "web_search_call";

/// A Responses usage with the answer's `web_search_call` items counted
/// into it as `server_tool_use.web_search_requests` (where it has no such
/// count already): whole answers and streams alike.
fn with_search_calls(usage: &mut Value, searches: usize) {
    if let (true, Some(o)) = (searches > 0, usage.as_object_mut()) {
        o.entry("server_tool_use")
            .or_insert_with(|| serde_json::json!({"web_search_requests": searches}));
    }
}

/// The usage with the answer's served tier in it (`service_tier`), where
/// the provider sent it beside the usage: the price sheet prices the tier
/// served, which can differ from the one asked
/// (`domain::usage::Breakdown::read`).
pub fn with_served_tier(mut usage: Value, tier: Option<&str>) -> Value {
    if let (Some(t), Some(u)) = (tier, usage.as_object_mut()) {
        u.entry("service_tier")
            .or_insert_with(|| Value::String(t.to_string()));
    }
    usage
}

/// What the meter learns of a native stream as it reads it.
#[derive(Default)]
pub struct State {
    id: Option<String>,
    model: Option<String>,
    created_at: i64,
    next_seq: u64,
    /// Messages: the usage of `message_start` (the input; the output comes
    /// in `message_delta`, the provider's usage only then).
    start_usage: Option<serde_json::Map<String, Value>>,
    open_block: Option<usize>,
    /// Responses: the response's output items as they were built.
    output: Vec<Value>,
    /// The stream's last event was read (`response.completed`,
    /// `.incomplete` or `.failed`; `message_stop`).
    pub ended: bool,
}

const RESPONSES_SILENT: &[&str] = &[
    "response.created",
    "response.in_progress",
    "response.queued",
    "response.output_item.added",
    "response.output_item.done",
    "response.content_part.added",
    "response.content_part.done",
    "response.output_text.done",
    "response.output_text.annotation.added",
    "response.web_search_call.in_progress",
    "response.web_search_call.searching",
    "response.web_search_call.completed",
    "response.function_call_arguments.done",
    "response.custom_tool_call_input.done",
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.done",
    "response.reasoning_text.done",
    "response.refusal.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
];

const MESSAGES_SILENT: &[&str] = &[
    "message_start",
    "content_block_start",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
];

/// Output tokens in one native event; the provider's usage is set when the
/// event carries the final count.
pub fn read_event(
    dialect: Dialect,
    ev: &[u8],
    family: TokenizerFamily,
    st: &mut State,
    usage: &mut Option<Reported>,
) -> i64 {
    let Some(data) = data_of(ev) else { return 0 };
    if data == b"[DONE]" {
        return 0;
    }
    let single = ev.windows(5).filter(|w| *w == b"data:").count() == 1;
    let Some(v) = serde_json::from_slice::<Value>(data)
        .ok()
        .filter(|_| single)
    else {
        return family.count(&String::from_utf8_lossy(ev)) as i64;
    };
    let ty = v["type"].as_str().unwrap_or("");
    let text = match dialect {
        Dialect::Responses => responses_event(ty, &v, st, usage),
        _ => messages_event(ty, &v, st, usage),
    };
    match text {
        Some(t) => family.count(t) as i64,
        None => family.count(&String::from_utf8_lossy(ev)) as i64,
    }
}

/// The generated text of a Responses event: `Some("")` for an event that
/// generates nothing, None for one not known.
fn responses_event<'a>(
    ty: &str,
    v: &'a Value,
    st: &mut State,
    usage: &mut Option<Reported>,
) -> Option<&'a str> {
    if let Some(n) = v["sequence_number"].as_u64() {
        st.next_seq = n + 1;
    }
    match ty {
        "response.created" => {
            let r = &v["response"];
            st.id = r["id"].as_str().map(str::to_string);
            st.model = r["model"].as_str().map(str::to_string);
            st.created_at = r["created_at"].as_i64().unwrap_or(0);
        }
        "response.output_item.added" | "response.output_item.done" => {
            let i = v["output_index"].as_u64().unwrap_or(0) as usize;
            if st.output.len() <= i {
                st.output.resize(i + 1, Value::Null);
            }
            st.output[i] = v["item"].clone();
        }
        "response.completed" | "response.incomplete" | "response.failed" => {
            st.ended = true;
            let r = &v["response"];
            if let Some(u) = r["usage"].as_object() {
                // The served tier and the searches run, as for a whole
                // answer: the final response's output items, else the
                // items the stream built.
                let sent = RawUsage::of(&r["usage"]);
                let mut u = with_served_tier(Value::Object(u.clone()), r["service_tier"].as_str());
                let items = match r["output"].as_array() {
                    Some(items) if !items.is_empty() => items.as_slice(),
                    _ => st.output.as_slice(),
                };
                let searches = items
                    .iter()
                    .filter(|i| i["type"] == WEB_SEARCH_CALL)
                    .count();
                with_search_calls(&mut u, searches);
                *usage = Some(reported(Dialect::Responses, u).with_sent(Some(sent)));
            }
        }
        _ => {}
    }
    if RESPONSES_SILENT.contains(&ty) {
        return Some("");
    }
    match ty {
        "response.output_text.delta"
        | "response.refusal.delta"
        | "response.function_call_arguments.delta"
        | "response.custom_tool_call_input.delta"
        | "response.reasoning_text.delta"
        | "response.reasoning_summary_text.delta" => {
            let d = v["delta"].as_str();
            if ty == "response.output_text.delta" {
                add_text(st, v, d.unwrap_or(""));
            } else if ty == "response.function_call_arguments.delta" {
                let i = v["output_index"].as_u64().unwrap_or(0) as usize;
                if let Some(item) = st.output.get_mut(i) {
                    let a = format!(
                        "{}{}",
                        item["arguments"].as_str().unwrap_or(""),
                        d.unwrap_or("")
                    );
                    item["arguments"] = Value::String(a);
                }
            }
            d
        }
        _ => None,
    }
}

/// Keeps the text an item received, for the response a cut ends with.
fn add_text(st: &mut State, v: &Value, d: &str) {
    let i = v["output_index"].as_u64().unwrap_or(0) as usize;
    let Some(item) = st.output.get_mut(i) else {
        return;
    };
    if !item["content"].is_array() {
        item["content"] = serde_json::json!([]);
    }
    let c = item["content"].as_array_mut().expect("array");
    let j = v["content_index"].as_u64().unwrap_or(0) as usize;
    while c.len() <= j {
        c.push(serde_json::json!({"type": "output_text", "text": "", "annotations": []}));
    }
    let t = format!("{}{d}", c[j]["text"].as_str().unwrap_or(""));
    c[j]["text"] = Value::String(t);
}

fn messages_event<'a>(
    ty: &str,
    v: &'a Value,
    st: &mut State,
    usage: &mut Option<Reported>,
) -> Option<&'a str> {
    match ty {
        "message_start" => {
            st.start_usage = v["message"]["usage"].as_object().cloned();
            st.id = v["message"]["id"].as_str().map(str::to_string);
        }
        "content_block_start" => st.open_block = v["index"].as_u64().map(|i| i as usize),
        "content_block_stop" => st.open_block = None,
        "message_stop" => st.ended = true,
        "message_delta" => {
            // The final count: message_start's usage (the input) with the
            // delta's own fields over it. That merged object is also what
            // the ledger keeps as the usage sent (`raw` as is: nothing of
            // the gateway's is merged into a Messages usage; Anthropic
            // sends its tier inside it).
            if let Some(d) = v["usage"]
                .as_object()
                .filter(|d| d.contains_key("output_tokens"))
            {
                let mut u = st.start_usage.clone().unwrap_or_default();
                u.extend(d.iter().map(|(k, x)| (k.clone(), x.clone())));
                *usage = Some(reported(Dialect::Messages, Value::Object(u)));
            }
        }
        _ => {}
    }
    if MESSAGES_SILENT.contains(&ty) {
        return Some("");
    }
    if ty != "content_block_delta" {
        return None;
    }
    let d = &v["delta"];
    match d["type"].as_str() {
        Some("text_delta") => d["text"].as_str(),
        Some("input_json_delta") => d["partial_json"].as_str(),
        Some("thinking_delta") => d["thinking"].as_str(),
        // An opaque signature of the thinking already counted.
        Some("signature_delta") => Some(""),
        _ => None,
    }
}

/// The clean ending of a native stream the gateway cut: Responses
/// `response.incomplete` (with the items so far closed), Messages the open
/// block closed, `message_delta` (`max_tokens`) and `message_stop`.
pub fn cut_events(
    dialect: Dialect,
    st: &State,
    edge: &Edge,
    reason: &str,
    usage: (i64, i64),
) -> Bytes {
    let text = match dialect {
        Dialect::Messages => {
            let mut o = messages::Out::new(edge, usage.0);
            o.continue_from(st.open_block);
            o.usage = Some(usage);
            o.cut_reason = Some(reason.to_string());
            o.finish_events();
            o.take_events()
        }
        _ => {
            let mut o = responses::Out::new(edge, st.created_at);
            o.continue_from(
                st.id.as_deref(),
                st.model.as_deref(),
                st.created_at,
                st.next_seq,
            );
            o.output = st.output.iter().filter(|i| !i.is_null()).cloned().collect();
            for item in &mut o.output {
                item["status"] = Value::String("incomplete".into());
            }
            o.usage = Some(usage);
            o.cut_reason = Some(reason.to_string());
            o.finish_events();
            o.take_events()
        }
    };
    Bytes::from(text)
}

/// The ending of a native stream whose provider broke off.
pub fn broken_events(dialect: Dialect, st: &State, edge: &Edge, msg: &str) -> Bytes {
    let text = match dialect {
        Dialect::Messages => {
            let mut o = messages::Out::new(edge, 0);
            o.continue_from(None);
            o.failed = Some(msg.into());
            o.finish_events();
            o.take_events()
        }
        _ => {
            let mut o = responses::Out::new(edge, st.created_at);
            o.continue_from(
                st.id.as_deref(),
                st.model.as_deref(),
                st.created_at,
                st.next_seq,
            );
            o.failed = Some(msg.into());
            o.finish_events();
            o.take_events()
        }
    };
    Bytes::from(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(ty: &str, v: Value) -> Vec<u8> {
        let mut v = v;
        v["type"] = json!(ty);
        format!("event: {ty}\ndata: {v}\n\n").into_bytes()
    }

    #[test]
    fn whole_answers_give_their_usage_in_every_dialect() {
        let read = |d: Dialect, s: &str| {
            answer_usage(d, s.as_bytes()).map(|r| match (r.input, r.output) {
                (Count::Number(i), Count::Number(o)) => (i as i64, o as i64),
                other => panic!("{other:?}"),
            })
        };
        assert_eq!(
            read(
                Dialect::Chat,
                r#"{"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#
            ),
            Some((3, 4))
        );
        assert_eq!(
            read(
                Dialect::Responses,
                r#"{"usage":{"input_tokens":3,"input_tokens_details":{"cached_tokens":1},"output_tokens":4}}"#
            ),
            Some((3, 4))
        );
        assert_eq!(
            read(
                Dialect::Messages,
                r#"{"usage":{"input_tokens":3,"cache_read_input_tokens":10,"cache_creation_input_tokens":null,"output_tokens":4}}"#
            ),
            Some((13, 4))
        );
        // An absurd count is kept for the sanity bound, not dropped.
        let r = answer_usage(
            Dialect::Messages,
            br#"{"usage":{"input_tokens":"lots","output_tokens":4}}"#,
        )
        .unwrap();
        assert_eq!(r.input, Count::Malformed);
        assert_eq!(read(Dialect::Chat, r#"{"id":"x"}"#), None);
    }

    #[test]
    fn the_usage_as_sent_is_kept_without_what_the_gateway_merges() {
        // The scan: the member's bytes, spacing and all; the served tier
        // beside the usage goes into `raw` (priced), not into the text.
        let body = br#"{"id":"x","usage": {"prompt_tokens": 3, "completion_tokens":4},"service_tier":"flex"}"#;
        let mut r = answer_usage(Dialect::Chat, body).unwrap();
        assert_eq!(r.raw["service_tier"], "flex");
        assert_eq!(
            r.take_sent().as_str(),
            r#"{"prompt_tokens": 3, "completion_tokens":4}"#
        );
        // The parser (Responses: output items): the object serialised once,
        // before the tier and the search calls are counted into it.
        let body = br#"{"usage":{"input_tokens":3,"output_tokens":4},"service_tier":"priority",
            "output":[{"type":"web_search_call"}]}"#;
        let mut r = answer_usage(Dialect::Responses, body).unwrap();
        assert_eq!(r.raw["server_tool_use"]["web_search_requests"], 1);
        assert_eq!(
            r.take_sent().as_str(),
            r#"{"input_tokens":3,"output_tokens":4}"#
        );
        // A stream's final event: Messages' start usage with the delta's
        // fields over it, serialised at the settle.
        let (mut st, mut u) = (State::default(), None);
        let f = TokenizerFamily::O200k;
        let start = ev(
            "message_start",
            json!({"message": {"id": "m", "usage": {"input_tokens": 12, "output_tokens": 1}}}),
        );
        read_event(Dialect::Messages, &start, f, &mut st, &mut u);
        let delta = ev("message_delta", json!({"usage": {"output_tokens": 9}}));
        read_event(Dialect::Messages, &delta, f, &mut st, &mut u);
        let sent: Value = serde_json::from_str(u.unwrap().take_sent().as_str()).unwrap();
        assert_eq!(sent, json!({"input_tokens": 12, "output_tokens": 9}));
        // Responses' completed event: the usage, not the tier beside it.
        let (mut st, mut u) = (State::default(), None);
        let done = ev(
            "response.completed",
            json!({"response": {"service_tier": "flex", "output": [],
                "usage": {"input_tokens": 2, "output_tokens": 5}}}),
        );
        read_event(Dialect::Responses, &done, f, &mut st, &mut u);
        let mut u = u.unwrap();
        assert_eq!(u.raw["service_tier"], "flex");
        assert_eq!(
            u.take_sent().as_str(),
            r#"{"input_tokens":2,"output_tokens":5}"#
        );
    }

    #[test]
    fn messages_deltas_count_and_usage_comes_at_the_end() {
        let f = TokenizerFamily::O200k;
        let (mut st, mut u) = (State::default(), None);
        let start = ev(
            "message_start",
            json!({"message": {"id": "msg_1", "usage": {"input_tokens": 12, "output_tokens": 1}}}),
        );
        assert_eq!(read_event(Dialect::Messages, &start, f, &mut st, &mut u), 0);
        assert_eq!(u, None, "message_start's output is not the final count");
        let b = ev(
            "content_block_start",
            json!({"index": 0, "content_block": {"type": "text", "text": ""}}),
        );
        read_event(Dialect::Messages, &b, f, &mut st, &mut u);
        let d = ev(
            "content_block_delta",
            json!({"index": 0, "delta": {"type": "text_delta", "text": " hello hello"}}),
        );
        assert_eq!(read_event(Dialect::Messages, &d, f, &mut st, &mut u), 2);
        let t = ev(
            "content_block_delta",
            json!({"index": 0, "delta": {"type": "input_json_delta", "partial_json": " hello"}}),
        );
        assert_eq!(read_event(Dialect::Messages, &t, f, &mut st, &mut u), 1);
        let odd = ev(
            "content_block_delta",
            json!({"index": 0, "delta": {"type": "new_delta", "x": " hello"}}),
        );
        assert!(
            read_event(Dialect::Messages, &odd, f, &mut st, &mut u) > 1,
            "unknown deltas count whole"
        );
        let md = ev(
            "message_delta",
            json!({"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
        );
        assert_eq!(read_event(Dialect::Messages, &md, f, &mut st, &mut u), 0);
        let u = u.unwrap();
        assert_eq!((u.input, u.output), (Count::Number(12), Count::Number(3)));
    }

    #[test]
    fn responses_deltas_count_and_done_events_do_not() {
        let f = TokenizerFamily::O200k;
        let (mut st, mut u) = (State::default(), None);
        let c = ev(
            "response.created",
            json!({"sequence_number": 0, "response": {"id": "resp_9", "model": "m", "created_at": 3}}),
        );
        read_event(Dialect::Responses, &c, f, &mut st, &mut u);
        let a = ev(
            "response.output_item.added",
            json!({"sequence_number": 1, "output_index": 0, "item": {"type": "message", "content": []}}),
        );
        read_event(Dialect::Responses, &a, f, &mut st, &mut u);
        let d = ev(
            "response.output_text.delta",
            json!({"sequence_number": 2, "output_index": 0, "content_index": 0, "delta": " hello"}),
        );
        assert_eq!(read_event(Dialect::Responses, &d, f, &mut st, &mut u), 1);
        let done = ev(
            "response.output_text.done",
            json!({"sequence_number": 3, "text": " hello hello hello"}),
        );
        assert_eq!(read_event(Dialect::Responses, &done, f, &mut st, &mut u), 0);
        let odd = ev("response.future_thing.delta", json!({"delta": " hello"}));
        assert!(read_event(Dialect::Responses, &odd, f, &mut st, &mut u) > 1);
        let edge = Edge {
            dialect: Dialect::Responses,
            native: true,
            model: "x".into(),
            request_id: "req_2".into(),
            custom_tools: Vec::new(),
            tool_search: false,
            json_array: false,
        };
        let cut = String::from_utf8(
            cut_events(
                Dialect::Responses,
                &st,
                &edge,
                "tenant_monthly_budget_exhausted",
                (4, 1),
            )
            .to_vec(),
        )
        .unwrap();
        let last = cut.trim_end().rsplit("\n\n").next().unwrap();
        assert!(last.starts_with("event: response.incomplete\n"), "{cut}");
        let data: Value = serde_json::from_str(last.split_once("data: ").unwrap().1).unwrap();
        assert_eq!(data["response"]["id"], "resp_9");
        assert_eq!(data["sequence_number"], 4);
        assert_eq!(
            data["response"]["output"][0]["content"][0]["text"],
            " hello"
        );
        assert_eq!(
            data["response"]["incomplete_details"]["reason"],
            "max_output_tokens"
        );
        let c = ev(
            "response.completed",
            json!({"response": {"usage": {"input_tokens": 5, "output_tokens": 2}}}),
        );
        read_event(Dialect::Responses, &c, f, &mut st, &mut u);
        let u = u.unwrap();
        assert_eq!((u.input, u.output), (Count::Number(5), Count::Number(2)));
    }

    /// A stream's searches and served tier reach the usage the price sheet
    /// reads, as a whole answer's do: from the final response's output, or
    /// from the items the stream built when the final response has none.
    #[test]
    fn a_responses_streams_searches_and_tier_are_billed() {
        let f = TokenizerFamily::O200k;
        let search = json!({"type": "web_search_call", "id": "ws_1", "status": "completed"});
        let message = json!({"type": "message", "content": []});
        let usage = json!({"input_tokens": 5, "output_tokens": 2});
        for final_output in [json!([search, search, message]), json!([])] {
            let (mut st, mut u) = (State::default(), None);
            for (i, item) in [&search, &search, &message].into_iter().enumerate() {
                let e = ev(
                    "response.output_item.done",
                    json!({"output_index": i, "item": item}),
                );
                assert_eq!(read_event(Dialect::Responses, &e, f, &mut st, &mut u), 0);
            }
            let phase = ev(
                "response.web_search_call.searching",
                json!({"item_id": "ws_1"}),
            );
            assert_eq!(
                read_event(Dialect::Responses, &phase, f, &mut st, &mut u),
                0
            );
            let c = ev(
                "response.completed",
                json!({"response": {"usage": usage, "service_tier": "priority",
                    "output": final_output}}),
            );
            read_event(Dialect::Responses, &c, f, &mut st, &mut u);
            let b = domain::usage::Breakdown::read(&u.unwrap().raw);
            assert_eq!(b.web_search_calls, 2, "{final_output}");
            assert_eq!(b.served_tier.as_deref(), Some("priority"));
        }
    }
}
