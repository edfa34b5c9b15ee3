//! Validation of OpenAI-style request bodies before anything is held or sent.
//! Errors name the offending field (OpenAI's `param`).

use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    ChatCompletions,
    Completions,
    Embeddings,
}

impl Endpoint {
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat/completions",
            Endpoint::Completions => "completions",
            Endpoint::Embeddings => "embeddings",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidField {
    pub param: String,
    pub message: String,
}

impl InvalidField {
    fn new(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            param: param.into(),
            message: message.into(),
        }
    }
}

/// What the gateway needs to know about a valid request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSummary {
    pub model: String,
    pub stream: bool,
    /// The client itself asked for `stream_options.include_usage`.
    pub client_wants_usage: bool,
    /// `max_completion_tokens` or `max_tokens`, when given.
    pub max_output: Option<i64>,
    /// Completions generated: `max(n, best_of)` per prompt, times the number
    /// of prompts of a legacy completion; 1 when absent.
    pub choices: i64,
}

/// Keys that would let a client steer the gateway to another upstream or
/// credential. Refused anywhere in the body, at any depth.
const FORBIDDEN_KEYS: &[&str] = &[
    "api_base",
    "base_url",
    "api_url",
    "upstream_url",
    "upstream_base_url",
    "endpoint_url",
    "api_key",
    "api_version",
    "custom_llm_provider",
    "litellm_params",
    "extra_headers",
];

const CHAT_ROLES: &[&str] = &[
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

pub fn validate(endpoint: Endpoint, body: &Value) -> Result<RequestSummary, InvalidField> {
    let obj = body
        .as_object()
        .ok_or_else(|| InvalidField::new("", "request body must be a JSON object"))?;
    reject_upstream_keys(obj)?;
    let model = match obj.get("model") {
        Some(Value::String(m)) if !m.trim().is_empty() && m.len() <= 256 => m.clone(),
        _ => {
            return Err(InvalidField::new(
                "model",
                "model must be a non-empty string",
            ))
        }
    };
    match endpoint {
        Endpoint::ChatCompletions => validate_messages(obj)?,
        Endpoint::Completions => {
            require_input(obj, "prompt")?;
        }
        Endpoint::Embeddings => {
            require_input(obj, "input")?;
            if obj.get("stream").is_some_and(|s| s != &Value::Bool(false)) {
                return Err(InvalidField::new("stream", "embeddings cannot be streamed"));
            }
        }
    }
    let stream = match obj.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        _ => return Err(InvalidField::new("stream", "stream must be a boolean")),
    };
    let client_wants_usage = match obj.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            _ => {
                return Err(InvalidField::new(
                    "stream_options.include_usage",
                    "include_usage must be a boolean",
                ))
            }
        },
        _ => {
            return Err(InvalidField::new(
                "stream_options",
                "stream_options must be an object",
            ))
        }
    };
    if client_wants_usage && !stream {
        return Err(InvalidField::new(
            "stream_options",
            "stream_options is only allowed when stream is true",
        ));
    }
    // The optional numeric fields, checked in one pass over the body's
    // members (a lookup of each of ten names cost ~1,000 instructions a
    // request); a body with several bad ones is refused for the first in
    // name order.
    let (mut max_tokens, mut max_completion, mut n, mut best_of) = (None, None, None, None);
    for (k, v) in obj {
        match k.as_str() {
            "max_tokens" => max_tokens = int_of(v, k, 1, 1_000_000)?,
            "max_completion_tokens" => max_completion = int_of(v, k, 1, 1_000_000)?,
            "n" => n = int_of(v, k, 1, 16)?,
            // best_of candidates are generated (and billed) even if fewer
            // are returned.
            "best_of" => best_of = int_of(v, k, 1, 16)?,
            "temperature" => num_of(v, k, 0.0, 2.0)?,
            "top_p" => num_of(v, k, 0.0, 1.0)?,
            "presence_penalty" | "frequency_penalty" => num_of(v, k, -2.0, 2.0)?,
            "top_logprobs" => {
                int_of(v, k, 0, 20)?;
            }
            "dimensions" => {
                int_of(v, k, 1, 65_536)?;
            }
            _ => {}
        }
    }
    let (n, best_of) = (n.unwrap_or(1), best_of.unwrap_or(1));
    // A legacy completion with a list of prompts completes each of them.
    let prompts = match (endpoint, obj.get("prompt")) {
        (Endpoint::Completions, Some(Value::Array(items)))
            if items.iter().all(|i| i.is_string() || i.is_array()) =>
        {
            items.len() as i64
        }
        _ => 1,
    };
    let choices = n.max(best_of) * prompts;
    Ok(RequestSummary {
        model,
        stream,
        client_wants_usage,
        max_output: max_completion.or(max_tokens),
        choices,
    })
}

