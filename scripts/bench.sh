#!/usr/bin/env bash
# tollgate's benchmark, one command, one markdown report (docs/benchmarks.md
# and docs/leases.md say how to read it), kept in bench/results/:
#
#   1. added latency and throughput: the upstream directly vs through tollgate
#      at 1 and 32 connections, non-stream, for each admission path —
#      `off` (nothing enforced: the ablation floor), `per_request` (one Lua
#      hold + settle per request), `lease` (the default) — with req/s,
#      p50/p99/p99.9 latency, errors, gateway CPU and RSS, and a check that
#      the books are exact (ledger events == requests served, Redis used ==
#      ledger tokens);
#   2. streams (time to first token, gaps between chunks), direct vs tollgate;
#   3. 1,000 concurrent slow streams through one instance: peak RSS, errors;
#   4. the hold-engine micro-benchmark (hold+settle pairs/s, Redis µs per
#      script from INFO commandstats) beside redis-benchmark PING;
#   5. isolation (docs/fair.md): tenant B's latency alone and while tenant A
#      floods past its in-flight limit (A's clients honour Retry-After, then
#      a hot loop that ignores it); B's failures; what A was answered.
#
#   ./scripts/bench.sh                  # upstream: `tollgate-dev mock-upstream` (zero delay)
#   UPSTREAM=nginx ./scripts/bench.sh   # upstream: nginx with bench/peers' fixed answer
#   DUR=20 ./scripts/bench.sh           # seconds per load run (default 10)
#   MODES="lease" SLOW_STREAMS=0 HOLD_BENCH=0 ISOLATION=0 ./scripts/bench.sh   # a quick subset
#   MODES= CONNS= HOLD_BENCH=0 ./scripts/bench.sh                  # isolation only
#   SCALE=1 ./scripts/bench.sh          # the scale section instead (scripts/bench_scale.sh)
#   BENCH_DB_SQL="CREATE INDEX …" ./scripts/bench.sh   # a schema ablation, run after the migrations
#   RECORD=0 ./scripts/bench.sh         # print the report only (default: also kept as
#                                       # bench/results/<date>-bench-<upstream>.md, its headline
#                                       # figures added to bench/results/figures.tsv)
#   TOLLGATE_BIN=/path/to/tollgate ./scripts/bench.sh   # another build of the gateway (A/B runs;
#                                       # its tollgate-dev beside it, or TOLLGATE_DEV_BIN=…)
#
#   6. load scenarios (docs/benchmarks.md, "Load scenarios"): three tenants
#      (core, standard, batch), every limit kind set, each scenario's loads
#      alone then together; per tenant admitted / refused by reason,
#      p50/p99/p99.9, gateway CPU per request, the targets, exact books, and
#      one SVG chart per scenario. Setting SCENARIOS runs only them unless
#      the other sections are asked for explicitly:
#
#   SCENARIOS="storm long streams retry surge all" ./scripts/bench.sh
#   SCENARIOS=long LONG_INPUTS="exact bound" ./scripts/bench.sh   # both long-input estimates
#   SCENARIOS=surge DUR=10 SURGE_DUR=30 SVG_DIR=bench/results/img ./scripts/bench.sh
#
# Only processes this script starts are stopped. Its Redis keys live under a
# fresh prefix; the hold-engine benchmark deletes its own keys.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/books.sh
. "$(dirname "${BASH_SOURCE[0]}")/books.sh"
cd "$TOLLGATE_ROOT"

DUR=${DUR:-10}
SCENARIOS=${SCENARIOS:-}
if [[ -n $SCENARIOS ]]; then
    : "${MODES=}" "${CONNS=}" "${SLOW_STREAMS:=0}" "${HOLD_BENCH:=0}" "${ISOLATION:=0}"
