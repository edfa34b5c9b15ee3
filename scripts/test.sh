#!/usr/bin/env bash
# Bring up the services and run every test the way CI does:
#   1. PostgreSQL, Redis and ClickHouse (scripts/services.sh);
#   2. a Python venv with the official openai package (TOLLGATE_TEST_PYTHON)
#      and LiteLLM's price catalog (TOLLGATE_TEST_LITELLM_PRICES, the file
#      tests/tests/pricing.rs imports),
#      and headless Chromium + chromedriver for the console's browser test,
#      and Claude Code, Codex and Gemini CLI from npm at pinned versions
#      (tests/tests/agents.rs; TOLLGATE_TEST_CLAUDE, _CODEX, _GEMINI);
#   3. the manual: mdbook (pinned, built once into a cache) builds docs/ and
#      scripts/doclinks.py fails on any relative link or anchor that points
#      nowhere (in the book, the README and the run logs in bench/results/);
#      every docs/*.md is in docs/SUMMARY.md; the current-figures tables
#      match bench/results/figures.tsv (scripts/figures.sh --check);
#   4. scripts/cycles.py: no import cycle between the modules of any crate
#      (a module and the modules it uses never use it back);
#      cargo clippy --workspace --all-targets -- -D warnings (the lints: every
#      library crate warns on a dependency it does not use, console/clippy.toml
#      bans TenantScope::system in the console), then
#      cargo test --workspace (extra arguments pass through, e.g. -p tollgate-quota);
#   5. unless SKIP_DEV_SMOKE=1: scripts/dev.sh on a free port, its printed curl
#      line must return a chat completion;
#   6. unless SKIP_SECRETS_SCAN=1: everything the suite left behind (server
#      logs, error bodies, /metrics, dumps of every test database and of
#      ClickHouse) is scanned for plaintext keys and the suite's secrets;
#   7. unless SKIP_SUPPLY_CHAIN=1: scripts/supply-chain.sh (cargo-deny).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TOLLGATE_ROOT"

have cargo || die "cargo not found: install Rust (rustup) and make sure cargo is on PATH"

ensure_services
ensure_test_python # exports TOLLGATE_TEST_PYTHON, TOLLGATE_TEST_LITELLM_PRICES
ensure_browser
ensure_agents # exports TOLLGATE_TEST_CLAUDE, TOLLGATE_TEST_CODEX, TOLLGATE_TEST_GEMINI
# libfaketime: replicas and a Redis whose clocks read another time
# (tests/tests/hardening.rs, the month's last seconds).
need_cmd faketime faketime

export TOLLGATE_TEST_DATABASE_URL=${TOLLGATE_TEST_DATABASE_URL:-postgres://postgres@$PG_HOST:$PG_PORT/postgres}
export TOLLGATE_TEST_REDIS_URL=${TOLLGATE_TEST_REDIS_URL:-redis://$REDIS_HOST:$REDIS_PORT}
export TOLLGATE_TEST_CLICKHOUSE_URL=${TOLLGATE_TEST_CLICKHOUSE_URL:-$(ch_url)}

# `cargo test --workspace -p X` ignores -p, so only add --workspace when the
# arguments (before any `--`) select no package themselves.
workspace=(--workspace)
for arg in "$@"; do
    case $arg in
    --) break ;;
    -p | -p* | --package | --package=* | --workspace | --all) workspace=() ;;
    esac
done

# What the suite leaves for the secrets scan (step 6).
TOLLGATE_TEST_LOG_DIR=${TOLLGATE_TEST_LOG_DIR:-${CARGO_TARGET_DIR:-$TOLLGATE_ROOT/target}/test-logs}
rm -rf "$TOLLGATE_TEST_LOG_DIR" && mkdir -p "$TOLLGATE_TEST_LOG_DIR"
export TOLLGATE_TEST_LOG_DIR

# Each end-to-end test makes its own database; drop the previous run's.
psql_url "$TOLLGATE_TEST_DATABASE_URL" -f - <<'SQL' >/dev/null || log "postgres: could not drop old test databases (continuing)"
SET client_min_messages = warning;
SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', datname) FROM pg_database WHERE datname LIKE 'tollgate\_t\_%'\gexec
SQL

