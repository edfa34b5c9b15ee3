//! The usage event's JSON for the Redis outbox, written directly.
//!
//! Every settled request's event is serialised once on the request path (the
//! settle carries it to Redis). Through serde_json that took ~7,400
//! instructions per event (callgrind, bench/results/
//! 2026-12-03-the-outbox-event-written-directly-and-three.md):
//! `#[serde(flatten)]` makes the struct a map, and every key and value goes
//! through the byte-by-byte escaper. Here the keys are literals and a string
//! value that needs no escaping (the usual case: ids, model names, dates) is
//! copied whole; anything else (a string that does need escaping, the anomaly's
//! verbatim report, tags) is written by serde_json itself. The output is byte
//! for byte what `serde_json::to_string` gives: the tests below compare the two
//! on arbitrary events, so the serde derive stays the reference for the format
//! and the decoder (`serde_json::from_str`) is unchanged. The writer names
//! every field of the event, so a new field does not compile until it is
//! written here too.

use super::UsageEvent;
use crate::attribution::Attribution;

/// Room for a typical event (~450 bytes) without growing.
const TYPICAL: usize = 640;

impl UsageEvent {
    /// `serde_json::to_string(self)`, faster.
    pub fn to_json(&self) -> String {
        // Every field named: a field added to the event and not written
        // here does not compile.
        let UsageEvent {
            request_id,
            tenant_id,
            app_id,
            key_id,
            model,
            period,
            day,
            input_tokens,
            output_tokens,
            cost_micro,
            cost_pico,
            est_tokens,
            est_cost_micro,
            overrun_tokens,
            overrun_cost_micro,
            status,
            stream,
            usage_source,
            replica,
            started_at_ms,
            settled_at_ms,
            deployment,
            anomaly,
            breakdown,
            charges,
            raw_usage,
            attribution:
                Attribution {
                    tags,
                    end_user,
                    session,
                    asked_model,
                },
        } = self;
        // The usage object's text on top: it is copied in whole.
        let extra = raw_usage.as_ref().map_or(0, |r| r.as_str().len() + 16);
        let mut w = Writer(String::with_capacity(TYPICAL + extra));
        w.str("{\"request_id\":", request_id);
        w.str(",\"tenant_id\":", tenant_id);
        w.str(",\"app_id\":", app_id);
        w.str(",\"key_id\":", key_id);
        w.str(",\"model\":", model);
        w.str(",\"period\":", period);
        w.str(",\"day\":", day);
        w.int(",\"input_tokens\":", *input_tokens);
        w.int(",\"output_tokens\":", *output_tokens);
        w.int(",\"cost_micro\":", *cost_micro);
        w.int(",\"cost_pico\":", *cost_pico);
        w.int(",\"est_tokens\":", *est_tokens);
        w.int(",\"est_cost_micro\":", *est_cost_micro);
        w.int(",\"overrun_tokens\":", *overrun_tokens);
        w.int(",\"overrun_cost_micro\":", *overrun_cost_micro);
        w.str(",\"status\":", status);
        w.0.push_str(if *stream {
            ",\"stream\":true"
        } else {
            ",\"stream\":false"
        });
        w.str(",\"usage_source\":", usage_source);
        w.str(",\"replica\":", replica);
        w.int(",\"started_at_ms\":", *started_at_ms);
        w.int(",\"settled_at_ms\":", *settled_at_ms);
        if let Some(d) = deployment {
            w.str(",\"deployment\":", d);
        }
        if let Some(a) = anomaly {
            w.serde(",\"anomaly\":", a);
        }
        if let Some(b) = breakdown {
            w.serde(",\"breakdown\":", b);
        }
        if let Some(c) = charges {
            w.0.push_str(",\"charges\":");
            c.write_json(&mut w.0);
        }
        if let Some(r) = raw_usage {
            // Valid JSON by construction (`RawUsage`), and what serde
            // writes for it: the text itself.
            w.0.push_str(",\"raw_usage\":");
            w.0.push_str(r.as_str());
        }
        // The flattened attribution, as serde writes it: after the fields.
        if !tags.is_empty() {
            w.serde(",\"tags\":", tags);
        }
        if let Some(u) = end_user {
            w.str(",\"end_user\":", u);
        }
        if let Some(s) = session {
            w.str(",\"session\":", s);
        }
        if let Some(m) = asked_model {
            w.str(",\"asked_model\":", m);
        }
        w.0.push('}');
        w.0
    }
}

/// The object being written. Each field comes with its key as a literal,
/// the separator and colon included (`,"model":`): one copy per field.
struct Writer(String);

impl Writer {
    fn int(&mut self, key: &str, v: i64) {
        self.0.push_str(key);
        self.0.push_str(itoa::Buffer::new().format(v));
    }

    /// A JSON string: copied whole when serde_json would escape nothing in
    /// it (no `"`, `\` or control character), else written by serde_json.
    fn str(&mut self, key: &str, s: &str) {
        if crate::json_scan::needs_no_escape(s.as_bytes()) {
            self.0.push_str(key);
            self.0.reserve(s.len() + 2);
            self.0.push('"');
            self.0.push_str(s);
            self.0.push('"');
        } else {
            self.serde(key, s);
        }
    }

