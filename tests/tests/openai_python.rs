//! The official `openai` Python package talks to tollgate as it would to
//! OpenAI: a chat completion, a stream with usage, and an embedding.
//! `scripts/test.sh` installs the package and sets TOLLGATE_TEST_PYTHON.

use domain::Limits;
use e2e::*;

#[tokio::test]
async fn the_official_openai_python_client_works_through_tollgate() {
    let python = std::env::var("TOLLGATE_TEST_PYTHON").expect(
        "TOLLGATE_TEST_PYTHON is not set: run ./scripts/test.sh, which installs the openai package",
    );
    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(1_000_000),
            ..Default::default()
        })
        .await;
    env.tenant(
        "small",
        Limits {
            monthly_tokens: Some(400),
            ..Default::default()
        },
        None,
    )
    .await;
    env.app("small", "a", Limits::default()).await;
    let (_, cutoff_key) = env.key("small", "a", Limits::default()).await;
    let srv = env.server().await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/openai_client.py");
    let out = tokio::process::Command::new(python)
        .arg(script)
        .env("OPENAI_BASE_URL", format!("http://{}/v1", srv.addr))
        .env("OPENAI_API_KEY", &key)
        .env("OPENAI_CUTOFF_KEY", &cutoff_key)
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "chat ok",
        "stream ok",
        "embedding ok",
        "bad key ok",
        "cutoff ok",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing {line:?} in:\n{stdout}"
        );
    }
    srv.shutdown().await;
}
