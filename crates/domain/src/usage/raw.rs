//! The provider's `usage` object as it sent it, kept on every ledger row
//! (issue #44): the breakdown and the price sheet decide what a request is
//! billed; this text is what lets finance re-price history or trace a
//! variance against the provider's invoice later.
//!
//! It is text, not a `serde_json::Value`: on the plain request path the
//! answer scan already has the object's bytes (`json_scan::top_level`), so
//! keeping them is one copy, and the outbox JSON and the ledger's COPY take
//! them verbatim. Only readers that have no text (streams, the parser
//! fallback, translated dialects) serialise a `Value` once.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// Most bytes of usage text a ledger row keeps. A real usage object is a
/// few hundred bytes; one larger than this is a provider bug or abuse, and
/// is stored as `{"truncated":true,"bytes":N}` (N its size) rather than cut
/// into invalid JSON or allowed to bloat every row.
pub const RAW_USAGE_CAP: usize = 4096;

/// A provider's usage object as JSON text: always valid JSON, at most
/// [`RAW_USAGE_CAP`] bytes, and without the escape `\u0000` (Postgres'
/// `jsonb` refuses it, and one such row would fail its whole ledger batch:
/// it is stored as `\ufffd`, the replacement character).
///
/// Serde writes and reads it as the JSON value itself, verbatim (through
/// `serde_json::value::RawValue`), so the outbox event's hand-written JSON
/// (`UsageEvent::to_json`) and serde's agree byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawUsage(String);

impl RawUsage {
    /// Text the caller has already parsed successfully as JSON (the scanned
    /// usage member of an answer): kept as it is, without parsing it again.
    /// Text that is not UTF-8 cannot have parsed, and gives None.
    pub fn from_parsed(text: &[u8]) -> Option<RawUsage> {
        if text.len() > RAW_USAGE_CAP {
            return Some(Self::truncated(text.len()));
        }
        if plain(text) {
            // SAFETY: ASCII bytes are valid UTF-8. And with no backslash
            // there is no escape to clean: the usual usage object (counts
            // and field names) costs one pass and one copy.
            let s = unsafe { std::str::from_utf8_unchecked(text) };
            debug_assert!(serde_json::from_str::<&RawValue>(s).is_ok(), "{s}");
            return Some(RawUsage(s.to_string()));
        }
        let s = std::str::from_utf8(text).ok()?;
        Some(Self::valid(s.to_string()))
    }

    /// Owned text known to be one JSON value: capped and cleaned, no copy.
    fn valid(s: String) -> RawUsage {
        debug_assert!(serde_json::from_str::<&RawValue>(&s).is_ok(), "{s}");
        if s.len() > RAW_USAGE_CAP {
            return Self::truncated(s.len());
        }
        Self::cleaned(s)
    }

    /// A usage object the reader holds only as a value: serialised once.
    pub fn of(v: &serde_json::Value) -> RawUsage {
        // A Value always serialises (its map keys are strings).
        Self::valid(serde_json::to_string(v).unwrap_or_else(|_| "null".into()))
    }

    /// Any text, validated (the ledger's and the outbox's readers); None
    /// when it is not one JSON value.
    pub fn parse(text: &str) -> Option<RawUsage> {
        let v = serde_json::from_str::<&RawValue>(text).ok()?;
        Self::from_parsed(v.get().as_bytes())
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// What stands for a usage object above the cap.
    fn truncated(bytes: usize) -> RawUsage {
        RawUsage(format!("{{\"truncated\":true,\"bytes\":{bytes}}}"))
    }

    /// `s` with every `\u0000` escape made `\ufffd` (same length, still
    /// valid JSON). Escapes are walked pair by pair, so an escaped
    /// backslash followed by `u0000` (the text `\u0000`) is left as it is.
    /// A usage object rarely has a backslash at all, so the usual text
    /// costs one `memchr`.
    fn cleaned(s: String) -> RawUsage {
        if !s.as_bytes().contains(&b'\\') {
            return RawUsage(s);
        }
        let mut b = s.into_bytes();
        let mut i = 0;
        while i + 1 < b.len() {
            if b[i] != b'\\' {
                i += 1;
                continue;
            }
            if b[i + 1] == b'u' && b.get(i + 2..i + 6) == Some(b"0000") {
                b[i + 2..i + 6].copy_from_slice(b"fffd");
            }
            // Past the escape's first two bytes (`\\`, `\"`, `\u`, …).
            i += 2;
        }
        // Only ASCII hex digits were replaced by ASCII hex digits.
        RawUsage(String::from_utf8(b).expect("still UTF-8"))
    }

    /// Text read back from storage (the outbox, the ledger): cleaned, not
    /// capped again — Postgres hands `jsonb` back re-spaced, so an object
    /// stored whole just under the cap may come back a little over it.
    fn stored(s: String) -> RawUsage {
        debug_assert!(serde_json::from_str::<&RawValue>(&s).is_ok(), "{s}");
        Self::cleaned(s)
    }
}

/// Whether `b` is all ASCII without a backslash, eight bytes at a time
/// (the usual usage object: the answer scan's path, once per request;
/// cheaper than `str::from_utf8` and a search for `\\` one after the other).
fn plain(b: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const BACKSLASH: u64 = 0x5c5c_5c5c_5c5c_5c5c;
    let mut words = b.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().expect("eight bytes"));
        // A byte is 0 in `x` where it was a backslash; the classic "has a
        // zero byte" test. Both tests may only err towards "not plain"
        // (then the careful path runs), never the other way.
        let x = w ^ BACKSLASH;
        if (w | (x.wrapping_sub(ONES) & !x)) & HIGH != 0 {
            return false;
        }
    }
    words
        .remainder()
        .iter()
        .all(|&c| c.is_ascii() && c != b'\\')
}

