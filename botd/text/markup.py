"""Markdown as the agent wrote it, rendered for a platform: what the core asks of a
platform's renderer, and the parts every renderer shares.

``MarkupRenderer`` is what delivery uses: a platform's ``render`` of Markdown into its markup
and its ``chunks``, the messages a reply becomes under the platform's limits. Each channel
names its renderer in its adapter's ``Capabilities.markup``; the platforms' own live in their
packages (Telegram's HTML, Slack's mrkdwn, Discord's Markdown), ``PLAIN`` here.

Shared here: one CommonMark parse (markdown-it-py, with GFM tables and strikethrough, raw
HTML off so that whatever HTML the model wrote stays text, ``MD``); ``MarkupWriter``, which
walks the parsed tree and writes plain text, its hooks overridden by a platform that writes
markup; and ``Renderer``, whose ``chunks`` splits the Markdown (never the rendered text, so
tags and fences stay whole) and splits a piece again whenever its rendering, or its plain
form, is still over the limits. Headings become bold lines, list items ``•`` or numbered
lines, a rule a line of box drawing, tables aligned text in a code block.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Protocol

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from .chunks import chunk_text
from .fences import parse_fence_spans

__all__ = [
    "LINK_SCHEME",
    "MD",
    "PLAIN",
    "MarkupRenderer",
    "MarkupWriter",
    "PlainRenderer",
    "RenderedChunk",
    "Renderer",
    "escape_html",
    "table_text",
]

MD = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
"""The one parser every renderer reads the agent's Markdown with."""

LINK_SCHEME = re.compile(r"(?i)(?:https?|mailto|tg|tel|ftp):")
"""Link targets a platform makes a link of; others (relative, unknown) are shown as text."""

_RULE = "──────────"
_BULLET = "• "


@dataclass(frozen=True, slots=True)
class RenderedChunk:
    """One message: the rendered text, and the same chunk as plain text for a fallback."""

    text: str
    plain: str


class MarkupRenderer(Protocol):
    """How a platform shows Markdown: what delivery asks of a channel's renderer."""

    @property
    def is_plain(self) -> bool:
        """Whether it writes plain text, without markup: a line then reads as a message."""
        ...

    def render(self, markdown: str) -> str:
        """``markdown`` in the platform's markup."""
        ...

    def chunks(
        self, markdown: str, limit: int, *, line_limit: int | None = None
    ) -> list[RenderedChunk]:
        """``markdown`` as messages of at most ``limit`` characters as the platform counts
        them (and ``line_limit`` lines), each with its plain form."""
        ...


