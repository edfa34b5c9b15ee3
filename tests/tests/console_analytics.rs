//! Usage analytics (`/console/analytics`) in headless Chromium against the
//! real server, over ledger traffic of two tenants across ten platform days
//! (`Asia/Shanghai`): every per-day figure and every top-N line (and the
//! "others" line) equals a sum computed here from the events the test
//! wrote (and, as a check of the writing, from a plain SQL sum over the
//! ledger); a tenant admin sees their own tenant's figures only, and is
//! refused another tenant's by address; a From after the To is refused with
//! a message beside the field; at 390 px the page does not scroll sideways
//! and the charts' text is at least 10 px high.

mod browser_common;

use browser_common::{browse, Ui};
use chrono::NaiveDate;
use domain::usage::UsageEvent;
use domain::MicroUsd;
use e2e::console_web::Web;
use e2e::*;
use sqlx::Row;
use std::collections::BTreeMap;

const ZONE: &str = "Asia/Shanghai";

/// Requests, input, output, cost.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
struct Sums([i64; 4]);

impl Sums {
    fn add(&mut self, e: &UsageEvent) {
        self.0[0] += 1;
        self.0[1] += e.input_tokens;
        self.0[2] += e.output_tokens;
        self.0[3] += e.cost_micro;
    }

    fn minus(self, o: Sums) -> Sums {
        Sums(std::array::from_fn(|i| self.0[i] - o.0[i]))
    }

    /// As the page's cells read: cost, requests, input, output.
    fn cells(&self) -> Vec<String> {
        vec![
            MicroUsd(self.0[3]).shown(),
            n(self.0[0]),
            n(self.0[1]),
            n(self.0[2]),
        ]
    }
}

fn n(v: i64) -> String {
    domain::money::group_thousands(v as u64)
}

/// One key of the fixture: (tenant, app, key name).
const KEYS: [(&str, &str, &str); 4] = [
    ("acme", "bot", "bot-main"),
    ("acme", "bot", "bot-batch"),
    ("acme", "web", "web-key"),
    ("globex", "ga", "globex-key"),
];

/// Ten days of traffic to `today` (platform days): each key 1–3 requests a
/// day, of two models, two tag values and (acme) three end users.
fn traffic(today: NaiveDate, key_ids: &[String]) -> Vec<UsageEvent> {
    let mut out = Vec::new();
    for d in 0..10i64 {
        let day = today - chrono::Duration::days(d);
        for (k, (tenant, app, _)) in KEYS.iter().enumerate() {
            let k64 = k as i64;
            for j in 0..1 + (d + k64) % 3 {
                let mut e = ledger_event(
                    &format!("an_{d}_{k}_{j}"),
                    tenant,
                    &day.format("%Y-%m").to_string(),
                    &day.to_string(),
                );
                e.app_id = app.to_string();
                e.key_id = key_ids[k].clone();
                e.model = if (d + j) % 2 == 0 {
                    "gpt-4o-mini".into()
                } else {
                    "gpt-4o".into()
                };
                e.input_tokens = 100 * (k64 + 1) + 7 * d + j;
                e.output_tokens = 50 * (k64 + 1) + 3 * d + j;
                e.cost_micro = (k64 + 1) * 10_000 + d * 1_001 + j * 17;
                e.attribution.tags = [(
                    "project".to_string(),
                    ["apollo", "zeus"][((k64 + d) % 2) as usize].to_string(),
                )]
                .into();
                if *tenant == "acme" {
                    e.attribution.end_user = Some(format!("user-{}", (k64 + j) % 3));
                }
                out.push(e);
            }
        }
    }
    out
}

/// The rows of a table as their cells' text.
async fn rows(ui: &Ui, css: &str) -> Vec<Vec<String>> {
    let v =
        ui.c.execute(
            "return [...document.querySelectorAll(arguments[0])]
               .map(r => [...r.cells].map(c => c.textContent.trim()))",
            vec![serde_json::json!(css)],
        )
        .await
        .unwrap();
    serde_json::from_value(v).unwrap()
}

