//! What the tokenizer tables cost in memory: the process's RSS before and
//! after each family is loaded (bench/results/2026-11-29-bench-2135.md, "Memory").
//!
//!     cargo run --release -p tollgate-domain --example tokenizer_rss -- o200k cl100k

use domain::tokens::TokenizerFamily;

fn rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS"))
                .map(str::to_string)
        })
        .unwrap_or_else(|| "VmRSS: unknown".into())
}

fn main() {
    println!("before: {}", rss());
    for name in std::env::args().skip(1) {
        let family = match name.as_str() {
            "o200k" => TokenizerFamily::O200k,
            "cl100k" => TokenizerFamily::Cl100k,
            other => {
                eprintln!("unknown family {other}: o200k or cl100k");
                std::process::exit(2);
            }
        };
        TokenizerFamily::warm_up([family]);
        println!("after {name}: {}", rss());
    }
}
