//! The longest free text a person may give the control plane: one table,
//! used by the admin API (a 400 naming the field and the maximum) and the
//! console (the same refusal beside the field, and `maxlength` on the
//! input). Lengths count characters (Unicode scalar values), not bytes.

/// A kind of free text and its maximum length in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextLimit {
    /// What the text is (`reason`, `note`, …), for documentation and tests.
    pub kind: &'static str,
    pub max_chars: usize,
}

/// Why something was asked for or done: a quota request's reason, a limits
/// restore's reason.
pub const REASON: TextLimit = TextLimit {
    kind: "reason",
    max_chars: 2000,
};
/// A decider's note on a quota request.
pub const NOTE: TextLimit = TextLimit {
    kind: "note",
    max_chars: 2000,
};
/// A tenant's, app's or model's display name.
pub const NAME: TextLimit = TextLimit {
    kind: "name",
    max_chars: 200,
};
/// A tenant's cost centre.
pub const COST_CENTER: TextLimit = TextLimit {
    kind: "cost_center",
    max_chars: 100,
};
/// A virtual key's name.
pub const KEY_NAME: TextLimit = TextLimit {
    kind: "key_name",
    max_chars: 100,
};
/// An email address (RFC 5321's path limit).
pub const EMAIL: TextLimit = TextLimit {
    kind: "email",
    max_chars: 254,
};

/// Every limit of the table (documentation and tests walk it).
pub const ALL: &[TextLimit] = &[REASON, NOTE, NAME, COST_CENTER, KEY_NAME, EMAIL];

impl TextLimit {
    /// `Err(length in characters)` when `text` is longer than the maximum.
    pub fn check(self, text: &str) -> Result<(), usize> {
        // Cheap first: a text of at most `max` bytes has at most `max` chars.
        if text.len() <= self.max_chars {
            return Ok(());
        }
        match text.chars().count() {
            n if n > self.max_chars => Err(n),
            _ => Ok(()),
        }
    }
}

/// At most `max` characters of `text`, cut on a character boundary, with
/// `…` appended when something was cut (a page shows the rest on demand).
pub fn clip(text: &str, max: usize) -> (&str, bool) {
    match text.char_indices().nth(max) {
        Some((i, _)) => (&text[..i], true),
        None => (text, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_count_characters_not_bytes() {
        assert_eq!(KEY_NAME.check(&"a".repeat(100)), Ok(()));
        assert_eq!(KEY_NAME.check(&"a".repeat(101)), Err(101));
        // 100 Chinese characters are 300 bytes and within the limit.
        assert_eq!(KEY_NAME.check(&"键".repeat(100)), Ok(()));
        assert_eq!(KEY_NAME.check(&"键".repeat(101)), Err(101));
        assert_eq!(REASON.check(&"x".repeat(200_000)), Err(200_000));
        assert_eq!(REASON.check(""), Ok(()));
    }

    #[test]
    fn every_limit_is_sane() {
        for l in ALL {
            assert!((50..=10_000).contains(&l.max_chars), "{l:?}");
        }
        let address = format!("{}@{}", "a".repeat(64), "d".repeat(189));
        assert_eq!(EMAIL.check(&address), Ok(()), "an RFC 5321 address fits");
    }

    #[test]
    fn clip_cuts_on_a_character_boundary() {
        assert_eq!(clip("abc", 5), ("abc", false));
        assert_eq!(clip("abc", 3), ("abc", false));
        assert_eq!(clip("abcd", 3), ("abc", true));
        assert_eq!(clip("键键键键", 2), ("键键", true));
    }
}
