#!/usr/bin/env bash
# A/B of gateway builds on the peers setup (nginx upstream on :18080, the
# bench tenant with every limit kind set): per round and build, wrk at c=32
# then c=1, req/s, p50, and CPU µs per request of the gateway, Postgres,
# Redis and the nginx upstream (from /proc/<pid>/stat utime+stime).
#   ROUNDS=3 DUR=8 ./scripts/ab.sh base=/path/bin new=/path/bin2
#   SETUP_BIN=/path/tollgate-dev …  # seed the tenant with this build's bench-setup
#                           # (default: each build's own tollgate-dev)
#   REDIS_STATS=1 …         # also Redis' time per command during each run
#                           # (INFO commandstats, reset before the run): µs of
#                           # Redis a request, by command, the top five
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"; cd "$TOLLGATE_ROOT"
. scripts/builds.sh
ROUNDS=${ROUNDS:-3}; DUR=${DUR:-8}; PORT=18091
for r in $(seq "$ROUNDS"); do
  for nb in "$@"; do
    name=${nb%%=*}; bin=${nb#*=}
    gw_start "$name" "$bin" "$PORT" "${SETUP_BIN:-}"
    wrk -t2 -c32 -d2s -s "$lua" http://127.0.0.1:$PORT/v1/chat/completions >/dev/null
    for c in 32 1; do
      t=1; [ $c -gt 1 ] && t=2
      rd=$(pgrep -x redis-server | tr '\n' ' '); ng=$(pgrep -f 'nginx: worker' | tr '\n' ' ')
      [[ ${REDIS_STATS:-0} != 1 ]] || redis-cli CONFIG RESETSTAT >/dev/null
      # shellcheck disable=SC2086 # pid lists
      { g0=$(ticks_of $gw); p0=$(pg_ticks); r0=$(ticks_of $rd); n0=$(ticks_of $ng); }
      out=$(wrk -t$t -c$c -d${DUR}s --latency -s "$lua" http://127.0.0.1:$PORT/v1/chat/completions)
      # shellcheck disable=SC2086
      { g1=$(ticks_of $gw); p1=$(pg_ticks); r1=$(ticks_of $rd); n1=$(ticks_of $ng); }
      reqs=$(echo "$out" | awk '/requests in/{print $1}')
      rps=$(echo "$out" | awk '/Requests\/sec/{print $2}'); p50=$(echo "$out" | awk '$1=="50%"{print $2}')
      non=$(echo "$out" | awk '/Non-2xx/{print $NF}')
      us() { echo $(( ($2 - $1) * 10000 / reqs )); }
      printf 'r%s %-6s c=%-2s rps=%-9s p50=%-8s gw=%s pg=%s redis=%s upstream=%s µs/req %s\n' \
        "$r" "$name" "$c" "$rps" "$p50" "$(us $g0 $g1)" "$(us $p0 $p1)" "$(us $r0 $r1)" "$(us $n0 $n1)" "${non:+non2xx=$non}"
      if [[ ${REDIS_STATS:-0} == 1 ]]; then
        # cmdstat_evalsha:calls=3955,usec=829871,usec_per_call=209.83,…
        # (a script's own commands are counted under their names too).
        redis-cli INFO commandstats | tr -d '\r' | awk -F'[:,=]' -v n="$reqs" '
          /^cmdstat_/ { sub(/^cmdstat_/, "", $1); printf "%s %d %.2f %.1f\n", $1, $3, $5 / n, $7 }' |
          sort -k3 -rn |
          awk 'NR <= 5 { printf "    redis %-8s calls=%-6s %s µs/req (%s µs/call)\n", $1, $2, $3, $4 }'
      fi
    done
    echo "r$r $name rss_mb=$(rss_mb $gw)"
    gw_stop
  done
done
