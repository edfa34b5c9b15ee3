#!/usr/bin/env bash
# The fairness benchmark (docs/fair.md, "Fairness, measured"; issue #51):
# a month of twelve tenants compressed into a minute and a half — diurnal
# load, weekends, random bursts, long prompts, streams, borrowing, a pool
# that is tight by the month's end — replayed on the mock upstream, then
# judged from the ledger and the decision log alone (crates/bench/src/
# fair_bench.rs, `judge`), apart from the code that decides.
#
#   ./scripts/bench_fair.sh                 # on, off, iso: ~4–5 min on 2 cores
#   RUNS=on ./scripts/bench_fair.sh         # the borrowing month only
#   SEED=7 DAY_SECS=4 ./scripts/bench_fair.sh
#   RECORD=0 ./scripts/bench_fair.sh        # print only: no file in bench/results, no figures
#
# Runs, each on a fresh database (tollgate_fair_<run>) and Redis prefix,
# with the same month of requests:
#   on   borrowing on: the false refusals by cause, the borrow hit rate,
#        reclaim on time, tokens served, bills;
#   off  nobody may borrow, the same budgets and load: tokens served
#        (utilisation gained = on ÷ off − 1);
#   iso  budgets out of reach: each tenant's steady load alone, then all
#        twelve together: p50/p99 of each (a shared 2-core machine: noisy).
# After each run the books (scripts/books.sh): clients' count and tokens vs
# the ledger vs Redis, nothing held, no overspend.
#
# Only processes this script starts are stopped.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/books.sh
. "$(dirname "${BASH_SOURCE[0]}")/books.sh"
cd "$TOLLGATE_ROOT"

