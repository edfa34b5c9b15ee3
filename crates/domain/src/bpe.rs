//! Counting tokens with one table instead of three.
//!
//! tiktoken-rs's `CoreBPE` keeps every token of an encoding three times —
//! an encoder map, a decoder map and a sorted copy for its "unstable"
//! encoder — plus 128 copies of its split regex: o200k costs ~46 MB of
//! resident memory, cl100k ~24 MB (`examples/tokenizer_rss.rs`). The gateway
//! only counts, so it keeps the encoder alone (bytes → rank), built once
//! from a temporary `CoreBPE` that is then dropped, and one regex. The
//! encoder is one flat table: every token's bytes in one buffer and an
//! index of 4-byte entries (`Ranks`), ~5 MB for o200k where a map of
//! `Vec<u8>` keys took ~25 MB (one allocation per token). The merge is the
//! textbook BPE loop (`merged_len`): merge the adjacent pair whose bytes
//! have the lowest rank, leftmost first, until no pair is a token.
//!
//! Counts equal tiktoken's `encode_ordinary(text).len()` exactly for every
//! text whose split pieces are at most `LONG_PIECE` bytes — prose and code,
//! in practice every piece (the tests check this against tiktoken-rs as the
//! oracle). A longer piece (a run of letters, digits or symbols with no
//! space: `-=-=…`, `aaaa…`, a long CJK run) is counted in windows of
//! `LONG_PIECE` bytes, because the merge tiktoken-rs exposes is quadratic in
//! the piece's length. That count is never lower than tiktoken's and at most
//! a quarter higher (tested; `"-=" × 2,000`: 314 against 254; `"的" × 3,000`:
//! 3,036 against 3,000; runs of one letter: equal) — an estimate errs high,
//! which a hold tolerates. It is also faster: a 1 MB piece in 45–62 ms
//! against tiktoken-rs's 72–317 ms (release build, this machine).
//!
//! The split runs on the `regex` crate's DFA rather than `fancy-regex`'s
//! backtracking VM, which was ~4 % of the gateway's CPU on short chat
//! messages (bench/results/2026-11-30-bench.md). tiktoken's patterns need
//! fancy-regex for one construct, `\s+(?!\S)` (and, in cl100k, possessive
//! quantifiers that change nothing there): "a run of whitespace, but leave
//! its last character to the next piece when a non-space follows". The
//! lookahead-free pattern matches the whole run with `\s+`, and `count`
//! gives the last character back (`lookahead_end`); the tests check the
//! pieces against tiktoken's.

use hashbrown::HashTable;
use regex::Regex;
use rustc_hash::FxHasher;
use std::collections::HashSet;
use std::hash::Hasher;
use tiktoken_rs::{CoreBPE, Rank};

/// Pieces longer than this are counted in windows of this many bytes.
pub const LONG_PIECE: usize = 256;

/// o200k_base's split pattern as tiktoken-rs has it (fancy-regex syntax).
pub const O200K_PATTERN: &str = tiktoken_rs::O200K_BASE_PAT_STR;

/// cl100k_base's split pattern, as tiktoken-rs builds it (not exported).
pub const CL100K_PATTERN: &str = "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$|\\s*[\\r\\n]|\\s+(?!\\S)|\\s";

/// A tiktoken pattern in the `regex` crate's syntax: possessive quantifiers
/// made plain (each one in these patterns is followed by nothing it could
/// give back to), and `\s+(?!\S)` with the plain alternative after it
/// (`\s+` or `\s`) become one `\s+`, whose last character `count` gives
/// back when a non-space follows.
pub fn without_lookahead(pattern: &str) -> String {
    let mut p = pattern
        .replace("?+", "?")
        .replace("++", "+")
        .replace("*+", "*")
        .replace("{1,3}+", "{1,3}");
    for tail in ["\\s+(?!\\S)|\\s+", "\\s+(?!\\S)|\\s"] {
        if p.ends_with(tail) {
            p.truncate(p.len() - tail.len());
            p.push_str("\\s+");
            return p;
        }
    }
    panic!("not a tiktoken split pattern: {pattern}");
}

/// Where a piece the plain pattern matched ends under tiktoken's pattern:
/// a run of whitespace with no line break in it, followed by a non-space,
/// leaves its last character to the next piece (`\s+(?!\S)`). A single
/// whitespace character stays (tiktoken's plain `\s`/`\s+` takes it).
fn lookahead_end(text: &str, start: usize, end: usize) -> usize {
    if end >= text.len() {
        return end;
    }
    let piece = &text[start..end];
    let mut chars = piece.chars();
    let Some(last) = chars.next_back() else {
        return end;
    };
    let run_of_spaces = !matches!(last, '\r' | '\n')
        && last.is_whitespace()
        && chars.clone().next().is_some()
        && chars.all(char::is_whitespace);
    if run_of_spaces {
        end - last.len_utf8()
    } else {
        end
    }
}

