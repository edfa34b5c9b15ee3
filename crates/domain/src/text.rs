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

/// Whether `email` (trimmed, lower-cased by the caller) has the shape of an
/// address a person signs in with: one `@`; a local part of letters,
/// digits and `.!#$%&'*+/=?^_`{|}~-` (no quoted forms, no leading,
/// trailing or doubled dot); a domain of at least two dot-separated labels
/// of letters, digits and inner hyphens. Markup (`<script>@x.io`), spaces
/// and quotes are refused; international domains are given in their
/// `xn--` form.
pub fn is_email(email: &str) -> bool {
    let Some((local, domain)) = email.split_once('@') else {
        return false;
    };
    let atext = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+/=?^_`{|}~-".contains(c);
    let local_ok = !local.is_empty()
        && local
            .split('.')
            .all(|p| !p.is_empty() && p.chars().all(atext));
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    let labels: Vec<&str> = domain.split('.').collect();
    local_ok && labels.len() >= 2 && labels.iter().all(|l| label_ok(l))
}

/// Whether `id` is a tenant's or an app's id: 1–64 characters of `a-z`,
/// `0-9`, `-` and `_`, starting with a letter or digit (it is part of
/// paths, Redis keys and file names).
pub fn is_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Whether `id` is a model's id: wider than a tenant's (`gpt-4o-mini`,
/// `org/model:tag`): 1–128 characters of letters, digits and `._:/-`,
/// starting with a letter or digit.
pub fn is_model_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:/-".contains(&b))
}

/// The shortest password a person may set, in characters.
pub const PASSWORD_MIN_CHARS: usize = 12;

/// Whether `password` is long enough ([`PASSWORD_MIN_CHARS`] characters,
/// not bytes).
pub fn password_long_enough(password: &str) -> bool {
    password.chars().count() >= PASSWORD_MIN_CHARS
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
    fn emails_have_the_shape_of_an_address() {
        for ok in [
            "a@b.io",
            "first.last+tag@mail.example.com",
            "o'neil@x-y.cn",
            "x@xn--fiqs8s.cn",
        ] {
            assert!(is_email(ok), "{ok}");
        }
        for bad in [
            "<script>alert(1)</script>@x.io",
            "a@b",
            "@b.io",
            "a@",
            "a b@c.io",
            "a@@b.io",
            "a@b@c.io",
            ".a@b.io",
            "a..b@c.io",
            "a@-b.io",
            "a@b..io",
            "\"a\"@b.io",
            "a@b.io>",
        ] {
            assert!(!is_email(bad), "{bad}");
        }
    }

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
    fn ids_and_model_ids() {
        for ok in ["acme", "a", "0-team_x", "a".repeat(64).as_str()] {
            assert!(is_id(ok), "{ok}");
        }
        for bad in [
            "",
            "Acme",
            "-a",
            "_a",
            "a b",
            "a/b",
            "a.b",
            "a".repeat(65).as_str(),
            "<x>",
        ] {
            assert!(!is_id(bad), "{bad}");
        }
        for ok in [
            "gpt-4o-mini",
            "org/model:tag",
            "A.1",
            "m".repeat(128).as_str(),
        ] {
            assert!(is_model_id(ok), "{ok}");
        }
        for bad in ["", "-m", "/m", "m m", "m<", "m".repeat(129).as_str()] {
            assert!(!is_model_id(bad), "{bad}");
        }
    }

    #[test]
    fn passwords_count_characters() {
        assert!(!password_long_enough(&"a".repeat(11)));
        assert!(password_long_enough(&"a".repeat(12)));
        // Four characters of three bytes each are 12 bytes, not 12 characters.
        assert!(!password_long_enough("键键键键"));
    }

    #[test]
    fn clip_cuts_on_a_character_boundary() {
        assert_eq!(clip("abc", 5), ("abc", false));
        assert_eq!(clip("abc", 3), ("abc", false));
        assert_eq!(clip("abcd", 3), ("abc", true));
        assert_eq!(clip("键键键键", 2), ("键键", true));
    }
}
