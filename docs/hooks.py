"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks``).

A page may link to a file of the checkout outside ``docs/`` by its relative path, as GitHub
renders it (``[bench/RESULTS.md](../bench/RESULTS.md)``): the site turns that link into one
to the file in the repository (``repo_url``/blob/main/...). A link whose file does not exist
in the checkout is a warning, so ``mkdocs build --strict`` fails on it as on a broken link
between pages.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.antre")

ROOT = Path(__file__).resolve().parents[1]
# [text](target) or [text](target#anchor), not images, not absolute URLs
LINK = re.compile(r"(?<!!)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")
FENCE = re.compile(r"^(```|~~~)", re.M)


def repo_path(page_src: str, target: str) -> str | None:
    """The checkout path ``target`` names from the page at ``docs/<page_src>`` when it leaves
    ``docs/``; None for a link between pages, an absolute URL or a mail link."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
        return None
    joined = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page_src), target))
    if joined.startswith("docs/") or joined == "docs":
        return None
    return joined


def _outside_fences(markdown: str) -> list[tuple[int, int]]:
    """The spans of ``markdown`` outside fenced code blocks (links inside code stay as they
    are)."""
    spans, start, inside = [], 0, False
    for m in FENCE.finditer(markdown):
        if not inside:
            spans.append((start, m.start()))
        else:
            start = markdown.find("\n", m.end()) + 1 or len(markdown)
        inside = not inside
    if not inside:
        spans.append((start, len(markdown)))
    return spans


def rewrite(markdown: str, page_src: str, repo_url: str) -> tuple[str, list[str]]:
    """``markdown`` with its links out of ``docs/`` made repository links, and the paths of
    those that name no file or folder of the checkout."""
    missing: list[str] = []

    def one(m: re.Match[str]) -> str:
        path = repo_path(page_src, m["target"])
        if path is None:
            return m[0]
        if not (ROOT / path).exists():
            missing.append(path)
        kind = "tree" if (ROOT / path).is_dir() else "blob"
        return f"[{m['text']}]({repo_url.rstrip('/')}/{kind}/main/{path}{m['anchor'] or ''})"

    out, last = [], 0
    for start, end in _outside_fences(markdown):
        out.append(markdown[last:start])
        out.append(LINK.sub(one, markdown[start:end]))
        last = end
    out.append(markdown[last:])
    return "".join(out), missing


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    text, missing = rewrite(markdown, page.file.src_uri, config["repo_url"] or "")
    for path in missing:
        log.warning("%s links to %s, which is not in the checkout", page.file.src_uri, path)
    return text
