#!/usr/bin/env bash
# Supply chain: cargo-deny against deny.toml (licences, bans, sources, and the
# RustSec advisories). Called by scripts/test.sh.
#
# The advisory database lives on GitHub. Where GitHub is unreachable (this
# project's CI machine reaches package registries only), the check uses a
# local copy if there is one (TOLLGATE_ADVISORY_DB=path to an advisory-db
# checkout, or one cargo-deny fetched before) and otherwise says plainly that
# advisories were NOT checked; licences, bans and sources always are.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TOLLGATE_ROOT"

ensure_cargo_deny

log "+ cargo deny check licenses bans sources"
"$CARGO_DENY" --log-level error check licenses bans sources

db_home=${CARGO_HOME:-$HOME/.cargo}/advisory-dbs
# cargo-deny's directory name for https://github.com/RustSec/advisory-db
db_dir=$db_home/advisory-db-3157b0e258782691
if [[ -n ${TOLLGATE_ADVISORY_DB:-} && ! -e $db_dir/.git ]]; then
    mkdir -p "$db_home"
    git clone -q "$TOLLGATE_ADVISORY_DB" "$db_dir"
fi
if timeout 30 git ls-remote -q https://github.com/RustSec/advisory-db HEAD >/dev/null 2>&1; then
    log "+ cargo deny check advisories (fetching the advisory database)"
    "$CARGO_DENY" --log-level error check advisories
elif [[ -e $db_dir/.git ]]; then
    log "+ cargo deny --offline check advisories (local database of $(git -C "$db_dir" log -1 --format=%cs))"
    "$CARGO_DENY" --log-level error --offline check advisories
else
    log "supply chain: advisories NOT checked: github.com unreachable and no local advisory database"
    log "supply chain: (set TOLLGATE_ADVISORY_DB to an advisory-db checkout to check offline)"
fi
echo "supply chain: ok"