# Each billing test makes its own ClickHouse database (left, like the
# Postgres ones, for the secrets scan); drop the previous run's.
for db in $(ch_query "SELECT name FROM system.databases WHERE substring(name, 1, 11) = 'tollgate_t_'" "$TOLLGATE_TEST_CLICKHOUSE_URL" 2>/dev/null || true); do
    ch_query "DROP DATABASE IF EXISTS $db" "$TOLLGATE_TEST_CLICKHOUSE_URL" >/dev/null ||
        log "clickhouse: could not drop $db (continuing)"
done

# The manual first: it takes seconds once mdbook is built.
bash scripts/book.sh

# Lints before the tests: an import cycle or a warning fails CI.
log "+ python3 scripts/cycles.py"
python3 scripts/cycles.py
log "+ cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy -q --workspace --all-targets -- -D warnings

# The replica-crash test runs real `tollgate` processes: build the binary
# first, from this tree.
log "+ cargo build -p tollgate-server --bin tollgate"
cargo build -q -p tollgate-server --bin tollgate

# Private redis-servers the tests started (their process title says
# tollgate-test-redis: redis-server writes its title over its environment,
# so a mark there is lost; a test binary's shared servers live in statics
# that are never dropped).
stop_test_redis() {
    pkill -f 'tollgate-test-redis' 2>/dev/null || true
}
trap stop_test_redis EXIT

log "+ cargo test ${workspace[*]+${workspace[*]} }$*"
cargo test "${workspace[@]}" "$@"
stop_test_redis

secrets_scan() {
    [[ ${SKIP_SECRETS_SCAN:-0} == 1 ]] && return 0
    local dumps=$TOLLGATE_TEST_LOG_DIR/dumps db table
    mkdir -p "$dumps"
    log "secrets scan: dumping the test databases"
    for db in $(psql_url "$TOLLGATE_TEST_DATABASE_URL" -Atc \
        "SELECT datname FROM pg_database WHERE datname LIKE 'tollgate\_t\_%' OR datname = 'tollgate_smoke'"); do
        pg_dump --data-only --no-owner "$(url_with_db "$TOLLGATE_TEST_DATABASE_URL" "$db")" >"$dumps/pg-$db.sql" ||
            die "secrets scan: pg_dump $db failed"
    done
    for table in $(ch_query "SELECT concat(database, '.', name) FROM system.tables WHERE database LIKE 'tollgate%' FORMAT TSV" \
        "$TOLLGATE_TEST_CLICKHOUSE_URL"); do
        ch_query "SELECT * FROM $table FORMAT TSV" "$TOLLGATE_TEST_CLICKHOUSE_URL" >"$dumps/ch-$table.tsv" ||
            die "secrets scan: could not read ClickHouse table $table"
    done
    log "+ secrets-scan $TOLLGATE_TEST_LOG_DIR"
    cargo run -q -p tollgate-e2e --bin secrets-scan -- "$TOLLGATE_TEST_LOG_DIR"
}

supply_chain() {
    [[ ${SKIP_SUPPLY_CHAIN:-0} == 1 ]] && return 0
    bash "$TOLLGATE_ROOT/scripts/supply-chain.sh"
}

if [[ ${SKIP_DEV_SMOKE:-0} == 1 ]]; then
    secrets_scan
    supply_chain
    exit 0
fi

# --- dev.sh smoke -----------------------------------------------------------

SMOKE_TIMEOUT=${SMOKE_TIMEOUT:-300}
smoke_dir=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-smoke.XXXXXX")
smoke_out=$smoke_dir/stdout.log
smoke_err=$smoke_dir/stderr.log
smoke_pgid=

smoke_stop() {
    [[ -n $smoke_pgid ]] || return 0
    kill -TERM -- "-$smoke_pgid" 2>/dev/null || true
    local _
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        kill -0 -- "-$smoke_pgid" 2>/dev/null || break
        sleep 0.5
    done
    kill -KILL -- "-$smoke_pgid" 2>/dev/null || true
    smoke_pgid=
}
trap 'smoke_stop; stop_test_redis' EXIT

