//! A few top-level members of a JSON object, found without parsing the rest.
//!
//! The gateway reads a whole answer only for its `usage` (and the served
//! `service_tier` beside it); everything else — the choices, the content —
//! goes to the client as the provider sent it. A general parser walks every
//! byte of that content through its tokenizer (and builds nothing from it);
//! this scan only tracks strings and nesting, finding the next quote,
//! bracket or escape sixteen bytes at a time (SSE2, on every x86-64; a table
//! lookup a byte elsewhere), so the content between them costs well under an
//! instruction a byte. It is a fast path, never the only path: any
//! body it cannot read plainly (not an object, a wanted key spelled with an
//! escape or given twice, a truncated value) is answered `None`, and the
//! caller parses the body the ordinary way. On well-formed JSON its answer is
//! what a parser finds (the unit and property tests below check it against
//! `serde_json`). It is not a validator: brackets must match, but a bad
//! literal or number inside content it skips goes unnoticed — the members
//! it returns are parsed strictly by the caller.

/// The raw text of each of `keys` at the top level of the object `body`
/// (`None` for a key it does not have), or `None` when the body must be read
/// by a parser instead.
pub fn top_level<'a, const N: usize>(
    body: &'a [u8],
    keys: [&str; N],
) -> Option<[Option<&'a [u8]>; N]> {
    let mut found: [Option<&'a [u8]>; N] = [None; N];
    let mut i = skip_ws(body, 0);
    if body.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(body, i + 1);
    if body.get(i) == Some(&b'}') {
        return trailing_ws_only(body, i + 1).then_some(found);
    }
    loop {
        if body.get(i) != Some(&b'"') {
            return None;
        }
        let (key_end, escaped) = string_end_escaped(body, i)?;
        if escaped {
            // An escaped key may spell a wanted one: a parser decides.
            return None;
        }
        let key = &body[i + 1..key_end - 1];
        i = skip_ws(body, key_end);
        if body.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(body, i + 1);
        let value_end = value_end(body, i)?;
        if let Some(slot) = keys.iter().position(|k| k.as_bytes() == key) {
            if found[slot].is_some() {
                return None;
            }
            found[slot] = Some(&body[i..value_end]);
        }
        i = skip_ws(body, value_end);
        match body.get(i) {
            Some(b',') => i = skip_ws(body, i + 1),
            Some(b'}') => return trailing_ws_only(body, i + 1).then_some(found),
            _ => return None,
        }
    }
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn skip_ws(body: &[u8], mut i: usize) -> usize {
    while i < body.len() && is_ws(body[i]) {
        i += 1;
    }
    i
}

fn trailing_ws_only(body: &[u8], i: usize) -> bool {
    skip_ws(body, i) == body.len()
}

/// Bytes a scan must stop at: in a string, its end, an escape or a control
/// character (not allowed raw); outside, a string or a bracket.
const IN_STRING: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};
const IN_NESTING: [bool; 256] = {
    let mut t = [false; 256];
    t[b'"' as usize] = true;
    t[b'{' as usize] = true;
    t[b'[' as usize] = true;
    t[b'}' as usize] = true;
    t[b']' as usize] = true;
    t
};

/// The first byte at or after `i` that `stop` marks. Sixteen bytes at a
/// time where the CPU has SSE2 (every x86-64 does: [`wide`]), so the
/// content between stops costs well under an instruction a byte; other
/// CPUs, a table lookup a byte.
fn next_stop(body: &[u8], mut i: usize, stop: Stop) -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        let len = body.len();
        while i + 16 <= len {
            let m = wide::stops(&body[i..i + 16], stop);
            if m != 0 {
                return Some(i + m.trailing_zeros() as usize);
            }
            i += 16;
        }
        if i >= len {
            return None;
        }
        // The last few bytes: the body's last sixteen with the bytes before
        // `i` shifted out, or (a body shorter than that) a copy padded with
        // a byte that is no stop, its padding masked off.
        let m = if len >= 16 {
            wide::stops(&body[len - 16..], stop) >> (i - (len - 16))
        } else {
            let mut chunk = [b'a'; 16];
            chunk[..len - i].copy_from_slice(&body[i..]);
            wide::stops(&chunk, stop) & ((1u32 << (len - i)) - 1)
        };
        return (m != 0).then(|| i + m.trailing_zeros() as usize);
    }
    #[allow(unreachable_code)]
    let table = match stop {
        Stop::InString => &IN_STRING,
        Stop::InNesting => &IN_NESTING,
    };
    body.get(i..)?
        .iter()
        .position(|&b| table[usize::from(b)])
        .map(|n| i + n)
}

/// Which bytes a scan stops at: [`IN_STRING`]'s or [`IN_NESTING`]'s.
#[derive(Clone, Copy)]
enum Stop {
    InString,
    InNesting,
}

