//! The tools of a Responses request for a chat provider (docs/clients.md,
//! "Responses tools"): `function` tools (and those of a `namespace`) as
//! chat functions; a `custom` tool (free-form, with or without a grammar)
//! as a function of one string `input`, its calls written back as
//! `custom_tool_call` items; a client-executed `tool_search` (Codex's) as a
//! function taking its own parameters, its calls written back as
//! `tool_search_call` items and the tools a `tool_search_output` loaded
//! offered from then on; hosted tools (which the provider runs, a
//! server-side tool search among them) and client-executed tools without a
//! chat equivalent (`local_shell`, `shell`, …) left out and named, so the
//! request is refused unless the model's provider serves Responses
//! natively.

use domain::request::InvalidField;
use serde_json::{json, Value};

/// What of a Responses request a chat provider cannot take.
#[derive(Default)]
pub(crate) struct Left {
    pub untranslated: Option<InvalidField>,
    pub custom: Vec<String>,
    /// A client-executed `tool_search` was offered (as [`TOOL_SEARCH`]).
    pub tool_search: bool,
    /// Tools the conversation's `tool_search_output` items loaded.
    pub loaded: Vec<Value>,
}

/// The chat function a client-executed `tool_search` is offered as.
pub(crate) const TOOL_SEARCH: &str = "tool_search";

impl Left {
    /// Notes the first part with no chat equivalent.
    pub fn untranslated(&mut self, param: String, message: String) {
        self.untranslated
            .get_or_insert(InvalidField { param, message });
    }
}

/// Tools the provider itself runs (OpenAI's hosted tools).
const HOSTED_TOOLS: &[&str] = &["file_search", "code_interpreter", "image_generation", "mcp"];

fn hosted(ty: &str) -> bool {
    HOSTED_TOOLS.contains(&ty) || ty.starts_with("web_search")
}

fn bad(param: String, message: &str) -> InvalidField {
    InvalidField {
        param,
        message: message.to_string(),
    }
}

/// A custom tool's parameters as a chat function: one string, `input`.
fn custom_parameters() -> Value {
    json!({"type": "object", "properties": {"input": {"type": "string",
        "description": "the tool's whole free-form input"}},
        "required": ["input"], "additionalProperties": false})
}

pub(crate) fn tools_to_chat(tools: &Value, left: &mut Left) -> Result<Value, InvalidField> {
    let Some(list) = tools.as_array() else {
        return Err(bad("tools".into(), "tools must be an array"));
    };
    let mut out = Vec::new();
    function_tools(list, "tools", &mut out, left)?;
    Ok(Value::Array(out))
}

fn function_tools(
    list: &[Value],
    at: &str,
    out: &mut Vec<Value>,
    left: &mut Left,
) -> Result<(), InvalidField> {
    for (i, t) in list.iter().enumerate() {
        let custom = match t.get("type").and_then(Value::as_str) {
            Some("function") => false,
            Some("custom") => true,
            Some("tool_search") if t["execution"] == "client" => {
                let parameters = t
                    .get("parameters")
                    .filter(|p| p.is_object())
                    .cloned()
                    .unwrap_or_else(|| {
                        json!({"type": "object", "properties": {"query": {"type": "string"}},
                            "required": ["query"]})
                    });
                let mut f = json!({"name": TOOL_SEARCH, "parameters": parameters});
                if let Some(d) = t.get("description").filter(|v| !v.is_null()) {
                    f["description"] = d.clone();
                }
                left.tool_search = true;
                out.push(json!({"type": "function", "function": f}));
                continue;
            }
            Some("namespace") => {
                let inner = t
                    .get("tools")
                    .and_then(Value::as_array)
                    .map_or(&[][..], Vec::as_slice);
                function_tools(inner, &format!("{at}[{i}].tools"), out, left)?;
                continue;
            }
            Some(h) if hosted(h) => {
                left.untranslated(
                    format!("{at}[{i}].type"),
                    format!("the hosted tool {h:?} runs at the provider: only a model whose provider serves Responses natively offers it"),
                );
                continue;
            }
            Some(other) => {
                left.untranslated(
                    format!("{at}[{i}].type"),
                    format!("tool type {other:?} has no chat equivalent: only a model whose provider serves Responses natively takes it"),
                );
                continue;
            }
            None => return Err(bad(format!("{at}[{i}].type"), "a tool needs a type")),
        };
        let Some(name) = t.get("name").and_then(Value::as_str) else {
            return Err(bad(format!("{at}[{i}].name"), "a tool needs a name"));
        };
        let mut f = json!({"name": name});
        if custom {
            // A grammar (`format`) cannot be enforced by a chat provider:
            // the call's input is whatever text the model writes.
            if let Some(d) = t.get("description").filter(|v| !v.is_null()) {
                f["description"] = d.clone();
            }
            f["parameters"] = custom_parameters();
            left.custom.push(name.to_string());
        } else {
            for k in ["description", "parameters", "strict"] {
                if let Some(v) = t.get(k).filter(|v| !v.is_null()) {
                    f[k] = v.clone();
                }
            }
        }
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(())
}

/// A custom tool's input from the arguments of the chat function it was
/// offered as: `input`, or the arguments whole when they are not that.
pub(crate) fn custom_input(arguments: &str) -> String {
    serde_json::from_str::<Value>(arguments)
        .ok()
        .and_then(|v| v.get("input").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| arguments.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codexs_tools_translate_or_are_named() {
        let tools = json!([
            {"type": "function", "name": "exec", "parameters": {"type": "object"}},
            {"type": "custom", "name": "apply_patch", "description": "Patch files",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
            {"type": "tool_search"},
            {"type": "local_shell"},
            {"type": "web_search"},
            {"type": "tool_search", "execution": "client", "description": "Find tools",
             "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
        ]);
        let mut left = Left::default();
        let chat = tools_to_chat(&tools, &mut left).unwrap();
        let names: Vec<&str> = chat
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["exec", "apply_patch", "tool_search"]);
        assert!(left.tool_search);
        assert_eq!(chat[2]["function"]["description"], "Find tools");
        assert_eq!(
            chat[1]["function"]["parameters"]["required"],
            json!(["input"])
        );
        assert_eq!(left.custom, ["apply_patch"]);
        assert_eq!(left.untranslated.unwrap().param, "tools[2].type");
        // A hosted tool alone is named as hosted.
        let mut left = Left::default();
        tools_to_chat(&json!([{"type": "code_interpreter"}]), &mut left).unwrap();
        let e = left.untranslated.unwrap();
        assert_eq!(e.param, "tools[0].type");
        assert!(e.message.contains("hosted"), "{}", e.message);
        // No type at all: malformed, refused at once.
        assert!(tools_to_chat(&json!([{"name": "x"}]), &mut Left::default()).is_err());
    }

    #[test]
    fn a_custom_input_is_read_back_from_the_function_arguments() {
        assert_eq!(
            custom_input(r#"{"input":"*** Begin Patch"}"#),
            "*** Begin Patch"
        );
        assert_eq!(custom_input("not json"), "not json");
    }
}
