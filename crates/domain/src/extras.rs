//! What a request asks the provider for that is billed beyond its text, and
//! that a tenant, app or key may be refused (docs/billing.md, "Service tiers
//! and hosted tools"): a service tier (and Anthropic's `speed`), and hosted
//! tools — tools the provider runs and bills per call and whose results come
//! back as input (web search and fetch, file search, code execution, image
//! generation, MCP). Read from the client's own body in its dialect. A body
//! with none of the members `read` looks at (`asks_beyond_text`) costs one
//! pass over its keys and allocates nothing.

use crate::limits::{self, Limits};
use crate::provider::Dialect;
use crate::request::InvalidField;
use serde_json::{json, Value};

/// Calls of hosted tools a request may make when its client set no cap: the
/// cap the gateway sends (Responses `max_tool_calls`, Anthropic `max_uses`
/// per tool) and holds.
pub const DEFAULT_TOOL_CALLS: i64 = 5;

/// Input tokens one hosted-tool call's results may add to the prompt (a
/// search's pages, a file search's chunks): held per call, and the sanity
/// bound of the input widened by as much.
pub const RESULT_TOKENS_PER_CALL: i64 = 8_000;

/// Most hosted-tool calls a client may cap a request at (the settle bills
/// at most `pricing::sheet::BOUND_TOOL_CALLS`).
pub const MAX_TOOL_CALLS: i64 = crate::pricing::sheet::BOUND_TOOL_CALLS;

/// The service tier a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierAsk<'a> {
    /// Absent, `default`, Anthropic's `standard_only`.
    Default,
    /// `auto`: the provider picks (Anthropic serves it from priority
    /// capacity where the organisation has some). Allowed like the default;
    /// held at the dearest tier the scopes allow.
    Auto,
    /// Any other tier (`priority`, `flex`, `scale`, `batch`, Anthropic's
    /// `speed: "fast"` as `fast`).
    Named(&'a str),
}

/// Where a hosted tool was asked for, to name it in a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// `tools[i]`.
    Tool(usize),
    /// A top-level field (chat `web_search_options`, Anthropic `mcp_servers`).
    Field(&'static str),
    /// A field of `tools[i]` (Gemini's tools are named by their field:
    /// `tools[0].googleSearch`).
    ToolField(usize, &'static str),
}

/// One hosted tool of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostedTool {
    /// Its name in the policy (`allowed_tools`): the type without version
    /// or `_preview` suffix (`web_search_20250305` → `web_search`).
    pub kind: &'static str,
    pub at: At,
    /// Anthropic: the tool's `max_uses` as the client set it.
    pub max_uses: Option<i64>,
}

impl HostedTool {
    /// The field a refusal names (`tools[2].type`).
    pub fn param(&self) -> String {
        match self.at {
            At::Tool(i) => format!("tools[{i}].type"),
            At::Field(f) => f.to_string(),
            At::ToolField(i, f) => format!("tools[{i}].{f}"),
        }
    }
}

/// What a request asks for beyond its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked<'a> {
    /// `service_tier` (Gemini's `serviceTier`).
    pub tier: TierAsk<'a>,
    /// The field the tier was asked in, to name in a refusal.
    pub tier_param: &'static str,
    /// Anthropic `speed` other than `standard` (`fast`).
    pub speed: Option<&'a str>,
    /// Empty for most requests (no allocation).
    pub tools: Vec<HostedTool>,
    /// Responses `max_tool_calls` as the client set it.
    pub max_tool_calls: Option<i64>,
    /// Extended thinking asked for (`thinking` of a type other than
    /// `disabled`: Anthropic's, and the chat providers' that copied it):
    /// billed in full, streamed summarised at most, so hidden reasoning
    /// for the hold.
    pub thinks: bool,
}

