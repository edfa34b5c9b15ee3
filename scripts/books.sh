# shellcheck shell=bash
# The books of benchmark tenants, computed apart from the gateway (sourced by
# scripts/bench.sh's load scenarios and scripts/bench_fair.sh). Both read the
# caller's $db_url (the bench database), $prefix (its Redis key prefix) and
# $month (YYYY-MM, platform time).

# books_of TENANT... : one line a tenant: ledger events, tokens, cost and
# overruns (Postgres), used and held tokens and cost (Redis), and the
# tenant's monthly limits (tokens, cost; empty when unset).
books_of() {
    local t ev tok cost over ut ht uc hc lt lc
    for t in "$@"; do
        read -r ev tok cost over < <(psql_url "$db_url" -At -F ' ' -c "SELECT count(*), COALESCE(SUM(input_tokens+output_tokens),0),
            COALESCE(SUM(cost_micro),0), COALESCE(SUM(overrun_tokens),0) FROM usage_events WHERE tenant_id = '$t'")
        read -r lt lc < <(psql_url "$db_url" -At -F ' ' -c "SELECT COALESCE(limits->>'monthly_tokens', '-'), COALESCE(limits->>'monthly_cost_usd', '-') FROM tenants WHERE id = '$t'")
        { read -r ut; read -r ht; read -r uc; read -r hc; } < <(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" HMGET "$prefix:{t:$t}:m:$month" t:ut t:ht t:uc t:hc)
        echo "$t $ev $tok $cost $over ${ut:-0} ${ht:-0} ${uc:-0} ${hc:-0} $lt $lc"
    done
}

# books_check BEFORE AFTER CLIENTS : books_of before and after a run, and the
# clients' `BOOKS tenant=T admitted=N tokens=M` lines → one verdict a
# tenant. *exact*: served = ledger events, client tokens = ledger tokens =
# Redis used, ledger cost = Redis cost, nothing left held; *no overspend*:
# Redis used within the monthly limits (+ recorded overruns; a tenant's
# effective limit includes what it borrowed, given as BORROWED_OF_<tenant
# with - as _>, tokens, in the environment, 0 when unset).
books_check() { # before after clients
    local t ev tok cost over ut ht uc hc lt lc b adm ctok ok line ev0 tok0 cost0 ut0 uc0 bv
    while read -r t ev tok cost over ut ht uc hc lt lc; do
        b=$(echo "$1" | awk -v t="$t" '$1==t')
        read -r _ ev0 tok0 cost0 _ ut0 _ uc0 _ _ _ <<<"$b"
        line=$(echo "$3" | grep "tenant=$t ")
        adm=$(echo "$line" | tr ' ' '\n' | awk -F= '$1=="admitted"{print $2}')
        ctok=$(echo "$line" | tr ' ' '\n' | awk -F= '$1=="tokens"{print $2}')
        ok=exact
        [[ $((ev - ev0)) -eq ${adm:-0} && $((tok - tok0)) -eq ${ctok:-0} && $((ut - ut0)) -eq $((tok - tok0)) &&
            $((uc - uc0)) -eq $((cost - cost0)) && $ht -eq 0 && $hc -eq 0 ]] || ok="NOT exact"
        bv=BORROWED_OF_${t//-/_}
        bv=${!bv:-0}
        # No overspend: used within the monthly limits (plus recorded overruns).
        awk -v u="$ut" -v o="$over" -v l="$lt" -v b="$bv" -v c="$uc" -v lc="$lc" \
            'BEGIN{ exit !((l == "-" || u <= l + b + o) && (lc == "-" || c <= lc * 1000000)) }' || ok="$ok, OVERSPENT"
        printf -- '- %s: %s served → %s ledger events; tokens: clients %s / ledger %s / Redis used %s; cost µUSD ledger %s / Redis %s; held after %s tokens, %s µUSD; used %s of %s tokens%s — %s\n' \
            "$t" "$adm" "$((ev - ev0))" "$ctok" "$((tok - tok0))" "$((ut - ut0))" "$((cost - cost0))" "$((uc - uc0))" \
            "$ht" "$hc" "$ut" "$lt" "$( ((bv > 0)) && echo " + $bv borrowed")" "$ok"
    done <<<"$2"
}
