# shellcheck shell=bash
# The scale section of scripts/bench.sh (`SCALE=1 ./scripts/bench.sh`;
# docs/benchmarks.md and docs/scale.md say how to read it). Sourced by bench.sh once the release
# build and the upstream are up; uses its $bin, $target, $upstream, $work,
# $month and helpers. Its own database (tollgate_scale) is dropped at the end.
#
#   1. a catalog of SCALE_KEYS keys over SCALE_TENANTS tenants (bulk-created
#      by `tollgate-dev load-keys`): a replica's start-up time (spawn to
#      /healthz and a first admitted request) and RSS; then SCALE_CREATES
#      keys created through replica A's admin API and used at once on A and
#      on B alternately: first calls refused, create → first 200 p50/p99,
#      revocation → first 401 p50/p99 (every 10th key), RSS of A and B
#      before and after;
#   2. ledgers of SCALE_EVENTS events (each loaded afresh, e.g. 1M then 10M)
#      in the current month, written by `tollgate-dev load-ledger` (the ledger's
#      own insert, rollups included; SCALE_END_USERS end users): bills API,
#      bill CSV, FOCUS export (first byte and whole), console dashboard,
#      request log first page and a deep page (cursor followed
#      SCALE_PAGES pages), each timed on a fresh replica.
#
#   SCALE=1 ./scripts/bench.sh
#   SCALE=1 SCALE_KEYS=100000 SCALE_EVENTS="100000 1000000" ./scripts/bench.sh   # a quick one
#   SCALE_KEEP_DB=1 …      # keep tollgate_scale at the end (e.g. to profile a
#                          # 100M ledger without loading it again; ~54 GB)

SCALE_KEYS=${SCALE_KEYS:-1000000}
SCALE_TENANTS=${SCALE_TENANTS:-10000}
SCALE_CREATES=${SCALE_CREATES:-1000}
SCALE_EVENTS=${SCALE_EVENTS:-1000000 10000000}
SCALE_LEDGER_TENANTS=${SCALE_LEDGER_TENANTS:-100}
SCALE_LEDGER_APPS=${SCALE_LEDGER_APPS:-5}
SCALE_END_USERS=${SCALE_END_USERS:-10000}
SCALE_PAGES=${SCALE_PAGES:-200}
SCALE_LOAD_PARALLEL=${SCALE_LOAD_PARALLEL:-2}
SCALE_LOAD_BATCH=${SCALE_LOAD_BATCH:-2000}

