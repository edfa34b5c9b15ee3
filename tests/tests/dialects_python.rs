//! The official `openai` (Responses) and `anthropic` (Messages) Python
//! packages against the real server, for a chat-only model (the dialect is
//! translated to chat completions) and for a model whose provider speaks
//! both dialects natively (passed through): text and usage billed exactly,
//! streams, the budget cut ending each dialect's own clean way with the
//! upstream stopped, count_tokens, tool round trips, and bad input refused
//! in the dialect's error shape with nothing charged.
//! `scripts/test.sh` installs both packages and sets TOLLGATE_TEST_PYTHON.

use domain::provider::{Dialect, ProviderProfile};
use domain::Limits;
use e2e::*;
use std::time::Duration;

const BUDGET: i64 = 1_200;

struct Run {
    stdout: String,
}

async fn run(python: &str, script: &str, envs: &[(&str, String)]) -> Run {
    let path = format!("{}/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::process::Command::new(python)
        .arg(&path)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{script} {envs:?}\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Run { stdout }
}

impl Run {
    fn has(&self, line: &str) {
        assert!(
            self.stdout.lines().any(|l| l == line),
            "missing {line:?} in:\n{}",
            self.stdout
        );
    }

    fn tagged(&self, tag: &str) -> Vec<Vec<String>> {
        self.stdout
            .lines()
            .filter_map(|l| {
                l.strip_prefix(tag)
                    .map(|r| r.split_whitespace().map(String::from).collect())
            })
            .collect()
    }
}

/// A tenant with a 1,200-token monthly budget and one key.
async fn small_tenant(env: &TestEnv, id: &str) -> String {
    let limits = Limits {
        monthly_tokens: Some(BUDGET),
        ..Default::default()
    };
    env.tenant(id, limits, None).await;
    env.app(id, "a", Limits::default()).await;
    env.key(id, "a", Limits::default()).await.1
}

#[tokio::test]
async fn the_official_openai_and_anthropic_clients_speak_their_dialects_through_tollgate() {
    let python = std::env::var("TOLLGATE_TEST_PYTHON").expect(
        "TOLLGATE_TEST_PYTHON is not set: run ./scripts/test.sh, which installs openai and anthropic",
    );
    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(10_000_000),
            // A budgeted tenant uses hosted tools only when allowed
            // (docs/billing.md, "Service tiers and hosted tools").
            allowed_tools: Some(vec!["web_search".into()]),
            ..Default::default()
        })
        .await;
    env.model("native-model", "chat", 150_000, 600_000).await;
    // Its provider serves both dialects natively: its profile says so.
    env.profile(
        "native-model",
        ProviderProfile {
            apis: vec![Dialect::Chat, Dialect::Responses, Dialect::Messages],
            ..ProviderProfile::default()
        },
    )
    .await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);

    let mut runs = Vec::new();
    for (model, native) in [("gpt-4o-mini", false), ("native-model", true)] {
        let tag = if native { "n" } else { "t" };
        let before = env.mock.snapshot();
        let openai_cut = small_tenant(&env, &format!("cut-r-{tag}")).await;
        let r = run(
            &python,
            "responses_client.py",
            &[
                ("OPENAI_BASE_URL", format!("{base}/v1")),
                ("OPENAI_API_KEY", key.clone()),
                ("CUTOFF_KEY", openai_cut),
                ("DIALECT_MODEL", model.into()),
            ],
        )
        .await;
        for l in [
            "create ok",
            "stream ok",
            "cutoff ok",
            "tools ok",
            "bad input ok",
            "models ok",
            "codex tools ok",
        ] {
            r.has(l);
        }
        let anthropic_cut = small_tenant(&env, &format!("cut-m-{tag}")).await;
        let m = run(
            &python,
            "anthropic_client.py",
            &[
                ("ANTHROPIC_BASE_URL", base.clone()),
                ("ANTHROPIC_API_KEY", key.clone()),
                ("CUTOFF_KEY", anthropic_cut),
                ("DIALECT_MODEL", model.into()),
            ],
        )
        .await;
        for l in [
            "create ok",
            "bearer ok",
            "stream ok",
            "count_tokens ok",
            "cutoff ok",
            "tools ok",
            "bad input ok",
            "models ok",
        ] {
            m.has(l);
        }
        let after = env.mock.snapshot();
        // Translated requests reach the provider as chat completions; native
        // ones at its own /v1/responses and /v1/messages.
        let (chat, resp, msgs) = (
            after.chat - before.chat,
            after.responses - before.responses,
            after.messages - before.messages,
        );
        if native {
            assert_eq!(chat, 0, "{after:?}");
            assert!(resp >= 5 && msgs >= 7, "{resp} {msgs}");
        } else {
            assert!(chat >= 12, "{chat}");
            assert_eq!((resp, msgs), (0, 0));
        }
        // Both cut streams were dropped upstream long before 5,000 tokens.
        assert_eq!(
            after.streams_closed_early - before.streams_closed_early,
            2,
            "{after:?}"
        );
        assert!(after.completion_tokens - before.completion_tokens < 2 * BUDGET as u64 + 200);
        runs.push((tag, r, m));
    }

    let month = this_month();
    for (tag, r, m) in &runs {
        for run in [r, m] {
            // Billed exactly what the SDK was told.
            for b in run.tagged("BILL ") {
                let ev = stored(&env, &b[0]).await;
                assert_eq!(
                    (ev.input_tokens.to_string(), ev.output_tokens.to_string()),
                    (b[1].clone(), b[2].clone()),
                    "{b:?}"
                );
            }
            // Refused and counted requests: nothing in the ledger.
            for b in run.tagged("NOCHARGE ") {
                assert!(env.usage_event(&b[0]).await.is_none(), "{b:?} was charged");
            }
        }
        // The cut streams: within budget, settled as cut off.
        for (run, tenant) in [(r, format!("cut-r-{tag}")), (m, format!("cut-m-{tag}"))] {
            let c = &run.tagged("CUT ")[0];
            let ev = stored(&env, &c[0]).await;
            assert_eq!(ev.status, "cut_off", "{c:?}");
            assert!(ev.total_tokens() <= BUDGET, "{ev:?}");
            assert_eq!(
                ev.output_tokens.to_string(),
                c[2],
                "the SDK saw what was billed"
            );
            let (used, _) = env.ledger_tokens(&tenant, &month).await;
            assert!(used <= BUDGET, "{tenant} used {used}");
            // The reason the client's clean ending did not carry as an
            // error: in the request lookup.
            let d = decision(&env, &c[0]).await;
            assert_eq!(d.reason, "tenant_monthly_budget_exhausted");
            assert_eq!(d.detail["cut_off"], true, "{:?}", d.detail);
            let dialect = if run.stdout.contains("count_tokens ok") {
                "messages"
            } else {
                "responses"
            };
            assert_eq!(d.detail["dialect"], dialect);
        }
    }
    srv.shutdown().await;
}