/// A top-N line: (tenant, group) and its sums.
type Line = ((String, String), Sums);

/// The top `n` groups of `events` by cost (then requests, tenant, group),
/// the page's order, and the sums of the rest.
fn top_n(
    events: &[&UsageEvent],
    group: impl Fn(&UsageEvent) -> (String, String),
    n: usize,
) -> (Vec<Line>, Sums, usize) {
    let mut by: BTreeMap<(String, String), Sums> = BTreeMap::new();
    let mut total = Sums::default();
    for e in events {
        by.entry(group(e)).or_default().add(e);
        total.add(e);
    }
    let count = by.len();
    let mut v: Vec<_> = by.into_iter().collect();
    v.sort_by(|a, b| {
        b.1 .0[3]
            .cmp(&a.1 .0[3])
            .then(b.1 .0[0].cmp(&a.1 .0[0]))
            .then(a.0.cmp(&b.0))
    });
    v.truncate(n);
    let shown = v.iter().fold(Sums::default(), |a, (_, s)| {
        Sums(std::array::from_fn(|i| a.0[i] + s.0[i]))
    });
    (v, total.minus(shown), count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analytics_figures_equal_the_ledger_a_tenant_admin_sees_their_own_and_a_phone_reads_the_charts(
) {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    for (id, name) in [("acme", "Acme Corp"), ("globex", "Globex Inc")] {
        let t = store::TenantRow {
            id: id.into(),
            name: name.into(),
            cost_center: "CC-1".into(),
            priority: "standard".into(),
            limits: domain::Limits::default(),
            may_borrow: false,
            borrow_cap_tokens: 0,
            allowed_models: None,
            clamp_max_tokens: false,
            max_queued_requests: None,
            max_open_streams: None,
        };
        env.store.create_tenant("test", &t).await.unwrap();
    }
    for (t, a) in [("acme", "bot"), ("acme", "web"), ("globex", "ga")] {
        env.app(t, a, domain::Limits::default()).await;
    }
    let mut key_ids = Vec::new();
    for (t, a, name) in KEYS {
        key_ids.push(env.named_key(t, a, name, domain::Limits::default()).await.0);
    }
    user(&env, "pa@x.io", "platform_admin", None).await;
    user(&env, "fin@x.io", "finance", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("acme")).await;
    let clock = domain::period::PlatformClock::parse(ZONE).unwrap();
    let today: NaiveDate = clock.day(chrono::Utc::now()).parse().unwrap();
    let events = traffic(today, &key_ids);
    env.store.insert_usage_events(&events).await.unwrap();
    let (srv, _driver, ui) = browse(&env, |c| c.platform.timezone = ZONE.into()).await;

    // What was written is what the ledger holds (a plain SQL sum).
    let ledger: BTreeMap<String, Sums> = sqlx::query(
        "SELECT day::text AS day, count(*)::int8 AS r, sum(input_tokens)::int8 AS i,
                sum(output_tokens)::int8 AS o, sum(cost_micro)::int8 AS c
         FROM usage_events GROUP BY day",
    )
    .fetch_all(env.store.pool())
    .await
    .unwrap()
    .iter()
    .map(|r| {
        (
            r.get("day"),
            Sums([r.get("r"), r.get("i"), r.get("o"), r.get("c")]),
        )
    })
    .collect();
    let mut written: BTreeMap<String, Sums> = BTreeMap::new();
    for e in &events {
        written.entry(e.day.clone()).or_default().add(e);
    }
    assert_eq!(ledger, written, "the ledger holds what the test wrote");

    // Platform admin, the last 7 days: each day's figures, each chart dot.
    ui.login("pa@x.io", None).await;
    ui.go("/console/analytics?range=7&group=model&top=10").await;
    ui.wait("#analytics-days").await;
    let first = today - chrono::Duration::days(6);
    let want: Vec<Vec<String>> = first
        .iter_days()
        .take(7)
        .map(|d| {
            let mut r = vec![d.to_string()];
            r.extend(written[&d.to_string()].cells());
            r
        })
        .collect();
    assert_eq!(rows(&ui, "#analytics-days tbody tr[data-day]").await, want);
    assert_eq!(
        ui.count("#spend-chart circle.dot").await,
        7,
        "one dot a day"
    );
    let titles =
        ui.c.execute(
            "return [...document.querySelectorAll('#spend-chart circle.dot title')].map(t => t.textContent)",
            vec![],
        )
        .await
        .unwrap();
    let want_titles: Vec<String> = first
        .iter_days()
        .take(7)
        .map(|d| {
            format!(
                "Spend · {d}: {}",
                MicroUsd(written[&d.to_string()].0[3]).shown()
            )
        })
        .collect();
    assert_eq!(titles, serde_json::json!(want_titles));
    let week: Vec<&UsageEvent> = events
        .iter()
        .filter(|e| e.day >= first.to_string())
        .collect();
    let mut week_total = Sums::default();
    week.iter().for_each(|e| week_total.add(e));
    assert_eq!(ui.text("#total-spend").await, week_total.cells()[0]);
    let span = ui.text("#analytics-span").await;
    assert!(span.contains(ZONE) && span.contains("UTC+08:00"), "{span}");
    // By model, across tenants.
    let (top, _, _) = top_n(&week, |e| (String::new(), e.model.clone()), 10);
    let got = rows(&ui, "#analytics-top tbody tr.top-row").await;
    assert_eq!(got.len(), top.len());
    for (row, ((_, model), s)) in got.iter().zip(&top) {
        assert_eq!(row[1], *model);
        assert_eq!(row[2], s.cells()[0]);
        assert_eq!(row[4..], s.cells()[1..]);
    }
    ui.shot("analytics-01-week-by-model").await;

    // A custom range of ten days, by key, top 2: the keys by name, the
    // rest as "others".
    let from = today - chrono::Duration::days(9);
    let path = format!("/console/analytics?range=custom&from={from}&to={today}&group=key&top=25");
    ui.go(&path).await;
    ui.wait("#analytics-top").await;
    let all: Vec<&UsageEvent> = events.iter().collect();
    let name_of = |id: &str| KEYS[key_ids.iter().position(|k| k == id).unwrap()].2;
    let tenant_name = |id: &str| {
        if id == "acme" {
            "Acme Corp"
        } else {
            "Globex Inc"
        }
    };
    // Four keys: all of them within a top 25, none left over.
    let (top, rest, count) = top_n(&all, |e| (e.tenant_id.clone(), e.key_id.clone()), 25);
    assert_eq!((top.len(), count, rest), (4, 4, Sums::default()));
    assert_eq!(ui.count("#analytics-others").await, 0);
    let got = rows(&ui, "#analytics-top tbody tr.top-row").await;
    for (row, ((tenant, key), s)) in got.iter().zip(&top) {
        assert_eq!(row[1], tenant_name(tenant), "a tenant by its name: {row:?}");
        assert_eq!(row[2], name_of(key), "a key by its name: {row:?}");
        assert_eq!(row[3], s.cells()[0]);
        assert_eq!(row[5..], s.cells()[1..]);
    }
    let page = ui.c.source().await.unwrap();
    assert!(
        !page.contains(&format!(">{}<", key_ids[0])),
        "no key id where its name exists"
    );
    // By tag value, top 5: (tenant, value) lines.
    ui.go(&format!(
        "/console/analytics?range=custom&from={from}&to={today}&group=tag&tag=project&top=5"
    ))
    .await;
    ui.wait("#analytics-top").await;
    let (top, rest, count) = top_n(
        &all,
        |e| (e.tenant_id.clone(), e.attribution.tags["project"].clone()),
        5,
    );
    assert_eq!(count, 4);
    assert_eq!(rest, Sums::default());
    let got = rows(&ui, "#analytics-top tbody tr.top-row").await;
    assert_eq!(got.len(), top.len());
    for (row, ((tenant, value), s)) in got.iter().zip(&top) {
        assert_eq!((row[1].as_str(), &row[2]), (tenant_name(tenant), value));
        assert_eq!(row[3], s.cells()[0]);
    }

    // Finance, by end user, top 5 of the ten days: acme's three users and
    // globex's requests without one.
    ui.logout().await;
    ui.login("fin@x.io", None).await;
    ui.go(&format!(
        "/console/analytics?range=custom&from={from}&to={today}&group=end_user&top=5"
    ))
    .await;
    ui.wait("#analytics-top").await;
    let (top, rest, count) = top_n(
        &all,
        |e| {
            (
                e.tenant_id.clone(),
                e.attribution.end_user.clone().unwrap_or_default(),
            )
        },
        5,
    );
    assert_eq!(
        count, 4,
        "acme's three users and globex's requests without one"
    );
    assert_eq!(rest, Sums::default());
    let got = rows(&ui, "#analytics-top tbody tr.top-row").await;
    for (row, ((tenant, user), s)) in got.iter().zip(&top) {
        let shown = if user.is_empty() { "(none)" } else { user };
        assert_eq!(
            (row[1].as_str(), row[2].as_str()),
            (tenant_name(tenant), shown)
        );
        assert_eq!(row[3], s.cells()[0]);
        assert_eq!(row[5..], s.cells()[1..]);
    }

    // A top that leaves groups out: eleven small end users of globex today,
    // and the top 5: the rest is summed as "others", equal to the total
    // less the top.
    let mut extra = Vec::new();
    for u in 0..11 {
        let mut e = ledger_event(
            &format!("an_extra_{u}"),
            "globex",
            &today.format("%Y-%m").to_string(),
            &today.to_string(),
        );
        e.app_id = "ga".into();
        e.key_id = key_ids[3].clone();
        e.input_tokens = 10 + u;
        e.output_tokens = 5 + u;
        e.cost_micro = 100 + u;
        e.attribution.end_user = Some(format!("small-{u:02}"));
        extra.push(e);
    }
    env.store.insert_usage_events(&extra).await.unwrap();
    let everything: Vec<&UsageEvent> = events.iter().chain(&extra).collect();
    ui.go(&format!(
        "/console/analytics?range=custom&from={from}&to={today}&group=end_user&top=5"
    ))
    .await;
    ui.wait("#analytics-others").await;
    let (top, rest, count) = top_n(
        &everything,
        |e| {
            (
                e.tenant_id.clone(),
                e.attribution.end_user.clone().unwrap_or_default(),
            )
        },
        5,
    );
    assert_eq!(count, 15);
    let got = rows(&ui, "#analytics-top tbody tr.top-row").await;
    assert_eq!(got.len(), 5);
    for (row, (_, s)) in got.iter().zip(&top) {
        assert_eq!(row[3], s.cells()[0]);
    }
    let others = rows(&ui, "#analytics-others").await.remove(0);
    assert_eq!(others[2], "All others (10)");
    assert_eq!(others[3], rest.cells()[0]);
    assert_eq!(others[5..], rest.cells()[1..]);
    ui.shot("analytics-02-others").await;

    // The tenant admin: acme's figures only, whatever the address says.
    ui.logout().await;
    ui.login("ta@x.io", None).await;
    ui.go(&format!(
        "/console/analytics?range=custom&from={from}&to={today}&group=key&top=25"
    ))
    .await;
    ui.wait("#analytics-top").await;
    let acme: Vec<&UsageEvent> = everything
        .iter()
        .copied()
        .filter(|e| e.tenant_id == "acme")
        .collect();
    let (top, _, count) = top_n(&acme, |e| (e.tenant_id.clone(), e.key_id.clone()), 25);
    assert_eq!(count, 3);
    let got = rows(&ui, "#analytics-top tbody tr.top-row").await;
    assert_eq!(got.len(), 3);
    for (row, ((_, key), s)) in got.iter().zip(&top) {
        // No tenant column for a tenant admin: rank, key, cost, share, ….
        assert_eq!(row[1], name_of(key));
        assert_eq!(row[2], s.cells()[0]);
        assert_eq!(row[4..], s.cells()[1..]);
    }
    let mut acme_total = Sums::default();
    acme.iter().for_each(|e| acme_total.add(e));
    assert_eq!(ui.text("#total-spend").await, acme_total.cells()[0]);
    let mut acme_days: BTreeMap<String, Sums> = BTreeMap::new();
    for e in &acme {
        acme_days.entry(e.day.clone()).or_default().add(e);
    }
    let got = rows(&ui, "#analytics-days tbody tr[data-day]").await;
    assert_eq!(got.len(), 10);
    for row in &got {
        assert_eq!(row[1..], acme_days[&row[0]].cells()[..], "{row:?}");
    }
    let page = ui.c.source().await.unwrap();
    assert!(
        !page.contains("Globex") && !page.contains("globex"),
        "nothing of globex on the page"
    );
    assert_eq!(ui.count("select[name=tenant]").await, 0, "no tenant picker");
    let ta = Web::login(&ui.base, "ta@x.io").await;
    for asked in ["globex", "Globex%20Inc"] {
        let p = ta.get(&format!("/console/analytics?tenant={asked}")).await;
        assert_eq!(p.status, 404, "{asked}: {}", p.status);
        assert!(!p.body.contains("globex-key"));
    }
    assert_eq!(ta.get("/console/analytics?tenant=acme").await.status, 200);

    // A From after the To is refused beside the field, with nothing shown.
    let bad = format!(
        "/console/analytics?range=custom&from={today}&to={}",
        today - chrono::Duration::days(3)
    );
    assert_eq!(ta.get(&bad).await.status, 422);
    ui.go(&bad).await;
    let msg = ui.text("#analytics-from-error").await;
    assert!(msg.contains("From is after To"), "{msg}");
    assert_eq!(ui.count("#analytics-days").await, 0);
    ui.shot("analytics-03-from-after-to").await;

    // A phone: no sideways scroll, chart text at least 10 px, the x labels
    // apart.
    ui.c.set_window_size(390, 844).await.unwrap();
    for (who, path) in [
        ("ta", "/console/analytics?range=30&group=app".to_string()),
        ("ta", path.clone()),
    ] {
        ui.go(&path).await;
        ui.wait("#spend-chart svg").await;
        let v =
            ui.c.execute(
                "const sizes = [], overlaps = [];
                 for (const svg of document.querySelectorAll('svg.chart.day')) {
                   const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
                   for (const t of svg.querySelectorAll('text')) {
                     sizes.push(parseFloat(getComputedStyle(t).fontSize) * scale);
                   }
                   const xs = [...svg.querySelectorAll('text.x-tick')].map(t => t.getBoundingClientRect());
                   for (let i = 1; i < xs.length; i++) {
                     if (xs[i].left < xs[i - 1].right) overlaps.push(i);
                   }
                   const r = svg.getBoundingClientRect();
                   if (r.left < 0 || r.right > document.documentElement.clientWidth + 0.5) overlaps.push('outside');
                 }
                 return {wide: document.documentElement.scrollWidth - window.innerWidth,
                         min: Math.min(...sizes), n: sizes.length, overlaps,
                         width: window.innerWidth};",
                vec![],
            )
            .await
            .unwrap();
        assert!(v["width"].as_f64().unwrap() <= 400.0, "{v}");
        assert!(
            v["wide"].as_f64().unwrap() <= 1.0,
            "{who} {path}: scrolls sideways: {v}"
        );
        assert!(v["n"].as_u64().unwrap() >= 20, "{v}");
        assert!(
            v["min"].as_f64().unwrap() >= 10.0,
            "{who} {path}: chart text below 10 px: {v}"
        );
        assert_eq!(v["overlaps"], serde_json::json!([]), "{path}: {v}");
    }
    ui.shot("analytics-04-phone").await;
    ui.c.execute(
        "document.querySelector('#analytics-top').scrollIntoView()",
        vec![],
    )
    .await
    .unwrap();
    ui.shot("analytics-05-phone-top").await;

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}
