#!/usr/bin/env bash
# Added latency and throughput of tollgate with full quota enforcement (every
# limit kind set on tenant, app and key; hold + settle in Redis per request)
# against the same upstream called directly, at 1 and 32 connections.
#
#   ./scripts/bench.sh                  # upstream: `tollgate mock-upstream` (zero delay)
#   UPSTREAM=nginx ./scripts/bench.sh   # upstream: nginx with ../shared/bench's fixed answer
#   DUR=20 ./scripts/bench.sh           # seconds per run (default 10)
#
# Prints a markdown table. Only processes this script starts are stopped.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TOLLGATE_ROOT"

DUR=${DUR:-10}
UPSTREAM=${UPSTREAM:-mock}
GW_PORT=${GW_PORT:-18081}
MOCK_PORT=${MOCK_PORT:-19090}
work=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-bench.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]:-}"; do [[ -n $p ]] && kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

ensure_services >/dev/null
have wrk || apt_install wrk
log "building tollgate (release)"
cargo build -q --release -p tollgate-server --bin tollgate -p tollgate-bench --bin tollgate-bench
bin=${CARGO_TARGET_DIR:-$TOLLGATE_ROOT/target}/release/tollgate
sbench=${CARGO_TARGET_DIR:-$TOLLGATE_ROOT/target}/release/tollgate-bench

case $UPSTREAM in
mock)
    "$bin" mock-upstream --listen "127.0.0.1:$MOCK_PORT" >"$work/mock.log" 2>&1 &
    pids+=($!)
    upstream=http://127.0.0.1:$MOCK_PORT/v1
    ;;
nginx)
    have nginx || apt_install nginx
    shared=$TOLLGATE_ROOT/../shared/bench
    mkdir -p "$work/nginx/body"
    sed "s#__DIR__#$work/nginx#g" "$shared/mock-upstream.nginx.conf" >"$work/nginx/nginx.conf"
    nginx -c "$work/nginx/nginx.conf"
    sleep 0.5
    pids+=("$(cat "$work/nginx/nginx.pid")")
    upstream=http://127.0.0.1:18080/v1
    ;;
*) die "UPSTREAM must be mock or nginx" ;;
esac

db_url=$(url_with_db "postgres://postgres@$PG_HOST:$PG_PORT/postgres" tollgate_bench)
pg_recreate_db "$db_url"
export TOLLGATE__DATABASE__URL=$db_url
export TOLLGATE__REDIS__URL=redis://$REDIS_HOST:$REDIS_PORT
export TOLLGATE__REDIS__KEY_PREFIX=tgbench$$
export TOLLGATE__KEYS__PEPPER=bench-pepper-0123456789abcdef0123456789abcdef
export TOLLGATE__KEYS__ENCRYPTION_KEY=0011223344556677889900112233445566778899001122334455667788990011
export TOLLGATE_LOG=warn
key=$("$bin" admin bench-setup --upstream "$upstream" 2>"$work/setup.log") || { cat "$work/setup.log" >&2; exit 1; }
"$bin" serve --listen "127.0.0.1:$GW_PORT" >"$work/gw.log" 2>&1 &
gw_pid=$!
pids+=("$gw_pid")
wait_until "tollgate on :$GW_PORT" 30 curl -fs -o /dev/null "http://127.0.0.1:$GW_PORT/healthz"

body='{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in one short sentence please."}],"max_tokens":64}'
lua() { # file, headers...
    local f=$1
    shift
    {
        echo 'wrk.method = "POST"'
        echo "wrk.body = '$body'"
        echo 'wrk.headers["Content-Type"] = "application/json"'
        for h in "$@"; do echo "wrk.headers[\"${h%%:*}\"] = \"${h#*: }\""; done
    } >"$f"
}
lua "$work/direct.lua" "Authorization: Bearer sk-upstream"
lua "$work/tollgate.lua" "Authorization: Bearer $key"
curl -fsS -o /dev/null -X POST "http://127.0.0.1:$GW_PORT/v1/chat/completions" -H "Authorization: Bearer $key" \
    -H 'Content-Type: application/json' -d "$body" || die "tollgate did not answer the warm-up request"