/// Token bytes → rank, flat: `bytes` holds every token, `spans[i]` is
/// entry i's (offset, length) in it and `ranks[i]` its rank; `index` finds
/// an entry by the hash of its bytes.
struct Ranks {
    bytes: Vec<u8>,
    spans: Vec<(u32, u32)>,
    ranks: Vec<Rank>,
    index: HashTable<u32>,
}

/// The bytes of the entry at `span` (offset, length).
fn span_bytes(bytes: &[u8], (offset, len): (u32, u32)) -> &[u8] {
    &bytes[offset as usize..(offset + len) as usize]
}

fn hash(bytes: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(bytes);
    h.finish()
}

impl Ranks {
    fn new(bytes: Vec<u8>, tokens: &[(usize, usize, Rank)]) -> Self {
        let mut t = Self {
            bytes,
            spans: Vec::with_capacity(tokens.len()),
            ranks: Vec::with_capacity(tokens.len()),
            index: HashTable::with_capacity(tokens.len()),
        };
        for &(at, len, rank) in tokens {
            let i = t.spans.len() as u32;
            t.spans.push((at as u32, len as u32));
            t.ranks.push(rank);
            let (spans, bytes) = (&t.spans, &t.bytes);
            let entry = |j: u32| span_bytes(bytes, spans[j as usize]);
            t.index
                .insert_unique(hash(entry(i)), i, |&j| hash(entry(j)));
        }
        t
    }

    fn entry(&self, i: u32) -> &[u8] {
        span_bytes(&self.bytes, self.spans[i as usize])
    }

    fn get(&self, token: &[u8]) -> Option<Rank> {
        self.index
            .find(hash(token), |&i| self.entry(i) == token)
            .map(|&i| self.ranks[i as usize])
    }

    fn len(&self) -> usize {
        self.spans.len()
    }
}

/// An encoding's ordinary tokens and split pattern, for counting.
pub struct CountingBpe {
    ranks: Ranks,
    split: Regex,
}

impl CountingBpe {
    /// Copies `bpe`'s ordinary tokens (not its special tokens, which
    /// `encode_ordinary` never produces), then drops `bpe`.
    pub fn from_core(bpe: CoreBPE, pattern: &str) -> Self {
        // First into one buffer, so that nothing of ours sits between the
        // CoreBPE's allocations: its pages are then wholly free once it is
        // dropped, and go back to the OS.
        let special: HashSet<Vec<u8>> = bpe
            .special_tokens()
            .into_iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let (mut all, mut tokens) = (Vec::new(), Vec::new());
        // Ranks are dense with a few gaps (before the special tokens).
        let (mut rank, mut missing) = (0, 0);
        while missing < 1_000 {
            match bpe.decode_bytes(&[rank]) {
                Ok(bytes) => {
                    missing = 0;
                    if !special.contains(&bytes) {
                        tokens.push((all.len(), bytes.len(), rank));
                        all.extend_from_slice(&bytes);
                    }
                }
                Err(_) => missing += 1,
            }
            rank += 1;
        }
        drop(bpe);
        all.shrink_to_fit();
        Self {
            ranks: Ranks::new(all, &tokens),
            split: Regex::new(&without_lookahead(pattern))
                .expect("tiktoken's split patterns compile"),
        }
    }

    /// Ordinary tokens in the encoding.
    pub fn vocabulary(&self) -> usize {
        self.ranks.len()
    }

    /// Tokens in `text`: tiktoken's count (see the module notes for pieces
    /// longer than `LONG_PIECE`).
    pub fn count(&self, text: &str) -> u64 {
        let mut n = 0;
        let mut at = 0;
        while let Some(m) = self.split.find_at(text, at) {
            let end = lookahead_end(text, m.start(), m.end());
            n += self.count_piece(&text.as_bytes()[m.start()..end]);
            at = end;
        }
        n
    }

    fn count_piece(&self, piece: &[u8]) -> u64 {
        // A piece of one window is looked up once, in the window.
        if piece.len() > LONG_PIECE && self.ranks.get(piece).is_some() {
            return 1;
        }
        piece
            .chunks(LONG_PIECE)
            .map(|w| {
                if w.len() == 1 || self.ranks.get(w).is_some() {
                    1
                } else {
                    self.merged_len(w) as u64
                }
            })
            .sum()
    }

