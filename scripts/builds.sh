# shellcheck shell=bash
# The setup scripts/ab.sh, scripts/rss.sh and scripts/instr.sh share, to run
# gateway builds one after another on the peers setup: the nginx upstream on
# :18080 (started unless one answers), the environment, `gw_start` and
# `gw_stop`. However the script ends, the gateway still running and the
# nginx started here are stopped. Sourced after lib.sh.

W=${TMPDIR:-/tmp}/tollgate-ab
mkdir -p "$W/nginx/body"
gw= nginx_started=
builds_stop() {
    if [[ -n $gw ]]; then kill "$gw" 2>/dev/null || true; fi
    if [[ -n $nginx_started ]]; then kill "$(cat "$W/nginx/nginx.pid")" 2>/dev/null || true; fi
}
trap builds_stop EXIT
if ! curl -fs -o /dev/null -X POST http://127.0.0.1:18080/v1/chat/completions; then
    sed "s#__DIR__#$W/nginx#g" bench/peers/mock-upstream.nginx.conf >"$W/nginx/nginx.conf"
    nginx -c "$W/nginx/nginx.conf"
    nginx_started=1
    sleep 1
fi
body='{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in one short sentence please."}],"max_tokens":64}'
db_url=$(url_with_db "postgres://postgres@127.0.0.1:5432/postgres" tollgate_ab)
export TOLLGATE__DATABASE__URL=$db_url TOLLGATE__REDIS__URL=redis://127.0.0.1:6379
export TOLLGATE__KEYS__PEPPER=peers-pepper-0123456789abcdef0123456789abcdef
export TOLLGATE__KEYS__ENCRYPTION_KEY=0011223344556677889900112233445566778899001122334455667788990011
export TOLLGATE_LOG=warn

# gw_start NAME BIN PORT [SETUP_BIN]: a fresh database and Redis prefix, the
# bench tenant seeded by the tollgate-dev beside SETUP_BIN (default BIN), or
# by SETUP_BIN itself when it is a tollgate-dev; a build with no tollgate-dev
# beside it is older than tollgate-dev and asked `tollgate admin
# bench-setup`, as it had it then. BIN
# serving on PORT; sets gw (its pid) and lua (the wrk script with its key).
# A SETUP_BIN (or BIN) named bare-proxy is the stack's floor
# (crates/bench/src/bare_proxy.rs): no setup and no key, a plain
# pass-through in front of the same upstream.
gw_start() {
    local name=$1 bin=$2 port=$3 key=
    if [[ $(basename "${4:-$bin}") == bare-proxy ]]; then
        "$bin" --listen "127.0.0.1:$port" --upstream 127.0.0.1:18080 >"$W/gw-$name.log" 2>&1 &
        gw=$!
        wait_until "bare-proxy on :$port" 30 tcp_open 127.0.0.1 "$port"
    else
        pg_recreate_db "$db_url" >/dev/null
        export TOLLGATE__REDIS__KEY_PREFIX=tgab$$$name$RANDOM
        local setup=${4:-$bin}
        [[ $(basename "$setup") == tollgate-dev || ! -x $(dirname "$setup")/tollgate-dev ]] ||
            setup=$(dirname "$setup")/tollgate-dev
        local verb=(bench-setup)
        [[ $(basename "$setup") == tollgate-dev ]] || verb=(admin bench-setup)
        key=$("$setup" "${verb[@]}" --upstream http://127.0.0.1:18080/v1 2>"$W/setup.log") ||
            { cat "$W/setup.log" >&2; die "$setup ${verb[*]} failed (a build needs its tollgate-dev beside it)"; }
        "$bin" serve --listen "127.0.0.1:$port" >"$W/gw-$name.log" 2>&1 &
        gw=$!
        until curl -fs -o /dev/null "http://127.0.0.1:$port/healthz"; do sleep 0.05; done
    fi
    lua=$W/$name.lua
    {
        echo 'wrk.method = "POST"'
        echo "wrk.body = '$body'"
        echo 'wrk.headers["Content-Type"] = "application/json"'
        [[ -z $key ]] || echo "wrk.headers[\"Authorization\"] = \"Bearer $key\""
    } >"$lua"
}

# gw_stop: stops the gateway gw_start started.
gw_stop() {
    kill "$gw" 2>/dev/null || true
    wait "$gw" 2>/dev/null || true
    gw=
}