    /// Rare: a string that needs escaping, the anomaly, tags.
    fn serde<T: serde::Serialize + ?Sized>(&mut self, key: &str, v: &T) {
        self.0.push_str(key);
        let json = serde_json::to_string(v).expect("a string or a JSON value serialises");
        self.0.push_str(&json);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::{RawUsage, UsageAnomaly};
    use proptest::prelude::*;

    fn event() -> UsageEvent {
        UsageEvent {
            request_id: "req_019ae3f0c1d27a3b8e5f4c2d1a0b9c8d".into(),
            tenant_id: "acme".into(),
            app_id: "acme-web".into(),
            key_id: "key_01".into(),
            model: "gpt-4o-mini".into(),
            period: "2026-12".into(),
            day: "2026-12-03".into(),
            input_tokens: 13,
            output_tokens: 9,
            cost_micro: 8,
            cost_pico: 7_500_001,
            est_tokens: 77,
            est_cost_micro: 41,
            overrun_tokens: 0,
            overrun_cost_micro: 0,
            status: "ok".into(),
            stream: false,
            usage_source: "provider".into(),
            replica: "host-1".into(),
            started_at_ms: 1_764_770_000_000,
            settled_at_ms: 1_764_770_000_123,
            deployment: Some("primary".into()),
            anomaly: None,
            breakdown: None,
            charges: None,
            raw_usage: RawUsage::from_parsed(br#"{"prompt_tokens":13, "completion_tokens":9}"#),
            attribution: Attribution::default(),
        }
    }

    #[test]
    fn a_typical_event_is_what_serde_writes() {
        let e = event();
        assert_eq!(e.to_json(), serde_json::to_string(&e).unwrap());
    }

    #[test]
    fn strings_that_need_escaping_are_escaped_as_serde_does() {
        for s in [
            "a\"b",
            "back\\slash",
            "new\nline",
            "\u{0}\u{1f}",
            "tab\t",
            "\u{7f}",
            "日本語",
            "emoji 🦀",
            "",
        ] {
            let mut e = event();
            e.model = s.into();
            e.attribution.end_user = Some(s.into());
            assert_eq!(e.to_json(), serde_json::to_string(&e).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn optional_parts_are_written_as_serde_does() {
        let mut e = event();
        e.deployment = None;
        assert_eq!(e.to_json(), serde_json::to_string(&e).unwrap());
        e.anomaly = Some(UsageAnomaly {
            kind: "output_above_cap".into(),
            reported: serde_json::json!({"completion_tokens": 1e30, "x": [null, "\"q\""]}),
        });
        e.attribution.tags = [("team".to_string(), "a\"b".to_string())].into();
        e.attribution.end_user = Some("u-1".into());
        e.breakdown = Some(crate::usage::Breakdown {
            input: 100,
            cached_input: 900,
            served_tier: Some("pri\"ority".into()),
            ..Default::default()
        });
        e.input_tokens = i64::MIN;
        e.output_tokens = i64::MAX;
        assert_eq!(e.to_json(), serde_json::to_string(&e).unwrap());
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9_.-]{0,40}",
            any::<String>(),
            "[\"\\\\\\x00-\\x1f a]{0,8}",
        ]
    }

    proptest! {
        #[test]
        fn any_event_is_written_exactly_as_serde_writes_it(
            strs in proptest::collection::vec(text(), 11),
            ints in proptest::collection::vec(any::<i64>(), 10),
            stream in any::<bool>(),
            deployment in proptest::option::of(text()),
            anomaly in proptest::option::of((text(), text())),
            tags in proptest::collection::btree_map(text(), text(), 0..3),
            end_user in proptest::option::of(text()),
            session in proptest::option::of(text()),
            raw_usage in proptest::option::of((text(), any::<i64>(), 0usize..3)),
        ) {
            let e = UsageEvent {
                request_id: strs[0].clone(),
                tenant_id: strs[1].clone(),
                app_id: strs[2].clone(),
                key_id: strs[3].clone(),
                model: strs[4].clone(),
                period: strs[5].clone(),
                day: strs[6].clone(),
                input_tokens: ints[0],
                output_tokens: ints[1],
                cost_micro: ints[2],
                cost_pico: ints[9],
                est_tokens: ints[3],
                est_cost_micro: ints[4],
                overrun_tokens: ints[5],
                overrun_cost_micro: ints[6],
                status: strs[7].clone(),
                stream,
                usage_source: strs[8].clone(),
                replica: strs[9].clone(),
                started_at_ms: ints[7],
                settled_at_ms: ints[8],
                deployment,
                anomaly: anomaly.map(|(kind, v)| UsageAnomaly {
                    kind,
                    reported: serde_json::json!({ "v": v, "k": strs[10] }),
                }),
                breakdown: (ints[9] % 2 == 0).then(|| crate::usage::Breakdown {
                    cached_input: ints[9].max(0),
                    ..Default::default()
                }),
                charges: (ints[9] % 3 != 0).then(|| {
                    let mut c = crate::charges::Charges::default();
                    c.set(crate::charges::Component::Input, ints[0], i128::from(ints[1]));
                    c.set(crate::charges::Component::WebSearch, ints[3], i128::from(ints[4]));
                    c
                }),
                // As each reader makes it: a value serialised, scanned
                // text with the provider's spacing, or one above the cap.
                raw_usage: raw_usage.map(|(s, n, how)| {
                    let v = serde_json::json!({ "prompt_tokens": n, "note": s });
                    match how {
                        0 => RawUsage::of(&v),
                        1 => RawUsage::from_parsed(
                            format!("{{ \"prompt_tokens\" : {n},\n \"note\": {} }}",
                                serde_json::to_string(&s).unwrap()).as_bytes(),
                        ).unwrap(),
                        _ => RawUsage::of(&serde_json::json!({ "x": s.repeat(4096) + "x".repeat(4096).as_str() })),
                    }
                }),
                attribution: Attribution {
                    tags,
                    end_user,
                    session,
                    asked_model: (ints[0] % 2 == 0).then(|| strs[10].clone()),
                },
            };
            let json = e.to_json();
            prop_assert_eq!(&json, &serde_json::to_string(&e).unwrap());
            let back: UsageEvent = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(back, e);
        }
    }
}
