//! What the quota tests share: a redis-server of a test's own, for tests
//! that do what no test on the shared Redis may (flush it, flush its
//! scripts).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server of this test's own, killed when dropped.
pub struct PrivateRedis {
    port: u16,
    child: Child,
}

impl PrivateRedis {
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            // scripts/test.sh stops what a test left by this title.
            .args([
                "--proc-title-template",
                "{title} {listen-addr} tollgate-test-redis",
            ])
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { port, child }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
