#!/usr/bin/env bash
# RSS of gateway builds over a long load (bench/results/2026-12-03-metrics-upkeep.md):
# after a 3 s warm-up, then after each of four 15 s runs of wrk at 32 connections.
#   ./scripts/rss.sh before=/path/bin after=/path/bin2
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"; cd "$TOLLGATE_ROOT"
. scripts/builds.sh
for nb in "$@"; do
  name=${nb%%=*}; bin=${nb#*=}
  gw_start "$name" "$bin" 18093
  wrk -t2 -c32 -d3s -s "$lua" http://127.0.0.1:18093/v1/chat/completions > /dev/null
  line="$name rss_mb: $(rss_mb $gw)"; total=0
  for i in 1 2 3 4; do
    n=$(wrk -t2 -c32 -d15s -s "$lua" http://127.0.0.1:18093/v1/chat/completions | awk '/requests in/{print $1}')
    total=$((total + n)); line="$line $(rss_mb $gw)"
  done
  echo "$line  (requests after warm-up: $total)"
  gw_stop
done