def escape_html(text: str) -> str:
    """``&``, ``<`` and ``>`` as HTML entities (Telegram's HTML and Slack's mrkdwn alike)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _display_width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


# --- writing the tree -----------------------------------------------------------------------


class MarkupWriter:
    """Writes a parsed Markdown document as plain text. A platform that writes markup
    subclasses it: ``markup = True``, its ``escape`` of literal text and the hooks for
    emphasis, quotes, code and links."""

    markup = False
    """Whether emphasis and links are written as markup (else as their plain text)."""

    def __init__(self) -> None:
        # Emphasis already open: nested emphasis of the same kind adds no markers.
        self._open: set[str] = set()

    def document(self, markdown: str) -> str:
        return self.tree(SyntaxTreeNode(MD.parse(markdown)))

    def tree(self, root: SyntaxTreeNode) -> str:
        """A parsed document (left unchanged, so one parse serves several writers)."""
        return self.blocks(root.children, "\n\n").strip("\n")

    # Hooks a platform overrides.

    def escape(self, text: str) -> str:
        """Literal text as the platform shows it (plain text: as it is)."""
        return text

    def emphasised(self, kind: str, inner: str) -> str:
        """``inner`` (already written) as ``strong``, ``em`` or ``s`` in the platform's markup;
        asked only when ``markup`` is set."""
        raise NotImplementedError

    def quote(self, body: str) -> str:
        """A block quote of ``body`` (already written): ``>`` before each line."""
        return "\n".join("> " + line if line else ">" for line in body.split("\n"))

    def preformatted(self, code: str, info: str = "") -> str:
        """A code block (or a table as aligned text); ``info`` is the fence's info string."""
        return code

    def code_inline(self, content: str) -> str:
        return content

    def text(self, content: str) -> str:
        """A run of literal text."""
        return self.escape(content)

    def hyperlink(self, node: SyntaxTreeNode, href: str, shown: str, label: str, same: bool) -> str:
        """A link (or image) to ``href`` with a scheme the platform links: ``shown`` is the
        target as people read it, ``label`` its text as plain text, ``same`` whether the
        label only repeats the target; asked only when ``markup`` is set."""
        raise NotImplementedError

    # Blocks.

    def blocks(self, nodes: list[SyntaxTreeNode], separator: str) -> str:
        rendered = (self.block(node) for node in nodes)
        return separator.join(part for part in rendered if part)

    def block(self, node: SyntaxTreeNode) -> str:
        kind = node.type
        if kind == "paragraph":
            return self.inline_of(node)
        if kind == "heading":
            return self.bold(self.inline_of(node, bold=True))
        if kind in ("bullet_list", "ordered_list"):
            return self.list_block(node)
        if kind == "blockquote":
            return self.quote(self.blocks(node.children, "\n\n"))
        if kind in ("fence", "code_block"):
            return self.preformatted(
                node.content.rstrip("\n"), node.info if kind == "fence" else ""
            )
        if kind == "table":
            return self.preformatted(table_text(node))
        if kind == "hr":
            return _RULE
        # html_block cannot occur (html is off); anything unknown keeps its text.
        return self.escape(node.content)

    def list_block(self, node: SyntaxTreeNode) -> str:
        number = int(str(node.attrs.get("start", 1)))
        items: list[str] = []
        for item in node.children:
            marker = f"{number}. " if node.type == "ordered_list" else _BULLET
            number += 1
            body = self.blocks(item.children, "\n")
            pad = " " * len(marker)
            lines = body.split("\n") if body else [""]
            items.append(
                "\n".join(
                    [marker + lines[0], *(pad + line if line else line for line in lines[1:])]
                )
            )
        return "\n".join(items)

    # Inline content.

    def inline_of(self, node: SyntaxTreeNode, *, bold: bool = False) -> str:
        inline = node.children[0] if node.children else None
        if inline is None:
            return ""
        if bold:
            saved = set(self._open)
            self._open.add("strong")
            try:
                return self.inlines(inline.children).strip()
            finally:
                self._open = saved
        return self.inlines(inline.children)

    def inlines(self, nodes: list[SyntaxTreeNode]) -> str:
        return "".join(self.inline(node) for node in nodes)

    def inline(self, node: SyntaxTreeNode) -> str:
        kind = node.type
        if kind in ("text", "text_special"):
            return self.text(node.content)
        if kind in ("softbreak", "hardbreak"):
            return "\n"
        if kind == "code_inline":
            return self.code_inline(node.content)
        if kind in ("strong", "em", "s"):
            return self.emphasis(kind, node)
        if kind in ("link", "image"):
            return self.link(node)
        return self.escape(node.content)

    def bold(self, text: str) -> str:
        if not text or not self.markup:
            return text
        return self.emphasised("strong", text)

    def emphasis(self, kind: str, node: SyntaxTreeNode) -> str:
        if kind in self._open or not self.markup:
            return self.inlines(node.children)
        self._open.add(kind)
        try:
            inner = self.inlines(node.children)
        finally:
            self._open.discard(kind)
        if not inner.strip():
            return inner
        return self.emphasised(kind, inner)

    def link(self, node: SyntaxTreeNode) -> str:
        href = str(node.attrs.get("src" if node.type == "image" else "href", ""))
        shown = MD.normalizeLinkText(href)
        label = plain_inline(node.children)
        same = label in (shown, href) or f"mailto:{label}" == href
        if not self.markup:
            return label if same or not href else f"{label} ({shown})"
        if not LINK_SCHEME.match(href):
            # Platforms refuse relative or unknown links: show the target as text.
            text = self.inlines(node.children)
            return text if same or not href else f"{text} ({self.escape(shown)})"
        return self.hyperlink(node, href, shown, label, same)


def plain_inline(nodes: list[SyntaxTreeNode]) -> str:
    """Inline nodes as plain text."""
    return MarkupWriter().inlines(nodes)


def table_text(node: SyntaxTreeNode) -> str:
    """A table as aligned plain text: cells padded, `` | `` between them, a rule under the head."""
    rows: list[list[str]] = []
    head_rows = 0
    for section in node.children:
        for row in section.children:
            cells = []
            for cell in row.children:
                inline = cell.children[0].children if cell.children else []
                cells.append(" ".join(plain_inline(inline).split()))
            rows.append(cells)
        if section.type == "thead":
            head_rows = len(rows)
    if not rows:
        return ""
    columns = max(len(row) for row in rows)
    widths = [
        max((_display_width(row[i]) for row in rows if i < len(row)), default=0)
        for i in range(columns)
    ]

    def line(row: list[str]) -> str:
        padded = [
            (row[i] if i < len(row) else "")
            + " " * (widths[i] - _display_width(row[i] if i < len(row) else ""))
            for i in range(columns)
        ]
        return " | ".join(padded).rstrip()

    lines = [line(row) for row in rows]
    if head_rows:
        lines.insert(head_rows, "-+-".join("-" * width for width in widths))
    return "\n".join(lines)


# --- fitting chunks -------------------------------------------------------------------------


