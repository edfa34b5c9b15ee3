//! A real OpenID provider for the SSO tests: PyPI's `oidc-provider-mock`
//! (installed by scripts/lib.sh into the test venv), run as its own process
//! on a free port. It signs ID tokens with an RSA key it makes at start, so
//! a restart on the same port is a key rotation.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct OidcProvider {
    pub port: u16,
    child: Option<Child>,
}

fn python() -> String {
    std::env::var("TOLLGATE_TEST_PYTHON").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        format!("{home}/.cache/tollgate/venv/bin/python")
    })
}

impl OidcProvider {
    pub fn start() -> OidcProvider {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut p = OidcProvider { port, child: None };
        p.spawn();
        p
    }

    fn spawn(&mut self) {
        let child = Command::new(python())
            .args([
                "-m",
                "oidc_provider_mock",
                "--host",
                "127.0.0.1",
                "--require-nonce",
            ])
            .args(["--port", &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("oidc-provider-mock in the test venv (scripts/lib.sh installs it)");
        self.child = Some(child);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            if discovery_answers(self.port) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("oidc-provider-mock did not start on port {}", self.port);
    }

    /// The issuer, exactly as the provider names itself.
    pub fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Sets the claims the provider puts in `sub`'s ID token.
    pub async fn user(&self, sub: &str, claims: serde_json::Value) {
        let r = reqwest::Client::new()
            .put(format!("{}/users/{sub}", self.issuer()))
            .json(&claims)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "provider user {sub}");
    }

    /// A new signing key: the provider restarts on the same port (its users
    /// are gone too; set them again).
    pub fn rotate_keys(&mut self) {
        self.stop();
        self.spawn();
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The discovery document answers 200 (a blocking GET, for start-up
/// polling outside any runtime).
fn discovery_answers(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req =
        format!("GET /.well-known/openid-configuration HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.ends_with(b"200")
}
