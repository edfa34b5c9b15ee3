//! The coding agents of 2026, unchanged, against the real server and the
//! mock provider: Claude Code (`claude -p`), Codex (`codex exec`) and Gemini
//! CLI (`gemini -p`), the real programs from npm at the versions
//! scripts/lib.sh pins (`ensure_agents` sets TOLLGATE_TEST_CLAUDE,
//! TOLLGATE_TEST_CODEX and TOLLGATE_TEST_GEMINI). Each runs in a private
//! HOME with telemetry and updates off, is driven by the mock through a
//! scripted tool call (`[mock:call=NAME:BASE64]` in the prompt) that the
//! agent executes and answers, and is checked by its exit status, what it
//! printed, what it did to its working directory and the ledger rows.

use domain::alias::ModelAlias;
use domain::provider::{Dialect, ProviderProfile};
use domain::usage::UsageEvent;
use domain::Limits;
use e2e::*;
use mock_upstream::Call;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one agent run may take before the test fails.
const RUN_TIMEOUT: Duration = Duration::from_secs(150);

fn agent(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run ./scripts/test.sh, which installs the agents (scripts/lib.sh ensure_agents)")
    })
}

/// A fresh directory for one run: `home` (the agent's HOME) and `work`
/// (its working directory).
struct Dirs {
    root: PathBuf,
    home: PathBuf,
    work: PathBuf,
}

