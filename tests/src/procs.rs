//! Private service processes for tests that stop, flush or reshape them: a
//! redis-server, a 3-master Redis Cluster, a PostgreSQL cluster.

use std::net::TcpListener as StdListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The process title of every redis-server a test starts: a test binary's
/// shared servers live in statics, which are never dropped, so
/// scripts/test.sh stops the processes whose title carries
/// `tollgate-test-redis` after the suite. (A mark in the environment does
/// not survive: redis-server writes its title over its environment.)
pub const TEST_REDIS_TITLE: &str = "{title} {listen-addr} tollgate-test-redis";

/// The environment that makes a process's clock start at `at` (`YYYY-MM-DD
/// hh:mm:ss`, UTC) and run on from there: Debian's libfaketime (package
/// `faketime`, which scripts/test.sh installs), the monotonic clock left
/// alone so timers and timeouts work as usual. (Not for redis-server: see
/// `redis_clock`.)
pub fn faketime_env(at: &str) -> Vec<(String, String)> {
    let lib = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("libfaketime (Debian package faketime; scripts/test.sh installs it)");
    vec![
        ("LD_PRELOAD".into(), lib.into()),
        ("FAKETIME".into(), format!("@{at}")),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ("TZ".into(), "UTC".into()),
    ]
}

/// A private redis-server for tests that flush or stop Redis.
pub struct RedisProc {
    pub port: u16,
    child: Option<Child>,
    extra: Vec<String>,
}

impl RedisProc {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// With more `redis-server` arguments (`--maxmemory-policy allkeys-lru`).
    pub fn start_with(extra: &[&str]) -> Self {
        let port = StdListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let extra = extra.iter().map(|a| a.to_string()).collect();
        let mut me = Self {
            port,
            child: None,
            extra,
        };
        me.spawn();
        me
    }

    /// The server's process id (to SIGSTOP it: a Redis that is slow, not down).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--proc-title-template", TEST_REDIS_TITLE])
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (scripts/test.sh installs it)");
        self.child = Some(child);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("private redis-server did not start on port {}", self.port);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for RedisProc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A private 3-master Redis Cluster from Debian's redis-server, for tests
/// that must run the hold engine unchanged on a cluster.
pub struct RedisCluster {
    pub nodes: Vec<String>,
    children: Vec<Child>,
    _dir: std::path::PathBuf,
}

impl RedisCluster {
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "tollgate-cluster-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let ports: Vec<u16> = (0..3)
            .map(|_| {
                StdListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port()
            })
            .collect();
        let mut children = Vec::new();
        for p in &ports {
            let node_dir = dir.join(p.to_string());
            std::fs::create_dir_all(&node_dir).unwrap();
            let child = Command::new("redis-server")
                .args(["--proc-title-template", TEST_REDIS_TITLE])
                .args([
                    "--port",
                    &p.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
                .arg("--dir")
                .arg(&node_dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server on PATH");
            children.push(child);
        }
        for p in &ports {
            let t0 = Instant::now();
            while std::net::TcpStream::connect(("127.0.0.1", *p)).is_err() {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "cluster node {p} did not start"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli on PATH");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        // Every node must agree the cluster is up before it takes commands.
        let t0 = Instant::now();
        for p in &ports {
            loop {
                let info = Command::new("redis-cli")
                    .args(["-p", &p.to_string(), "cluster", "info"])
                    .output()
                    .unwrap();
                if String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok") {
                    break;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(20),
                    "cluster never reached state ok"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Self {
            nodes: ports
                .iter()
                .map(|p| format!("redis://127.0.0.1:{p}"))
                .collect(),
            children,
            _dir: dir,
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

/// A private PostgreSQL cluster (Debian's binaries, run as the `postgres`
/// user), for tests that stop and restart the database.
pub struct PgProc {
    pub port: u16,
    dir: std::path::PathBuf,
    bin: std::path::PathBuf,
}

impl PgProc {
    pub fn start() -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL from Debian's packages (scripts/test.sh installs it)")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .find(|p| p.join("initdb").exists())
            .expect("initdb");
        let port = StdListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir =
            std::env::temp_dir().join(format!("tollgate-pg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        Self::as_postgres(&["chown", "-R", "postgres", dir.to_str().unwrap()], true);
        let data = dir.join("data");
        let out = Self::as_postgres(
            &[
                bin.join("initdb").to_str().unwrap(),
                "-D",
                data.to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
            ],
            false,
        );
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let me = Self { port, dir, bin };
        me.up();
        me
    }

    fn as_postgres(args: &[&str], root: bool) -> std::process::Output {
        let mut c = if root || !Self::is_root() {
            let mut c = Command::new(args[0]);
            c.args(&args[1..]);
            c
        } else {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).args(args);
            c
        };
        c.output().expect("runs")
    }

    fn is_root() -> bool {
        std::env::var("USER").map(|u| u == "root").unwrap_or(false)
            || Command::new("id")
                .arg("-u")
                .output()
                .is_ok_and(|o| o.stdout.starts_with(b"0"))
    }

    pub fn up(&self) {
        let data = self.dir.join("data");
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.display()
        );
        let out = Self::as_postgres(
            &[
                self.bin.join("pg_ctl").to_str().unwrap(),
                "-D",
                data.to_str().unwrap(),
                "-o",
                &opts,
                "-w",
                "-l",
                self.dir.join("log").to_str().unwrap(),
                "start",
            ],
            false,
        );
        assert!(
            out.status.success(),
            "pg_ctl start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn down(&self) {
        let data = self.dir.join("data");
        let _ = Self::as_postgres(
            &[
                self.bin.join("pg_ctl").to_str().unwrap(),
                "-D",
                data.to_str().unwrap(),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
            false,
        );
    }

    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PgProc {
    fn drop(&mut self) {
        self.down();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