    /// How many tokens BPE makes of `piece`: start from single bytes and
    /// merge the adjacent pair whose joined bytes have the lowest rank (the
    /// leftmost of equals) until no adjacent pair is a token.
    fn merged_len(&self, piece: &[u8]) -> usize {
        // Part k is piece[starts[k]..starts[k + 1]]; pair[k] is the rank of
        // part k joined with part k + 1 (Rank::MAX: not a token).
        let mut starts: Vec<usize> = (0..=piece.len()).collect();
        let joined = |starts: &[usize], k: usize| match starts.get(k + 2) {
            Some(&end) => self.ranks.get(&piece[starts[k]..end]).unwrap_or(Rank::MAX),
            None => Rank::MAX,
        };
        let mut pair: Vec<Rank> = (0..piece.len()).map(|k| joined(&starts, k)).collect();
        while let Some((k, &best)) = pair.iter().enumerate().min_by_key(|&(_, r)| *r) {
            if best == Rank::MAX {
                break;
            }
            starts.remove(k + 1);
            pair.remove(k + 1);
            pair[k] = joined(&starts, k);
            if k > 0 {
                pair[k - 1] = joined(&starts, k - 1);
            }
        }
        starts.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::{cl100k, o200k};
    use proptest::prelude::*;

    fn oracle(family: &str, text: &str) -> u64 {
        let bpe = match family {
            "o200k" => tiktoken_rs::o200k_base_singleton(),
            _ => tiktoken_rs::cl100k_base_singleton(),
        };
        bpe.encode_ordinary(text).len() as u64
    }

    fn both() -> [(&'static str, &'static CountingBpe); 2] {
        [("o200k", o200k()), ("cl100k", cl100k())]
    }

    fn assert_counts_equal_tiktoken(texts: &[&str]) {
        for (name, t) in both() {
            for text in texts {
                assert_eq!(t.count(text), oracle(name, text), "{name}: {text:?}");
            }
        }
    }

    #[test]
    fn the_plain_patterns_drop_only_the_lookahead() {
        assert_eq!(
            without_lookahead(CL100K_PATTERN),
            "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s+$|\\s*[\\r\\n]|\\s+"
        );
        let o = without_lookahead(O200K_PATTERN);
        assert!(o.ends_with("|\\s*[\\r\\n]+|\\s+"), "{o}");
        assert_eq!(o.len(), O200K_PATTERN.len() - "\\s+(?!\\S)|".len());
    }

    #[test]
    fn whitespace_runs_split_as_tiktoken_splits_them() {
        let texts = [
            "a  b",
            "a   b",
            "a \t b",
            "a\u{3000}\u{3000}b",
            "a \n  b",
            "a  \n\n  b  ",
            "  ",
            " x",
            "x ",
            "x  ",
            "\t\tx",
            "a\u{a0} b",
            "a \r\n b",
        ];
        assert_counts_equal_tiktoken(&texts);
    }

    #[test]
    fn the_vocabularies_are_whole_without_special_tokens() {
        assert_eq!(o200k().vocabulary(), 199_998);
        assert_eq!(cl100k().vocabulary(), 100_256);
    }

    #[test]
    fn counts_equal_tiktoken_on_prose_code_and_other_scripts() {
        let texts = [
            "",
            "Hello, world!",
            "Say hello in one short sentence please.",
            "  leading and trailing spaces  \n\n\tand tabs",
            "fn main() { println!(\"{}\", 1 + 2); } // código",
            "数据库连接池的最大连接数是多少？请用中文回答。",
            "Ünïcödé façade — naïve résumé, 東京 and Москва; emoji 🎉🚀 👩‍👩‍👧",
            "I'm sure they'll say we've done it; don't they'd?",
            "12345678901234567890 3.14159 1e-9 0xDEADBEEF",
            "<|endoftext|> is only text here",
            "line one\r\nline two\r\n\r\n   \n",
        ];
        assert_counts_equal_tiktoken(&texts);
    }

    #[test]
    fn a_long_piece_is_never_counted_below_tiktoken_and_stays_close() {
        let b64: String = (0..6_000)
            .map(|i| {
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[i * 7 % 64]
                    as char
            })
            .collect();
        for (name, t) in both() {
            for text in [
                b64.as_str(),
                &"a".repeat(5_000),
                &"的".repeat(3_000),
                &"-=".repeat(2_000),
            ] {
                let (ours, exact) = (t.count(text), oracle(name, text));
                let windows = text.len().div_ceil(LONG_PIECE) as u64;
                assert!(ours >= exact, "{name}: {ours} < {exact}");
                assert!(
                    ours <= exact * 5 / 4 + windows,
                    "{name}: {ours} against {exact}"
                );
            }
        }
    }

    fn texts() -> impl Strategy<Value = String> {
        // Letters, digits, punctuation, whitespace, CJK, accents and emoji,
        // in short runs: the pieces stay under LONG_PIECE.
        proptest::collection::vec(
            prop_oneof![
                "[a-zA-Z]{1,12}",
                "[0-9]{1,7}",
                "[ \\t\\r\\n]{1,4}",
                "[ \\t\\u{a0}\\u{2003}\\u{3000}\\u{b}\\u{c}]{1,5}",
                "[!-/:-@\\[-`{-~]{1,4}",
                "[\\u{4e00}-\\u{4e80}]{1,6}",
                "[àéîõüßçñ]{1,5}",
                "[\\u{1F600}-\\u{1F64F}]{1,3}",
                "'(s|t|re|ve|m|ll|d)",
            ],
            0..40,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]
        #[test]
        fn counts_equal_tiktoken_on_random_text(text in texts()) {
            for (name, t) in both() {
                prop_assert_eq!(t.count(&text), oracle(name, &text), "{}: {:?}", name, text);
            }
        }
    }
}