impl Dirs {
    fn new(name: &str) -> Dirs {
        let root = std::env::temp_dir().join(format!(
            "tollgate-agent-{name}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let (home, work) = (root.join("home"), root.join("work"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        Dirs { root, home, work }
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

struct Run {
    stdout: String,
    stderr: String,
}

/// Runs `bin args` in `work` with nothing of this process's environment
/// but PATH, plus `envs` and `home` as HOME.
async fn run_in(
    bin: &str,
    args: &[&str],
    (home, work): (&Path, &Path),
    envs: &[(&str, String)],
) -> Run {
    let mut c = tokio::process::Command::new(bin);
    c.args(args)
        .current_dir(work)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("LANG", "C.UTF-8")
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(RUN_TIMEOUT, c.output())
        .await
        .unwrap_or_else(|_| panic!("{bin} {args:?} did not finish in {RUN_TIMEOUT:?}"))
        .expect("the agent starts");
    let r = Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        out.status.success(),
        "{bin} {args:?} exited with {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        r.stdout,
        r.stderr
    );
    r
}

async fn run(bin: &str, args: &[&str], dirs: &Dirs, envs: &[(&str, String)]) -> Run {
    run_in(bin, args, (&dirs.home, &dirs.work), envs).await
}

/// The mock's answer text: `n` tokens of " hello".
fn said_hello(r: &Run) {
    assert!(
        r.stdout.contains("hello hello"),
        "the model's answer is not in the output:\nstdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
}

/// Requests the mock answered (every dialect).
fn answered(env: &TestEnv) -> i64 {
    let s = env.mock.snapshot();
    (s.chat + s.responses + s.messages) as i64
}

/// Every ledger row, once there is one for each request the mock answered.
async fn ledger(env: &TestEnv) -> Vec<UsageEvent> {
    let want = answered(env);
    assert!(
        ledger_reaches(env, want, Duration::from_secs(10)).await,
        "expected {want} ledger rows (one per answered request)"
    );
    let ids: Vec<String> =
        sqlx::query_scalar("SELECT request_id FROM usage_events ORDER BY started_at")
            .fetch_all(env.store.pool())
            .await
            .unwrap();
    // Every request the agent sent was served: none refused.
    let refused: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT request_id, reason, COALESCE(detail::text, '') FROM request_decisions WHERE decision = 'refused'",
    )
    .fetch_all(env.store.pool())
    .await
    .unwrap();
    assert!(refused.is_empty(), "refused: {refused:?}");
    let mut rows = Vec::new();
    for id in ids {
        rows.push(env.usage_event(&id).await.unwrap());
    }
    // What the agent's requests were (shown when a test fails).
    for r in &rows {
        eprintln!(
            "ledger: {} {} stream={} in={} out={} cost_pico={} end_user={:?}",
            r.model,
            r.status,
            r.stream,
            r.input_tokens,
            r.output_tokens,
            r.cost_pico,
            r.attribution.end_user
        );
    }
    rows
}

/// Every row served, booked `ok`, counted and priced by `model`.
fn all_ok(rows: &[UsageEvent], model: &str) {
    assert!(!rows.is_empty(), "no ledger rows");
    for r in rows {
        assert_eq!(r.status, "ok", "{r:?}");
        assert_eq!(r.model, model, "{r:?}");
        assert!(r.input_tokens > 0 && r.output_tokens > 0, "{r:?}");
        assert!(r.cost_micro > 0 && r.cost_pico > 0, "{r:?}");
        assert_eq!(r.usage_source, "provider", "{r:?}");
    }
}

async fn alias(env: &TestEnv, pattern: &str, model: &str) {
    env.store
        .create_model_alias(
            "test",
            &ModelAlias {
                alias: pattern.into(),
                model: model.into(),
                tenant_id: None,
            },
        )
        .await
        .unwrap();
}

/// A tenant with no limits, one app and key: returns the key.
async fn open_tenant(env: &TestEnv) -> String {
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    env.key("t", "a", Limits::default()).await.1
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[tokio::test]
async fn claude_code_runs_with_only_a_base_url_and_a_key() {
    claude_code_runs(false).await;
}

#[tokio::test]
async fn claude_code_runs_through_a_native_messages_provider() {
    claude_code_runs(true).await;
}

/// Claude Code with only a base URL and a key: a Bash round trip, then a
/// second session; through a chat provider (translated) or one serving
/// Messages natively (passed through).
async fn claude_code_runs(native: bool) {
    let claude = agent("TOLLGATE_TEST_CLAUDE");
    let env = TestEnv::new().await;
    // The names Claude Code asks for (its main model and its haiku
    // background model) are served by the catalog's model through one
    // pattern alias.
    env.model("house-model", "chat", 150_000, 600_000).await;
    if native {
        env.profile(
            "house-model",
            ProviderProfile {
                apis: vec![Dialect::Chat, Dialect::Messages],
                ..ProviderProfile::default()
            },
        )
        .await;
    }
    alias(&env, "claude-*", "house-model").await;
    let key = open_tenant(&env).await;
    let srv = env.server().await;
    let settings = || {
        vec![
            ("ANTHROPIC_BASE_URL", format!("http://{}", srv.addr)),
            ("ANTHROPIC_API_KEY", key.clone()),
            // Telemetry, error reports and updates off.
            ("DISABLE_TELEMETRY", "1".to_string()),
            ("DISABLE_ERROR_REPORTING", "1".to_string()),
            ("DISABLE_AUTOUPDATER", "1".to_string()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
        ]
    };

    // A tool round trip: the model asks for Bash, Claude Code runs it and
    // sends the result back, the model answers.
    let dirs = Dirs::new(if native { "claude-native" } else { "claude" });
    let cmd = serde_json::json!({"command": "echo tool-ran > proof.txt",
        "description": "Write the proof file"})
    .to_string();
    let prompt = format!(
        "Write the proof file. {} [mock:output_tokens=12]",
        Call::directive("Bash", &cmd)
    );
    let r = run(
        &claude,
        &["-p", &prompt, "--allowedTools", "Bash"],
        &dirs,
        &settings(),
    )
    .await;
    said_hello(&r);
    assert_eq!(read(&dirs.work.join("proof.txt")).trim(), "tool-ran");
    let first = ledger(&env).await;
    assert!(
        first.len() >= 2,
        "a tool round trip is two requests at least: {first:?}"
    );
    // A second session of the same installation, in another directory.
    let elsewhere = dirs.work.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let r = run_in(
        &claude,
        &["-p", "Say hello."],
        (&dirs.home, &elsewhere),
        &settings(),
    )
    .await;
    said_hello(&r);
    let rows = ledger(&env).await;
    assert!(rows.len() > first.len());
    all_ok(&rows, "house-model");
    let s = env.mock.snapshot();
    if native {
        assert!(s.messages >= 3 && s.chat == 0, "{s:?}");
    } else {
        assert!(s.chat >= 3 && s.messages == 0, "{s:?}");
    }
    // Claude Code's metadata.user_id carries its device, account and
    // session: one end user for both sessions, none refused.
    let users: std::collections::BTreeSet<_> = rows
        .iter()
        .map(|r| r.attribution.end_user.clone())
        .collect();
    assert_eq!(users.len(), 1, "{users:?}");
    let user = users.into_iter().next().unwrap().expect("an end user");
    assert!(
        user.starts_with("device:") || user.starts_with("account:"),
        "{user}"
    );
    // Each row keeps the name Claude Code asked for (served by the alias)
    // and its session: two runs, two sessions, one end user.
    for r in &rows {
        let asked = r.attribution.asked_model.as_deref().unwrap_or_default();
        assert!(asked.starts_with("claude-"), "asked for {asked:?}: {r:?}");
    }
    let sessions: std::collections::BTreeSet<_> =
        rows.iter().map(|r| r.attribution.session.clone()).collect();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    assert!(sessions.iter().all(Option::is_some), "{sessions:?}");
    // The bill by the name asked for shows both names: one line per name
    // Claude Code asked for, each "<asked> → house-model", with the cost
    // of its ledger rows (summed here from the rows themselves).
    let mut want: std::collections::BTreeMap<Option<String>, (i64, i64)> = Default::default();
    for r in &rows {
        let line = r
            .attribution
            .asked_model
            .as_ref()
            .map(|a| format!("{a} → {}", r.model));
        let w = want.entry(line).or_default();
        w.0 += 1;
        w.1 += r.exact_cost_pico();
    }
    let got: std::collections::BTreeMap<Option<String>, (i64, i64)> = env
        .store
        .attributed_rows(
            &store::TenantScope::system(),
            &rows[0].period,
            &domain::bill::GroupBy::AskedModel,
        )
        .await
        .unwrap()
        .into_iter()
        .map(|l| (l.value, (l.totals.requests, l.totals.cost_pico)))
        .collect();
    assert_eq!(got, want, "the bill by the name asked for");
}

/// Codex's config.toml for a tollgate provider at `base`.
fn codex_config(dirs: &Dirs, base: &str, extra: &str) -> Vec<(&'static str, String)> {
    let codex_home = dirs.home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            r#"model = "gpt-5.5"
model_provider = "tollgate"
check_for_update_on_startup = false
{extra}
[analytics]
enabled = false

[model_providers.tollgate]
name = "tollgate"
base_url = "{base}/v1"
env_key = "TOLLGATE_API_KEY"
wire_api = "responses"
"#
        ),
    )
    .unwrap();
    vec![("CODEX_HOME", codex_home.display().to_string())]
}

/// Codex asked to add a file: the model answers with an `apply_patch`
/// call (a custom tool: free-form text), Codex applies it, then the model
/// answers with text.
async fn codex_applies_a_patch(native: bool) {
    let codex = agent("TOLLGATE_TEST_CODEX");
    let env = TestEnv::new().await;
    env.model("gpt-5.5", "chat", 1_250_000, 10_000_000).await;
    if native {
        env.profile(
            "gpt-5.5",
            ProviderProfile {
                apis: vec![Dialect::Chat, Dialect::Responses],
                ..ProviderProfile::suggested_for("gpt-5.5")
            },
        )
        .await;
    }
    let key = open_tenant(&env).await;
    let srv = env.server().await;
    let dirs = Dirs::new(if native { "codex-native" } else { "codex-chat" });
    std::fs::write(dirs.work.join("notes.txt"), "first line\n").unwrap();
    let patch = "*** Begin Patch\n*** Update File: notes.txt\n@@\n first line\n+patched by codex\n*** End Patch\n";
    // A native provider sees the custom tool and answers with a
    // custom_tool_call; a chat provider sees the function of one string
    // `input` tollgate offers it as.
    let args = if native {
        patch.to_string()
    } else {
        serde_json::json!({"input": patch}).to_string()
    };
    let prompt = format!(
        "Add a line to notes.txt. {} [mock:output_tokens=9]",
        Call::directive("apply_patch", &args)
    );
    // Hosted web search runs at the provider: a chat provider cannot, so
    // Codex is told not to offer it there.
    let extra = if native {
        ""
    } else {
        "web_search = \"disabled\""
    };
    let mut envs = codex_config(&dirs, &format!("http://{}", srv.addr), extra);
    envs.push(("TOLLGATE_API_KEY", key));
    let r = run(
        &codex,
        &[
            "exec",
            "--skip-git-repo-check",
            "--sandbox",
            "workspace-write",
            &prompt,
        ],
        &dirs,
        &envs,
    )
    .await;
    said_hello(&r);
    assert_eq!(
        read(&dirs.work.join("notes.txt")),
        "first line\npatched by codex\n"
    );
    let s = env.mock.snapshot();
    if native {
        assert!(s.responses >= 2 && s.chat == 0, "{s:?}");
    } else {
        assert!(s.chat >= 2 && s.responses == 0, "{s:?}");
    }
    let rows = ledger(&env).await;
    all_ok(&rows, "gpt-5.5");
    assert!(rows.iter().all(|r| r.stream), "{rows:?}");
    // Asked by its catalog name: no other name kept. Codex names its
    // session in a header on every request: one session.
    assert!(
        rows.iter().all(|r| r.attribution.asked_model.is_none()),
        "{rows:?}"
    );
    let sessions: std::collections::BTreeSet<_> =
        rows.iter().map(|r| r.attribution.session.clone()).collect();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert!(sessions.iter().all(Option::is_some), "{sessions:?}");
}

#[tokio::test]
async fn codex_applies_a_patch_through_a_chat_provider() {
    codex_applies_a_patch(false).await;
}

#[tokio::test]
async fn codex_applies_a_patch_through_a_native_responses_provider() {
    codex_applies_a_patch(true).await;
}

#[tokio::test]
async fn gemini_cli_runs_against_tollgate() {
    let gemini = agent("TOLLGATE_TEST_GEMINI");
    let env = TestEnv::new().await;
    env.model("house-model", "chat", 150_000, 600_000).await;
    // Gemini CLI asks for its own model names (a pro model, a flash-lite
    // one for routing): one pattern alias serves them.
    alias(&env, "gemini-*", "house-model").await;
    let key = open_tenant(&env).await;
    let srv = env.server().await;
    let dirs = Dirs::new("gemini");
    let settings = dirs.home.join(".gemini");
    std::fs::create_dir_all(&settings).unwrap();
    // The API key sign-in, usage statistics and updates off.
    std::fs::write(
        settings.join("settings.json"),
        serde_json::json!({
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": false},
            "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
            "telemetry": {"enabled": false},
        })
        .to_string(),
    )
    .unwrap();
    std::fs::write(dirs.work.join("notes.txt"), "the secret word is tollgate\n").unwrap();
    let args = serde_json::json!({"file_path": "notes.txt"}).to_string();
    let prompt = format!(
        "Read notes.txt. {} [mock:output_tokens=7]",
        Call::directive("read_file", &args)
    );
    let r = run(
        &gemini,
        &["-p", &prompt],
        &dirs,
        &[
            ("GOOGLE_GEMINI_BASE_URL", format!("http://{}", srv.addr)),
            ("GEMINI_API_KEY", key),
            ("GEMINI_CLI_TRUST_WORKSPACE", "true".into()),
        ],
    )
    .await;
    said_hello(&r);
    // The file's text went back to the model in the function response.
    let s = env.mock.snapshot();
    let tool_message = s.last_body.as_ref().and_then(|b| {
        b["messages"]
            .as_array()?
            .iter()
            .find(|m| m["role"] == "tool")
            .cloned()
    });
    assert!(
        tool_message
            .as_ref()
            .is_some_and(|m| m.to_string().contains("the secret word is tollgate")),
        "the file's text did not reach the model: {tool_message:?}"
    );
    let rows = ledger(&env).await;
    all_ok(&rows, "house-model");
    for r in &rows {
        let asked = r.attribution.asked_model.as_deref().unwrap_or_default();
        assert!(asked.starts_with("gemini-"), "asked for {asked:?}: {r:?}");
    }
}
