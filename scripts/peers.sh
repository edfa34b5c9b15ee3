#!/usr/bin/env bash
# tollgate beside LiteLLM and Portkey, in one run of bench/peers/peers.sh:
# the same nginx upstream (a fixed chat completion), the same wrk load at 1
# and 32 connections. This script builds tollgate (release), starts nginx
# with bench/peers' configuration, seeds the `bench` tenant (every limit
# kind set on tenant, app and key, none reachable during the run) on that
# upstream, starts `tollgate serve` with full enforcement (admission=lease,
# the default), and hands over to peers.sh, which installs LiteLLM and
# Portkey on first use (pip / npm) under $PEERS_DIR.
#
#   ./scripts/peers.sh                       # direct tollgate litellm portkey
#   DUR=8 ./scripts/peers.sh direct tollgate # a subset
#   DUR=8 ./scripts/peers.sh direct nginx-proxy stack-floor tollgate
#
# stack-floor is a plain pass-through on tollgate's own libraries (the
# `bare-proxy` bench binary, built and started here when asked for): what
# axum, hyper and tokio cost before any metering.
#
# When the run had direct and nginx-proxy, the last lines give each other
# path beside nginx-proxy, from this run's figures: its requests/s at 32
# connections as a share of nginx-proxy's, and its added p50 at one
# connection (its p50 less direct's) as a multiple of nginx-proxy's (the
# goals: >= 50 % and <= 2x; docs/benchmarks.md).
#
# The run is kept as bench/results/<date>-peers.md and tollgate's ratios go
# to the current-figures table (bench/results/figures.tsv); RECORD=0 only
# prints.
#
# Only processes this script (or peers.sh) starts are stopped.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TOLLGATE_ROOT"

shared=$TOLLGATE_ROOT/bench/peers
[[ -x $shared/peers.sh || -f $shared/peers.sh ]] || die "no $shared/peers.sh"
export PEERS_DIR=${PEERS_DIR:-/tmp/tollgate-peers}
GW_PORT=${GW_PORT:-18091}
work=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-peers.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]:-}"; do [[ -n $p ]] && kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

ensure_services >/dev/null
have nginx || apt_install nginx
have wrk || apt_install wrk
log "building tollgate (release)"
cargo build -q --release -p tollgate-server --bin tollgate -p tollgate-devtools --bin tollgate-dev
bin=${CARGO_TARGET_DIR:-$TOLLGATE_ROOT/target}/release/tollgate
dev=${CARGO_TARGET_DIR:-$TOLLGATE_ROOT/target}/release/tollgate-dev
FLOOR_PORT=${FLOOR_PORT:-18093}
if [[ " $* " == *" stack-floor "* ]]; then
    cargo build -q --release -p tollgate-bench --bin bare-proxy
    "${CARGO_TARGET_DIR:-$TOLLGATE_ROOT/target}/release/bare-proxy" \
        --listen "127.0.0.1:$FLOOR_PORT" --upstream 127.0.0.1:18080 >"$work/floor.log" 2>&1 &
    pids+=($!)
    wait_until "bare-proxy on :$FLOOR_PORT" 10 tcp_open 127.0.0.1 "$FLOOR_PORT"
    export STACK_FLOOR_URL=http://127.0.0.1:$FLOOR_PORT
fi

if ! tcp_open 127.0.0.1 18080; then
    mkdir -p "$work/nginx/body"
    sed "s#__DIR__#$work/nginx#g" "$shared/mock-upstream.nginx.conf" >"$work/nginx/nginx.conf"
    nginx -c "$work/nginx/nginx.conf"
    wait_until "nginx on :18080" 10 tcp_open 127.0.0.1 18080
    pids+=("$(cat "$work/nginx/nginx.pid")")
fi

