//! The secrets scan that runs after the suite finds what it is meant to find.

use std::process::Command;

fn scan(dir: &std::path::Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_secrets-scan"))
        .arg(dir)
        .output()
        .expect("secrets-scan runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn a_leaked_key_or_secret_is_found_and_a_clean_tree_passes() {
    let dir = std::env::temp_dir().join(format!("tg-scan-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(dir.join("nested")).unwrap();
    let key = domain::keys::generate();
    let prefix = domain::keys::display_prefix(&key);
    // What a clean run leaves: display prefixes, hashes, a key-shaped string
    // whose checksum is wrong.
    let mut broken = key.clone();
    broken.replace_range(5..6, if &key[5..6] == "A" { "B" } else { "A" });
    std::fs::write(
        dir.join("clean.log"),
        format!("issued key {prefix} for app a\nbad key {broken} refused\n"),
    )
    .unwrap();
    let (code, out) = scan(&dir);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("1 files") && out.contains("0 findings"),
        "{out}"
    );

    std::fs::write(
        dir.join("nested/leak.log"),
        format!(
            "line one\nauthorization: Bearer {key}\ncfg jwt={}\n",
            e2e::JWT_SECRET
        ),
    )
    .unwrap();
    let (code, out) = scan(&dir);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("leak.log:2: plaintext virtual key"), "{out}");
    assert!(out.contains("leak.log:3: JWT secret"), "{out}");
    assert!(out.contains("2 findings"), "{out}");
    // The finding names the secret without repeating it.
    assert!(
        !out.contains(&key) && !out.contains(e2e::JWT_SECRET),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