async fn decision(env: &TestEnv, rid: &str) -> store::RequestDecisionRow {
    let t0 = std::time::Instant::now();
    loop {
        let scope = store::TenantScope::system();
        if let Some(d) = env.store.request_decision(&scope, rid).await.unwrap() {
            return d;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no decision recorded for {rid}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn stored(env: &TestEnv, rid: &str) -> domain::usage::UsageEvent {
    let t0 = std::time::Instant::now();
    loop {
        if let Some(ev) = env.usage_event(rid).await {
            return ev;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no usage event for {rid}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Google's `google-genai` Python SDK against the Gemini API dialect (always
/// translated to chat): generate_content, generate_content_stream,
/// count_tokens, a function call round trip, refusals as the SDK's errors,
/// and a stream cut at the budget that the SDK ends cleanly
/// (`MAX_TOKENS`), booked `cut_off` within the budget. Then the stream
/// without `alt=sse`: Google's JSON array, booked `ok`.
#[tokio::test]
async fn the_google_genai_client_speaks_gemini_through_tollgate() {
    let python = std::env::var("TOLLGATE_TEST_PYTHON").expect(
        "TOLLGATE_TEST_PYTHON is not set: run ./scripts/test.sh, which installs google-genai",
    );
    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(10_000_000),
            ..Default::default()
        })
        .await;
    let cut_key = small_tenant(&env, "cut-g").await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let before = env.mock.snapshot();
    let g = run(
        &python,
        "gemini_client.py",
        &[
            ("GEMINI_BASE_URL", base.clone()),
            ("GEMINI_API_KEY", key.clone()),
            ("CUTOFF_KEY", cut_key),
            ("DIALECT_MODEL", "gpt-4o-mini".into()),
        ],
    )
    .await;
    for l in [
        "generate ok",
        "stream ok",
        "count ok",
        "tools ok",
        "cutoff ok",
        "errors ok",
    ] {
        g.has(l);
    }
    // The cut stream was dropped upstream long before 5,000 tokens.
    let after = env.mock.snapshot();
    assert_eq!(after.streams_closed_early - before.streams_closed_early, 1);
    for b in g.tagged("BILL ") {
        let ev = stored(&env, &b[0]).await;
        assert_eq!(ev.status, "ok", "{ev:?}");
        assert_eq!(
            (ev.input_tokens.to_string(), ev.output_tokens.to_string()),
            (b[1].clone(), b[2].clone()),
            "{b:?}"
        );
    }
    let c = &g.tagged("CUT ")[0];
    let ev = stored(&env, &c[0]).await;
    assert_eq!(ev.status, "cut_off", "{c:?}");
    assert!(ev.total_tokens() <= BUDGET, "{ev:?}");
    assert_eq!(
        ev.output_tokens.to_string(),
        c[2],
        "the SDK saw what was billed"
    );
    let d = decision(&env, &c[0]).await;
    assert_eq!(d.reason, "tenant_monthly_budget_exhausted");
    assert_eq!(d.detail["dialect"], "gemini");

    // Without alt=sse: one JSON array of GenerateContentResponses.
    let r = reqwest::Client::new()
        .post(format!(
            "{base}/v1beta/models/gpt-4o-mini:streamGenerateContent"
        ))
        .header("x-goog-api-key", &key)
        .json(&serde_json::json!({"contents": [{"role": "user",
            "parts": [{"text": "Stream [mock:output_tokens=4]"}]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let all: Vec<serde_json::Value> = r.json().await.unwrap();
    let text: String = all
        .iter()
        .filter_map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(text, " hello".repeat(4));
    let last = all.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 4);
    let ev = stored(&env, &rid).await;
    assert_eq!(
        (ev.status.as_str(), ev.stream, ev.output_tokens),
        ("ok", true, 4)
    );
    srv.shutdown().await;
}
