//! The browser harness the console's browser tests share: chromedriver on
//! a free port, a headless Chromium session, and a page driver (`Ui`) that
//! waits for elements and writes screenshots to the artifacts directory.
#![allow(dead_code)]

use e2e::console_web::PASSWORD;
use e2e::TestEnv;
use fantoccini::{Client, ClientBuilder, Locator};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `$TOLLGATE_ARTIFACTS`, else `$CARGO_TARGET_DIR/artifacts/console`, else
/// `target/artifacts/console` in the workspace (gitignored).
pub fn artifacts_dir() -> PathBuf {
    let dir = match (
        std::env::var("TOLLGATE_ARTIFACTS"),
        std::env::var("CARGO_TARGET_DIR"),
    ) {
        (Ok(d), _) => PathBuf::from(d),
        (_, Ok(t)) => PathBuf::from(t).join("artifacts/console"),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/artifacts/console"),
    };
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    /// chromedriver on a free port. The port is found by binding and
    /// releasing it, so another process (a server of a test running beside
    /// this one) may take it first: then chromedriver exits, and it is
    /// started again on another port. Ready means this child answers
    /// `/status`, not merely that something listens on the port.
    pub fn start() -> Driver {
        for _ in 0..5 {
            if let Some(d) = Self::try_start() {
                return d;
            }
        }
        panic!("chromedriver did not start (5 ports tried)");
    }

    fn try_start() -> Option<Driver> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Its own process group: the browsers it starts are in it, and go
        // with it (a browser whose session was not closed outlives a killed
        // chromedriver otherwise).
        let child = Command::new("chromedriver")
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver on PATH (scripts/test.sh installs chromium-driver)");
        let mut d = Driver { child, port };
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            if d.child.try_wait().ok().flatten().is_some() {
                return None; // exited: the port was taken
            }
            if driver_status(port).is_some_and(|s| s.contains("\"ready\"")) {
                return Some(d);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("chromedriver did not answer /status within 20 s");
    }

    pub async fn browser(&self) -> Client {
        let mut opts = serde_json::json!({
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,900", "--lang=en-US"],
            "prefs": {"intl.accept_languages": "en-US,en"},
        });
        if std::path::Path::new("/usr/bin/chromium").exists() {
            opts["binary"] = "/usr/bin/chromium".into();
        }
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), opts);
        // Two rustls crypto providers are linked (reqwest's, fantoccini's):
        // name one. The driver is plain HTTP on 127.0.0.1 anyway.
        let _ = rustls::crypto::ring::default_provider().install_default();
        ClientBuilder::rustls()
            .unwrap()
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a Chromium session")
    }
}