impl Serialize for RawUsage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Valid by construction; a RawValue is written verbatim.
        let raw = serde_json::from_str::<&RawValue>(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RawUsage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // The outbox reader's path, once per event: the value's text is
        // found (skipped over, not built) and taken as it is.
        let raw = Box::<RawValue>::deserialize(d)?;
        Ok(RawUsage::stored(Box::<str>::from(raw).into_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scanned_text_is_kept_verbatim() {
        let text = br#"{ "prompt_tokens": 12,
            "completion_tokens": 3 }"#;
        let r = RawUsage::from_parsed(text).unwrap();
        assert_eq!(r.as_str().as_bytes(), text);
        // Serde writes it as the value itself, unchanged.
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json.as_bytes(), text);
        let back: RawUsage = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn a_value_is_serialised_once() {
        let r = RawUsage::of(&json!({"input_tokens": 5, "output_tokens": 2}));
        assert_eq!(r.as_str(), r#"{"input_tokens":5,"output_tokens":2}"#);
    }

    #[test]
    fn a_usage_object_above_the_cap_is_stored_as_its_size() {
        let big = json!({ "prompt_tokens": 1, "x": "a".repeat(RAW_USAGE_CAP) });
        let n = serde_json::to_string(&big).unwrap().len();
        let r = RawUsage::of(&big);
        assert_eq!(r.as_str(), format!(r#"{{"truncated":true,"bytes":{n}}}"#));
        let text = serde_json::to_string(&big).unwrap();
        assert_eq!(RawUsage::from_parsed(text.as_bytes()).unwrap(), r);
        // The marker is itself valid JSON.
        let v: serde_json::Value = serde_json::from_str(r.as_str()).unwrap();
        assert_eq!(v, json!({"truncated": true, "bytes": n}));
        // Exactly at the cap is kept whole.
        let pad = RAW_USAGE_CAP - r#"{"x":""}"#.len();
        let at = format!(r#"{{"x":"{}"}}"#, "b".repeat(pad));
        assert_eq!(at.len(), RAW_USAGE_CAP);
        assert_eq!(RawUsage::from_parsed(at.as_bytes()).unwrap().as_str(), at);
    }

    /// What Postgres hands back is re-spaced (`"a": 1, "b": 2`): an object
    /// stored whole just under the cap is read back whole, not as the
    /// marker.
    #[test]
    fn an_object_read_back_longer_than_the_cap_is_kept() {
        let members: Vec<String> = (0..400).map(|i| format!("\"k{i:03}\":1")).collect();
        let compact = format!("{{{}}}", members.join(","));
        assert!(compact.len() <= RAW_USAGE_CAP);
        assert!(RawUsage::from_parsed(compact.as_bytes()).unwrap().as_str() == compact);
        let spaced = format!("{{{}}}", members.join(", ").replace(':', ": "));
        assert!(spaced.len() > RAW_USAGE_CAP);
        let back: RawUsage = serde_json::from_str(&spaced).unwrap();
        assert_eq!(back.as_str(), spaced);
    }

    #[test]
    fn only_a_real_nul_escape_is_replaced() {
        // The text `\u0000` (an escaped backslash, then "u0000") is not a NUL.
        let literal = r#"{"note":"a\\u0000b"}"#;
        assert_eq!(
            RawUsage::from_parsed(literal.as_bytes()).unwrap().as_str(),
            literal
        );
        let mixed = r#"{"a":"\\\u0000","b":"\"\u0000"}"#;
        assert_eq!(
            RawUsage::from_parsed(mixed.as_bytes()).unwrap().as_str(),
            r#"{"a":"\\\ufffd","b":"\"\ufffd"}"#
        );
        let v: serde_json::Value =
            serde_json::from_str(RawUsage::from_parsed(mixed.as_bytes()).unwrap().as_str())
                .unwrap();
        assert_eq!(v["a"], "\\\u{fffd}");
        assert_eq!(v["b"], "\"\u{fffd}");
    }

    #[test]
    fn a_nul_escape_is_replaced_so_jsonb_takes_it() {
        let r = RawUsage::of(&json!({"note": "a\u{0}b"}));
        assert_eq!(r.as_str(), r#"{"note":"a\ufffdb"}"#);
        let v: serde_json::Value = serde_json::from_str(r.as_str()).unwrap();
        assert_eq!(v["note"], "a\u{fffd}b");
    }

    #[test]
    fn plain_text_is_ascii_without_a_backslash() {
        for len in 0..40 {
            let text = vec![b'a'; len];
            assert!(plain(&text), "{len}");
            for at in 0..len {
                for bad in [b'\\', 0x80, 0xff, 0xc3] {
                    let mut t = text.clone();
                    t[at] = bad;
                    assert!(!plain(&t), "{len} {at} {bad}");
                }
                // Bytes near a backslash's or the high bit's value are plain.
                for ok in [b'[', b']', b'\\' - 1, b'\\' + 1, 0x7f, 0, b'"'] {
                    let mut t = text.clone();
                    t[at] = ok;
                    assert!(plain(&t), "{len} {at} {ok}");
                }
            }
        }
        // Not plain: kept the careful way, same result.
        let r = RawUsage::from_parsed("{\"n\":\"é\\u0000\"}".as_bytes()).unwrap();
        assert_eq!(r.as_str(), "{\"n\":\"é\\ufffd\"}");
    }

    #[test]
    fn only_json_parses() {
        assert!(RawUsage::parse("{\"a\":1}").is_some());
        assert!(RawUsage::parse("{\"a\":").is_none());
        assert!(RawUsage::parse("").is_none());
        assert!(serde_json::from_str::<RawUsage>("{\"a\":}").is_err());
    }
}
