//! What a provider (one deployment of a model) actually does, as opposed to
//! what the OpenAI API says it should: which field it reads as the output
//! cap, whether it generates reasoning it never streams, and which client
//! dialects it speaks natively. The gateway's behaviour towards a provider
//! is driven by this profile, never by guessing from the model's name at
//! request time (the name only seeds the default when a model is created).

use serde::{Deserialize, Serialize};

/// The request field a provider reads as the output-token cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapField {
    /// `max_tokens`: every OpenAI-compatible provider reads it (vLLM,
    /// DeepSeek, MiniMax, older OpenAI chat models). The safe default.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`: OpenAI's reasoning models, which refuse
    /// `max_tokens`.
    MaxCompletionTokens,
    /// Both fields, same value: for a provider whose reading is unknown.
    Both,
}

impl CapField {
    pub fn as_str(self) -> &'static str {
        match self {
            CapField::MaxTokens => "max_tokens",
            CapField::MaxCompletionTokens => "max_completion_tokens",
            CapField::Both => "both",
        }
    }

    pub fn parse(s: &str) -> Option<CapField> {
        match s {
            "max_tokens" => Some(CapField::MaxTokens),
            "max_completion_tokens" => Some(CapField::MaxCompletionTokens),
            "both" => Some(CapField::Both),
            _ => None,
        }
    }

    /// The request fields to send the held cap in, in order.
    pub fn fields(self) -> &'static [&'static str] {
        match self {
            CapField::MaxTokens => &["max_tokens"],
            CapField::MaxCompletionTokens => &["max_completion_tokens"],
            CapField::Both => &["max_tokens", "max_completion_tokens"],
        }
    }
}

/// A client dialect a provider may speak natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    Chat,
    /// OpenAI Responses (`/v1/responses`).
    Responses,
    /// Anthropic Messages (`/v1/messages`).
    Messages,
    /// Google's Gemini API (`/v1beta/models/{m}:generateContent`): always
    /// translated, never a provider's native dialect (not in `apis`).
    #[serde(skip)]
    Gemini,
}

impl Dialect {
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Chat => "chat",
            Dialect::Responses => "responses",
            Dialect::Messages => "messages",
            Dialect::Gemini => "gemini",
        }
    }

    pub fn parse(s: &str) -> Option<Dialect> {
        match s {
            "chat" => Some(Dialect::Chat),
            "responses" => Some(Dialect::Responses),
            "messages" => Some(Dialect::Messages),
            _ => None,
        }
    }
}

/// How a provider behaves. Defaults are the safe reading of an unknown
/// OpenAI-compatible provider: it reads `max_tokens`, shows every token it
/// bills, and speaks chat completions only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderProfile {
    pub cap_field: CapField,
    /// The provider generates (and bills) reasoning tokens it does not
    /// stream: a stream's output cannot be counted as it flows, so its whole
    /// cap is held up front.
    pub hidden_reasoning: bool,
    /// Dialects the provider serves natively; requests in any other dialect
    /// are translated to chat completions.
    pub apis: Vec<Dialect>,
}

impl Default for ProviderProfile {
    fn default() -> Self {
        ProviderProfile {
            cap_field: CapField::MaxTokens,
            hidden_reasoning: false,
            apis: vec![Dialect::Chat],
        }
    }
}

impl ProviderProfile {
    /// The profile a new model gets when its creator names none: OpenAI's
    /// reasoning models (o-series, gpt-5) read `max_completion_tokens` and
    /// hide their reasoning; everything else gets the safe default. Only a
    /// default: an operator who knows better sets the profile explicitly.
    pub fn suggested_for(upstream_model: &str) -> ProviderProfile {
        let m = upstream_model.to_ascii_lowercase();
        let m = m.rsplit('/').next().unwrap_or(&m);
        if ["o1", "o3", "o4", "gpt-5"].iter().any(|p| m.starts_with(p)) {
            ProviderProfile {
                cap_field: CapField::MaxCompletionTokens,
                hidden_reasoning: true,
                apis: vec![Dialect::Chat],
            }
        } else if m.starts_with("gemini-")
            && !["gemini-1", "gemini-2.0"].iter().any(|p| m.starts_with(p))
        {
            // Gemini 2.5 and later think by default, bill the thoughts as
            // output (`thoughtsTokenCount`) and never stream them.
            ProviderProfile {
                hidden_reasoning: true,
                ..ProviderProfile::default()
            }
        } else {
            ProviderProfile::default()
        }
    }

    pub fn speaks(&self, dialect: Dialect) -> bool {
        self.apis.contains(&dialect)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_providers_get_the_safe_default() {
        let p = ProviderProfile::suggested_for("deepseek-chat");
        assert_eq!(p.cap_field, CapField::MaxTokens);
        assert!(!p.hidden_reasoning);
        assert!(p.speaks(Dialect::Chat) && !p.speaks(Dialect::Messages));
    }

    #[test]
    fn thinking_gemini_models_hide_their_reasoning() {
        for m in [
            "gemini-2.5-pro",
            "gemini-3-flash-preview",
            "google/gemini-2.5-flash",
        ] {
            let p = ProviderProfile::suggested_for(m);
            assert!(p.hidden_reasoning, "{m}");
            assert_eq!(p.cap_field, CapField::MaxTokens, "{m}");
        }
        for m in ["gemini-2.0-flash", "gemini-1.5-pro"] {
            assert!(!ProviderProfile::suggested_for(m).hidden_reasoning, "{m}");
        }
    }

    #[test]
    fn openai_reasoning_names_suggest_their_profile() {
        for m in ["o3-mini", "openai/o3-mini", "gpt-5", "O1-preview"] {
            let p = ProviderProfile::suggested_for(m);
            assert_eq!(p.cap_field, CapField::MaxCompletionTokens, "{m}");
            assert!(p.hidden_reasoning, "{m}");
        }
    }

    #[test]
    fn cap_fields_round_trip_and_name_their_fields() {
        for f in [
            CapField::MaxTokens,
            CapField::MaxCompletionTokens,
            CapField::Both,
        ] {
            assert_eq!(CapField::parse(f.as_str()), Some(f));
        }
        assert_eq!(
            CapField::Both.fields(),
            ["max_tokens", "max_completion_tokens"]
        );
        assert_eq!(CapField::parse("max_output_tokens"), None);
    }

    #[test]
    fn a_profile_reads_from_json_with_defaults_and_refuses_unknown_fields() {
        let p: ProviderProfile = serde_json::from_str(r#"{"hidden_reasoning":true}"#).unwrap();
        assert_eq!(p.cap_field, CapField::MaxTokens);
        assert!(p.hidden_reasoning);
        assert_eq!(p.apis, vec![Dialect::Chat]);
        assert!(serde_json::from_str::<ProviderProfile>(r#"{"cap":"x"}"#).is_err());
    }
}