/// chromedriver's `GET /status` answer, if something on the port gave one.
fn driver_status(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    // HTTP/1.1: chromedriver closes an HTTP/1.0 request unanswered.
    c.write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    // Until the answer says ready, or the peer closes or goes quiet (it
    // may keep the connection open).
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = c.read(&mut buf) {
        out.extend_from_slice(&buf[..n]);
        if out.windows(7).any(|w| w == b"\"ready\"") {
            break;
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

impl Drop for Driver {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Ui {
    pub c: Client,
    pub base: String,
    pub shots: PathBuf,
}

/// The server (plain-HTTP cookies, then `tune`'s changes), a browser and
/// the page driver, for a browser test.
pub async fn browse(
    env: &TestEnv,
    tune: impl FnOnce(&mut server::config::Config),
) -> (server::app::Running, Driver, Ui) {
    let mut cfg = env.config();
    cfg.auth.cookie_secure = false;
    tune(&mut cfg);
    let srv = env.server_with(cfg).await;
    let driver = Driver::start();
    let ui = Ui {
        c: driver.browser().await,
        base: format!("http://{}", srv.addr),
        shots: artifacts_dir(),
    };
    (srv, driver, ui)
}

impl Ui {
    /// How many elements match `css` now.
    pub async fn count(&self, css: &str) -> usize {
        self.c.find_all(Locator::Css(css)).await.unwrap().len()
    }

    pub async fn go(&self, path: &str) {
        self.c.goto(&format!("{}{path}", self.base)).await.unwrap();
    }

    pub async fn shot(&self, name: &str) {
        let png = self.c.screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
        std::fs::write(self.shots.join(format!("{name}.png")), png).unwrap();
    }

    pub async fn wait(&self, css: &str) -> fantoccini::elements::Element {
        self.c
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css} never appeared: {e}"))
    }

    /// Runs `act` on the element `css` finds; when htmx swapped it out
    /// between the find and the act (a stale element), finds it again.
    async fn on<T, F, Fut>(&self, css: &str, act: F) -> T
    where
        F: Fn(fantoccini::elements::Element) -> Fut,
        Fut: std::future::Future<Output = Result<T, fantoccini::error::CmdError>>,
    {
        for _ in 0..50 {
            match act(self.wait(css).await).await {
                Ok(t) => return t,
                Err(e) if e.is_stale_element_reference() => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(e) => panic!("{css}: {e}"),
            }
        }
        panic!("{css} kept being replaced for 5 s")
    }

    pub async fn fill(&self, css: &str, text: &str) {
        self.on(css, |e| async move {
            e.clear().await?;
            e.send_keys(text).await
        })
        .await
    }

    /// Chooses the option of value `value` of the `<select>` `css` finds
    /// (a click on it, as a person chooses).
    pub async fn select(&self, css: &str, value: &str) {
        self.click(&format!("{css} option[value=\"{value}\"]"))
            .await
    }

    pub async fn click(&self, css: &str) {
        self.on(css, |e| async move { e.click().await }).await
    }

    pub async fn text(&self, css: &str) -> String {
        self.on(css, |e| async move { e.text().await }).await
    }

    pub async fn login(&self, email: &str, shot: Option<&str>) {
        self.go("/console/login").await;
        self.fill("input[name=email]", email).await;
        self.fill("input[name=password]", PASSWORD).await;
        if let Some(name) = shot {
            self.shot(name).await;
        }
        self.click("button[type=submit]").await;
        self.wait("#logout").await;
    }

    pub async fn logout(&self) {
        self.click("#logout").await;
        self.wait("input[name=email]").await;
    }

    /// Waits until `css` has the attribute value `want`.
    pub async fn wait_attr(&self, css: &str, attr: &str, want: &str) {
        let t0 = std::time::Instant::now();
        loop {
            if let Ok(e) = self.c.find(Locator::Css(css)).await {
                if e.attr(attr).await.ok().flatten().as_deref() == Some(want) {
                    return;
                }
            }
            if t0.elapsed() > Duration::from_secs(10) {
                self.shot("failure").await;
                let src = self.c.source().await.unwrap_or_default();
                std::fs::write(self.shots.join("failure.html"), &src).unwrap();
                panic!("{css}[{attr}] never became {want}; see failure.html/png");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The `data-field`s of a form's errors, sorted.
/// Read in one script, so an htmx swap between finding the errors and
/// reading them leaves no stale element behind.
pub async fn error_fields(ui: &Ui, form: &str) -> Vec<String> {
    let v =
        ui.c.execute(
            "return Array.from(document.querySelectorAll(arguments[0]))
                .map(e => e.getAttribute('data-field') || '')",
            vec![serde_json::json!(format!("{form} .field-error"))],
        )
        .await
        .unwrap();
    let mut fields: Vec<String> = serde_json::from_value(v).unwrap();
    fields.sort();
    fields
}

/// Every console page a signed-in person reaches by following links from
/// the dashboard (GET links only; exports, paging, the language switch and
/// log out left out; at most `PER_PATH` queries of one path). Paths with
/// their queries, in the order found.
pub async fn crawl(ui: &Ui, max: usize) -> Vec<String> {
    const PER_PATH: usize = 4;
    let mut seen: Vec<String> = Vec::new();
    let mut queue = std::collections::VecDeque::from(["/console".to_string()]);
    let mut per_path: std::collections::HashMap<String, usize> = Default::default();
    while let Some(href) = queue.pop_front() {
        if seen.len() >= max {
            break;
        }
        if seen.contains(&href) {
            continue;
        }
        seen.push(href.clone());
        ui.go(&href).await;
        let links = ui
            .c
            .execute(
                "return Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'))",
                vec![],
            )
            .await
            .unwrap();
        for l in links.as_array().cloned().unwrap_or_default() {
            let Some(l) = l.as_str() else { continue };
            let l = l.split('#').next().unwrap_or_default().to_string();
            let skip = !l.starts_with("/console")
                || [".csv", "/logout", "/sso/", "/lang", "cursor=", "before="]
                    .iter()
                    .any(|s| l.contains(s));
            if skip || seen.contains(&l) || queue.contains(&l) {
                continue;
            }
            let path = l.split('?').next().unwrap_or_default().to_string();
            let n = per_path.entry(path).or_default();
            if *n < PER_PATH {
                *n += 1;
                queue.push_back(l);
            }
        }
    }
    seen
}