# wrk prints latencies as 812.00us / 1.20ms / 2.00s: convert to microseconds.
to_us() { awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); print v+0} else if (v ~ /ms$/) {sub(/ms$/,"",v); print v*1000} else if (v ~ /s$/) {sub(/s$/,"",v); print v*1000000} else print v}'; }
declare -A R
run() { # name url lua conns
    local t=1 out
    [[ $4 -gt 1 ]] && t=2
    out=$(wrk -t"$t" -c"$4" -d"${DUR}s" --latency -s "$3" "$2" 2>&1)
    R[$1.$4.rps]=$(echo "$out" | awk '/Requests\/sec/{printf "%d", $2}')
    R[$1.$4.p50]=$(echo "$out" | awk '$1=="50%"{print $2}' | to_us)
    R[$1.$4.p99]=$(echo "$out" | awk '$1=="99%"{print $2}' | to_us)
    R[$1.$4.err]=$(echo "$out" | awk '/Non-2xx/{print $NF} /Socket errors/{print "sock"}' | paste -sd, -)
    R[$1.$4.err]=${R[$1.$4.err]:-0}
}
redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
for c in 1 32; do
    log "direct   c=$c (${DUR}s)"
    run direct "$upstream/chat/completions" "$work/direct.lua" "$c"
    log "tollgate c=$c (${DUR}s)"
    run tollgate "http://127.0.0.1:$GW_PORT/v1/chat/completions" "$work/tollgate.lua" "$c"
done
# Streams: 64 chunks 20 ms apart (the mock's directives; nginx cannot stream).
if [[ $UPSTREAM == mock ]]; then
    log "streams: direct, then tollgate (${STREAMS:-60} streams, 10 at a time)"
    sd=$("$sbench" --url "$upstream/chat/completions" --requests "${STREAMS:-60}")
    sg=$("$sbench" --url "http://127.0.0.1:$GW_PORT/v1/chat/completions" --key "$key" --requests "${STREAMS:-60}")
fi
rss=$(awk '/VmRSS/{print $2" "$3}' "/proc/$gw_pid/status")
cpu=$(awk '{printf "%.1f", ($14+$15)/100}' "/proc/$gw_pid/stat")

echo
echo "tollgate bench — upstream: $UPSTREAM, ${DUR}s per run, $(nproc) cores, $(date -u +%F)"
echo
echo "| conns | direct req/s | tollgate req/s | direct p50 µs | tollgate p50 µs | added p50 µs | direct p99 µs | tollgate p99 µs | added p99 µs | non-2xx (direct / tollgate) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for c in 1 32; do
    d50=${R[direct.$c.p50]} g50=${R[tollgate.$c.p50]} d99=${R[direct.$c.p99]} g99=${R[tollgate.$c.p99]}
    printf '| %s | %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %s / %s |\n' "$c" \
        "${R[direct.$c.rps]}" "${R[tollgate.$c.rps]}" "$d50" "$g50" "$(awk -v a="$g50" -v b="$d50" 'BEGIN{print a-b}')" \
        "$d99" "$g99" "$(awk -v a="$g99" -v b="$d99" 'BEGIN{print a-b}')" "${R[direct.$c.err]}" "${R[tollgate.$c.err]}"
done
if [[ -n ${sd:-} ]]; then
    val() { echo "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1==k{print $2}'; }
    echo
    echo "| streams (64 chunks, 20 ms apart, 10 concurrent) | direct | tollgate | added |"
    echo "|---|---|---|---|"
    for k in ttft_p50_us ttft_p99_us gap_p50_us gap_p99_us; do
        d=$(val "$sd" $k) g=$(val "$sg" $k)
        printf '| %s | %s | %s | %s |\n' "${k%_us} µs" "$d" "$g" "$(awk -v a="$g" -v b="$d" 'BEGIN{print a-b}')"
    done
    echo "| errors | $(val "$sd" errors) | $(val "$sg" errors) | |"
fi
echo
echo "gateway after the runs: RSS $rss, CPU time ${cpu}s"
hold=$(curl -fs "http://127.0.0.1:$GW_PORT/metrics" | awk '/^tollgate_hold_seconds_sum/{s=$2} /^tollgate_hold_seconds_count/{c=$2} END{if (c) printf "%.1f", s/c*1e6}')
evalsha=$(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" INFO commandstats | awk -F'[,=]' '/^cmdstat_evalsha/{print $6}')
echo "hold round trip seen by the gateway: ${hold} µs mean; Redis time per script call (hold/settle mix): ${evalsha} µs"
echo "physical floor, redis-benchmark PING on this machine:"
for c in 1 32; do
    printf '  c=%s: %s\n' "$c" "$(redis-benchmark -h "$REDIS_HOST" -p "$REDIS_PORT" -t ping -n 100000 -c "$c" -q 2>/dev/null | tr '\r' '\n' | grep -E 'PING_MBULK: [0-9]' | tail -1)"
done