class Renderer:
    """A ``MarkupRenderer`` built on the shared parse: a platform gives its ``render`` (and,
    where it differs, how it counts length, makes the rendered and plain forms, and writes
    plain text it must fall back to); ``chunks`` is the same for all."""

    is_plain = False

    def render(self, markdown: str) -> str:
        raise NotImplementedError

    def size(self, text: str) -> int:
        """Length as the platform counts it (in characters, unless it says otherwise)."""
        return len(text)

    def rendered_and_plain(self, markdown: str) -> tuple[str, str]:
        """``markdown`` rendered, and as plain text."""
        text = self.render(markdown)
        return text, text if self.is_plain else PLAIN.render(markdown)

    def fallback(self, plain: str) -> str:
        """Plain text (a piece of Markdown that could not be split) as the platform must be
        sent it: escaped, its mentions defused. It may grow at most six times."""
        return plain

    def chunks(
        self, markdown: str, limit: int, *, line_limit: int | None = None
    ) -> list[RenderedChunk]:
        """``markdown`` rendered as messages of at most ``limit`` characters (and
        ``line_limit`` lines).

        The Markdown is split first (fence-safe, ``chunk_text``); a piece whose rendering or
        plain form is still too long, or has too many lines, is split again from its Markdown.
        """
        chunks: list[RenderedChunk] = []
        for piece in chunk_text(markdown, limit):
            chunks.extend(self._fit(piece, limit, line_limit))
        return chunks

    def _fit(self, md: str, limit: int, line_limit: int | None) -> list[RenderedChunk]:
        text, plain = self.rendered_and_plain(md)
        if not text.strip() and not plain.strip():
            return []
        longest = max(self.size(text), self.size(plain))
        too_many_lines = line_limit is not None and max(_line_count(text), _line_count(plain)) > (
            line_limit
        )
        if longest <= limit and not too_many_lines:
            return [RenderedChunk(text, plain)]
        if longest > limit:
            # Scale the budget by how much rendering expanded this piece, with some slack.
            budget = min(len(md) - 1, len(md) * limit * 9 // (longest * 10))
            pieces = chunk_text(md, budget) if budget > 0 else []
        else:
            pieces = _split_lines(md)
        if not pieces or any(len(piece) >= len(md) for piece in pieces):
            return self._fall_back(plain, limit, line_limit)
        fitted: list[RenderedChunk] = []
        for piece in pieces:
            fitted.extend(self._fit(piece, limit, line_limit))
        return fitted

    def _fall_back(self, plain: str, limit: int, line_limit: int | None) -> list[RenderedChunk]:
        """Plain text cut by length: the last resort when the Markdown cannot be split further."""
        # Escaping at most quintuples a character (``&`` → ``&amp;``); ZWSPs add one per
        # mention or backtick run.
        size = max(1, limit // 6)
        chunks: list[RenderedChunk] = []
        for piece in chunk_text(plain, size, markdown=False):
            if line_limit is not None:
                lines = piece.split("\n")
                parts = [
                    "\n".join(lines[i : i + line_limit]) for i in range(0, len(lines), line_limit)
                ]
            else:
                parts = [piece]
            chunks.extend(RenderedChunk(self.fallback(part), part) for part in parts)
        return chunks


class PlainRenderer(Renderer):
    """The text without markup: for a terminal, and for a platform's plain fallback."""

    is_plain = True

    def render(self, markdown: str) -> str:
        return MarkupWriter().document(markdown)


PLAIN = PlainRenderer()


def _line_count(text: str) -> int:
    return text.count("\n") + 1


def _split_lines(md: str) -> list[str]:
    """``md`` cut in two at a line boundary near the middle; a cut fence is closed and reopened."""
    lines = md.split("\n")
    if len(lines) < 2:
        return chunk_text(md, max(1, len(md) // 2))
    starts: list[int] = []
    offset = 0
    for line in lines[:-1]:
        offset += len(line) + 1
        starts.append(offset)
    spans = parse_fence_spans(md)
    middle = len(md) // 2

    def outside(off: int) -> bool:
        return all(not span.start < off <= (span.end if span.closed else len(md)) for span in spans)

    free = [off for off in starts if outside(off) and md[:off].strip() and md[off:].strip()]
    if free:
        cut = min(free, key=lambda off: abs(off - middle))
        return [md[:cut].rstrip(), md[cut:]]
    # Every line boundary lies inside a fence: cut between two of its content lines.
    inner = [
        (off, span)
        for off in starts
        for span in spans
        if span.start + len(span.open_line) + 1 < off < span.close_start
    ]
    if not inner:
        return chunk_text(md, max(1, len(md) // 2))
    cut, span = min(inner, key=lambda pair: abs(pair[0] - middle))
    return [md[:cut] + span.close_line, span.open_line + "\n" + md[cut:]]