RUNS=${RUNS:-on off iso}
SEED=${SEED:-4}
DAYS=${DAYS:-30}
DAY_SECS=${DAY_SECS:-3}
RATE_SCALE=${RATE_SCALE:-2}
ISO_SECS=${ISO_SECS:-4}
# The month is compressed ~29,000× (a day in 3 s): the periodic jobs and the
# batch queue's wait and the empty-pool back-off are scaled with it
# (defaults 10 s, 60 s, 60 s, 5 s).
BORROW_CHECK_SECS=${BORROW_CHECK_SECS:-1}
BORROW_EMPTY_BACKOFF_MS=${BORROW_EMPTY_BACKOFF_MS:-250}
RECLAIM_SECS=${RECLAIM_SECS:-2}
MAX_WAIT_MS_BATCH=${MAX_WAIT_MS_BATCH:-6000}
GW_PORT=${GW_PORT:-18281}
MOCK_PORT=${MOCK_PORT:-19291}
RECORD=${RECORD:-1}
work=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-fair.XXXXXX")
pids=()
gw_pid=
cleanup() { for p in "${pids[@]:-}" $gw_pid; do [[ -n $p ]] && kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

ensure_services >/dev/null
log "building tollgate and fair-bench (release)"
cargo build -q --release -p tollgate-server --bin tollgate -p tollgate-devtools --bin tollgate-dev -p tollgate-bench --bin fair-bench
target=${CARGO_TARGET_DIR:-$TOLLGATE_ROOT/target}/release
bin=${TOLLGATE_BIN:-$target/tollgate}
# The seeding and the mock provider: the tollgate-dev of the same build
# (it migrates the database to its own schema), beside TOLLGATE_BIN.
dev=${TOLLGATE_DEV_BIN:-$(dirname "$bin")/tollgate-dev}
[[ -x $dev ]] || die "no tollgate-dev beside $bin: build it (-p tollgate-devtools --bin tollgate-dev) or set TOLLGATE_DEV_BIN"
fb=$target/fair-bench
month_args=(--seed "$SEED" --days "$DAYS" --day-secs "$DAY_SECS" --rate-scale "$RATE_SCALE")

"$dev" mock-upstream --listen "127.0.0.1:$MOCK_PORT" >"$work/mock.log" 2>&1 &
pids+=($!)
upstream=http://127.0.0.1:$MOCK_PORT/v1
wait_until "mock upstream" 30 tcp_open 127.0.0.1 "$MOCK_PORT"

export TOLLGATE__REDIS__URL=redis://$REDIS_HOST:$REDIS_PORT
export TOLLGATE__KEYS__PEPPER=bench-pepper-0123456789abcdef0123456789abcdef
export TOLLGATE__KEYS__ENCRYPTION_KEY=0011223344556677889900112233445566778899001122334455667788990011
export TOLLGATE__METRICS__TOKEN=bench-metrics-token-0123456789abcdef0123
export TOLLGATE_LOG=warn
export TOLLGATE__FAIR__BORROW_CHECK_SECS=$BORROW_CHECK_SECS
export TOLLGATE__FAIR__RECLAIM_SECS=$RECLAIM_SECS
export TOLLGATE__FAIR__MAX_WAIT_MS_BATCH=$MAX_WAIT_MS_BATCH
export TOLLGATE__FAIR__BORROW_EMPTY_BACKOFF_MS=$BORROW_EMPTY_BACKOFF_MS
month=$(TZ=Asia/Shanghai date +%Y-%m)
tenants=$(printf 'fair-%02d ' $(seq 1 12))

# q SQL > FILE : rows as `,`-separated text for the judge.
q() { psql_url "$db_url" -At -F ',' -c "$1"; }
ms() { echo "(extract(epoch from $1) * 1000)::bigint"; }
dump() { # dir
    local d=$1
    mkdir -p "$d"
    q "SELECT id, priority, limits->>'monthly_tokens', limits->>'max_inflight', may_borrow, borrow_cap_tokens
       FROM tenants WHERE id LIKE 'fair-%'" >"$d/tenants.csv"
    q "SELECT tenant_id, slots FROM model_guarantees WHERE model_id = 'fair-pool'" >"$d/guarantees.csv"
    q "SELECT pool_capacity FROM models WHERE id = 'fair-pool'" >"$d/capacity.csv"
    q "SELECT monthly_tokens, reclaim_below_share_ppm FROM borrow_pool" >"$d/pool.csv"
    q "SELECT request_id, tenant_id, input_tokens, output_tokens, est_tokens, cost_micro, $(ms started_at), $(ms settled_at), model
       FROM usage_events WHERE tenant_id LIKE 'fair-%'" >"$d/events.csv"
    q "SELECT request_id, (detail->>'waited_ms')::bigint FROM request_decisions
       WHERE tenant_id LIKE 'fair-%' AND decision <> 'refused' AND detail ? 'waited_ms'" >"$d/waits.csv"
    q "SELECT request_id, tenant_id, reason, $(ms at), detail->>'est_input_tokens', detail->>'est_output_tokens',
              detail->>'headroom_tokens'
       FROM request_decisions WHERE tenant_id LIKE 'fair-%' AND decision = 'refused'" >"$d/decisions.csv"
    q "SELECT tenant_id, state, tokens, $(ms created_at), $(ms "COALESCE(settled_at, created_at)"), trigger
       FROM borrows WHERE tenant_id LIKE 'fair-%'" >"$d/borrows.csv"
    q "SELECT tenant_id, tokens, $(ms at) FROM reclaims WHERE state = 'done' AND tenant_id LIKE 'fair-%'" >"$d/reclaims.csv"
}

declare -A R
for run in $RUNS; do
    db_url=$(url_with_db "postgres://postgres@$PG_HOST:$PG_PORT/postgres" "tollgate_fair_$run")
    pg_recreate_db "$db_url"
    prefix=tgfair$$$run
    export TOLLGATE__DATABASE__URL=$db_url TOLLGATE__REDIS__KEY_PREFIX=$prefix
    "$fb" plan "${month_args[@]}" --mode "$run" >"$work/spec-$run.json"
    "$dev" bench-setup --upstream "$upstream" --fair "$(cat "$work/spec-$run.json")" >"$work/keys-$run" 2>"$work/setup-$run.log" ||
        { cat "$work/setup-$run.log" >&2; exit 1; }
    # shellcheck disable=SC2086
    before=$(books_of $tenants)
    "$bin" serve --listen "127.0.0.1:$GW_PORT" >"$work/gw-$run.log" 2>&1 &
    gw_pid=$!
    wait_until "tollgate ($run) on :$GW_PORT" 30 curl -fs -o /dev/null "http://127.0.0.1:$GW_PORT/healthz"
    log "fair: run $run (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    extra=()
    [[ $run == iso ]] && extra=(--iso --iso-secs "$ISO_SECS")
    t0=$(date +%s)
    "$fb" replay "${month_args[@]}" --url "http://127.0.0.1:$GW_PORT" --keys "$work/keys-$run" \
        --out "$work/client-$run.tsv" "${extra[@]}" >"$work/replay-$run.out" || die "fair-bench replay $run failed"
    R[$run.secs]=$(($(date +%s) - t0))
    # Stopping returns the leases and flushes the ledger; then the books.
    kill -TERM "$gw_pid" 2>/dev/null || true
    wait "$gw_pid" 2>/dev/null || true
    gw_pid=
    sleep 1
    while read -r t b; do
        [[ -n $t ]] && export "BORROWED_OF_${t//-/_}=$b"
    done < <(q "SELECT tenant_id || ' ' || SUM(outstanding_tokens) FROM borrows WHERE state = 'active' GROUP BY tenant_id" | tr ',' ' ')
    # shellcheck disable=SC2086
    R[$run.books]=$(books_check "$before" "$(books_of $tenants)" "$(grep '^BOOKS ' "$work/replay-$run.out")")
    R[$run.replay]=$(grep -v '^BOOKS ' "$work/replay-$run.out")
    if [[ $run != iso ]]; then
        dump "$work/db-$run"
        R[$run.judge]=$("$fb" judge --client "$work/client-$run.tsv" --dir "$work/db-$run" \
            --max-wait-ms "2000,2000,$MAX_WAIT_MS_BATCH" --reclaim-secs "$RECLAIM_SECS" --label "borrowing $run")
    fi
    for t in $tenants; do unset "BORROWED_OF_${t//-/_}"; done
done

fig() { echo "${R[$1.judge]:-}" | sed -n 's/^FIG //p' | tr ' ' '\n' | awk -F= -v k="$2" '$1==k{print $2}'; }
pctof() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a * 100 / b; else print "n/a" }'; }

