#!/usr/bin/env bash
# Bring up the services, build tollgate-dev (debug) and run `tollgate-dev demo`
# (the demo platform on a built-in mock provider, served as `tollgate serve` serves).
# Extra arguments go to `tollgate-dev demo` (e.g. --listen). Environment defaults (only when unset):
#   TOLLGATE__DATABASE__URL          postgres://postgres@127.0.0.1:5432/tollgate
#   TOLLGATE__REDIS__URL             redis://127.0.0.1:6379
#   TOLLGATE__CLICKHOUSE__URL        http://127.0.0.1:8123
#   TOLLGATE__CLICKHOUSE__DATABASE   tollgate
# The server listens on 127.0.0.1:8080 unless TOLLGATE__SERVER__LISTEN is set.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TOLLGATE_ROOT"

ensure_services

export TOLLGATE__DATABASE__URL=${TOLLGATE__DATABASE__URL:-postgres://postgres@$PG_HOST:$PG_PORT/tollgate}
export TOLLGATE__REDIS__URL=${TOLLGATE__REDIS__URL:-redis://$REDIS_HOST:$REDIS_PORT}
export TOLLGATE__CLICKHOUSE__URL=${TOLLGATE__CLICKHOUSE__URL:-$(ch_url)}
export TOLLGATE__CLICKHOUSE__DATABASE=${TOLLGATE__CLICKHOUSE__DATABASE:-tollgate}

pg_create_db "$TOLLGATE__DATABASE__URL"
ch_query "CREATE DATABASE IF NOT EXISTS \`$TOLLGATE__CLICKHOUSE__DATABASE\`" "$TOLLGATE__CLICKHOUSE__URL" >/dev/null ||
    die "clickhouse: could not create database $TOLLGATE__CLICKHOUSE__DATABASE"

have cargo || die "cargo not found: install Rust (rustup) and make sure cargo is on PATH"
log "building tollgate-dev (debug)"
cargo build -p tollgate-devtools --bin tollgate-dev

target_dir=${CARGO_TARGET_DIR:-target}
[[ $target_dir == /* ]] || target_dir=$TOLLGATE_ROOT/$target_dir
bin=$target_dir/debug/tollgate-dev
[[ -x $bin ]] || die "built binary not found at $bin"

exec "$bin" demo "$@"