fi
SURGE_DUR=${SURGE_DUR:-30}
LONG_INPUTS=${LONG_INPUTS:-exact}
SCN_STREAMS=${SCN_STREAMS:-1000}
# The noisy tenant's clients of `long` and `streams` run at this nice
# increment (they stand in for other machines; 0: same priority as the
# measured clients, the whole box's figure).
NOISY_NICE=${NOISY_NICE:-10}
UPSTREAM=${UPSTREAM:-mock}
MODES=${MODES-off per_request lease}
CONNS=${CONNS-1 32}
STREAMS=${STREAMS:-60}
SLOW_STREAMS=${SLOW_STREAMS:-1000}
HOLD_BENCH=${HOLD_BENCH:-1}
ISOLATION=${ISOLATION:-1}
ISO_RUNS=${ISO_RUNS:-polite hot}
ISO_HOT_FLOOD=${ISO_HOT_FLOOD:-128}
GW_PORT=${GW_PORT:-18081}
MOCK_PORT=${MOCK_PORT:-19090}
work=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-bench.XXXXXX")
pids=()
gw_pid=
cleanup() { for p in "${pids[@]:-}" $gw_pid; do [[ -n $p ]] && kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
# 1,000 streams need ~3,000 sockets across the three processes.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

ensure_services >/dev/null
have wrk || apt_install wrk
have redis-benchmark || apt_install redis-tools
log "building tollgate (release)"
cargo build -q --release -p tollgate-server --bin tollgate -p tollgate-devtools --bin tollgate-dev -p tollgate-bench --bin tollgate-bench --bin hold-bench --bin iso-bench --bin scen-bench
target=${CARGO_TARGET_DIR:-$TOLLGATE_ROOT/target}/release
# TOLLGATE_BIN: another build of the gateway (one saved from an earlier
# commit), to compare two builds run by run in one session.
bin=${TOLLGATE_BIN:-$target/tollgate}
# The seeding and the mock provider: the tollgate-dev of the same build
# (it migrates the database to its own schema), beside TOLLGATE_BIN.
dev=${TOLLGATE_DEV_BIN:-$(dirname "$bin")/tollgate-dev}
[[ -x $dev ]] || die "no tollgate-dev beside $bin: build it (-p tollgate-devtools --bin tollgate-dev) or set TOLLGATE_DEV_BIN"

case $UPSTREAM in
mock)
    "$dev" mock-upstream --listen "127.0.0.1:$MOCK_PORT" >"$work/mock.log" 2>&1 &
    pids+=($!)
    upstream=http://127.0.0.1:$MOCK_PORT/v1
    wait_until "mock upstream" 30 tcp_open 127.0.0.1 "$MOCK_PORT"
    ;;
nginx)
    have nginx || apt_install nginx
    shared=$TOLLGATE_ROOT/bench/peers
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
prefix=tgbench$$
export TOLLGATE__DATABASE__URL=$db_url
export TOLLGATE__REDIS__URL=redis://$REDIS_HOST:$REDIS_PORT
export TOLLGATE__REDIS__KEY_PREFIX=$prefix
export TOLLGATE__KEYS__PEPPER=bench-pepper-0123456789abcdef0123456789abcdef
export TOLLGATE__KEYS__ENCRYPTION_KEY=0011223344556677889900112233445566778899001122334455667788990011
# /metrics is not public: the bench reads it with this token.
METRICS_TOKEN=bench-metrics-token-0123456789abcdef0123
export TOLLGATE__METRICS__TOKEN=$METRICS_TOKEN
export TOLLGATE_LOG=warn
key=$("$dev" bench-setup --upstream "$upstream" 2>"$work/setup.log") || { cat "$work/setup.log" >&2; exit 1; }
month=$(TZ=Asia/Shanghai date +%Y-%m)
# An ablation of the schema: SQL run on the bench database after the
# migrations, e.g. the ledger's indexes before migration 0015 (docs/scale.md,
# "Cheaper ledger writes"). Empty by default.
[[ -n ${BENCH_DB_SQL:-} ]] && psql_url "$db_url" -c "$BENCH_DB_SQL" >/dev/null

start_gateway() { # admission mode
    local extra=()
    [[ $1 == off ]] && extra=(env TOLLGATE__GATEWAY__BENCH_UNENFORCED_OK=true)
    "${extra[@]}" env TOLLGATE__GATEWAY__ADMISSION="$1" "$bin" serve --listen "127.0.0.1:$GW_PORT" >"$work/gw-$1.log" 2>&1 &
    gw_pid=$!
    wait_until "tollgate ($1) on :$GW_PORT" 30 curl -fs -o /dev/null "http://127.0.0.1:$GW_PORT/healthz"
    curl -fsS -o /dev/null -X POST "http://127.0.0.1:$GW_PORT/v1/chat/completions" -H "Authorization: Bearer $key" \
        -H 'Content-Type: application/json' -d "$body" || die "tollgate ($1) did not answer the warm-up request"
    # The warm-up's event reaches the ledger a linger later
    # (gateway.ledger_linger_ms); books read before it would count it in
    # Redis but not in the ledger's starting figure.
    sleep 1
}
stop_gateway() {
    kill -TERM "$gw_pid" 2>/dev/null || true
    wait "$gw_pid" 2>/dev/null || true
    gw_pid=
}
# The upstream's processes: the mock, or nginx's master and workers.
upstream_pids() {
    case $UPSTREAM in
    mock) echo "${pids[0]}" ;;
    nginx) local m=${pids[0]}; echo "$m $(pgrep -P "$m" | tr '\n' ' ')" ;;
    esac
}