/// Why a request may not go as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyRefusal {
    /// 403 `service_tier_not_allowed`.
    Tier { param: &'static str, tier: String },
    /// 403 `tool_not_allowed`.
    Tool { param: String, kind: &'static str },
}

/// Hosted tools by policy name. Anthropic's client-run tools (`bash_…`,
/// `text_editor_…`, `computer_…`) and OpenAI's (`computer_use_preview`,
/// `local_shell`, `shell`) are not here: the client runs them.
const HOSTED: &[&str] = &[
    "web_search",
    "web_fetch",
    "file_search",
    "code_interpreter",
    "code_execution",
    "image_generation",
    "mcp",
];

/// Gemini's hosted tools: the field of a `Tool` that asks for one (as the
/// REST API reads it, camel or snake case; the `google-genai` SDKs send
/// camel case) and its policy name. Gemini's other tool fields are not
/// here: `functionDeclarations` (client-run) is translated, and the rest
/// (`googleMaps`, `computerUse`, Vertex's `retrieval`, …) are refused as
/// unsupported by the dialect (`gateway::dialect::gemini`).
const GEMINI_HOSTED: &[(&str, &str)] = &[
    ("googleSearch", "web_search"),
    ("google_search", "web_search"),
    ("googleSearchRetrieval", "web_search"),
    ("google_search_retrieval", "web_search"),
    ("enterpriseWebSearch", "web_search"),
    ("enterprise_web_search", "web_search"),
    ("urlContext", "web_fetch"),
    ("url_context", "web_fetch"),
    ("codeExecution", "code_execution"),
    ("code_execution", "code_execution"),
    ("fileSearch", "file_search"),
    ("file_search", "file_search"),
    ("mcpServers", "mcp"),
    ("mcp_servers", "mcp"),
];

/// A Gemini `Tool` field that asks for a hosted tool: the field (as a
/// static name, for [`At::ToolField`]) and its policy name.
pub fn gemini_hosted_kind(field: &str) -> Option<(&'static str, &'static str)> {
    GEMINI_HOSTED.iter().copied().find(|(f, _)| *f == field)
}

/// Tools a cap can be sent for in Anthropic's dialect (`max_uses`).
fn anthropic_cappable(kind: &str) -> bool {
    matches!(kind, "web_search" | "web_fetch")
}

/// The policy name of a tool type, when it is a hosted tool: the type
/// without a date suffix (`_20250305`, `_2025_08_26`) or `_preview`.
pub fn hosted_kind(ty: &str) -> Option<&'static str> {
    let mut t = ty;
    // Date parts: `_20250305`, or `_2025_03_11` (three numeric parts).
    while let Some((head, tail)) = t.rsplit_once('_') {
        if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) {
            t = head;
        } else {
            break;
        }
    }
    let t = t.strip_suffix("_preview").unwrap_or(t);
    HOSTED.iter().copied().find(|k| *k == t)
}

fn bad(param: &str, message: &str) -> InvalidField {
    InvalidField {
        param: param.to_string(),
        message: message.to_string(),
    }
}

fn tier_name<'a>(v: Option<&'a Value>, param: &str) -> Result<TierAsk<'a>, InvalidField> {
    match v {
        None | Some(Value::Null) => Ok(TierAsk::Default),
        Some(Value::String(s)) => Ok(match s.as_str() {
            "default" | "standard" | "standard_only" => TierAsk::Default,
            "auto" => TierAsk::Auto,
            s if !s.is_empty() && s.len() <= 32 => TierAsk::Named(s),
            _ => return Err(bad(param, "a service tier is a name of 1 to 32 characters")),
        }),
        Some(_) => Err(bad(param, "a service tier is a string")),
    }
}

