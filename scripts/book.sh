#!/usr/bin/env bash
# The manual: build docs/ with mdbook (pinned; built once into a cache by
# lib.sh's ensure_mdbook) into $CARGO_TARGET_DIR/book (default target/book),
# then fail on
#   - a docs/*.md page missing from docs/SUMMARY.md (it would not be in the book),
#   - any relative link or anchor that points nowhere: in the built book, the
#     README and the run logs in bench/ (scripts/doclinks.py),
#   - a current-figures table that is not bench/results/figures.tsv's
#     (scripts/figures.sh --check).
# Called by scripts/test.sh; runs on its own too: ./scripts/book.sh
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$TOLLGATE_ROOT"

ensure_mdbook
book_dir=${CARGO_TARGET_DIR:-$TOLLGATE_ROOT/target}/book
[[ $book_dir == /* ]] || book_dir=$TOLLGATE_ROOT/$book_dir
log "+ mdbook build docs -d $book_dir"
rm -rf "$book_dir"
if ! book_log=$("$MDBOOK" build docs -d "$book_dir" 2>&1); then
    printf '%s\n' "$book_log" >&2
    die "manual: mdbook build failed"
fi
# A missing include or a page mdbook cannot read is only a warning to mdbook.
if grep -E '(^| )(WARN|ERROR) ' <<<"$book_log" >&2; then
    die "manual: mdbook warned (above)"
fi
for page in docs/*.md; do
    [[ $page == docs/SUMMARY.md ]] && continue
    grep -q "](${page#docs/})" docs/SUMMARY.md || die "manual: $page is not in docs/SUMMARY.md"
done
log "+ scripts/doclinks.py $book_dir README.md bench/**/*.md"
"${TOLLGATE_TEST_PYTHON:-python3}" scripts/doclinks.py "$book_dir" README.md bench/results/*.md bench/experiments/README.md
bash scripts/figures.sh --check
echo "manual: ok ($book_dir/index.html)"
