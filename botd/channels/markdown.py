"""Markdown as the agent wrote it, rendered per platform.

One CommonMark parse (markdown-it-py, with GFM tables and strikethrough, raw HTML off so that
whatever HTML the model wrote stays text) feeds a small renderer per flavour:

* ``slack``: mrkdwn. ``*bold*``, ``_italic_``, ``~strike~``, ``<url|label>``, headings as bold
  lines, ``•``/numbered list lines, ``>`` quotes, tables as a code block. ``&``, ``<``, ``>`` are
  escaped everywhere except Slack's own angle tokens (``<@U…>``, ``<!here>``, ``<https://…|…>``),
  which are kept verbatim. ``defuse_slack_mass_mentions`` turns the tokens that notify a whole
  channel or user group into plain readable text.
* ``telegram_html``: only Telegram's tag set; every other ``<``, ``>``, ``&`` is escaped.
* ``discord``: the source itself (Discord reads Markdown), with top-level tables turned into
  code blocks and ``@everyone``/``@here`` broken by a zero-width space.
* ``plain``: the text without markup, for Telegram's fallback and the console.

``render_chunks`` splits the Markdown (never the rendered text, so tags and fences stay whole)
and splits a piece again whenever its rendering, or its plain form, is still over the limits.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from botd.chat import Flavour
from botd.text.chunks import chunk_text
from botd.text.fences import open_fence_at_end, parse_fence_spans

_MD = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])

# Slack's own angle tokens: user/channel/group mentions, special mentions and links.
_SLACK_TOKEN = re.compile(
    r"<(?:[@#][A-Z0-9][A-Za-z0-9_]*(?:\|[^<>\n]*)?"
    r"|![a-z][^<>\n]*"
    r"|(?:https?|mailto|tel|slack):[^<>\s|]+(?:\|[^<>\n]*)?)>"
)
# Private-use characters are excluded: Slack token placeholders use them.
_BARE_URL = re.compile(r"https?://[^\s<>\"\ue000-\uf8ff]+")
_LINK_SCHEME = re.compile(r"(?i)(?:https?|mailto|tg|tel|ftp):")
_CODE_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]+")
_MASS_MENTION = re.compile(r"@(everyone|here)\b")
# Slack's special mentions and user-group mentions, with or without a label.
_SLACK_SPECIAL_MENTION = re.compile(r"<!(channel|here|everyone|group)(?:\|[^<>\n]*)?>", re.I)
_SLACK_GROUP_MENTION = re.compile(r"<!subteam\^[^<>|\n]*(?:\|([^<>\n]*))?>", re.I)
_ZWSP = "\u200b"
_BACKTICK_RUN = re.compile("``(?=`)")
# One line that Markdown leaves as it is: no character that starts inline syntax (or an
# entity, an escape, a line break), nothing at its start that opens a block (a heading, a
# list, a quote, an indented code block), no space at either end (a paragraph is trimmed).
_PLAIN_LINE = re.compile(
    r"[^\s\x00-\x1f\x7f-\x9f\\`*_\[\]<>&~|#=+\-0-9]"
    r"(?:[^\x00-\x1f\x7f-\x9f\u2028\u2029\\`*_\[\]<>&~|]*"
    r"[^\s\x00-\x1f\x7f-\x9f\\`*_\[\]<>&~|])?"
)
_RULE = "──────────"
_BULLET = "• "


@dataclass(frozen=True, slots=True)
class RenderedChunk:
    """One message: the rendered text, and the same chunk as plain text for a fallback."""

    text: str
    plain: str


def render(markdown: str, flavour: Flavour) -> str:
    """``markdown`` rendered for ``flavour`` (see the module docstring)."""
    if flavour == "discord":
        return _render_discord(markdown)
    if flavour == "slack":
        return _render_slack(markdown)
    return _Renderer(flavour).document(markdown)


def render_chunks(
    markdown: str, flavour: Flavour, limit: int, *, line_limit: int | None = None
) -> list[RenderedChunk]:
    """``markdown`` rendered as messages of at most ``limit`` characters (and ``line_limit`` lines).

    The Markdown is split first (fence-safe, ``chunk_text``); a piece whose rendering or plain
    form is still too long, or has too many lines, is split again from its Markdown.
    """
    chunks: list[RenderedChunk] = []
    for piece in chunk_text(markdown, limit):
        chunks.extend(_fit(piece, flavour, limit, line_limit))
    return chunks


# --- fitting chunks -------------------------------------------------------------------------


def _line_count(text: str) -> int:
    return text.count("\n") + 1


def _size(text: str, flavour: Flavour) -> int:
    """Length as the platform counts it: Telegram counts UTF-16 code units (an emoji is 2)."""
    if flavour == "telegram_html":
        return len(text.encode("utf-16-le", "surrogatepass")) // 2
    return len(text)


def _rendered_and_plain(md: str, flavour: Flavour) -> tuple[str, str]:
    """``md`` rendered for ``flavour`` and as plain text; Telegram's two from one parse."""
    if flavour == "telegram_html":
        if _PLAIN_LINE.fullmatch(md):
            return _escape(md), md  # what the parse would give, without it

        root = SyntaxTreeNode(_MD.parse(md))
        return _Renderer(flavour).tree(root), _Renderer("plain").tree(root)
    text = render(md, flavour)
    return text, text if flavour == "plain" else render(md, "plain")