body='{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in one short sentence please."}],"max_tokens":64}'
lua() { # file, headers...
    local f=$1
    shift
    {
        echo 'wrk.method = "POST"'
        echo "wrk.body = '$body'"
        echo 'wrk.headers["Content-Type"] = "application/json"'
        for h in "$@"; do echo "wrk.headers[\"${h%%:*}\"] = \"${h#*: }\""; done
        # Percentiles in µs and error counts, machine-readable.
        cat <<'EOF'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("BENCH requests=%d p50=%d p99=%d p999=%d errors=%d status=%d\n",
    summary.requests, latency:percentile(50), latency:percentile(99), latency:percentile(99.9),
    e.connect + e.read + e.write + e.timeout, e.status))
end
EOF
    } >"$f"
}
lua "$work/direct.lua" "Authorization: Bearer sk-upstream"
lua "$work/tollgate.lua" "Authorization: Bearer $key"

declare -A R
field() { echo "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1==k{print $2}'; }
run() { # name url lua conns [pid]
    local t=1 out line
    [[ $4 -gt 1 ]] && t=2
    local c0=0 up rd u0 p0 r0
    if [[ -n ${5:-} ]]; then
        c0=$(ticks_of "$5")
        up=$(upstream_pids) rd=$(pgrep -x redis-server | tr '\n' ' ')
        # shellcheck disable=SC2086
        u0=$(ticks_of $up) p0=$(pg_ticks) r0=$(ticks_of $rd)
    fi
    out=$({ TIMEFORMAT='WRKCPU %U %S'; time wrk -t"$t" -c"$4" -d"${DUR}s" --latency -s "$3" "$2" 2>&1; } 2>&1)
    line=$(echo "$out" | grep '^BENCH ')
    R[$1.$4.rps]=$(echo "$out" | awk '/Requests\/sec/{printf "%d", $2}')
    for k in requests p50 p99 p999 errors status; do R[$1.$4.$k]=$(field "$line" $k); done
    if [[ -n ${5:-} ]]; then
        local g=$(($(ticks_of "$5") - c0))
        R[$1.$4.cpu]=$(awk -v g="$g" -v d="$DUR" 'BEGIN{printf "%.2f", g/100/d}')
        R[$1.$4.rss]=$(rss_mb "$5")
        # CPU per request of every process on the path, in µs: where the
        # machine's two cores go (bench/results/2026-11-30-bench.md, "What bounds").
        local n=$((${R[$1.$4.requests]:-0})) wrk_s
        wrk_s=$(echo "$out" | awk '/^WRKCPU/{print $2+$3}')
        # shellcheck disable=SC2086
        R[$1.$4.per]=$(awk -v n="$n" -v g="$g" -v u=$(($(ticks_of $up) - u0)) \
            -v p=$(($(pg_ticks) - p0)) -v r=$(($(ticks_of $rd) - r0)) -v w="${wrk_s:-0}" \
            'BEGIN{ if (n < 1) n = 1; f = 1e6 / 100 / n;
                    printf "%.1f | %.1f | %.1f | %.1f | %.1f | %.1f", g*f, u*f, p*f, r*f, w*1e6/n, (g+u+p+r)*f + w*1e6/n }')
    fi
}
# The books of the bench tenant: ledger events, ledger tokens, Redis used;
# then the bench database's committed and rolled-back transactions (a
# ledger COPY that failed on a stored request id rolls back; Postgres
# reports a backend's counts when it goes idle, up to ~10 s late, so the
# figures of a run are close, not exact).
books() {
    local ev tok used xc xr
    read -r ev tok < <(psql_url "$db_url" -At -F ' ' -c "SELECT count(*), COALESCE(SUM(input_tokens+output_tokens),0) FROM usage_events WHERE tenant_id = 'bench' AND NOT stream")
    used=$(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" HGET "$prefix:{t:bench}:m:$month" t:ut)
    read -r xc xr < <(psql_url "$db_url" -At -F ' ' -c "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()")
    echo "$ev ${tok:-0} ${used:-0} ${xc:-0} ${xr:-0}"
}

if [[ ${SCALE:-0} == 1 ]]; then
    # The scale section instead (its own function and database).
    # shellcheck source=scripts/bench_scale.sh
    . "$TOLLGATE_ROOT/scripts/bench_scale.sh"
    # Kept in bench/results/ too (RECORD=0: printed only); the shell's own
    # stdout, so that everything scale_bench starts stays this shell's.
    if [[ ${RECORD:-1} == 1 ]]; then
        results=bench/results/$(date -u +%F-%H%M)-scale.md
        log "report kept in $results"
        exec > >(tee "$results")
    fi
    scale_bench
    exit 0
fi
for c in $CONNS; do
    log "direct c=$c (${DUR}s)"
    run direct "$upstream/chat/completions" "$work/direct.lua" "$c"
done
redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
for mode in $MODES; do
    start_gateway "$mode"
    for c in $CONNS; do
        log "tollgate admission=$mode c=$c (${DUR}s)"
        read -r ev0 tok0 used0 xc0 xr0 < <(books)
        run "$mode" "http://127.0.0.1:$GW_PORT/v1/chat/completions" "$work/tollgate.lua" "$c" "$gw_pid"
        # Let the last settles and the ledger writer finish, then compare.
        sleep 2
        read -r ev1 tok1 used1 xc1 xr1 < <(books)
        served=$((${R[$mode.$c.requests]:-0} - ${R[$mode.$c.status]:-0}))
        R[$mode.$c.books]="$((ev1 - ev0)) events / $served served; $((tok1 - tok0)) tokens in the ledger / $((used1 - used0)) in Redis; Postgres: $((xc1 - xc0)) commits, $((xr1 - xr0)) rollbacks"
    done
    if [[ $mode == "${MODES##* }" ]]; then
        # Streams through the last (default) mode, while it runs.
        if [[ $UPSTREAM == mock ]]; then
            log "streams: direct, then tollgate ($STREAMS streams, 10 at a time)"
            sd=$("$target/tollgate-bench" --url "$upstream/chat/completions" --requests "$STREAMS")
            sg=$("$target/tollgate-bench" --url "http://127.0.0.1:$GW_PORT/v1/chat/completions" --key "$key" --requests "$STREAMS")
            if [[ $SLOW_STREAMS -gt 0 ]]; then
                log "$SLOW_STREAMS concurrent slow streams (100 chunks, 50 ms apart)"
                peak=0
                "$target/tollgate-bench" --url "http://127.0.0.1:$GW_PORT/v1/chat/completions" --key "$key" \
                    --requests "$SLOW_STREAMS" --concurrency "$SLOW_STREAMS" --chunks 100 --chunk-delay-ms 50 >"$work/slow.out" &
                sb=$!
                while kill -0 "$sb" 2>/dev/null; do
                    r=$(rss_mb "$gw_pid")
                    ((r > peak)) && peak=$r
                    sleep 0.2
                done
                wait "$sb" || true
                slow=$(cat "$work/slow.out")
            fi
        fi
        admissions=$(curl -fs -H "Authorization: Bearer $METRICS_TOKEN" "http://127.0.0.1:$GW_PORT/metrics" | awk '/^tollgate_admissions_total/{printf "%s%s", sep, $0; sep="; "}')
        hold_us=$(curl -fs -H "Authorization: Bearer $METRICS_TOKEN" "http://127.0.0.1:$GW_PORT/metrics" | awk '/^tollgate_hold_seconds_sum/{s=$2} /^tollgate_hold_seconds_count/{c=$2} END{if (c) printf "%.1f", s/c*1e6}')
    fi
    stop_gateway
done
if [[ $ISOLATION == 1 && $UPSTREAM == mock ]]; then
    read -r key_a key_b < <("$dev" bench-setup --upstream "$upstream" --isolation 2>>"$work/setup.log") ||
        { cat "$work/setup.log" >&2; exit 1; }
    [[ -n ${key_b:-} ]] || die "bench-setup --isolation printed no keys"
    start_gateway lease
    iso_url=http://127.0.0.1:$GW_PORT/v1/chat/completions
    for run in $ISO_RUNS; do
        case $run in
        polite) log "isolation: B steady alone / under A's flood (128 clients, Retry-After honoured)"
            R[iso.$run]=$("$target/iso-bench" --url "$iso_url" --a-key "$key_a" --b-key "$key_b") ;;
        hot) log "isolation: B steady alone / under A's hot loop ($ISO_HOT_FLOOD clients, Retry-After ignored)"
            R[iso.$run]=$("$target/iso-bench" --url "$iso_url" --a-key "$key_a" --b-key "$key_b" \
                --ignore-retry-after --flood "$ISO_HOT_FLOOD") ;;
        *) die "ISO_RUNS: polite and/or hot" ;;
        esac
    done
    stop_gateway
