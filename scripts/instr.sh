#!/usr/bin/env bash
# Instructions per request of gateway builds, counted by callgrind: the
# figure to rank small changes by on a machine whose wall clock is noisy
# (the count is the same whatever else the machine does). Each build serves
# the peers setup (scripts/builds.sh: the nginx upstream on :18080, the bench
# tenant with every limit kind set) under `valgrind --tool=callgrind`; after
# a warm-up the counters are zeroed, wrk runs for DUR seconds, the counters
# are dumped, and the total is divided by the requests wrk completed
# (background work — the lease flusher, the ledger writer — included).
#   ROUNDS=2 DUR=10 ./scripts/instr.sh base=/path/bin new=/path/bin2
# A binary named bare-proxy (the stack's floor, `cargo build --release -p
# tollgate-bench --bin bare-proxy`) is counted the same way, as a
# pass-through in front of the same upstream (builds.sh's gw_start):
#   ROUNDS=1 DUR=15 ./scripts/instr.sh floor=$CARGO_TARGET_DIR/release/bare-proxy cur=/path/bin
# Each build's bench tenant is seeded by the tollgate-dev beside it (build
# both: `cargo build --release -p tollgate-server -p tollgate-devtools`).
# Under valgrind SHA-256 runs in software (no SHA-NI), so hashing counts
# more than it costs natively.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"; cd "$TOLLGATE_ROOT"
have valgrind || apt_install valgrind
have wrk || apt_install wrk
have nginx || apt_install nginx
. scripts/builds.sh
ROUNDS=${ROUNDS:-2}; DUR=${DUR:-10}; CONNS=${CONNS:-8}; PORT=18092
for r in $(seq "$ROUNDS"); do
  for nb in "$@"; do
    name=${nb%%=*}; bin=${nb#*=}
    out=$W/cg-$name-$r.out
    rm -f "$out"*
    wrap=$W/cg-$name.sh
    printf '#!/bin/sh\nexec valgrind --tool=callgrind "--callgrind-out-file=%s" "%s" "$@"\n' "$out" "$bin" >"$wrap"
    chmod +x "$wrap"
    gw_start "$name" "$wrap" "$PORT" "$bin"
    url=http://127.0.0.1:$PORT/v1/chat/completions
    wrk -t1 -c4 -d5s -s "$lua" "$url" >/dev/null
    callgrind_control -z "$gw" >/dev/null 2>&1 || die "callgrind_control -z $gw failed"
    res=$(wrk -t1 -c"$CONNS" -d"${DUR}s" -s "$lua" "$url")
    # The first triggered dump is written to "$out.1".
    callgrind_control -d "$gw" >/dev/null 2>&1 || die "callgrind_control -d $gw failed"
    gw_stop
    reqs=$(echo "$res" | awk '/requests in/{print $1}')
    non=$(echo "$res" | awk '/Non-2xx/{print $NF}')
    [[ -s $out.1 ]] || die "no callgrind dump at $out.1"
    ir=$(callgrind_annotate "$out.1" 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
    [[ ${reqs:-0} -gt 0 && ${ir:-0} -gt 0 ]] || die "no requests ($reqs) or no count ($ir) for $name"
    printf 'r%s %-6s requests=%-6s instructions=%-11s per_request=%s %s\n' \
      "$r" "$name" "$reqs" "$ir" "$((ir / reqs))" "${non:+non2xx=$non}"
  done
done