/// The service tier a Gemini body asks for (`serviceTier`, or
/// `service_tier`; Google's names in any case): None for the standard
/// tier, else the tier by the name the chat provider takes (`flex`,
/// `priority`), which the translation sends as `service_tier`.
pub fn gemini_tier(body: &Value) -> Result<Option<&'static str>, InvalidField> {
    let (param, v) = match body.get("serviceTier") {
        Some(v) => ("serviceTier", v),
        None => (
            "service_tier",
            body.get("service_tier").unwrap_or(&Value::Null),
        ),
    };
    let name = match v {
        Value::Null => return Ok(None),
        Value::String(s) => s.to_ascii_lowercase(),
        _ => return Err(bad(param, "serviceTier is a string")),
    };
    match name.trim_start_matches("service_tier_") {
        "unspecified" | "standard" => Ok(None),
        "flex" => Ok(Some("flex")),
        "priority" => Ok(Some("priority")),
        _ => Err(bad(param, "serviceTier must be standard, flex or priority")),
    }
}

fn cap_of(v: Option<&Value>, param: &str) -> Result<Option<i64>, InvalidField> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_i64() {
            Some(n) if (0..=MAX_TOOL_CALLS).contains(&n) => Ok(Some(n)),
            _ => Err(bad(
                param,
                &format!("a tool call cap is an integer from 0 to {MAX_TOOL_CALLS}"),
            )),
        },
    }
}

/// Fields that change what a request costs or what the provider keeps,
/// refused with the reason (docs/providers.md, "Fields that change cost or
/// retention"): the others of that table are priced and held.
fn refused_fields(dialect: Dialect, body: &Value) -> Result<(), InvalidField> {
    let set = |k: &str| body.get(k).is_some_and(|v| !v.is_null());
    match dialect {
        Dialect::Chat => {
            if body.get("store") == Some(&Value::Bool(true)) {
                return Err(bad(
                    "store",
                    "store: true would have the provider keep this completion; tollgate does not let a provider keep a tenant's completions (send store: false or leave it out)",
                ));
            }
            if set("prediction") {
                return Err(bad(
                    "prediction",
                    "predicted outputs are billed for rejected prediction tokens beyond max_tokens, which no hold can bound; tollgate does not forward prediction",
                ));
            }
        }
        Dialect::Messages if set("inference_geo") && body["inference_geo"] != "global" => {
            return Err(bad(
                "inference_geo",
                "a pinned inference region is priced above the global one; use a model whose deployment is in that region (its price carries the difference)",
            ));
        }
        _ => {}
    }
    Ok(())
}

/// Whether a top-level member of a request body is one [`read`] (or
/// `refused_fields`) looks at, in any dialect.
fn asks_beyond_text(member: &str) -> bool {
    matches!(
        member,
        "store"
            | "prediction"
            | "inference_geo"
            | "service_tier"
            | "serviceTier"
            | "speed"
            | "mcp_servers"
            | "web_search_options"
            | "max_tool_calls"
            | "thinking"
            | "tools"
    )
}