fi
if [[ -n $SCENARIOS && $UPSTREAM == mock ]]; then
    # The long prompts' model (gpt-4.1) on a provider of its own: a second
    # mock, at NOISY_NICE like the noisy clients. A provider reading 6 MB
    # prompts does so on its machines, not on the gateway's; one mock for
    # both would make the short requests wait behind its parsing.
    long_upstream=$upstream
    if [[ $NOISY_NICE != 0 ]]; then
        nice -n "$NOISY_NICE" "$dev" mock-upstream --listen "127.0.0.1:$((MOCK_PORT + 1))" >"$work/mock-long.log" 2>&1 &
        pids+=($!)
        wait_until "second mock upstream" 30 tcp_open 127.0.0.1 "$((MOCK_PORT + 1))"
        long_upstream=http://127.0.0.1:$((MOCK_PORT + 1))/v1
    fi
    read -r key_c key_s key_b < <("$dev" bench-setup --upstream "$upstream" --long-upstream "$long_upstream" --scenarios 2>>"$work/setup.log") ||
        { cat "$work/setup.log" >&2; exit 1; }
    [[ -n ${key_b:-} ]] || die "bench-setup --scenarios printed no keys"
    svg_dir=${SVG_DIR:-$work}
    mkdir -p "$svg_dir"
    # The books of the scenario tenants, computed apart from the gateway
    # (scripts/books.sh).
    scn_books() { books_of scn-core scn-standard scn-batch; }
    scn_check() { books_check "$@"; }
    for sc in $SCENARIOS; do
        modes=-
        [[ $sc == long ]] && modes=$LONG_INPUTS
        for li in $modes; do
            name=$sc note=
            if [[ $li != - ]]; then
                export TOLLGATE__GATEWAY__LONG_INPUT_ESTIMATE=$li
                name=$sc-$li note="long-input estimate: $li"
            fi
            log "scenario $name (${DUR}s phases, surges ${SURGE_DUR}s; load: $(cut -d' ' -f1-3 /proc/loadavg))"
            before=$(scn_books)
            start_gateway lease
            out=$("$target/scen-bench" --url "http://127.0.0.1:$GW_PORT" --keys "$key_c,$key_s,$key_b" --scenario "$sc" \
                --dur "$DUR" --surge-dur "$SURGE_DUR" --streams "$SCN_STREAMS" --gw-pid "$gw_pid" \
                --noisy-nice "$NOISY_NICE" --svg "$svg_dir/scenario-$name.svg" --note "$note") || die "scen-bench $name failed"
            # Stopping returns the leases; then the books must close exactly.
            stop_gateway
            sleep 1
            R[scn.$name]=$(echo "$out" | grep -v '^BOOKS ')
            R[scn.$name.books]=$(scn_check "$before" "$(scn_books)" "$(echo "$out" | grep '^BOOKS ')")
            R[scn.names]="${R[scn.names]:-} $name"
            unset TOLLGATE__GATEWAY__LONG_INPUT_ESTIMATE
        done
    done
