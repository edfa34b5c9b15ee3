#!/usr/bin/env python3
"""Fails on a relative link, or an anchor, that points nowhere.

    python3 scripts/doclinks.py BOOK_DIR [MARKDOWN ...]

BOOK_DIR is the manual as mdbook built it (HTML): every `href` and `src`
that is not an absolute URL must name a file of the book, and its
`#fragment` an `id` in that file; so a link to a page missing from
docs/SUMMARY.md, to a file outside docs/, or to a heading that was renamed
fails. Each MARKDOWN file outside the book (README.md, the run logs in
bench/results/) is read as GitHub shows it: a relative link must name a
file or directory of the repository, and an anchor into a markdown file one
of its headings.

Standard library only; prints every broken link, exits 1 if there is one.
"""

import html.parser
import os
import re
import sys
import urllib.parse

SKIP_PAGES = {"404.html", "print.html", "toc.html"}


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name"):
                self.ids.add(value)
            if (name == "href" and tag in ("a", "link")) or (name == "src" and tag in ("img", "script")):
                self.links.append((self.getpos()[0], value))


def is_external(url):
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", url)) or url.startswith("//")


def check_book(book):
    pages = {}
    for dirpath, _, files in os.walk(book):
        for f in files:
            if f.endswith(".html"):
                path = os.path.join(dirpath, f)
                p = Page()
                with open(path, encoding="utf-8") as fh:
                    p.feed(fh.read())
                pages[os.path.normpath(path)] = p
    broken = []
    for path, page in sorted(pages.items()):
        rel = os.path.relpath(path, book)
        if rel in SKIP_PAGES:
            continue
        for line, url in page.links:
            if is_external(url):
                continue
            target, _, fragment = url.partition("#")
            target = urllib.parse.unquote(target.split("?")[0])
            dest = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
            if not dest.startswith(os.path.normpath(book) + os.sep) and dest != os.path.normpath(book):
                broken.append(f"{rel}:{line}: {url}: points outside the book")
                continue
            if not os.path.exists(dest):
                broken.append(f"{rel}:{line}: {url}: no such file in the book")
                continue
            if fragment and dest in pages and urllib.parse.unquote(fragment) not in pages[dest].ids:
                broken.append(f"{rel}:{line}: {url}: no anchor #{fragment} in {os.path.relpath(dest, book)}")
    return broken, len(pages)


def github_slugs(markdown):
    """The anchors GitHub gives a markdown file's headings."""
    slugs, seen = set(), {}
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        m = None if in_code else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def check_markdown(files):
    broken = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            text = fh.read()
        # Links inside code are examples, not links.
        prose = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
        prose = re.sub(r"`[^`\n]*`", "", prose)
        for m in LINK.finditer(prose):
            url = m.group(1)
            line = prose.count("\n", 0, m.start()) + 1
            if is_external(url):
                continue
            target, _, fragment = url.partition("#")
            target = urllib.parse.unquote(target)
            dest = os.path.normpath(os.path.join(os.path.dirname(f), target)) if target else f
            if not os.path.exists(dest):
                broken.append(f"{f}:{line}: {url}: no such file")
                continue
            if fragment and dest.endswith(".md"):
                with open(dest, encoding="utf-8") as fh:
                    if fragment.lower() not in github_slugs(fh.read()):
                        broken.append(f"{f}:{line}: {url}: no heading #{fragment} in {dest}")
    return broken


def main(argv):
    if len(argv) < 2 or not os.path.isdir(argv[1]):
        sys.exit(__doc__)
    broken, pages = check_book(argv[1])
    broken += check_markdown(argv[2:])
    for b in broken:
        print(f"broken link: {b}", file=sys.stderr)
    if broken:
        print(f"doclinks: {len(broken)} broken link(s)", file=sys.stderr)
        return 1
    print(f"doclinks: {pages} pages of the book and {len(argv) - 2} markdown files, no broken link")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