report() {
    echo "# tollgate fairness benchmark — seed $SEED, $DAYS days of ${DAY_SECS} s, rate ×$RATE_SCALE, $(nproc) cores, $(date -u '+%F %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo
    echo "Command: \`SEED=$SEED DAYS=$DAYS DAY_SECS=$DAY_SECS RATE_SCALE=$RATE_SCALE RUNS=\"$RUNS\" ./scripts/bench_fair.sh\`;"
    echo "jobs scaled with the month: borrow check every ${BORROW_CHECK_SECS} s, reclaim every ${RECLAIM_SECS} s, batch queue wait ${MAX_WAIT_MS_BATCH} ms, empty-pool borrow back-off ${BORROW_EMPTY_BACKOFF_MS} ms."
    if [[ -f $work/spec-on.json ]]; then
        echo
        echo "Tenants and pool (\`fair-bench plan\`): $(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print("pool %d tokens (chunk 5 %%, reclaim below 20 %% free), model pool %d slots; " % (s["pool_tokens"], s["capacity"]) + "; ".join("%s %s budget %d of ~%d asked, in-flight %d%s" % (t["id"], t["priority"], t["monthly_tokens"], t["expected_tokens"], t["max_inflight"], (", guaranteed %d slots" % t["guarantee"]) if t["guarantee"] else "") for t in s["tenants"]))' "$work/spec-on.json" 2>/dev/null || echo '?')"
    fi
    local run
    for run in $RUNS; do
        echo
        echo "## Run $run (${R[$run.secs]} s)"
        echo
        echo "${R[$run.replay]}"
        if [[ -n ${R[$run.judge]:-} ]]; then
            echo
            echo "${R[$run.judge]}" | grep -v '^FIG '
        fi
        echo
        echo "Books after $run (clients vs Postgres ledger vs Redis; no overspend against budget + borrowed):"
        echo
        echo "${R[$run.books]}"
    done
    if [[ -n ${R[on.judge]:-} && -n ${R[off.judge]:-} ]]; then
        echo
        echo "Utilisation gained: $(fig on served_tokens) tokens served with borrowing on, $(fig off served_tokens) off, same offered load ($(fig on offered_tokens) tokens): $(awk -v a="$(fig on served_tokens)" -v b="$(fig off served_tokens)" 'BEGIN{ printf "%+.1f %%", (a / b - 1) * 100 }')"
        # The tenants that borrowed in the on run: their ledger tokens in both.
        local who t on=0 off=0
        who=$(echo "${R[on.books]}" | awk '/borrowed/{sub(":", "", $2); print $2}')
        for t in $who; do
            on=$((on + $(echo "${R[on.books]}" | awk -v t="- $t:" 'index($0, t) == 1' | sed -n 's/.*tokens: clients [0-9]* \/ ledger \([0-9]*\) \/ Redis used.*/\1/p')))
            off=$((off + $(echo "${R[off.books]}" | awk -v t="- $t:" 'index($0, t) == 1' | sed -n 's/.*tokens: clients [0-9]* \/ ledger \([0-9]*\) \/ Redis used.*/\1/p')))
        done
        echo "Requests served: $(fig on served_requests) on, $(fig off served_requests) off ($(awk -v a="$(fig on served_requests)" -v b="$(fig off served_requests)" 'BEGIN{ printf "%+.1f %%", (a / b - 1) * 100 }')); the tenants that borrowed ($(echo $who | tr ' ' ',')): $on tokens on, $off off ($(awk -v a="$on" -v b="$off" 'BEGIN{ if (b > 0) printf "%+.1f %%", (a / b - 1) * 100 }'))."
    fi
}