/// The stop tables sixteen bytes at a time, with SSE2: a byte compared
/// with each stop byte at once, the matches as a bit mask (bit n for byte
/// n). Each mask is exactly its table's set (the unit tests check every
/// byte value in every position).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod wide {
    use super::Stop;
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };

    /// The stop bytes of `chunk` (16 bytes) as a mask.
    pub(super) fn stops(chunk: &[u8], stop: Stop) -> u32 {
        let chunk: &[u8; 16] = chunk.try_into().expect("sixteen bytes");
        // SAFETY: SSE2 is enabled for this target (the cfg above); the load
        // reads the 16 bytes of `chunk` (unaligned loads are allowed).
        unsafe {
            let x = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
            let quote = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'"' as i8));
            let m = match stop {
                Stop::InString => {
                    let escape = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'\\' as i8));
                    // Below 0x20: min(x, 0x1f) == x, unsigned.
                    let control = _mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(0x1f)), x);
                    _mm_or_si128(quote, _mm_or_si128(escape, control))
                }
                Stop::InNesting => {
                    // With bit 5 set, `[` `]` become `{` `}`, and only
                    // these four bytes become either.
                    let y = _mm_or_si128(x, _mm_set1_epi8(0x20));
                    let open = _mm_cmpeq_epi8(y, _mm_set1_epi8(b'{' as i8));
                    let close = _mm_cmpeq_epi8(y, _mm_set1_epi8(b'}' as i8));
                    _mm_or_si128(quote, _mm_or_si128(open, close))
                }
            };
            _mm_movemask_epi8(m) as u32
        }
    }
}

/// Whether `s` can be written as a JSON string's content as it is: no
/// quote, backslash or control character in it (what a serialiser would
/// escape; it does not escape other bytes).
pub fn needs_no_escape(s: &[u8]) -> bool {
    next_stop(s, 0, Stop::InString).is_none()
}

/// Just past the closing quote of the string that opens at `start`.
fn string_end(body: &[u8], start: usize) -> Option<usize> {
    string_end_escaped(body, start).map(|(end, _)| end)
}

/// [`string_end`], and whether the string has an escape in it.
fn string_end_escaped(body: &[u8], start: usize) -> Option<(usize, bool)> {
    let mut i = start + 1;
    let mut escaped = false;
    loop {
        i = next_stop(body, i, Stop::InString)?;
        match body[i] {
            b'"' => return Some((i + 1, escaped)),
            b'\\' => {
                escaped = true;
                i += 2;
            }
            // Control characters are not allowed raw in a JSON string.
            _ => return None,
        }
    }
}

