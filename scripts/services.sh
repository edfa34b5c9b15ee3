#!/usr/bin/env bash
# Bring up PostgreSQL, Redis and ClickHouse on 127.0.0.1 for tollgate:
# use them if they answer, start them if installed, install them from
# Debian's packages if missing (as root). Idempotent; prints one line per
# service on success.
#
#   ./scripts/services.sh          # run it
#   . scripts/services.sh          # or source it (your shell options are kept)

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ ${BASH_SOURCE[0]} != "$0" ]]; then
    # Sourced: run in a subshell so that a failure returns instead of exiting
    # the caller's shell.
    (
        set -euo pipefail
        ensure_services
    ) || return 1
else
    set -euo pipefail
    ensure_services
fi
