//! The console's colour scheme (issue #52, "dark mode") in headless
//! Chromium against the real server. The header's switch chooses dark; the
//! page's background, its cards, its form fields and its charts' text then
//! read dark-on-light inverted — measured off the computed styles (relative
//! luminance and contrast, WCAG's formulas, computed here), not the
//! stylesheet's text; the choice holds on another page and in 中文; "as the
//! system" forgets it and the browser's own scheme (headless Chromium's
//! light) applies again.

mod browser_common;

use browser_common::{browse, Ui};
use e2e::*;

/// WCAG relative luminance of a CSS `rgb(…)`/`rgba(…)` colour.
fn luminance(css: &str) -> f64 {
    let nums: Vec<f64> = css
        .trim_start_matches("rgba(")
        .trim_start_matches("rgb(")
        .trim_end_matches(')')
        .split(',')
        .take(3)
        .map(|v| {
            v.trim()
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("a colour: {css}"))
        })
        .collect();
    assert_eq!(nums.len(), 3, "a colour: {css}");
    let lin = |c: f64| {
        let c = c / 255.0;
        if c <= 0.03928 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    0.2126 * lin(nums[0]) + 0.7152 * lin(nums[1]) + 0.0722 * lin(nums[2])
}

fn contrast(a: f64, b: f64) -> f64 {
    (a.max(b) + 0.05) / (a.min(b) + 0.05)
}

/// The computed `prop` of the first element `css` finds.
async fn style(ui: &Ui, css: &str, prop: &str) -> String {
    ui.wait(css).await;
    let v =
        ui.c.execute(
            "return getComputedStyle(document.querySelector(arguments[0]))[arguments[1]]",
            vec![css.into(), prop.into()],
        )
        .await
        .unwrap();
    v.as_str().unwrap_or_default().to_string()
}

/// (background of the page, its text, a card, a form field) luminances.
async fn scheme(ui: &Ui) -> [f64; 4] {
    [
        luminance(&style(ui, "html", "backgroundColor").await),
        luminance(&style(ui, "main", "color").await),
        luminance(&style(ui, ".card", "backgroundColor").await),
        luminance(
            &style(
                ui,
                "main select, main input:not([type=hidden])",
                "backgroundColor",
            )
            .await,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_switch_turns_every_surface_dark_and_keeps_it_until_auto() {
    let env = TestEnv::new().await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let (_srv, _driver, ui) = browse(&env, |_| ()).await;
    ui.login("admin@x.io", None).await;
    // A page with cards, form fields and charts (drawn for empty days too).
    ui.go("/console/analytics").await;
    ui.wait_attr("html", "data-theme", "auto").await;
    let [bg, ink, card, field] = scheme(&ui).await;
    assert!(
        bg > 0.8 && card > 0.8 && field > 0.8,
        "light by default: {bg} {card} {field}"
    );
    assert!(
        contrast(bg, ink) >= 7.0,
        "light: ink on the page {bg} / {ink}"
    );

    ui.click("button[name=theme][value=dark]").await;
    ui.wait_attr("html", "data-theme", "dark").await;
    let [bg, ink, card, field] = scheme(&ui).await;
    assert!(
        bg < 0.05 && card < 0.05 && field < 0.05,
        "dark surfaces: {bg} {card} {field}"
    );
    assert!(
        contrast(bg, ink) >= 7.0,
        "dark: ink on the page {bg} / {ink}"
    );
    assert!(
        contrast(card, ink) >= 7.0,
        "dark: ink on a card {card} / {ink}"
    );
    let tick = luminance(&style(&ui, "svg.chart text", "fill").await);
    assert!(
        contrast(card, tick) >= 4.5,
        "dark: a chart's labels {card} / {tick}"
    );
    let muted = luminance(&style(&ui, ".muted", "color").await);
    assert!(
        contrast(card, muted) >= 4.5,
        "dark: muted text on a card {card} / {muted}"
    );
    ui.shot("theme-dark-analytics").await;

    // Another page, then the other language: still dark, the switch's
    // words in 中文.
    ui.go("/console/tenants").await;
    ui.wait_attr("html", "data-theme", "dark").await;
    ui.click("button[name=lang][value=zh]").await;
    ui.wait_attr("html", "lang", "zh").await;
    ui.wait_attr("html", "data-theme", "dark").await;
    ui.wait_attr("button[name=theme][value=dark]", "title", "配色：深色")
        .await;
    assert_eq!(ui.count("button[name=theme].on").await, 1);
    assert!(luminance(&style(&ui, "html", "backgroundColor").await) < 0.05);

    // "As the system": the cookie goes, headless Chromium's light applies.
    ui.click("button[name=theme][value=auto]").await;
    ui.wait_attr("html", "data-theme", "auto").await;
    assert!(luminance(&style(&ui, "html", "backgroundColor").await) > 0.8);
    let cookies = ui.c.get_all_cookies().await.unwrap();
    assert!(
        !cookies
            .iter()
            .any(|c| c.name() == "tg_theme" && !c.value().is_empty()),
        "no theme remembered"
    );
}