/// What the client's `body` (in its `dialect`) asks for beyond its text;
/// a field tollgate refuses (`store: true`, `prediction`, …) named.
pub fn read(dialect: Dialect, body: &Value) -> Result<Asked<'_>, InvalidField> {
    let plain = Asked {
        tier: TierAsk::Default,
        tier_param: "service_tier",
        speed: None,
        tools: Vec::new(),
        max_tool_calls: None,
        thinks: false,
    };
    if body
        .as_object()
        .is_some_and(|o| !o.keys().any(|k| asks_beyond_text(k)))
    {
        // Most requests: one pass over the body's members, not a lookup
        // of each field below.
        return Ok(plain);
    }
    refused_fields(dialect, body)?;
    let mut asked = Asked {
        // Gemini's tier is sent to the chat provider the body is
        // translated for, under the same name.
        tier: if dialect == Dialect::Gemini {
            gemini_tier(body)?.map_or(TierAsk::Default, TierAsk::Named)
        } else {
            tier_name(body.get("service_tier"), "service_tier")?
        },
        tier_param: if dialect == Dialect::Gemini && body.get("serviceTier").is_some() {
            "serviceTier"
        } else {
            "service_tier"
        },
        speed: None,
        tools: Vec::new(),
        max_tool_calls: None,
        thinks: false,
    };
    if dialect == Dialect::Messages {
        match body.get("speed") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s == "standard" => {}
            Some(Value::String(s)) if !s.is_empty() && s.len() <= 32 => {
                asked.speed = Some(s.as_str())
            }
            Some(_) => return Err(bad("speed", "speed is a name of 1 to 32 characters")),
        }
        if body.get("mcp_servers").is_some_and(|v| !v.is_null()) {
            asked.tools.push(HostedTool {
                kind: "mcp",
                at: At::Field("mcp_servers"),
                max_uses: None,
            });
        }
    }
    if dialect == Dialect::Chat && body.get("web_search_options").is_some_and(|v| !v.is_null()) {
        asked.tools.push(HostedTool {
            kind: "web_search",
            at: At::Field("web_search_options"),
            max_uses: None,
        });
    }
    if dialect == Dialect::Responses {
        asked.max_tool_calls = cap_of(body.get("max_tool_calls"), "max_tool_calls")?;
    }
    asked.thinks = body
        .get("thinking")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t != "disabled");
    if dialect == Dialect::Gemini {
        // A Gemini `Tool` is named by its fields, one tool may carry several.
        let list = body.get("tools").and_then(Value::as_array);
        for (i, t) in list.into_iter().flatten().enumerate() {
            let fields = t.as_object().into_iter().flat_map(|o| o.keys());
            for (field, kind) in fields.filter_map(|k| gemini_hosted_kind(k)) {
                asked.tools.push(HostedTool {
                    kind,
                    at: At::ToolField(i, field),
                    max_uses: None,
                });
            }
        }
    } else if let Some(list) = body.get("tools").and_then(Value::as_array) {
        for (i, t) in list.iter().enumerate() {
            let Some(kind) = t.get("type").and_then(Value::as_str).and_then(hosted_kind) else {
                continue;
            };
            let max_uses = if dialect == Dialect::Messages {
                cap_of(t.get("max_uses"), &format!("tools[{i}].max_uses"))?
            } else {
                None
            };
            asked.tools.push(HostedTool {
                kind,
                at: At::Tool(i),
                max_uses,
            });
        }
    }
    Ok(asked)
}

/// A tier the scopes allow: the default always; another when every scope
/// that lists tiers lists it, and one does.
pub fn tier_allowed(scopes: [&Limits; 3], tier: &str) -> bool {
    limits::allows(scopes, |l| l.allowed_service_tiers.as_ref(), tier, false)
}

/// A hosted tool the scopes allow: when every scope that lists tools lists
/// it, and one does; when none lists any, every hosted tool unless one of
/// the scopes has a monthly budget (a budgeted key uses none unless told).
pub fn tool_allowed(scopes: [&Limits; 3], kind: &str) -> bool {
    let budgeted = scopes
        .iter()
        .any(|l| l.monthly_tokens.is_some() || l.monthly_cost_usd.is_some());
    limits::allows(scopes, |l| l.allowed_tools.as_ref(), kind, !budgeted)
}

/// The hold of a request's hosted tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolHold {
    /// Calls of any hosted tool held.
    pub calls: i64,
    /// Of them, web searches (the sheet's `tool_fees.web_search` each).
    pub web_search_calls: i64,
    /// Input tokens their results may add.
    pub result_tokens: i64,
}

