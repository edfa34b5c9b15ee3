//! The console's colour scheme: the browser's own (`auto`, following
//! `prefers-color-scheme`), light or dark, chosen in the header and
//! remembered in a cookie for a year. The stylesheet holds both palettes
//! (`light-dark()` in static/console.css); the page only says which applies
//! (`<html data-theme>`).

use axum::http::HeaderMap;

pub const THEME_COOKIE: &str = "tg_theme";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Theme {
    #[default]
    Auto,
    Light,
    Dark,
}

impl Theme {
    pub fn parse(s: &str) -> Option<Theme> {
        match s {
            "auto" => Some(Theme::Auto),
            "light" => Some(Theme::Light),
            "dark" => Some(Theme::Dark),
            _ => None,
        }
    }

    pub fn code(self) -> &'static str {
        match self {
            Theme::Auto => "auto",
            Theme::Light => "light",
            Theme::Dark => "dark",
        }
    }

    /// The theme cookie's, else the browser's own.
    pub fn from_headers(h: &HeaderMap) -> Theme {
        crate::cookies::cookie(h, THEME_COOKIE)
            .and_then(|v| Theme::parse(&v))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_read_back_and_anything_else_is_the_browsers_own() {
        for t in [Theme::Auto, Theme::Light, Theme::Dark] {
            assert_eq!(Theme::parse(t.code()), Some(t));
        }
        assert_eq!(Theme::parse("Dark"), None);
        assert_eq!(Theme::parse("<script>"), None);
        let mut h = HeaderMap::new();
        assert_eq!(Theme::from_headers(&h), Theme::Auto);
        h.insert("cookie", "tg_lang=zh; tg_theme=dark".parse().unwrap());
        assert_eq!(Theme::from_headers(&h), Theme::Dark);
        h.insert("cookie", "tg_theme=purple".parse().unwrap());
        assert_eq!(Theme::from_headers(&h), Theme::Auto);
    }
}