def _fit(md: str, flavour: Flavour, limit: int, line_limit: int | None) -> list[RenderedChunk]:
    text, plain = _rendered_and_plain(md, flavour)
    if not text.strip() and not plain.strip():
        return []
    longest = max(_size(text, flavour), _size(plain, flavour))
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
        return _fallback(plain, flavour, limit, line_limit)
    fitted: list[RenderedChunk] = []
    for piece in pieces:
        fitted.extend(_fit(piece, flavour, limit, line_limit))
    return fitted


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


def _fallback(
    plain: str, flavour: Flavour, limit: int, line_limit: int | None
) -> list[RenderedChunk]:
    """Plain text cut by length: the last resort when the Markdown cannot be split further."""
    # Escaping at most quintuples a character (``&`` → ``&amp;``); ZWSPs add one per mention
    # or backtick run.
    size = max(1, limit // 6)
    chunks: list[RenderedChunk] = []
    for piece in chunk_text(plain, size, markdown=False):
        if line_limit is not None:
            lines = piece.split("\n")
            parts = ["\n".join(lines[i : i + line_limit]) for i in range(0, len(lines), line_limit)]
        else:
            parts = [piece]
        for part in parts:
            if flavour == "slack":
                text = _BACKTICK_RUN.sub("``" + _ZWSP, _escape(part))
                chunks.append(RenderedChunk(text, part))
            elif flavour == "telegram_html":
                chunks.append(RenderedChunk(_escape(part), part))
            elif flavour == "discord":
                chunks.append(RenderedChunk(_neutralise_mentions(part), part))
            else:
                chunks.append(RenderedChunk(part, part))
    return chunks


# --- helpers --------------------------------------------------------------------------------


def _keep(text: str) -> str:
    return text


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escape_attr(text: str) -> str:
    return _escape(text).replace('"', "&quot;")


def _neutralise_mentions(text: str) -> str:
    return _MASS_MENTION.sub("@" + _ZWSP + r"\1", text)


def _display_width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _fresh_char(text: str, avoid: str = "") -> str:
    """A private-use character that occurs neither in ``text`` nor in ``avoid``."""
    for code in range(0xE000, 0xF900):
        ch = chr(code)
        if ch not in text and ch not in avoid:
            return ch
    raise ValueError("no private-use character left for a placeholder")


# --- the renderer ---------------------------------------------------------------------------


class _Renderer:
    """Renders the markdown-it syntax tree as Slack mrkdwn, Telegram HTML or plain text."""

    def __init__(self, flavour: Flavour) -> None:
        self.flavour = flavour
        self.markup = flavour != "plain"
        self._escape_text: Callable[[str], str] = _escape if self.markup else _keep
        # Emphasis already open: nested emphasis of the same kind adds no markers.
        self._open: set[str] = set()

    def document(self, markdown: str) -> str:
        return self.tree(SyntaxTreeNode(_MD.parse(markdown)))

    def tree(self, root: SyntaxTreeNode) -> str:
        """A parsed document (left unchanged, so one parse serves several renderers)."""
        return self.blocks(root.children, "\n\n").strip("\n")

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
            return self.code_block(node.content, node.info if kind == "fence" else "")
        if kind == "table":
            return self.table(node)
        if kind == "hr":
            return _RULE
        # html_block cannot occur (html is off); anything unknown keeps its text.
        return self._escape_text(node.content)

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

    def quote(self, body: str) -> str:
        if self.flavour == "telegram_html":
            return f"<blockquote>{body}</blockquote>"
        # Slack reads a literal ``>`` at a line start as a quote, like Markdown.
        return "\n".join("> " + line if line else ">" for line in body.split("\n"))

    def code_block(self, content: str, info: str) -> str:
        code = content.rstrip("\n")
        if self.flavour == "telegram_html":
            language = info.split()[0] if info.split() else ""
            if language and _CODE_LANGUAGE.fullmatch(language):
                return f'<pre><code class="language-{language}">{_escape(code)}</code></pre>'
            return f"<pre>{_escape(code)}</pre>"
        if self.flavour == "slack":
            return _slack_code_block(code)
        return code

    def table(self, node: SyntaxTreeNode) -> str:
        text = _table_text(node)
        if self.flavour == "telegram_html":
            return f"<pre>{_escape(text)}</pre>"
        if self.flavour == "slack":
            return _slack_code_block(text)
        return text

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
            if self.flavour == "telegram_html":
                return f"<code>{_escape(node.content)}</code>"
            if self.flavour == "slack":
                return f"`{_escape(node.content)}`"
            return node.content
        if kind in ("strong", "em", "s"):
            return self.emphasis(kind, node)
        if kind in ("link", "image"):
            return self.link(node)
        return self._escape_text(node.content)

    def text(self, content: str) -> str:
        if self.flavour != "slack":
            return self._escape_text(content)
        # Backticks that were escaped in the Markdown are literal: a run of three must not
        # read as a Slack code block, so it is broken by a ZWSP.
        content = _BACKTICK_RUN.sub("``" + _ZWSP, content)
        # Slack links bare URLs only when they are wrapped in angle brackets.
        parts: list[str] = []
        last = 0
        for match in _BARE_URL.finditer(content):
            url = _trim_url(match.group())
            parts.append(self._escape_text(content[last : match.start()]))
            parts.append(f"<{_slack_url(url)}>")
            last = match.start() + len(url)
        parts.append(self._escape_text(content[last:]))
        return "".join(parts)

    def bold(self, text: str) -> str:
        if not text or not self.markup:
            return text
        return f"<b>{text}</b>" if self.flavour == "telegram_html" else f"*{text}*"

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
        if self.flavour == "telegram_html":
            tag = {"strong": "b", "em": "i", "s": "s"}[kind]
            return f"<{tag}>{inner}</{tag}>"
        mark = {"strong": "*", "em": "_", "s": "~"}[kind]
        return f"{mark}{inner}{mark}"

    def link(self, node: SyntaxTreeNode) -> str:
        href = str(node.attrs.get("src" if node.type == "image" else "href", ""))
        shown = _MD.normalizeLinkText(href)
        label = _plain_inline(node.children)
        same = label in (shown, href) or f"mailto:{label}" == href
        if not self.markup:
            return label if same or not href else f"{label} ({shown})"
        if not _LINK_SCHEME.match(href):
            # Telegram and Slack refuse relative or unknown links: show the target as text.
            text = self.inlines(node.children)
            return text if same or not href else f"{text} ({self._escape_text(shown)})"
        if self.flavour == "slack":
            return f"<{_slack_url(href)}>" if same else f"<{_slack_url(href)}|{_escape(label)}>"
        inner = self.inlines(node.children) if node.type == "link" else _escape(label)
        return f'<a href="{_escape_attr(href)}">{inner or _escape(shown)}</a>'


def _plain_inline(nodes: list[SyntaxTreeNode]) -> str:
    return _Renderer("plain").inlines(nodes)


def _trim_url(url: str) -> str:
    """A bare URL without trailing punctuation or an unbalanced closing parenthesis."""
    while url and url[-1] in ".,:;!?'*_~":
        url = url[:-1]
    while url.endswith(")") and url.count(")") > url.count("("):
        url = url[:-1]
    return url


def _slack_code_block(code: str) -> str:
    """A Slack code block; a backtick run inside is broken by a ZWSP so it cannot end it."""
    return "```\n" + _BACKTICK_RUN.sub("``" + _ZWSP, _escape(code)) + "\n```"


def _slack_url(url: str) -> str:
    return _escape(url.replace("|", "%7C"))


def _table_text(node: SyntaxTreeNode) -> str:
    """A table as aligned plain text: cells padded, `` | `` between them, a rule under the head."""
    rows: list[list[str]] = []
    head_rows = 0
    for section in node.children:
        for row in section.children:
            cells = []
            for cell in row.children:
                inline = cell.children[0].children if cell.children else []
                cells.append(" ".join(_plain_inline(inline).split()))
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


# --- Slack and Discord ----------------------------------------------------------------------


def _render_slack(markdown: str) -> str:
    """mrkdwn, with Slack's own angle tokens swapped out before parsing and restored after."""
    tokens: list[str] = []
    open_mark = _fresh_char(markdown)
    close_mark = _fresh_char(markdown, open_mark)

    def hold(match: re.Match[str]) -> str:
        tokens.append(match.group())
        return f"{open_mark}{len(tokens) - 1}{close_mark}"

    held = _SLACK_TOKEN.sub(hold, markdown)
    rendered = _Renderer("slack").document(held)
    if not tokens:
        return rendered
    placeholder = re.compile(re.escape(open_mark) + r"(\d+)" + re.escape(close_mark))
    return placeholder.sub(lambda match: tokens[int(match.group(1))], rendered)


def defuse_slack_mass_mentions(mrkdwn: str) -> str:
    """``mrkdwn`` with every mention that notifies many people turned into plain text.

    ``<!channel>``, ``<!here>``, ``<!everyone>`` (also with a label, ``<!here|here>``) read
    ``@channel``, ``@here``, ``@everyone``; a user-group mention ``<!subteam^ID|@handle>`` reads
    ``@handle`` (``@usergroup`` without a label). Plain ``@channel`` text notifies nobody in a
    message posted without ``link_names``, so the result pings no one; user mentions
    (``<@U…>``), channel links and dates stay as they are.
    """
    text = _SLACK_SPECIAL_MENTION.sub(lambda match: "@" + match.group(1).lower(), mrkdwn)

    def group(match: re.Match[str]) -> str:
        handle = (match.group(1) or "").strip().lstrip("@")
        return "@" + (handle or "usergroup")

    return _SLACK_GROUP_MENTION.sub(group, text)


def _render_discord(markdown: str) -> str:
    """The source as it is, with top-level tables as code blocks, a fence left open closed and
    mass mentions broken."""
    lines = markdown.split("\n")
    root = SyntaxTreeNode(_MD.parse(markdown))
    # Replace from the bottom so earlier line numbers stay valid.
    for node in reversed(root.children):
        if node.type != "table" or node.map is None:
            continue
        start, end = node.map
        body = _table_text(node)
        longest_run = max((len(run) for run in re.findall(r"`+", body)), default=0)
        fence = "`" * max(3, longest_run + 1)
        lines[start:end] = [fence, *body.split("\n"), fence]
    text = "\n".join(lines)
    unclosed = open_fence_at_end(text)
    if unclosed is not None:
        text = text.rstrip("\n") + "\n" + unclosed.close_line
    return _neutralise_mentions(text)