impl Asked<'_> {
    /// Whether the request asks for anything here at all.
    pub fn is_plain(&self) -> bool {
        self.tier == TierAsk::Default
            && self.speed.is_none()
            && self.tools.is_empty()
            && !self.thinks
    }

    /// The first thing asked that the scopes do not allow.
    pub fn check(&self, scopes: [&Limits; 3]) -> Result<(), PolicyRefusal> {
        if let TierAsk::Named(t) = self.tier {
            if !tier_allowed(scopes, t) {
                return Err(PolicyRefusal::Tier {
                    param: self.tier_param,
                    tier: t.to_string(),
                });
            }
        }
        if let Some(s) = self.speed {
            if !tier_allowed(scopes, s) {
                return Err(PolicyRefusal::Tier {
                    param: "speed",
                    tier: s.to_string(),
                });
            }
        }
        for t in &self.tools {
            if !tool_allowed(scopes, t.kind) {
                return Err(PolicyRefusal::Tool {
                    param: t.param(),
                    kind: t.kind,
                });
            }
        }
        Ok(())
    }

    /// The service tiers the request may be served at, beyond the default,
    /// for the hold to take the dearest: the one named (and the speed);
    /// for `auto`, every tier the scopes allow.
    pub fn reachable_tiers<'s>(&'s self, scopes: [&'s Limits; 3]) -> Vec<&'s str> {
        let mut out: Vec<&str> = Vec::new();
        match self.tier {
            TierAsk::Default => {}
            TierAsk::Named(t) => out.push(t),
            TierAsk::Auto => {
                if let Some(list) = scopes.iter().find_map(|l| l.allowed_service_tiers.as_ref()) {
                    out.extend(
                        list.iter()
                            .map(String::as_str)
                            .filter(|t| tier_allowed(scopes, t)),
                    );
                }
            }
        }
        out.extend(self.speed);
        out
    }

    /// Calls held for the hosted tools: the client's caps, the injected
    /// [`DEFAULT_TOOL_CALLS`] where it set none; each call's results
    /// [`RESULT_TOKENS_PER_CALL`] of input.
    pub fn tool_hold(&self, dialect: Dialect) -> ToolHold {
        if self.tools.is_empty() {
            return ToolHold::default();
        }
        let (calls, searches) = if dialect == Dialect::Messages {
            // A cap per tool: the calls add up.
            self.tools.iter().fold((0i64, 0i64), |(c, s), t| {
                let n = t.max_uses.unwrap_or(DEFAULT_TOOL_CALLS);
                (c + n, s + if t.kind == "web_search" { n } else { 0 })
            })
        } else {
            // One cap for every hosted call (Responses `max_tool_calls`;
            // chat search sends none and is held at the default).
            let n = self.max_tool_calls.unwrap_or(DEFAULT_TOOL_CALLS);
            let searches = self.tools.iter().any(|t| t.kind == "web_search");
            (n, if searches { n } else { 0 })
        };
        let calls = calls.min(MAX_TOOL_CALLS);
        ToolHold {
            calls,
            web_search_calls: searches.min(MAX_TOOL_CALLS),
            result_tokens: calls * RESULT_TOKENS_PER_CALL,
        }
    }
}

