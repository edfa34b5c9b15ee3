//! The Grafana dashboard (deploy/grafana/tollgate.json) names only metrics,
//! and labels, that a running server really exports: a server serves an
//! admitted request, a stream, a refusal, an unknown key and a queued
//! request, then every panel's query and every template variable is
//! checked against that server's `/metrics` text.

use domain::Limits;
use e2e::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// PromQL words that are not metric names (functions, aggregations,
/// keywords) and Grafana's `label_values`.
const PROMQL_WORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "rate",
    "irate",
    "increase",
    "delta",
    "histogram_quantile",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "topk",
    "bottomk",
    "abs",
    "clamp_min",
    "clamp_max",
    "label_values",
    "and",
    "or",
    "unless",
    "offset",
    "bool",
    "le",
];

/// Metric name → the label names its series carry, read from Prometheus
/// text exposition (comments skipped; a histogram's `_bucket`, `_sum`,
/// `_count` series are names of their own, as PromQL sees them).
fn exported(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..end].to_string()).or_default();
        if line[end..].starts_with('{') {
            let body = &line[end + 1..line.find('}').expect("closing brace")];
            for pair in body.split(',').filter(|p| !p.is_empty()) {
                labels.insert(pair.split('=').next().unwrap().trim().to_string());
            }
        }
    }
    out
}

/// The metric names and label names one query uses. Label names come from
/// selectors (`{tenant=~"$tenant"}`), grouping (`by (tenant, reason)`) and
/// `label_values(metric, label)`; metric names are the identifiers left.
fn names_in(expr: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let strings = regex::Regex::new(r#""[^"]*""#).unwrap();
    let e = strings.replace_all(expr, "\"\"");
    let mut labels = BTreeSet::new();
    let selector = regex::Regex::new(r"\{([^}]*)\}").unwrap();
    let matcher = regex::Regex::new(r"([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)").unwrap();
    for c in selector.captures_iter(&e) {
        for m in matcher.captures_iter(&c[1]) {
            labels.insert(m[1].to_string());
        }
    }
    let grouping = regex::Regex::new(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)").unwrap();
    for c in grouping.captures_iter(&e) {
        labels.extend(
            c[1].split(',')
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty()),
        );
    }
    let lv = regex::Regex::new(
        r"label_values\(\s*[A-Za-z_:][A-Za-z0-9_:]*\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)",
    )
    .unwrap();
    for c in lv.captures_iter(&e) {
        labels.insert(c[1].to_string());
    }
    let e = selector.replace_all(&e, " ");
    let e = grouping.replace_all(&e, " ");
    let e = regex::Regex::new(r"\[[^\]]*\]")
        .unwrap()
        .replace_all(&e, " ");
    let e = regex::Regex::new(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
        .unwrap()
        .replace_all(&e, " ");
    let ident = regex::Regex::new(r"[A-Za-z_:][A-Za-z0-9_:]*").unwrap();
    let label_values_arg = regex::Regex::new(r",\s*[A-Za-z_][A-Za-z0-9_]*\s*\)").unwrap();
    let e = label_values_arg.replace_all(&e, ")");
    let number = regex::Regex::new(r"\b\d+(\.\d+)?(e\d+)?\b").unwrap();
    let e = number.replace_all(&e, " ");
    let metrics = ident
        .find_iter(&e)
        .map(|m| m.as_str().to_string())
        .filter(|w| !PROMQL_WORDS.contains(&w.as_str()))
        .collect();
    labels.remove("le");
    (metrics, labels)
}

/// Every query in the dashboard, with where it is (panel title or variable).
fn queries(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    fn walk(panels: &[Value], out: &mut Vec<(String, String)>) {
        for p in panels {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push((
                        p["title"].as_str().unwrap_or("?").to_string(),
                        e.to_string(),
                    ));
                }
            }
            walk(
                p["panels"].as_array().map(|v| v.as_slice()).unwrap_or(&[]),
                out,
            );
        }
    }
    walk(d["panels"].as_array().expect("panels"), &mut out);
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        let q = v["query"]["query"].as_str().or(v["definition"].as_str());
        if let (Some(q), Some("query")) = (q, v["type"].as_str()) {
            out.push((
                format!("variable ${}", v["name"].as_str().unwrap()),
                q.to_string(),
            ));
        }
    }
    out
}

