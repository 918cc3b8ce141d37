#!/usr/bin/env python3
"""Every local link in the project's documents resolves (label `unit`, CTest `docs.links`).

    tests/docs/link_check.py REPO_ROOT [FILE.md ...]

Without files it checks README.md, CONTRIBUTING.md and every docs/**/*.md. A link
[text](target) or ![alt](target) outside code that is not a URL must name a file or
directory that exists, relative to the document; a `#anchor` on a Markdown target (or
alone, for the document itself) must be the slug of one of that document's headings,
by GitHub's rules: the heading's text lowercased, every character that is not a
letter, digit, space, '-' or '_' dropped, spaces turned into '-', and a repeated slug
numbered -1, -2, ... An explicit <a id="..."> or <a name="..."> counts too.
Each broken link is printed as FILE:LINE: target: why; the exit status is 1 if any is.
"""
import pathlib
import re
import sys

FENCE = re.compile(r"^\s{0,3}(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the text may hold one level of [...] (an image in a link).
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+(?:\([^()\s]*\)[^()\s<>]*)*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)\s*=\s*\"([^\"]+)\"", re.IGNORECASE)
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # https:, mailto:, ...


def slug(heading):
    """GitHub's anchor for a heading's Markdown text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text)                          # inline HTML
    text = text.lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def lines_outside_code(path):
    """(line number, text) of each line outside fenced code blocks."""
    in_fence = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            if in_fence is None:
                in_fence = fence.group(1)
            elif fence.group(1) == in_fence:
                in_fence = None
            continue
        if in_fence is None:
            yield number, line


_anchor_cache = {}


def anchors(path):
    if path not in _anchor_cache:
        found, counts = set(), {}
        for _, line in lines_outside_code(path):
            heading = HEADING.match(line)
            if heading:
                base = slug(heading.group(2))
                n = counts.get(base, 0)
                counts[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
            found.update(HTML_ANCHOR.findall(line))
        _anchor_cache[path] = found
    return _anchor_cache[path]


def check(document, root):
    problems = []
    for number, line in lines_outside_code(document):
        text = CODE_SPAN.sub("", line)
        targets = [m.group(1) for m in LINK.finditer(text)]
        reference = REFERENCE.match(text)
        if reference:
            targets.append(reference.group(1))
        for target in targets:
            if EXTERNAL.match(target) or target.startswith("//"):
                continue
            where = f"{document.relative_to(root)}:{number}: {target}"
            file_part, _, anchor = target.partition("#")
            resolved = (document.parent / file_part).resolve() if file_part else document
            if not resolved.exists():
                problems.append(f"{where}: no such file or directory")
                continue
            if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                problems.append(f"{where}: no heading '#{anchor}' in {resolved.relative_to(root)}")
    return problems


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    root = pathlib.Path(argv[1]).resolve()
    if len(argv) > 2:
        documents = [pathlib.Path(p).resolve() for p in argv[2:]]
    else:
        documents = [root / "README.md", root / "CONTRIBUTING.md"] + sorted((root / "docs").rglob("*.md"))
    problems = []
    for document in documents:
        if not document.exists():
            problems.append(f"{document}: the document itself is missing")
            continue
        problems += check(document, root)
    for problem in problems:
        print(problem)
    print(f"link_check: {len(documents)} documents, {len(problems)} broken link(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