# The charts, from the same tables as the judge.
if [[ -d $work/db-on && -d $work/db-off ]]; then
    svg_dir=${SVG_DIR:-$work}
    [[ $RECORD == 1 ]] && svg_dir=${SVG_DIR:-docs/img}
    "$fb" chart --on "$work/db-on" --off "$work/db-off" --days "$DAYS" --svg-dir "$svg_dir" &&
        log "charts: $svg_dir/fair-served.svg, $svg_dir/fair-pool.svg"
fi

if [[ $RECORD != 1 ]]; then
    report
    exit 0
fi
results=bench/results/$(date -u +%F-%H%M)-fair.md
report | tee "$results"
log "report kept in $results"
src=$(basename "$results")
if [[ -n ${R[on.judge]:-} ]]; then
    record_figure fair_false_refusals "fairness month: false refusals, share of requests that fit (bench_fair.sh)" \
        "$(pctof "$(fig on false_refusals)" "$(fig on fit)") % ($(fig on false_refusals) of $(fig on fit))" "< 1 % (seed 004: < 1 %)" "$src"
    record_figure fair_borrow_hit "fairness month: borrow hit rate, requests above own budget the pool could serve (bench_fair.sh)" \
        "$(pctof "$(fig on borrow_hit)" "$(fig on borrow_could)") % ($(fig on borrow_hit) of $(fig on borrow_could))" "≥ 88 % (seed 004: ~88 %)" "$src"
    record_figure fair_reclaim_on_time "fairness month: reclaim on time while the pool is tight (bench_fair.sh)" \
        "$(pctof "$(fig on reclaim_on_time)" "$(fig on reclaim_demands)") % ($(fig on reclaim_on_time) of $(fig on reclaim_demands))" "≥ 95 % (seed 004: ~95 %)" "$src"
    record_figure fair_bills_exact "fairness month: served requests billed exactly, client usage × list price = ledger (bench_fair.sh)" \
        "$(pctof "$(fig on bills_exact)" "$(fig on bills)") % ($(fig on bills_exact) of $(fig on bills))" "100 % (seed 004: ~99.3 %)" "$src"
fi
if [[ -n ${R[on.judge]:-} && -n ${R[off.judge]:-} ]]; then
    record_figure fair_utilisation "fairness month: tokens served with borrowing on vs off, same load (bench_fair.sh)" \
        "$(awk -v a="$(fig on served_tokens)" -v b="$(fig off served_tokens)" 'BEGIN{ printf "%+.1f %%", (a / b - 1) * 100 }')" "> 0 (seed 004: +25 %)" "$src"
fi
bash "$TOLLGATE_ROOT/scripts/figures.sh"
