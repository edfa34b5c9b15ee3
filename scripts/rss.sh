#!/usr/bin/env bash
# RSS of gateway builds over a long load (docs/benchmarks.md, "Metrics upkeep"):
# after a 3 s warm-up, then after each of four 15 s runs of wrk at 32 connections.
#   ./scripts/rss.sh before=/path/bin after=/path/bin2
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"; cd "$TOLLGATE_ROOT"
W=${TMPDIR:-/tmp}/tollgate-ab; mkdir -p $W/nginx/body
if ! curl -fs -o /dev/null -X POST http://127.0.0.1:18080/v1/chat/completions; then
  sed "s#__DIR__#$W/nginx#g" bench/peers/mock-upstream.nginx.conf > $W/nginx/nginx.conf; nginx -c $W/nginx/nginx.conf; trap 'kill "$(cat $W/nginx/nginx.pid)" 2>/dev/null || true' EXIT; sleep 1; fi
body='{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in one short sentence please."}],"max_tokens":64}'
db_url=$(url_with_db "postgres://postgres@127.0.0.1:5432/postgres" tollgate_ab)
export TOLLGATE__DATABASE__URL=$db_url TOLLGATE__REDIS__URL=redis://127.0.0.1:6379
export TOLLGATE__KEYS__PEPPER=peers-pepper-0123456789abcdef0123456789abcdef
export TOLLGATE__KEYS__ENCRYPTION_KEY=0011223344556677889900112233445566778899001122334455667788990011
export TOLLGATE_LOG=warn
for nb in "$@"; do
  name=${nb%%=*}; bin=${nb#*=}
  pg_recreate_db "$db_url" >/dev/null; export TOLLGATE__REDIS__KEY_PREFIX=tgrss$$$name
  key=$("$bin" admin bench-setup --upstream http://127.0.0.1:18080/v1 2>/dev/null)
  "$bin" serve --listen 127.0.0.1:18093 > $W/rss-$name.log 2>&1 & gw=$!
  until curl -fs -o /dev/null http://127.0.0.1:18093/healthz; do sleep 0.05; done
  { echo 'wrk.method = "POST"'; echo "wrk.body = '$body'"; echo 'wrk.headers["Content-Type"] = "application/json"'
    echo "wrk.headers[\"Authorization\"] = \"Bearer $key\""; } > $W/r.lua
  wrk -t2 -c32 -d3s -s $W/r.lua http://127.0.0.1:18093/v1/chat/completions > /dev/null
  line="$name rss_mb:"; total=0
  line="$line $(( $(awk '/VmRSS/{print $2}' /proc/$gw/status) / 1024 ))"
  for i in 1 2 3 4; do
    n=$(wrk -t2 -c32 -d15s -s $W/r.lua http://127.0.0.1:18093/v1/chat/completions | awk '/requests in/{print $1}')
    total=$((total + n)); line="$line $(( $(awk '/VmRSS/{print $2}' /proc/$gw/status) / 1024 ))"
  done
  echo "$line  (requests after warm-up: $total)"
  kill $gw; wait $gw 2>/dev/null || true
done