/// Just past the value that starts at `start`: a string, an object or array
/// (nesting counted, strings skipped), or a literal or number (up to the
/// next delimiter). Not a validation: the wanted values are parsed by the
/// caller, and a body that is not JSON fails the client, not the books.
fn value_end(body: &[u8], start: usize) -> Option<usize> {
    match *body.get(start)? {
        b'"' => string_end(body, start),
        b'{' | b'[' => {
            // The open brackets, innermost in the low bit (1 for `{`): a
            // closer must match its opener; deeper than 64 is left to the
            // parser.
            let (mut open, mut depth) = (0u64, 0u32);
            let mut i = start;
            loop {
                i = next_stop(body, i, Stop::InNesting)?;
                match body[i] {
                    b'"' => {
                        i = string_end(body, i)?;
                        continue;
                    }
                    b @ (b'{' | b'[') => {
                        if depth == 64 {
                            return None;
                        }
                        open = open << 1 | u64::from(b == b'{');
                        depth += 1;
                    }
                    b => {
                        if (open & 1 == 1) != (b == b'}') {
                            return None;
                        }
                        open >>= 1;
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                }
                i += 1;
            }
        }
        _ => {
            let mut i = start;
            while i < body.len() && !matches!(body[i], b',' | b'}' | b']') && !is_ws(body[i]) {
                i += 1;
            }
            (i > start).then_some(i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Map, Value};

    fn scan<'a>(body: &'a str, keys: [&str; 2]) -> Option<[Option<&'a str>; 2]> {
        top_level(body.as_bytes(), keys)
            .map(|f| f.map(|v| v.map(|s| std::str::from_utf8(s).unwrap())))
    }

    #[test]
    fn finds_the_members_of_a_chat_answer() {
        let body = r#"{"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant","content":"a \"usage\": {\"x\":1} ]}"},"finish_reason":"stop"}],
            "usage" : {"prompt_tokens":12,"completion_tokens":11,"prompt_tokens_details":{"cached_tokens":0}},"service_tier":"default"} "#;
        let [u, t] = scan(body, ["usage", "service_tier"]).unwrap();
        assert_eq!(
            u,
            Some(
                r#"{"prompt_tokens":12,"completion_tokens":11,"prompt_tokens_details":{"cached_tokens":0}}"#
            )
        );
        assert_eq!(t, Some(r#""default""#));
        assert_eq!(
            scan(r#"{"usage":null}"#, ["usage", "x"]),
            Some([Some("null"), None])
        );
        assert_eq!(scan(r#" { } "#, ["usage", "x"]), Some([None, None]));
        assert_eq!(
            scan(r#"{"a":-1.5e3,"usage":7}"#, ["usage", "a"]),
            Some([Some("7"), Some("-1.5e3")])
        );
    }

    #[test]
    fn leaves_to_a_parser_what_it_cannot_read_plainly() {
        for body in [
            "",
            "[]",
            r#"{"usage":1,"usage":2}"#,
            r#"{"us\u0061ge":1}"#,
            r#"{"usage":{"a":1}"#,
            r#"{"usage":"open}"#,
            r#"{"usage" 1}"#,
            r#"{"usage":1,}"#,
            r#"{"usage":1} x"#,
            r#"{"a":[1}],"usage":1}"#,
            r#"{"a":{"b":[}]},"usage":1}"#,
            r#"{"usage":}"#,
            "{\"a\":\"raw\ncontrol\"}",
        ] {
            assert_eq!(scan(body, ["usage", "x"]), None, "{body}");
        }
    }

    /// Any JSON value, with keys drawn from a small set so that wanted
    /// ones turn up at every depth.
    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[ -~\\\\\"\u{e9}\u{1F600}\n]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec((key(), inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("usage".to_string()),
            Just("service_tier".to_string()),
            "[a-z_\"\\\\]{0,8}",
        ]
    }

    /// Every byte value at every position of a chunk long enough for the
    /// sixteen-at-a-time path: the stop found is the first one the tables
    /// mark, for both kinds of stop; and the escape check agrees with
    /// serde_json's writer.
    #[test]
    fn the_wide_path_stops_where_the_tables_do() {
        for b in 0..=255u8 {
            for (len, at) in [1, 2, 15, 16, 17, 31, 40]
                .into_iter()
                .flat_map(|len| (0..len).map(move |at| (len, at)))
            {
                let mut body = vec![b'a'; len];
                body[at] = b;
                for (stop, table) in [(Stop::InString, &IN_STRING), (Stop::InNesting, &IN_NESTING)]
                {
                    let want = table[usize::from(b)].then_some(at);
                    assert_eq!(next_stop(&body, 0, stop), want, "byte {b:#x} at {at}");
                    let from = at.saturating_sub(3);
                    assert_eq!(next_stop(&body, from, stop), want, "from {from}");
                    // From inside the chunk, past the byte: nothing.
                    assert_eq!(next_stop(&body, at + 1, stop), None);
                }
            }
            for s in [char::from(b).to_string(), format!("{:0>20}", char::from(b))] {
                if b.is_ascii() {
                    let plain = serde_json::to_string(&s).unwrap() == format!("\"{s}\"");
                    assert_eq!(needs_no_escape(s.as_bytes()), plain, "byte {b:#x}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_parser(
            members in prop::collection::vec((key(), value()), 0..8),
            pretty in any::<bool>(),
        ) {
            let obj = Value::Object(members.into_iter().collect::<Map<_, _>>());
            let body = if pretty {
                serde_json::to_string_pretty(&obj).unwrap()
            } else {
                serde_json::to_string(&obj).unwrap()
            };
            // What a parser reads of the text (floats as it rounds them).
            let read: Value = serde_json::from_str(&body).unwrap();
            let escaped = obj
                .as_object()
                .unwrap()
                .keys()
                .any(|k| k.contains(['"', '\\']));
            let Some(found) = top_level(body.as_bytes(), ["usage", "service_tier"]) else {
                // Only a key written with an escape is left to the parser.
                prop_assert!(escaped, "well-formed JSON with plain keys is read: {}", body);
                return Ok(());
            };
            for (slot, k) in found.iter().zip(["usage", "service_tier"]) {
                let parsed = slot.map(|s| serde_json::from_slice::<Value>(s).unwrap());
                prop_assert_eq!(parsed.as_ref(), read.get(k));
            }
        }

        #[test]
        fn never_panics_on_bytes(body in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = top_level(&body, ["usage", "service_tier"]);
        }
    }

    #[test]
    fn nesting_deeper_than_it_tracks_is_left_to_the_parser() {
        let nested = |n: usize| format!(r#"{{"a":{}{},"usage":1}}"#, "[".repeat(n), "]".repeat(n));
        assert_eq!(scan(&nested(64), ["usage", "x"]), Some([Some("1"), None]));
        assert_eq!(scan(&nested(65), ["usage", "x"]), None);
    }

    #[test]
    fn a_wanted_value_found_twice_is_left_to_the_parser() {
        let body = json!({"usage": 1}).to_string();
        let twice = format!("{}, \"usage\": 2}}", body.trim_end_matches('}'));
        assert_eq!(scan(&twice, ["usage", "x"]), None);
    }
}