/// The refusal of client-chosen upstreams and credentials, for a body that
/// is sent on as it is (a dialect passed through to its provider).
pub fn refuse_upstream_keys(body: &Value) -> Result<(), InvalidField> {
    match body.as_object() {
        Some(obj) => reject_upstream_keys(obj),
        None => Ok(()),
    }
}

fn reject_upstream_keys(obj: &Map<String, Value>) -> Result<(), InvalidField> {
    match forbidden_key_path(obj) {
        Some(path) => Err(InvalidField::new(
            path,
            "upstream URLs and credentials are set by the gateway, not the client",
        )),
        None => Ok(()),
    }
}

/// The path (`a.b[2].c`, `x[0][1].y`) of the first forbidden key in `obj`,
/// at any depth and through any nesting of arrays and objects: built on the
/// way back up, so a clean body (every request) allocates nothing.
/// (serde_json refuses documents nested deeper than 128, so this recursion
/// is bounded.)
fn forbidden_key_path(obj: &Map<String, Value>) -> Option<String> {
    for (k, v) in obj {
        if FORBIDDEN_KEYS.iter().any(|f| f.eq_ignore_ascii_case(k)) {
            return Some(k.clone());
        }
        if let Some(below) = forbidden_below(v) {
            return Some(format!("{k}{below}"));
        }
    }
    None
}

/// The rest of the path (`.c`, `[2].c`, `[0][1].c`) of the first forbidden
/// key inside `v`.
fn forbidden_below(v: &Value) -> Option<String> {
    match v {
        Value::Object(o) => forbidden_key_path(o).map(|p| format!(".{p}")),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, x)| forbidden_below(x).map(|p| format!("[{i}]{p}"))),
        _ => None,
    }
}

fn validate_messages(obj: &Map<String, Value>) -> Result<(), InvalidField> {
    let msgs = match obj.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        _ => {
            return Err(InvalidField::new(
                "messages",
                "messages must be a non-empty array",
            ))
        }
    };
    for (i, m) in msgs.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str);
        if !role.is_some_and(|r| CHAT_ROLES.contains(&r)) {
            return Err(InvalidField::new(
                format!("messages[{i}].role"),
                format!("role must be one of {}", CHAT_ROLES.join(", ")),
            ));
        }
        match m.get("content") {
            None | Some(Value::Null) | Some(Value::String(_)) | Some(Value::Array(_)) => {}
            _ => {
                return Err(InvalidField::new(
                    format!("messages[{i}].content"),
                    "content must be a string or an array of parts",
                ))
            }
        }
    }
    Ok(())
}

fn require_input(obj: &Map<String, Value>, field: &str) -> Result<(), InvalidField> {
    match obj.get(field) {
        Some(Value::String(_)) => Ok(()),
        Some(Value::Array(a)) if !a.is_empty() => Ok(()),
        _ => Err(InvalidField::new(
            field,
            format!("{field} must be a string or a non-empty array"),
        )),
    }
}

