#!/usr/bin/env bash
# Side-by-side proxy overhead: the same fixed upstream (nginx serving a chat.completion),
# the same load (wrk, 1 and 32 connections), direct and through each gateway.
#
#   TOLLGATE_URL=http://127.0.0.1:8080 TOLLGATE_KEY=tg-... bench/peers/peers.sh [direct nginx-proxy stack-floor tollgate litellm portkey]
#
# nginx-proxy is the floor for any gateway on this machine: nginx as a plain reverse proxy
# (two workers, keep-alive to the upstream), enforcing nothing. Compare ratios within one run.
# stack-floor (STACK_FLOOR_URL) is the same plain pass-through written on tollgate's own
# libraries (crates/bench/src/bare_proxy.rs): the floor of the stack, before any metering.
#
# Point tollgate's model `gpt-4o-mini` at http://127.0.0.1:18080/v1 before running, with a
# tenant whose budget will not run out during the run. LiteLLM and Portkey are installed on
# first use under $PEERS_DIR (pip / npm). Only processes this script starts are stopped.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PEERS_DIR=${PEERS_DIR:-/tmp/tollgate-peers}
DUR=${DUR:-8}
targets=${*:-direct nginx-proxy tollgate litellm portkey}
mkdir -p "$PEERS_DIR/mock/body"
started=()
cleanup() { for p in "${started[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

need() { command -v "$1" >/dev/null 2>&1 || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null; }; }
need nginx nginx; need wrk wrk

# upstream
if ! curl -fs -o /dev/null -X POST http://127.0.0.1:18080/v1/chat/completions; then
  sed "s#__DIR__#$PEERS_DIR/mock#g" "$here/mock-upstream.nginx.conf" > "$PEERS_DIR/mock/nginx.conf"
  nginx -c "$PEERS_DIR/mock/nginx.conf"
  sleep 1
  started+=("$(cat "$PEERS_DIR/mock/nginx.pid")")
fi

body='{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in one short sentence please."}],"max_tokens":64}'
script() { # $1 file, rest: headers
  local f=$1; shift
  { echo 'wrk.method = "POST"'; echo "wrk.body = '$body'"; echo 'wrk.headers["Content-Type"] = "application/json"'
    for h in "$@"; do echo "wrk.headers[\"${h%%:*}\"] = \"${h#*: }\""; done; } > "$f"
}
# CPU=1: also each process's CPU per request during each run (user and
# system, summed by command name from /proc), wrk's own, and the whole
# box's (from /proc/stat: user, system, softirq — the loopback network
# stack, charged to no process — and idle), so a run shows what the box
# spends a request and where.
cpu_snapshot() {
  for p in /proc/[0-9]*/stat; do cat "$p" 2>/dev/null; echo; done |
    awk 'NF { c=$0; sub(/^[0-9]+ \(/, "", c); sub(/\) .*/, "", c); gsub(/ /, "_", c); r=$0; sub(/.*\) /, "", r)
              split(r, f, " "); u[c]+=f[12]; s[c]+=f[13] }
         END { for (k in u) print k, u[k], s[k] }' | sort
}
run() { # name url luafile
  for c in 1 32; do
    local t=1; [ $c -gt 1 ] && t=2
    [ "${CPU:-0}" = 1 ] && { cpu_snapshot > "$PEERS_DIR/cpu.before"; head -1 /proc/stat > "$PEERS_DIR/box.before"; }
    local TIMEFORMAT='%U %S'
    { time wrk -t$t -c$c -d${DUR}s --latency -s "$3" "$2" > "$PEERS_DIR/wrk.out" 2>&1; } 2> "$PEERS_DIR/wrk.time"
    out=$(cat "$PEERS_DIR/wrk.out")
    [ "${CPU:-0}" = 1 ] && { cpu_snapshot > "$PEERS_DIR/cpu.after"; head -1 /proc/stat > "$PEERS_DIR/box.after"; }
    rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
    p50=$(echo "$out" | awk '$1=="50%"{print $2}'); p99=$(echo "$out" | awk '$1=="99%"{print $2}')
    non=$(echo "$out" | awk '/Non-2xx/{print $NF}'); non=${non:-0}
    printf '%-9s c=%-3s rps=%-10s p50=%-9s p99=%-9s non2xx=%s\n' "$1" "$c" "$rps" "$p50" "$p99" "$non"
    if [ "${CPU:-0}" = 1 ]; then
      local n; n=$(echo "$out" | awk '/requests in/{print $1}')
      join "$PEERS_DIR/cpu.before" "$PEERS_DIR/cpu.after" | awk -v n="$n" -v hz="$(getconf CLK_TCK)" '
        { du=$4-$2; ds=$5-$3; if (du+ds > 1) printf "    cpu %-16s user %6.1f  sys %6.1f us/request\n", $1, du*1e6/hz/n, ds*1e6/hz/n }'
      awk -v n="$n" '{ printf "    cpu %-16s user %6.1f  sys %6.1f us/request\n", "wrk", $1*1e6/n, $2*1e6/n }' "$PEERS_DIR/wrk.time"
      # cpu  user nice system idle iowait irq softirq steal ...
      cat "$PEERS_DIR/box.before" "$PEERS_DIR/box.after" | awk -v n="$n" -v hz="$(getconf CLK_TCK)" '
        { for (i = 2; i <= 9; i++) v[NR, i] = $i }
        END { for (i = 2; i <= 9; i++) x[i] = (v[2, i] - v[1, i]) * 1e6 / hz / n
              printf "    box  user %.1f  sys %.1f  softirq %.1f  idle %.1f  other %.1f us/request (all cores)\n",
                x[2] + x[3], x[4], x[8], x[5] + x[6], x[7] + x[9] }'
    fi
  done
}

