#!/usr/bin/env bash
# A/B of gateway builds on the peers setup (nginx upstream on :18080, the
# bench tenant with every limit kind set): per round and build, wrk at c=32
# then c=1, req/s, p50, and CPU µs per request of the gateway, Postgres,
# Redis and the nginx upstream (from /proc/<pid>/stat utime+stime).
#   ROUNDS=3 DUR=8 ./scripts/ab.sh base=/path/bin new=/path/bin2
#   SETUP_BIN=/path/bin …   # seed the tenant with this build's `admin bench-setup`
#                           # (default: each build its own)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"; cd "$TOLLGATE_ROOT"
ROUNDS=${ROUNDS:-3}; DUR=${DUR:-8}; PORT=18091
W=${TMPDIR:-/tmp}/tollgate-ab; mkdir -p $W/nginx/body
if ! curl -fs -o /dev/null -X POST http://127.0.0.1:18080/v1/chat/completions; then
  sed "s#__DIR__#$W/nginx#g" bench/peers/mock-upstream.nginx.conf > $W/nginx/nginx.conf
  nginx -c $W/nginx/nginx.conf; trap 'kill "$(cat $W/nginx/nginx.pid)" 2>/dev/null || true' EXIT; sleep 1
fi
body='{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in one short sentence please."}],"max_tokens":64}'
ticks() { # sum utime+stime (ticks) of the given pids
  local s=0 p
  for p in "$@"; do [[ -r /proc/$p/stat ]] && s=$((s + $(awk '{sub(/.*\) /,""); print $12+$13}' /proc/$p/stat))); done
  echo $s
}
db_url=$(url_with_db "postgres://postgres@127.0.0.1:5432/postgres" tollgate_ab)
export TOLLGATE__DATABASE__URL=$db_url TOLLGATE__REDIS__URL=redis://127.0.0.1:6379
export TOLLGATE__KEYS__PEPPER=peers-pepper-0123456789abcdef0123456789abcdef
export TOLLGATE__KEYS__ENCRYPTION_KEY=0011223344556677889900112233445566778899001122334455667788990011
export TOLLGATE_LOG=warn
for r in $(seq "$ROUNDS"); do
  for nb in "$@"; do
    name=${nb%%=*}; bin=${nb#*=}
    pg_recreate_db "$db_url" >/dev/null
    export TOLLGATE__REDIS__KEY_PREFIX=tgab$$r$name
    key=$("${SETUP_BIN:-$bin}" admin bench-setup --upstream http://127.0.0.1:18080/v1 2>$W/setup.log)
    "$bin" serve --listen 127.0.0.1:$PORT > $W/gw-$name.log 2>&1 & gw=$!
    until curl -fs -o /dev/null http://127.0.0.1:$PORT/healthz; do sleep 0.05; done
    { echo 'wrk.method = "POST"'; echo "wrk.body = '$body'"; echo 'wrk.headers["Content-Type"] = "application/json"'
      echo "wrk.headers[\"Authorization\"] = \"Bearer $key\""; } > $W/t.lua
    wrk -t2 -c32 -d2s -s $W/t.lua http://127.0.0.1:$PORT/v1/chat/completions >/dev/null
    for c in 32 1; do
      t=1; [ $c -gt 1 ] && t=2
      pg=$(pgrep -x postgres | tr '\n' ' '); pg="$pg $(pgrep -f 'postgres:' | tr '\n' ' ')"
      rd=$(pgrep -x redis-server | tr '\n' ' '); ng=$(pgrep -f 'nginx: worker' | tr '\n' ' ')
      g0=$(ticks $gw); p0=$(ticks $pg); r0=$(ticks $rd); n0=$(ticks $ng)
      out=$(wrk -t$t -c$c -d${DUR}s --latency -s $W/t.lua http://127.0.0.1:$PORT/v1/chat/completions)
      pg2="$(pgrep -f 'postgres:' | tr '\n' ' ')"
      g1=$(ticks $gw); p1=$(ticks $pg2 $(pgrep -x postgres)); r1=$(ticks $rd); n1=$(ticks $ng)
      reqs=$(echo "$out" | awk '/requests in/{print $1}')
      rps=$(echo "$out" | awk '/Requests\/sec/{print $2}'); p50=$(echo "$out" | awk '$1=="50%"{print $2}')
      non=$(echo "$out" | awk '/Non-2xx/{print $NF}')
      us() { echo $(( ($2 - $1) * 10000 / reqs )); }
      printf 'r%s %-6s c=%-2s rps=%-9s p50=%-8s gw=%s pg=%s redis=%s upstream=%s µs/req %s\n' \
        "$r" "$name" "$c" "$rps" "$p50" "$(us $g0 $g1)" "$(us $p0 $p1)" "$(us $r0 $r1)" "$(us $n0 $n1)" "${non:+non2xx=$non}"
    done
    rss=$(awk '/VmRSS/{print $2}' /proc/$gw/status)
    echo "r$r $name rss_kb=$rss"
    kill $gw; wait $gw 2>/dev/null || true
  done
done