# scale_start NAME PORT : start a replica; sets S_PID and S_START_MS (spawn
# to /healthz answering, then to a first admitted request).
scale_start() {
    local t0 t1
    t0=$(date +%s%N)
    "$bin" serve --listen "127.0.0.1:$2" >"$work/scale-$1.log" 2>&1 &
    S_PID=$!
    scale_pids+=("$S_PID")
    until curl -fs -o /dev/null "http://127.0.0.1:$2/healthz"; do
        kill -0 "$S_PID" 2>/dev/null || { cat "$work/scale-$1.log" >&2; die "replica $1 exited"; }
        (($(date +%s%N) - t0 < 120000000000)) || die "replica $1: no /healthz after 120 s"
        sleep 0.02
    done
    t1=$(date +%s%N)
    S_HEALTH_MS=$(((t1 - t0) / 1000000))
    until [[ $(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$2/v1/chat/completions" \
        -H "Authorization: Bearer $scale_key" -H 'Content-Type: application/json' -d "$body") == 200 ]]; do
        (($(date +%s%N) - t0 < 120000000000)) || die "replica $1: the bench key is not admitted after 120 s"
        sleep 0.02
    done
    S_START_MS=$((($(date +%s%N) - t0) / 1000000))
}
scale_stop() {
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

scale_bench() {
    local sdb port_a port_b pid_a pid_b token rss rows out
    scale_pids=()
    trap 'for p in "${scale_pids[@]:-}"; do [[ -n $p ]] && kill "$p" 2>/dev/null || true; done; cleanup' EXIT
    cargo build -q --release -p tollgate-bench --bin scale-bench
    sdb=$(url_with_db "postgres://postgres@$PG_HOST:$PG_PORT/postgres" tollgate_scale)
    pg_recreate_db "$sdb"
    export TOLLGATE__DATABASE__URL=$sdb
    export TOLLGATE__REDIS__URL=redis://$REDIS_HOST:$REDIS_PORT
    export TOLLGATE__REDIS__KEY_PREFIX=tgscale$$
    export TOLLGATE__KEYS__PEPPER=bench-pepper-0123456789abcdef0123456789abcdef
    export TOLLGATE__KEYS__ENCRYPTION_KEY=0011223344556677889900112233445566778899001122334455667788990011
    export TOLLGATE__AUTH__JWT_SECRET=scale-bench-jwt-secret-0123456789abcdef0123456789
    export TOLLGATE__AUTH__COOKIE_SECURE=false
    export TOLLGATE_LOG=warn
    scale_key=$("$dev" bench-setup --upstream "$upstream" 2>"$work/scale-setup.log") ||
        { cat "$work/scale-setup.log" >&2; exit 1; }
    local pw=scale-bench-password-0123456789
    "$bin" admin create-user --email scale@bench.local --password "$pw" --role platform_admin >/dev/null
    declare -A S

    # 1. The catalog.
    log "scale: loading $SCALE_KEYS keys over $SCALE_TENANTS tenants"
    out=$("$dev" load-keys --keys "$SCALE_KEYS" --tenants "$SCALE_TENANTS" 2>/dev/null)
    S[load_keys]=$out
    S[keys_in_db]=$(psql_url "$sdb" -At -c "SELECT count(*) FROM virtual_keys")
    port_a=$(free_port 18181)
    scale_start a "$port_a"
    pid_a=$S_PID S[a_health_ms]=$S_HEALTH_MS S[a_start_ms]=$S_START_MS S[a_rss0]=$(rss_mb "$pid_a")
    port_b=$(free_port $((port_a + 1)))
    scale_start b "$port_b"
    pid_b=$S_PID S[b_health_ms]=$S_HEALTH_MS S[b_start_ms]=$S_START_MS S[b_rss0]=$(rss_mb "$pid_b")
    token=$(curl -fsS -X POST "http://127.0.0.1:$port_a/api/v1/auth/login" -H 'Content-Type: application/json' \
        -d "{\"email\":\"scale@bench.local\",\"password\":\"$pw\"}" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
    [[ -n $token ]] || die "scale: login failed"
    log "scale: $SCALE_CREATES keys created on A, used at once on A and B"
    S[keys]=$("$target/scale-bench" keys --admin "http://127.0.0.1:$port_a" --token "$token" --tenant bench --app load \
        --urls "http://127.0.0.1:$port_a,http://127.0.0.1:$port_b" --n "$SCALE_CREATES")
    S[a_rss1]=$(rss_mb "$pid_a") S[b_rss1]=$(rss_mb "$pid_b")
    scale_stop "$pid_a"
    scale_stop "$pid_b"

    # 2. The books.
    local n prev=0 runs=()
    for n in $SCALE_EVENTS; do
        log "scale: ledger of $n events ($SCALE_LEDGER_TENANTS tenants × $SCALE_LEDGER_APPS apps, $month)"
        # Each size from an empty ledger: an event's request id carries its
        # start, which depends on the plan's size, so a larger plan does not
        # repeat a smaller one's ids (docs/scale.md, "The loader").
        psql_url "$sdb" -c "TRUNCATE usage_events, usage_rollups, usage_month_rollups, usage_day_rollups" >/dev/null
        out=$("$dev" load-ledger --events "$n" --tenants "$SCALE_LEDGER_TENANTS" --apps "$SCALE_LEDGER_APPS" \
            --end-users "$SCALE_END_USERS" --period "$month" --parallel "$SCALE_LOAD_PARALLEL" \
            --batch "$SCALE_LOAD_BATCH" 2>/dev/null)
        S[$n.load]=$out
        psql_url "$sdb" -c "VACUUM ANALYZE usage_events" -c "VACUUM ANALYZE usage_rollups" -c "VACUUM ANALYZE usage_month_rollups" \
            -c "VACUUM ANALYZE usage_day_rollups" -c "VACUUM ANALYZE request_decisions"
        rows=$(psql_url "$sdb" -At -F ' ' -c "SELECT (SELECT count(*) FROM usage_events), (SELECT count(*) FROM usage_rollups),
            (SELECT count(*) FROM usage_day_rollups),
            replace(pg_size_pretty(pg_total_relation_size('usage_events')), ' ', ''),
            replace(pg_size_pretty(pg_total_relation_size('usage_rollups')), ' ', '')")
        S[$n.rows]=$rows
        scale_start a "$port_a"
        pid_a=$S_PID
        local api="http://127.0.0.1:$port_a/api/v1" auth="Authorization: Bearer $token"
        S[$n.bills]=$("$target/scale-bench" get --name bills --url "$api/bills?period=$month" --header "$auth")
        S[$n.csv]=$("$target/scale-bench" get --name csv --url "$api/bills.csv?period=$month" --header "$auth")
        # FOCUS: the whole platform's month (a row per tenant × app × model
        # × day × tags × component: it grows with them; streamed, so its
        # first bytes are timed apart) and one tenant's.
        S[$n.focus]=$("$target/scale-bench" get --name focus --url "$api/bills.focus.csv?period=$month" --header "$auth")
        S[$n.focus_t]=$("$target/scale-bench" get --name focus_t \
            --url "$api/bills.focus.csv?period=$month&tenant=load-00007" --header "$auth")
        S[$n.dash]=$("$target/scale-bench" get --name dashboard --url "http://127.0.0.1:$port_a/console" \
            --header "Cookie: tg_session=$token")
        S[$n.log]=$("$target/scale-bench" pages --url "$api/requests?limit=50" --token "$token" --pages "$SCALE_PAGES")
        S[$n.log_t]=$("$target/scale-bench" pages --url "$api/requests?tenant=load-00007&limit=50" --token "$token" \
            --pages "$SCALE_PAGES")
        scale_stop "$pid_a"
        runs+=("$n")
        prev=$n
    done
    : "$prev"

    echo
    echo "# tollgate scale bench — $(nproc) cores, $(date -u '+%F %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "Catalog: ${S[keys_in_db]} keys in Postgres (${S[load_keys]})"
    echo
    echo "| replica | /healthz after ms | first admitted request after ms | RSS MB at start | RSS MB after $SCALE_CREATES creations |"
    echo "|---|---|---|---|---|"
    echo "| A (creates) | ${S[a_health_ms]} | ${S[a_start_ms]} | ${S[a_rss0]} | ${S[a_rss1]} |"
    echo "| B | ${S[b_health_ms]} | ${S[b_start_ms]} | ${S[b_rss0]} | ${S[b_rss1]} |"
    echo
    echo "Keys created on A and used at once (alternately on A and B); every 10th revoked on A, then called until 401:"
    echo
    echo "| used on | keys | first call 401 | create → 200 p50 ms | p99 ms | max ms | revocations | served after revoke answered | revoke → 401 p50 ms | p99 ms | max ms |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    local line r
    while read -r line; do
        r=$(field "$line" replica)
        [[ $r == *":$port_a" ]] && r=A || r=B
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$r" "$(field "$line" keys)" \
            "$(field "$line" first_call_401)" "$(field "$line" usable_p50_ms)" "$(field "$line" usable_p99_ms)" \
            "$(field "$line" usable_max_ms)" "$(field "$line" revocations)" "$(field "$line" served_after_revoke)" \
            "$(field "$line" revoked_p50_ms)" "$(field "$line" revoked_p99_ms)" "$(field "$line" revoked_max_ms)"
    done <<<"${S[keys]}"
    echo
    echo "Books ($SCALE_LEDGER_TENANTS tenants × $SCALE_LEDGER_APPS apps × 4 keys × 2 models × $SCALE_END_USERS end users over the month's days, half the requests with cached input; each figure the p50 of 5 runs, max in brackets; request log: $SCALE_PAGES pages of 50 followed by cursor):"
    echo
    echo "| events | rollup rows | day rows | events table | rollups table | load (events/s) | bills ms | bill CSV ms (bytes) | FOCUS first byte ms | FOCUS ms (bytes) | one tenant's FOCUS ms (bytes) | dashboard ms | request log first page ms | page $SCALE_PAGES ms | one tenant's: first ms | page $SCALE_PAGES ms |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for n in "${runs[@]}"; do
        local ev ro dr es rs
        read -r ev ro dr es rs <<<"${S[$n.rows]}"
        printf '| %s | %s | %s | %s | %s | %s | %s (%s) | %s (%s; %s B) | %s (%s) | %s (%s; %s B) | %s (%s; %s B) | %s (%s) | %s | %s | %s | %s |\n' "$ev" "$ro" "$dr" "$es" "$rs" \
            "$(echo "${S[$n.load]}" | sed -n 's/.*: \([0-9]*\) events\/s.*/\1/p')" \
            "$(field "${S[$n.bills]}" p50_ms)" "$(field "${S[$n.bills]}" max_ms)" \
            "$(field "${S[$n.csv]}" p50_ms)" "$(field "${S[$n.csv]}" max_ms)" "$(field "${S[$n.csv]}" bytes)" \
            "$(field "${S[$n.focus]}" first_byte_p50_ms)" "$(field "${S[$n.focus]}" first_byte_max_ms)" \
            "$(field "${S[$n.focus]}" p50_ms)" "$(field "${S[$n.focus]}" max_ms)" "$(field "${S[$n.focus]}" bytes)" \
            "$(field "${S[$n.focus_t]}" p50_ms)" "$(field "${S[$n.focus_t]}" max_ms)" "$(field "${S[$n.focus_t]}" bytes)" \
            "$(field "${S[$n.dash]}" p50_ms)" "$(field "${S[$n.dash]}" max_ms)" \
            "$(field "${S[$n.log]}" first_ms)" "$(field "${S[$n.log]}" last_ms)" \
            "$(field "${S[$n.log_t]}" first_ms)" "$(field "${S[$n.log_t]}" last_ms)"
    done
    echo
    for n in "${runs[@]}"; do
        echo "- $n: ${S[$n.load]}; statuses: bills $(field "${S[$n.bills]}" status), csv $(field "${S[$n.csv]}" status), focus $(field "${S[$n.focus]}" status) / $(field "${S[$n.focus_t]}" status), dashboard $(field "${S[$n.dash]}" status); request log ${S[$n.log]}; tenant ${S[$n.log_t]}"
    done
    if [[ ${SCALE_KEEP_DB:-0} == 1 ]]; then
        log "scale: keeping the database tollgate_scale (SCALE_KEEP_DB=1; drop it when done)"
    else
        pg_drop_scale_db "$sdb"
    fi
}

pg_drop_scale_db() {
    psql_url "$(url_with_db "$1" postgres)" -c "DROP DATABASE IF EXISTS tollgate_scale WITH (FORCE)" >/dev/null
}