for t in $targets; do case $t in
direct)
  script "$PEERS_DIR/direct.lua" "Authorization: Bearer sk-upstream"
  run direct http://127.0.0.1:18080/v1/chat/completions "$PEERS_DIR/direct.lua" ;;
nginx-proxy)
  mkdir -p "$PEERS_DIR/proxy/body"
  cat > "$PEERS_DIR/proxy/nginx.conf" <<NGX
worker_processes 2;
pid $PEERS_DIR/proxy/nginx.pid;
error_log $PEERS_DIR/proxy/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $PEERS_DIR/proxy/body;
  upstream up { server 127.0.0.1:18080; keepalive 64; }
  server {
    listen 127.0.0.1:18082;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
NGX
  nginx -c "$PEERS_DIR/proxy/nginx.conf"
  sleep 1
  started+=("$(cat "$PEERS_DIR/proxy/nginx.pid")")
  script "$PEERS_DIR/direct.lua" "Authorization: Bearer sk-upstream"
  run nginx-proxy http://127.0.0.1:18082/v1/chat/completions "$PEERS_DIR/direct.lua" ;;
stack-floor)
  : "${STACK_FLOOR_URL:?set STACK_FLOOR_URL}"
  script "$PEERS_DIR/direct.lua" "Authorization: Bearer sk-upstream"
  run stack-floor "$STACK_FLOOR_URL/v1/chat/completions" "$PEERS_DIR/direct.lua" ;;
tollgate)
  : "${TOLLGATE_URL:?set TOLLGATE_URL}" "${TOLLGATE_KEY:?set TOLLGATE_KEY}"
  script "$PEERS_DIR/tollgate.lua" "Authorization: Bearer $TOLLGATE_KEY"
  run tollgate "$TOLLGATE_URL/v1/chat/completions" "$PEERS_DIR/tollgate.lua" ;;
litellm)
  if [ ! -x "$PEERS_DIR/litellm/bin/litellm" ]; then
    python3 -m venv "$PEERS_DIR/litellm" && "$PEERS_DIR/litellm/bin/pip" install -q 'litellm[proxy]'
  fi
  mk=sk-Zq7vL2mN9xR4tY8wK3pB6cD1fG5hJ0aE
  cat > "$PEERS_DIR/litellm.yaml" <<YAML
model_list:
  - model_name: gpt-4o-mini
    litellm_params: {model: openai/gpt-4o-mini, api_base: "http://127.0.0.1:18080/v1", api_key: sk-upstream}
general_settings: {master_key: $mk}
YAML
  LITELLM_LOG=ERROR "$PEERS_DIR/litellm/bin/litellm" --config "$PEERS_DIR/litellm.yaml" --port 14000 --num_workers 1 >"$PEERS_DIR/litellm.log" 2>&1 &
  started+=($!)
  for _ in $(seq 60); do curl -fs -o /dev/null http://127.0.0.1:14000/health/liveliness && break; sleep 1; done
  script "$PEERS_DIR/litellm.lua" "Authorization: Bearer $mk"
  run litellm http://127.0.0.1:14000/v1/chat/completions "$PEERS_DIR/litellm.lua" ;;
portkey)
  if [ ! -f "$PEERS_DIR/portkey/node_modules/@portkey-ai/gateway/build/start-server.js" ]; then
    mkdir -p "$PEERS_DIR/portkey" && (cd "$PEERS_DIR/portkey" && npm init -y >/dev/null && npm install -s @portkey-ai/gateway >/dev/null)
  fi
  node "$PEERS_DIR/portkey/node_modules/@portkey-ai/gateway/build/start-server.js" --port=18787 >"$PEERS_DIR/portkey.log" 2>&1 &
  started+=($!)
  sleep 4
  script "$PEERS_DIR/portkey.lua" "Authorization: Bearer sk-upstream" "x-portkey-provider: openai" "x-portkey-custom-host: http://127.0.0.1:18080/v1"
  run portkey http://127.0.0.1:18787/v1/chat/completions "$PEERS_DIR/portkey.lua" ;;
*) echo "unknown target $t" >&2; exit 2 ;;
esac; done