db_url=$(url_with_db "postgres://postgres@$PG_HOST:$PG_PORT/postgres" tollgate_peers)
pg_recreate_db "$db_url"
export TOLLGATE__DATABASE__URL=$db_url
export TOLLGATE__REDIS__URL=redis://$REDIS_HOST:$REDIS_PORT
export TOLLGATE__REDIS__KEY_PREFIX=tgpeers$$
export TOLLGATE__KEYS__PEPPER=peers-pepper-0123456789abcdef0123456789abcdef
export TOLLGATE__KEYS__ENCRYPTION_KEY=0011223344556677889900112233445566778899001122334455667788990011
export TOLLGATE_LOG=warn
key=$("$dev" bench-setup --upstream http://127.0.0.1:18080/v1 2>"$work/setup.log") ||
    { cat "$work/setup.log" >&2; exit 1; }
"$bin" serve --listen "127.0.0.1:$GW_PORT" >"$work/gw.log" 2>&1 &
pids+=($!)
wait_until "tollgate on :$GW_PORT" 30 curl -fs -o /dev/null "http://127.0.0.1:$GW_PORT/healthz"

log "peers.sh (${DUR:-8}s per run); tollgate log: $work/gw.log"
TOLLGATE_URL=http://127.0.0.1:$GW_PORT TOLLGATE_KEY=$key bash "$shared/peers.sh" "$@" |
    tee "$work/peers.out"

# The lines above look like `tollgate  c=32  rps=23197.62   p50=1.29ms ...`;
# wrk writes p50 in us, ms or s.
awk '
  function us(v) { if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return v * 1000; return v * 1e6 }
  $2 ~ /^c=/ && $3 ~ /^rps=/ {
    name = $1; c = substr($2, 3); sub(/^rps=/, "", $3); sub(/^p50=/, "", $4)
    if (!(name in seen)) { seen[name] = 1; order[++n] = name }
    rps[name, c] = $3; p50[name, c] = us($4)
  }
  END {
    if (!(("direct", 1) in p50) || !(("nginx-proxy", 32) in rps)) {
      print "ratios: run direct and nginx-proxy too for the shares and multiples"; exit
    }
    ng = p50["nginx-proxy", 1] - p50["direct", 1]
    for (i = 1; i <= n; i++) {
      t = order[i]; if (t == "direct" || t == "nginx-proxy") continue
      share = (t, 32) in rps ? sprintf("%.1f %%", 100 * rps[t, 32] / rps["nginx-proxy", 32]) : "-"
      added = (t, 1) in p50 ? p50[t, 1] - p50["direct", 1] : ""
      mult = added == "" ? "-" : ng > 0 ? sprintf("%.1fx", added / ng) : "- (nginx-proxy added nothing)"
      printf "ratio %-11s c=32 req/s %s of nginx-proxy'"'"'s; c=1 added p50 %s us against nginx-proxy'"'"'s %d us: %s\n", \
        t, share, added == "" ? "-" : sprintf("%d", added), ng, mult
    }
  }' "$work/peers.out" | tee "$work/ratios.out"

# Kept in bench/results/ (RECORD=0: printed only), and tollgate's ratios
# added to the current-figures table (scripts/figures.sh).
[[ ${RECORD:-1} == 1 ]] || exit 0
results=bench/results/$(date -u +%F-%H%M)-peers.md
{
    echo "# peers.sh — ${DUR:-8}s per run, $(nproc) cores, $(date -u '+%F %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo
    echo "Paths: ${*:-direct tollgate litellm portkey}"
    echo
    echo '```'
    cat "$work/peers.out" "$work/ratios.out"
    echo '```'
} >"$results"
log "report kept in $results"
src=$(basename "$results")
line=$(grep '^ratio tollgate ' "$work/ratios.out" || true)
share=$(echo "$line" | sed -n 's/.*c=32 req\/s \([0-9.]* %\) of.*/\1/p')
mult=$(echo "$line" | sed -n 's/.*: \([0-9.]*\)x$/\1/p')
[[ -n $share ]] && record_figure nginx_share_c32 "share of nginx-proxy's requests/s at 32 connections (peers.sh)" \
    "$share" "≥ 50 %" "$src"
[[ -n $mult ]] && record_figure nginx_multiple_c1 "added p50 at 1 connection, multiple of nginx-proxy's (peers.sh)" \
    "$mult×" "≤ 2×" "$src"
# tollgate's requests/s at 32 connections over Portkey's and LiteLLM's.
peers=$(awk '$2 == "c=32" && $3 ~ /^rps=/ { sub(/^rps=/, "", $3); rps[$1] = $3 }
    END { if (rps["tollgate"] && rps["portkey"] && rps["litellm"])
        printf "%.1f× / %.0f×", rps["tollgate"] / rps["portkey"], rps["tollgate"] / rps["litellm"] }' "$work/peers.out")
[[ -n $peers ]] && record_figure peers_c32 "against Portkey / LiteLLM, requests/s at 32 connections (peers.sh)" \
    "$peers" "≥ 30× / ≥ 300×" "$src"
bash "$TOLLGATE_ROOT/scripts/figures.sh"