smoke_fail() {
    log "dev.sh smoke: $*"
    log "--- dev.sh stdout (last 40 lines) ---"
    tail -n 40 "$smoke_out" >&2 || true
    log "--- dev.sh stderr (last 40 lines) ---"
    tail -n 40 "$smoke_err" >&2 || true
    smoke_stop
    echo "smoke: 0 passed, 1 failed"
    exit 1
}

smoke_port=$(free_port 18480)
smoke_db_url=$(url_with_db "$TOLLGATE_TEST_DATABASE_URL" tollgate_smoke)
smoke_redis_db=15
pg_recreate_db "$smoke_db_url"
ch_query 'DROP DATABASE IF EXISTS tollgate_smoke' "$TOLLGATE_TEST_CLICKHOUSE_URL" >/dev/null ||
    die "clickhouse: could not drop database tollgate_smoke"
redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" -n "$smoke_redis_db" flushdb >/dev/null ||
    die "redis: could not flush database $smoke_redis_db"

# Build first so that the timeout below covers start-up, not compilation
# (dev.sh's own build is then a no-op).
log "dev.sh smoke: building tollgate-dev"
cargo build -q -p tollgate-devtools --bin tollgate-dev

log "dev.sh smoke: starting scripts/dev.sh on 127.0.0.1:$smoke_port (logs in $smoke_dir)"
# setsid: dev.sh (and the server it execs) lead their own process group, so
# that the whole group can be stopped afterwards.
smoke_metrics_token=smoke-metrics-token-0123456789abcdef01234
TOLLGATE__SERVER__LISTEN=127.0.0.1:$smoke_port \
    TOLLGATE__METRICS__TOKEN=$smoke_metrics_token \
    TOLLGATE__DATABASE__URL=$smoke_db_url \
    TOLLGATE__REDIS__URL=redis://$REDIS_HOST:$REDIS_PORT/$smoke_redis_db \
    TOLLGATE__CLICKHOUSE__URL=$TOLLGATE_TEST_CLICKHOUSE_URL \
    TOLLGATE__CLICKHOUSE__DATABASE=tollgate_smoke \
    setsid bash "$TOLLGATE_ROOT/scripts/dev.sh" </dev/null >"$smoke_out" 2>"$smoke_err" &
smoke_pid=$!
smoke_pgid=$smoke_pid

curl_line=
deadline=$((SECONDS + SMOKE_TIMEOUT))
while :; do
    curl_line=$(grep -m 1 '^curl ' "$smoke_out" || true)
    [[ -n $curl_line ]] && break
    kill -0 "$smoke_pid" 2>/dev/null || smoke_fail "scripts/dev.sh exited before printing a curl line"
    ((SECONDS < deadline)) || smoke_fail "no line starting with 'curl ' on stdout within ${SMOKE_TIMEOUT}s"
    sleep 1
done

log "dev.sh smoke: running: $curl_line"
if ! curl_output=$(timeout 60 bash -c "$curl_line" </dev/null 2>&1); then
    log "$curl_output"
    smoke_fail "the printed curl line failed"
fi
if [[ $curl_output != *'"chat.completion"'* ]]; then
    log "$curl_output"
    smoke_fail "the printed curl line did not return a \"chat.completion\""
fi
# For the secrets scan: the server's metrics and an error body.
smoke_base=${curl_line#*http://}
smoke_base=http://${smoke_base%%/*}
curl -s -H "Authorization: Bearer $smoke_metrics_token" "$smoke_base/metrics" \
    >"$TOLLGATE_TEST_LOG_DIR/smoke-metrics.txt" || true
curl -s -H 'Authorization: Bearer tg-not-a-real-key' -d '{}' "$smoke_base/v1/chat/completions" \
    >"$TOLLGATE_TEST_LOG_DIR/smoke-error-body.json" || true
smoke_stop
# The server's log is scanned; its stdout is not: `tollgate-dev demo` prints the
# demo key there once, on purpose (the curl line above).
mv "$smoke_err" "$TOLLGATE_TEST_LOG_DIR/smoke-server.log"
rm -rf "$smoke_dir"
echo "smoke: 1 passed, 0 failed"

secrets_scan
supply_chain
