//! After the suite: read everything it left behind (server logs, spawned
//! replicas' logs, error bodies, `/metrics`, dumps of every test database and
//! ClickHouse) and fail if a secret is in it. Plain virtual keys are found by
//! their shape and checksum (`tg-` + body + check), so a leaked key is caught
//! whichever test made it; the suite's fixed secrets (pepper, encryption key,
//! JWT secret, provider key, password) are searched for literally.
//!
//! Usage: secrets-scan DIR...   (exit 1 and a line per finding on any hit)

use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// A secret shown in a finding: enough to recognise, not enough to use.
fn redact(s: &str) -> String {
    format!("{}…", s.chars().take(8).collect::<String>())
}

fn main() {
    let dirs: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if dirs.is_empty() {
        eprintln!("usage: secrets-scan DIR...");
        std::process::exit(2);
    }
    let key_shape = regex::Regex::new(r"tg-[0-9A-Za-z]{30,}").expect("regex");
    let mut paths = Vec::new();
    for d in &dirs {
        files(d, &mut paths);
    }
    paths.sort();
    let (mut bytes, mut findings) = (0usize, 0usize);
    for path in &paths {
        let Ok(raw) = std::fs::read(path) else {
            continue;
        };
        bytes += raw.len();
        let text = String::from_utf8_lossy(&raw);
        for (lineno, line) in text.lines().enumerate() {
            let at = format!("{}:{}", path.display(), lineno + 1);
            for (what, secret) in e2e::SUITE_SECRETS {
                if line.contains(secret) {
                    findings += 1;
                    println!("{at}: {what} ({})", redact(secret));
                }
            }
            for m in key_shape.find_iter(line) {
                // The key is exactly prefix + body + checksum; try that length.
                let candidate: String = m.as_str().chars().take(3 + 32 + 6).collect();
                if domain::keys::is_well_formed(&candidate) {
                    findings += 1;
                    println!("{at}: plaintext virtual key ({})", redact(&candidate));
                }
            }
        }
    }
    println!(
        "secrets scan: {} files, {} bytes, {findings} findings",
        paths.len(),
        bytes
    );
    if paths.is_empty() {
        println!("secrets scan: nothing to scan — is TOLLGATE_TEST_LOG_DIR set?");
        std::process::exit(1);
    }
    if findings > 0 {
        std::process::exit(1);
    }
}