#[test]
fn the_query_reader_finds_names_and_labels() {
    let (m, l) = names_in(
        r#"histogram_quantile(0.95, sum by (le, model) (rate(tollgate_upstream_seconds_bucket{model=~"$model"}[5m]))) * 3600 / 1e6"#,
    );
    assert_eq!(m, ["tollgate_upstream_seconds_bucket".to_string()].into());
    assert_eq!(l, ["model".to_string()].into());
    let (m, l) = names_in("label_values(tollgate_requests_total, tenant)");
    assert_eq!(m, ["tollgate_requests_total".to_string()].into());
    assert_eq!(l, ["tenant".to_string()].into());
}

#[tokio::test]
async fn every_dashboard_query_names_metrics_the_server_exports() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/grafana/tollgate.json"
    );
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();

    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(100_000),
            max_output_tokens: Some(500),
            ..Default::default()
        })
        .await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let url = format!("{base}/v1/chat/completions");
    user(&env, "root@example.com", "platform_admin", None).await;
    let token = login(&base, "root@example.com").await;

    // Admitted, streamed, refused (output cap), and an unknown key.
    assert_eq!(
        post(&url, &key, &chat_body("hello", Some(20)))
            .await
            .status(),
        200
    );
    let mut body = chat_body("hello [mock:output_tokens=30]", Some(50));
    body["stream"] = json!(true);
    let r = post(&url, &key, &body).await;
    assert_eq!(r.status(), 200);
    sse_events(r).await;
    let refused = post(&url, &key, &chat_body("hello", Some(100_000))).await;
    assert!(refused.status().is_client_error(), "{}", refused.status());
    let unknown = post(&url, &domain::keys::generate(), &chat_body("hello", None)).await;
    assert_eq!(unknown.status(), 401);

    // A pool of one slot and two requests at once: one waits in the queue.
    let (s, b) = api(
        "PUT",
        &format!("{base}/api/v1/models/gpt-4o-mini/fairness"),
        Some(&token),
        Some(json!({"pool_capacity": 1})),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let slow = chat_body("hello [mock:latency_ms=400]", Some(10));
    let (a, b) = tokio::join!(post(&url, &key, &slow), post(&url, &key, &slow));
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));

    let month = this_month();
    assert!(
        eventually(Duration::from_secs(10), || async {
            env.ledger_tokens("t", &month).await.1 == 4
        })
        .await,
        "the four admitted requests reach the ledger"
    );
    // Counters the writers bump after answering (ledger, decision log)
    // may lag the answers by a flush: read until the names are all there
    // or the time is up.
    let qs = queries(&dash);
    let wanted: BTreeSet<String> = qs.iter().flat_map(|(_, q)| names_in(q).0).collect();
    let mut text = metrics(srv.addr).await;
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(10)
        && !wanted.iter().all(|m| exported(&text).contains_key(m))
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
        text = metrics(srv.addr).await;
    }
    let have = exported(&text);
    assert!(qs.len() >= 20, "panels and variables: {}", qs.len());
    let mut missing = Vec::new();
    for (place, q) in &qs {
        let (names, labels) = names_in(q);
        if names.is_empty() {
            missing.push(format!("{place}: no metric in `{q}`"));
        }
        for n in &names {
            match have.get(n) {
                None => missing.push(format!("{place}: metric {n} not in /metrics")),
                Some(carried) => {
                    for l in labels.iter().filter(|l| !carried.contains(*l)) {
                        missing.push(format!("{place}: {n} has no label {l}"));
                    }
                }
            }
        }
    }
    assert!(missing.is_empty(), "{missing:#?}\n/metrics:\n{text}");
    srv.shutdown().await;
}