/// Sends the provider the cap the hold assumed, where the client set none:
/// Responses `max_tool_calls`, Anthropic `max_uses` on its web search and
/// fetch tools.
/// `tools` and `client_cap` are [`Asked::tools`] and
/// [`Asked::max_tool_calls`] as read from `body`.
pub fn inject_caps(
    dialect: Dialect,
    tools: &[HostedTool],
    client_cap: Option<i64>,
    body: &mut Value,
) {
    if tools.is_empty() {
        return;
    }
    match dialect {
        Dialect::Responses if client_cap.is_none() => {
            body["max_tool_calls"] = json!(DEFAULT_TOOL_CALLS);
        }
        Dialect::Messages => {
            for t in tools {
                if let (At::Tool(i), None) = (t.at, t.max_uses) {
                    if anthropic_cappable(t.kind) {
                        body["tools"][i]["max_uses"] = json!(DEFAULT_TOOL_CALLS);
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scopes_of(t: Limits, a: Limits, k: Limits) -> [Limits; 3] {
        [t, a, k]
    }

    fn refs(s: &[Limits; 3]) -> [&Limits; 3] {
        [&s[0], &s[1], &s[2]]
    }

    fn tiers(names: &[&str]) -> Limits {
        Limits {
            allowed_service_tiers: Some(names.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn fields_that_change_cost_or_retention_are_refused_with_a_reason() {
        for (dialect, body, param) in [
            (Dialect::Chat, json!({"store": true}), "store"),
            (
                Dialect::Chat,
                json!({"prediction": {"type": "content", "content": "x"}}),
                "prediction",
            ),
            (
                Dialect::Messages,
                json!({"inference_geo": "us"}),
                "inference_geo",
            ),
        ] {
            assert_eq!(read(dialect, &body).unwrap_err().param, param, "{body}");
        }
        assert!(read(Dialect::Chat, &json!({"store": false, "prediction": null})).is_ok());
        assert!(read(Dialect::Messages, &json!({"inference_geo": "global"})).is_ok());
    }

    #[test]
    fn tool_types_have_one_policy_name() {
        assert_eq!(hosted_kind("web_search_20250305"), Some("web_search"));
        assert_eq!(hosted_kind("web_search_preview"), Some("web_search"));
        assert_eq!(
            hosted_kind("web_search_preview_2025_03_11"),
            Some("web_search")
        );
        assert_eq!(hosted_kind("web_fetch_20250910"), Some("web_fetch"));
        assert_eq!(
            hosted_kind("code_execution_20250825"),
            Some("code_execution")
        );
        assert_eq!(hosted_kind("mcp"), Some("mcp"));
        for client_run in [
            "function",
            "custom",
            "bash_20250124",
            "computer_use_preview",
            "shell",
        ] {
            assert_eq!(hosted_kind(client_run), None, "{client_run}");
        }
    }

    #[test]
    fn only_the_default_tier_unless_a_scope_lists_more() {
        let none = scopes_of(Limits::NONE, Limits::NONE, Limits::NONE);
        assert!(!tier_allowed(refs(&none), "priority"));
        let tenant_only = scopes_of(tiers(&["priority", "flex"]), Limits::NONE, Limits::NONE);
        assert!(tier_allowed(refs(&tenant_only), "priority"));
        // The key narrows what the tenant allows.
        let narrowed = scopes_of(tiers(&["priority", "flex"]), Limits::NONE, tiers(&["flex"]));
        assert!(!tier_allowed(refs(&narrowed), "priority"));
        assert!(tier_allowed(refs(&narrowed), "flex"));
        let body = json!({"service_tier": "priority"});
        let asked = read(Dialect::Chat, &body).unwrap();
        assert_eq!(
            asked.check(refs(&none)),
            Err(PolicyRefusal::Tier {
                param: "service_tier",
                tier: "priority".into()
            })
        );
        assert!(asked.check(refs(&tenant_only)).is_ok());
        // `auto` and `default` are the default: always allowed; auto may
        // reach every tier the scopes allow.
        for t in ["auto", "default", "standard_only"] {
            let body = json!({"service_tier": t});
            assert!(read(Dialect::Messages, &body)
                .unwrap()
                .check(refs(&none))
                .is_ok());
        }
        let body = json!({"service_tier": "auto"});
        let asked = read(Dialect::Chat, &body).unwrap();
        assert_eq!(asked.reachable_tiers(refs(&narrowed)), vec!["flex"]);
        assert!(asked.reachable_tiers(refs(&none)).is_empty());
        // Anthropic's fast mode is a tier of its own.
        let body = json!({"speed": "fast"});
        let asked = read(Dialect::Messages, &body).unwrap();
        assert_eq!(
            asked.check(refs(&none)),
            Err(PolicyRefusal::Tier {
                param: "speed",
                tier: "fast".into()
            })
        );
        assert!(read(Dialect::Chat, &json!({"service_tier": 3})).is_err());
    }

    #[test]
    fn hosted_tools_are_off_for_budgeted_keys_unless_listed() {
        let body = json!({"tools": [{"type": "function", "name": "f"}, {"type": "web_search"}]});
        let asked = read(Dialect::Responses, &body).unwrap();
        let free = scopes_of(Limits::NONE, Limits::NONE, Limits::NONE);
        assert!(
            asked.check(refs(&free)).is_ok(),
            "no budget, no list: allowed"
        );
        let budgeted = Limits {
            monthly_tokens: Some(1_000),
            ..Default::default()
        };
        let b = scopes_of(budgeted.clone(), Limits::NONE, Limits::NONE);
        assert_eq!(
            asked.check(refs(&b)),
            Err(PolicyRefusal::Tool {
                param: "tools[1].type".into(),
                kind: "web_search"
            })
        );
        let listed = Limits {
            allowed_tools: Some(vec!["web_search".into()]),
            ..Default::default()
        };
        let ok = scopes_of(budgeted, Limits::NONE, listed);
        assert!(asked.check(refs(&ok)).is_ok());
        // Chat's search field is the web search tool.
        let chat = json!({"web_search_options": {}});
        let asked = read(Dialect::Chat, &chat).unwrap();
        assert_eq!(asked.tools[0].param(), "web_search_options");
        assert!(asked.check(refs(&b)).is_err());
    }

    #[test]
    fn gemini_hosted_tools_are_named_by_their_field_and_follow_the_policy() {
        let body = json!({"tools": [
            {"functionDeclarations": [{"name": "ls"}]},
            {"googleSearch": {}},
            {"code_execution": {}, "urlContext": {}},
            {"googleSearchRetrieval": {}},
        ]});
        let asked = read(Dialect::Gemini, &body).unwrap();
        let named: Vec<(String, &str)> = asked.tools.iter().map(|t| (t.param(), t.kind)).collect();
        assert_eq!(
            named,
            vec![
                ("tools[1].googleSearch".to_string(), "web_search"),
                ("tools[2].code_execution".to_string(), "code_execution"),
                ("tools[2].urlContext".to_string(), "web_fetch"),
                ("tools[3].googleSearchRetrieval".to_string(), "web_search"),
            ]
        );
        assert_eq!(asked.tier, TierAsk::Default);
        let budgeted = Limits {
            monthly_tokens: Some(1_000),
            ..Default::default()
        };
        let b = scopes_of(budgeted.clone(), Limits::NONE, Limits::NONE);
        assert_eq!(
            asked.check(refs(&b)),
            Err(PolicyRefusal::Tool {
                param: "tools[1].googleSearch".into(),
                kind: "web_search"
            })
        );
        let listed = |names: &[&str]| Limits {
            allowed_tools: Some(names.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        };
        let some = scopes_of(budgeted.clone(), Limits::NONE, listed(&["web_search"]));
        assert_eq!(
            asked.check(refs(&some)),
            Err(PolicyRefusal::Tool {
                param: "tools[2].code_execution".into(),
                kind: "code_execution"
            })
        );
        let all = listed(&["web_search", "code_execution", "web_fetch"]);
        assert!(asked
            .check(refs(&scopes_of(budgeted, Limits::NONE, all)))
            .is_ok());
        // Function declarations alone are no hosted tool.
        let plain = json!({"tools": [{"function_declarations": [{"name": "f"}]}]});
        assert!(read(Dialect::Gemini, &plain).unwrap().is_plain());
    }

    #[test]
    fn extended_thinking_is_read_in_any_dialect() {
        for d in [Dialect::Messages, Dialect::Chat] {
            for (t, thinks) in [
                (json!({"type": "enabled", "budget_tokens": 2048}), true),
                (json!({"type": "adaptive"}), true),
                (json!({"type": "disabled"}), false),
                (json!(null), false),
            ] {
                let body = json!({"thinking": t});
                let asked = read(d, &body).unwrap();
                assert_eq!(asked.thinks, thinks, "{d:?} {body}");
                assert_eq!(asked.is_plain(), !thinks);
            }
        }
        assert!(
            !read(Dialect::Chat, &json!({"messages": []}))
                .unwrap()
                .thinks
        );
    }

    #[test]
    fn a_gemini_tier_is_a_policy_under_googles_field_name() {
        let none = scopes_of(Limits::NONE, Limits::NONE, Limits::NONE);
        for (body, param) in [
            (json!({"serviceTier": "PRIORITY"}), "serviceTier"),
            (json!({"service_tier": "priority"}), "service_tier"),
        ] {
            let asked = read(Dialect::Gemini, &body).unwrap();
            assert_eq!(asked.tier, TierAsk::Named("priority"));
            assert_eq!(
                asked.check(refs(&none)),
                Err(PolicyRefusal::Tier {
                    param,
                    tier: "priority".into()
                })
            );
        }
        for standard in [
            "standard",
            "STANDARD",
            "unspecified",
            "SERVICE_TIER_UNSPECIFIED",
        ] {
            let body = json!({"serviceTier": standard});
            assert!(
                read(Dialect::Gemini, &body).unwrap().is_plain(),
                "{standard}"
            );
        }
        assert_eq!(
            gemini_tier(&json!({"serviceTier": "Flex"})).unwrap(),
            Some("flex")
        );
        let bad = read(Dialect::Gemini, &json!({"serviceTier": "scale"})).unwrap_err();
        assert_eq!(bad.param, "serviceTier");
        assert!(read(Dialect::Gemini, &json!({"serviceTier": 2})).is_err());
        let flex = scopes_of(tiers(&["flex"]), Limits::NONE, Limits::NONE);
        let body = json!({"serviceTier": "flex"});
        let asked = read(Dialect::Gemini, &body).unwrap();
        assert!(asked.check(refs(&flex)).is_ok());
        assert_eq!(asked.reachable_tiers(refs(&flex)), vec!["flex"]);
    }

    #[test]
    fn caps_are_held_and_injected_where_the_client_set_none() {
        let mut body = json!({"tools": [{"type": "web_search"}, {"type": "file_search"}]});
        let asked = read(Dialect::Responses, &body).unwrap();
        let hold = asked.tool_hold(Dialect::Responses);
        assert_eq!(
            hold,
            ToolHold {
                calls: DEFAULT_TOOL_CALLS,
                web_search_calls: DEFAULT_TOOL_CALLS,
                result_tokens: DEFAULT_TOOL_CALLS * RESULT_TOKENS_PER_CALL
            }
        );
        inject_caps(
            Dialect::Responses,
            &asked.tools.clone(),
            asked.max_tool_calls,
            &mut body,
        );
        assert_eq!(body["max_tool_calls"], DEFAULT_TOOL_CALLS);
        let mut body = json!({"max_tool_calls": 2, "tools": [{"type": "web_search"}]});
        let asked = read(Dialect::Responses, &body).unwrap();
        assert_eq!(asked.tool_hold(Dialect::Responses).web_search_calls, 2);
        inject_caps(
            Dialect::Responses,
            &asked.tools.clone(),
            asked.max_tool_calls,
            &mut body,
        );
        assert_eq!(body["max_tool_calls"], 2, "the client's own cap stays");
        // Anthropic: a cap per tool, added up.
        let mut body = json!({"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
            {"type": "web_fetch_20250910", "name": "web_fetch"}, {"name": "f", "input_schema": {}}]});
        let asked = read(Dialect::Messages, &body).unwrap();
        let hold = asked.tool_hold(Dialect::Messages);
        assert_eq!(
            (hold.calls, hold.web_search_calls),
            (3 + DEFAULT_TOOL_CALLS, 3)
        );
        inject_caps(
            Dialect::Messages,
            &asked.tools.clone(),
            asked.max_tool_calls,
            &mut body,
        );
        assert_eq!(body["tools"][0]["max_uses"], 3);
        assert_eq!(body["tools"][1]["max_uses"], DEFAULT_TOOL_CALLS);
        assert!(body["tools"][2].get("max_uses").is_none());
        assert!(read(Dialect::Responses, &json!({"max_tool_calls": 1000})).is_err());
        // A plain request asks for nothing.
        let plain = json!({"messages": [], "store": false});
        assert!(read(Dialect::Chat, &plain).unwrap().is_plain());
    }
}
