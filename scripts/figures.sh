#!/usr/bin/env bash
# The current figures: the latest row of each measure in
# bench/results/figures.tsv, written as one markdown table between the
# markers `<!-- figures:begin -->` and `<!-- figures:end -->` of
# docs/benchmarks.md and README.md.
#
#   ./scripts/figures.sh           # rewrite both tables
#   ./scripts/figures.sh --check   # exit 1 if either differs from the file (scripts/test.sh)
#
# bench.sh and peers.sh append their rows (lib.sh's record_figure) and run
# this; a figure measured by hand is a row added with the same function or
# an editor: date, key, measure, value, goal, source (a file in
# bench/results/), tab-separated. The latest row of a key is the last one in
# the file; the table keeps the order in which keys first appear.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TOLLGATE_ROOT"

check=0
[[ ${1:-} == --check ]] && check=1

tsv=bench/results/figures.tsv
[[ -s $tsv ]] || die "figures: $tsv is missing or empty"

table=$(awk -F'\t' '
    NR == 1 { next }
    NF != 6 { printf "figures: line %d of %s has %d fields, not 6\n", NR, FILENAME, NF > "/dev/stderr"; bad = 1; next }
    {
        if (!($2 in row)) order[++n] = $2
        row[$2] = $0
    }
    END {
        if (bad) exit 1
        print "| measure | figure | goal | run |"
        print "|---|---|---|---|"
        for (i = 1; i <= n; i++) {
            split(row[order[i]], f, "\t")
            printf "| %s | %s | %s | %s, `bench/results/%s` |\n", f[3], f[4], f[5], f[1], f[6]
        }
    }' "$tsv")

# Every source the table names must exist.
while IFS= read -r src; do
    [[ -e bench/results/$src ]] || die "figures: $tsv names bench/results/$src, which does not exist"
done < <(awk -F'\t' 'NR > 1 { print $6 }' "$tsv" | sort -u)

status=0
for doc in docs/benchmarks.md README.md; do
    if ! grep -q '^<!-- figures:begin -->$' "$doc" || ! grep -q '^<!-- figures:end -->$' "$doc"; then
        die "figures: $doc has no <!-- figures:begin --> / <!-- figures:end --> lines"
    fi
    new=$(awk -v table="$table" '
        /^<!-- figures:end -->$/ { skip = 0 }
        !skip { print }
        /^<!-- figures:begin -->$/ { print table; skip = 1 }' "$doc")
    if [[ $new == "$(cat "$doc")" ]]; then
        continue
    fi
    if ((check)); then
        log "figures: the table in $doc is not bench/results/figures.tsv's (run ./scripts/figures.sh)"
        status=1
    else
        printf '%s\n' "$new" >"$doc"
        log "figures: wrote the table in $doc"
    fi
done
((check)) && ((status == 0)) && log "figures: the tables match $tsv"
exit "$status"
