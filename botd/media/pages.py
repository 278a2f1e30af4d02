"""Web pages as the model reads them: an HTML page's title and its text as markdown.

Synchronous CPU work (BeautifulSoup's parser and markdownify, ``botd[web]``): botd runs it
in a reading worker (``sandbox``), never on the event loop or its thread pool.
"""

from __future__ import annotations

import re

# Elements whose content is never what a reader of the page sees.
_HIDDEN = ("script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "head")
_BLANK_RUNS = re.compile(r"\n[ \t]*(?:\n[ \t]*){2,}")


def page_markdown(body: bytes, charset: str | None) -> tuple[str, str]:
    """The title and markdown text of an HTML page given as bytes."""
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    # Given the bytes, BeautifulSoup finds the encoding itself (the header's charset first,
    # then the page's own meta tag, then a guess).
    soup = BeautifulSoup(body, "html.parser", from_encoding=charset)
    title = soup.title.get_text(" ", strip=True) if soup.title is not None else ""
    for element in soup(list(_HIDDEN)):
        element.decompose()
    converter = MarkdownConverter(heading_style="ATX", bullets="-", strip=["img"])
    text = converter.convert_soup(soup)
    return title, _BLANK_RUNS.sub("\n\n", text).strip()


__all__ = ["page_markdown"]