/// An optional integer member `f` (its value `v`) within `lo..=hi`.
fn int_of(v: &Value, f: &str, lo: i64, hi: i64) -> Result<Option<i64>, InvalidField> {
    match v {
        Value::Null => Ok(None),
        v => match v.as_i64() {
            Some(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
            _ => Err(InvalidField::new(
                f,
                format!("{f} must be an integer from {lo} to {hi}"),
            )),
        },
    }
}

/// An optional number member `f` (its value `v`) within `lo..=hi`.
fn num_of(v: &Value, f: &str, lo: f64, hi: f64) -> Result<(), InvalidField> {
    match v {
        Value::Null => Ok(()),
        v => match v.as_f64() {
            Some(x) if x >= lo && x <= hi => Ok(()),
            _ => Err(InvalidField::new(
                f,
                format!("{f} must be a number from {lo} to {hi}"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat(extra: Value) -> Value {
        let mut b = json!({"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    }

    #[test]
    fn a_plain_chat_request_passes() {
        let s = validate(Endpoint::ChatCompletions, &chat(json!({"max_tokens":64}))).unwrap();
        assert_eq!(s.model, "gpt-4o-mini");
        assert_eq!(s.max_output, Some(64));
        assert!(!s.stream);
    }

    /// Every optional numeric field is checked, at both ends of its range.
    #[test]
    fn each_numeric_field_has_its_range() {
        let fields: [(&str, Value, Value, Value); 10] = [
            ("max_tokens", json!(1), json!(1_000_000), json!(0)),
            (
                "max_completion_tokens",
                json!(1),
                json!(1_000_000),
                json!(1_000_001),
            ),
            ("n", json!(1), json!(16), json!(17)),
            ("best_of", json!(1), json!(16), json!(0)),
            ("temperature", json!(0.0), json!(2.0), json!(2.5)),
            ("top_p", json!(0.0), json!(1.0), json!(-0.1)),
            ("presence_penalty", json!(-2.0), json!(2.0), json!(2.1)),
            ("frequency_penalty", json!(-2.0), json!(2.0), json!(-2.1)),
            ("top_logprobs", json!(0), json!(20), json!(21)),
            ("dimensions", json!(1), json!(65_536), json!("many")),
        ];
        for (f, lo, hi, bad) in fields {
            for ok in [lo, hi, Value::Null] {
                assert!(
                    validate(Endpoint::ChatCompletions, &chat(json!({ f: ok }))).is_ok(),
                    "{f}"
                );
            }
            let e = validate(Endpoint::ChatCompletions, &chat(json!({ f: bad }))).unwrap_err();
            assert_eq!(e.param, f);
        }
        let s = validate(
            Endpoint::ChatCompletions,
            &chat(json!({"n": 3, "best_of": 5})),
        )
        .unwrap();
        assert_eq!(s.choices, 5);
        let s = validate(
            Endpoint::ChatCompletions,
            &chat(json!({"max_tokens": 10, "max_completion_tokens": 20})),
        )
        .unwrap();
        assert_eq!(s.max_output, Some(20));
    }

    #[test]
    fn errors_name_the_field() {
        let e = validate(Endpoint::ChatCompletions, &chat(json!({"temperature":3}))).unwrap_err();
        assert_eq!(e.param, "temperature");
        let e = validate(Endpoint::ChatCompletions, &chat(json!({"max_tokens":0}))).unwrap_err();
        assert_eq!(e.param, "max_tokens");
        let e = validate(
            Endpoint::ChatCompletions,
            &json!({"model":"m","messages":[]}),
        )
        .unwrap_err();
        assert_eq!(e.param, "messages");
        let e = validate(
            Endpoint::ChatCompletions,
            &json!({"model":"m","messages":[{"role":"boss","content":"x"}]}),
        )
        .unwrap_err();
        assert_eq!(e.param, "messages[0].role");
        let e = validate(Endpoint::ChatCompletions, &json!([1])).unwrap_err();
        assert_eq!(e.param, "");
    }

    #[test]
    fn client_upstream_urls_are_refused_at_any_depth() {
        let e = validate(
            Endpoint::ChatCompletions,
            &chat(json!({"api_base":"http://evil"})),
        )
        .unwrap_err();
        assert_eq!(e.param, "api_base");
        let e = validate(
            Endpoint::ChatCompletions,
            &chat(json!({"extra_body":{"nested":[{"Base_URL":"http://169.254.169.254"}]}})),
        )
        .unwrap_err();
        assert_eq!(e.param, "extra_body.nested[0].Base_URL");
        // Arrays of arrays are walked too.
        let e = validate(
            Endpoint::ChatCompletions,
            &chat(json!({"x": [[{"api_base": "http://evil", "api_key": "sk-x"}]]})),
        )
        .unwrap_err();
        assert_eq!(e.param, "x[0][0].api_base");
        let e = refuse_upstream_keys(&json!({"input": [1, [2, [{"a": {"API_KEY": "k"}}]]]}))
            .unwrap_err();
        assert_eq!(e.param, "input[1][1][0].a.API_KEY");
    }

    #[test]
    fn stream_options_need_a_stream() {
        let s = validate(
            Endpoint::ChatCompletions,
            &chat(json!({"stream":true,"stream_options":{"include_usage":true}})),
        )
        .unwrap();
        assert!(s.stream && s.client_wants_usage);
        let e = validate(
            Endpoint::ChatCompletions,
            &chat(json!({"stream_options":{"include_usage":true}})),
        )
        .unwrap_err();
        assert_eq!(e.param, "stream_options");
    }

    #[test]
    fn every_generated_completion_is_counted() {
        let s = validate(Endpoint::ChatCompletions, &chat(json!({"n":3}))).unwrap();
        assert_eq!(s.choices, 3);
        let c = json!({"model":"m","prompt":["a","b"],"n":2,"best_of":4});
        assert_eq!(validate(Endpoint::Completions, &c).unwrap().choices, 8);
        let c = json!({"model":"m","prompt":[1,2,3]});
        assert_eq!(validate(Endpoint::Completions, &c).unwrap().choices, 1);
        let e = validate(
            Endpoint::Completions,
            &json!({"model":"m","prompt":"a","best_of":99}),
        )
        .unwrap_err();
        assert_eq!(e.param, "best_of");
    }

    #[test]
    fn embeddings_need_input_and_no_stream() {
        assert!(validate(Endpoint::Embeddings, &json!({"model":"e","input":"hi"})).is_ok());
        let e = validate(Endpoint::Embeddings, &json!({"model":"e"})).unwrap_err();
        assert_eq!(e.param, "input");
        let e = validate(
            Endpoint::Embeddings,
            &json!({"model":"e","input":"x","stream":true}),
        )
        .unwrap_err();
        assert_eq!(e.param, "stream");
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    /// Any JSON value, with the field names a client might try.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            ".{0,20}".prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 64, 8, |inner| {
            let key = prop_oneof![
                Just("model".to_string()),
                Just("messages".to_string()),
                Just("max_tokens".to_string()),
                Just("temperature".to_string()),
                Just("stream".to_string()),
                Just("stream_options".to_string()),
                Just("api_base".to_string()),
                Just("n".to_string()),
                Just("role".to_string()),
                Just("content".to_string()),
                "[a-z_]{1,12}",
            ];
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(key, inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Whatever arrives, validation answers — Ok, or an error that says
        /// what is wrong — and never panics.
        #[test]
        fn validation_never_panics_and_always_explains(body in json_value()) {
            for e in [Endpoint::ChatCompletions, Endpoint::Completions, Endpoint::Embeddings] {
                match validate(e, &body) {
                    Ok(s) => {
                        prop_assert!(!s.model.is_empty());
                        prop_assert!(s.choices >= 1);
                        prop_assert!(s.max_output.is_none_or(|m| m >= 1));
                    }
                    Err(f) => prop_assert!(!f.message.is_empty()),
                }
            }
        }

        /// A forbidden key anywhere makes the request invalid, naming its path.
        #[test]
        fn upstream_keys_are_refused_at_any_depth(
            wraps in proptest::collection::vec(0u8..3, 0..6),
            key in prop_oneof![Just("api_base"), Just("base_url"), Just("API_KEY")],
        ) {
            let mut inner = serde_json::json!({key: "http://169.254.169.254"});
            // Any nesting: an object in an array, an array in an array, an
            // object in an object.
            for w in wraps {
                inner = match w {
                    0 => serde_json::json!({"extra": [inner]}),
                    1 => serde_json::json!([1, inner]),
                    _ => serde_json::json!({"o": inner}),
                };
            }
            let mut body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
            body["wrapper"] = inner;
            let e = validate(Endpoint::ChatCompletions, &body).unwrap_err();
            prop_assert!(e.param.ends_with(key), "{}", e.param);
        }
    }
}