fi
evalsha=$(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" INFO commandstats | awk -F'[,=]' '/^cmdstat_evalsha/{print $6}')
if [[ $HOLD_BENCH == 1 ]]; then
    log "hold-engine micro-benchmark"
    hb=$("$target/hold-bench" --redis "redis://$REDIS_HOST:$REDIS_PORT" --seconds "$((DUR < 3 ? DUR : 3))" \
        --runs "sequential:1,sequential:16,pipelined:16,pipelined:64,lease:64,lease:256")
fi

# The report: printed, and unless RECORD=0 kept in bench/results/ with its
# headline figures added to the current-figures table (scripts/figures.sh).
report() {
echo
echo "# tollgate bench — upstream: $UPSTREAM, ${DUR}s per run, $(nproc) cores, $(date -u '+%F %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo
echo "| path | conns | req/s | p50 µs | p99 µs | p99.9 µs | added p50 µs | added p99 µs | errors / non-2xx | gateway CPU (cores) | gateway RSS MB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for c in $CONNS; do
    printf '| direct | %s | %s | %s | %s | %s | | | %s / %s | | |\n' "$c" "${R[direct.$c.rps]}" "${R[direct.$c.p50]}" \
        "${R[direct.$c.p99]}" "${R[direct.$c.p999]}" "${R[direct.$c.errors]}" "${R[direct.$c.status]}"
    for mode in $MODES; do
        printf '| tollgate, %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s |\n' "$mode" "$c" "${R[$mode.$c.rps]}" \
            "${R[$mode.$c.p50]}" "${R[$mode.$c.p99]}" "${R[$mode.$c.p999]}" \
            "$((${R[$mode.$c.p50]:-0} - ${R[direct.$c.p50]:-0}))" "$((${R[$mode.$c.p99]:-0} - ${R[direct.$c.p99]:-0}))" \
            "${R[$mode.$c.errors]}" "${R[$mode.$c.status]}" "${R[$mode.$c.cpu]}" "${R[$mode.$c.rss]}"
    done
done
echo
echo "CPU per request of each process on the path (µs; wrk's from its own user+sys time; the machine has $(nproc) cores, so $(($(nproc) * 1000000)) µs per second in all):"
echo
echo "| path | conns | gateway | upstream | Postgres | Redis | wrk | total |"
echo "|---|---|---|---|---|---|---|---|"
for c in $CONNS; do for mode in $MODES; do
    printf '| tollgate, %s | %s | %s |\n' "$mode" "$c" "${R[$mode.$c.per]:-}"
done; done
echo
echo "Books after each run (the budgets stay exact: every served request is one ledger event, Redis used == ledger tokens; \`off\` writes the ledger but no Redis):"
echo
for mode in $MODES; do for c in $CONNS; do echo "- $mode, c=$c: ${R[$mode.$c.books]}"; done; done
if [[ -n ${sd:-} ]]; then
    echo
    echo "| streams (64 chunks, 20 ms apart, 10 concurrent; admission=${MODES##* }) | direct | tollgate | added |"
    echo "|---|---|---|---|"
    for k in ttft_p50_us ttft_p99_us gap_p50_us gap_p99_us; do
        d=$(field "$sd" $k) g=$(field "$sg" $k)
        printf '| %s | %s | %s | %s |\n' "${k%_us} µs" "$d" "$g" "$(awk -v a="$g" -v b="$d" 'BEGIN{print a-b}')"
    done
    echo "| errors | $(field "$sd" errors) | $(field "$sg" errors) | |"
fi
if [[ -n ${slow:-} ]]; then
    echo
    echo "$SLOW_STREAMS concurrent slow streams (100 chunks 50 ms apart) through one instance: peak gateway RSS ${peak} MB;" \
        "streams $(field "$slow" streams), events $(field "$slow" events), errors $(field "$slow" errors), TTFT p99 $(field "$slow" ttft_p99_us) µs"
fi
echo
echo "Admission time seen by the gateway (admission=${MODES##* }): ${hold_us:-n/a} µs mean; admissions by path: ${admissions:-n/a}; Redis time per script call over the runs above: ${evalsha:-n/a} µs"
if [[ -n ${hb:-} ]]; then
    echo
    echo "$hb"
fi
if [[ $ISOLATION == 1 && $UPSTREAM == mock ]]; then
    echo
    echo "Isolation (admission=lease, default queue policy; tenants iso-a and iso-b, in-flight limit 2 each; mock latency 20 ms;"
    echo "B: 5 rounds of 300 sequential requests alone, then 300 while A floods):"
    echo
    echo "| A's clients | B p50 alone µs | B p99 alone µs | B p50 under flood µs | B p99 under flood µs | B p99 change | B failed / not allowed | A's answers |"
    echo "|---|---|---|---|---|---|---|---|"
    for run in $ISO_RUNS; do
        line=$(echo "${R[iso.$run]}" | head -1)
        answers=$(echo "${R[iso.$run]}" | sed -n 's/^a_answers: //p')
        who="128, honouring Retry-After"
        [[ $run == hot ]] && who="$ISO_HOT_FLOOD, hot loop"
        printf '| %s | %s | %s | %s | %s | %s %% | %s / %s | %s |\n' "$who" "$(field "$line" b_alone_p50_us)" \
            "$(field "$line" b_alone_p99_us)" "$(field "$line" b_busy_p50_us)" "$(field "$line" b_busy_p99_us)" \
            "$(field "$line" p99_change_pct)" "$(field "$line" b_failed)" "$(field "$line" b_not_allowed)" "$answers"
    done
fi
if [[ -n ${R[scn.names]:-} ]]; then
    echo
    echo "## Load scenarios (admission=lease; tenants scn-core, scn-standard, scn-batch; $(nproc) cores; charts in ${svg_dir})"
    for name in ${R[scn.names]}; do
        echo
        echo "${R[scn.$name]}"
        echo "Books after $name (clients' count vs Postgres ledger vs Redis; no overspend against the monthly limits):"
        echo
        echo "${R[scn.$name.books]}"
    done
fi
echo
echo "Physical floor, redis-benchmark PING on this machine:"
for c in 1 32; do
    printf -- '- c=%s: %s\n' "$c" "$(redis-benchmark -h "$REDIS_HOST" -p "$REDIS_PORT" -t ping -n 100000 -c "$c" -q 2>/dev/null | tr '\r' '\n' | grep -E 'PING_MBULK: [0-9]' | tail -1)"
done
}

RECORD=${RECORD:-1}
if [[ $RECORD != 1 ]]; then
    report
    exit 0
fi
what=bench-$UPSTREAM
[[ -n $SCENARIOS ]] && what=scenarios
results=bench/results/$(date -u +%F-%H%M)-$what.md
report | tee "$results"
log "report kept in $results"
src=$(basename "$results")
thousands() { echo "$1" | sed ':a;s/\B[0-9]\{3\}\>/,&/;ta'; }
for c in $CONNS; do
    [[ $UPSTREAM == nginx && -n ${R[lease.$c.rps]:-} ]] || continue
    if [[ $c == 1 ]]; then
        record_figure added_p50_c1 "added latency at 1 connection, p50 (bench.sh, nginx upstream, leases)" \
            "$((${R[lease.1.p50]:-0} - ${R[direct.1.p50]:-0})) µs" "≤ 100 µs" "$src"
        record_figure added_p99_c1 "added latency at 1 connection, p99 (bench.sh, nginx upstream, leases)" \
            "$((${R[lease.1.p99]:-0} - ${R[direct.1.p99]:-0})) µs" "≤ 300 µs" "$src"
    elif [[ $c == 32 ]]; then
        record_figure rps_c32 "requests/s at 32 connections (bench.sh, nginx upstream, leases; books exact)" \
            "$(thousands "${R[lease.32.rps]}")" "≥ 20,000" "$src"
    fi
done
if [[ -n ${sd:-} ]]; then
    record_figure stream_ttft "streams: added time to first token, p50 / p99 (bench.sh)" \
        "$(awk -v g50="$(field "$sg" ttft_p50_us)" -v d50="$(field "$sd" ttft_p50_us)" \
            -v g99="$(field "$sg" ttft_p99_us)" -v d99="$(field "$sd" ttft_p99_us)" \
            'BEGIN { printf "%+.2f / %+.2f ms", (g50 - d50) / 1000, (g99 - d99) / 1000 }')" "p99 ≤ 1 ms" "$src"
fi
if [[ -n ${slow:-} && $SLOW_STREAMS == 1000 ]]; then
    record_figure slow_streams_rss "1,000 concurrent slow streams: peak gateway RSS (bench.sh)" "$peak MB" "≤ 100 MB" "$src"
fi
# The leased hold engine at its most clients: `| lease | 256 | 72246 | …`.
pairs=$(echo "${hb:-}" | awk -F'|' '$2 ~ /lease/ { n = $4 + 0 } END { if (n) printf "%d", n }')
if [[ -n $pairs ]]; then
    record_figure hold_engine "hold engine: hold+settle pairs/s on leases (hold-bench)" \
        "$(thousands "$pairs")" "≥ 50,000" "$src"
fi
bash "$TOLLGATE_ROOT/scripts/figures.sh"
