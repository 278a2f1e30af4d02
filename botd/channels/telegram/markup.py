"""Telegram's HTML: the agent's Markdown written with only the tags Telegram takes.

``<b>``, ``<i>``, ``<s>``, ``<code>``, ``<pre>`` (with ``<code class="language-…">`` for a
fence's language), ``<blockquote>`` and ``<a href>``; every other ``<``, ``>``, ``&`` is
escaped. Tables are aligned text in a ``<pre>``. Length is counted as Telegram counts it, in
UTF-16 code units (an emoji is 2).
"""

from __future__ import annotations

import re

from markdown_it.tree import SyntaxTreeNode

from ...text.markup import MD, MarkupWriter, Renderer, escape_html

__all__ = ["HTML", "TelegramHtml"]

_CODE_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]+")
# One line that Markdown leaves as it is: no character that starts inline syntax (or an
# entity, an escape, a line break), nothing at its start that opens a block (a heading, a
# list, a quote, an indented code block), no space at either end (a paragraph is trimmed).
_PLAIN_LINE = re.compile(
    r"[^\s\x00-\x1f\x7f-\x9f\\`*_\[\]<>&~|#=+\-0-9]"
    r"(?:[^\x00-\x1f\x7f-\x9f\u2028\u2029\\`*_\[\]<>&~|]*"
    r"[^\s\x00-\x1f\x7f-\x9f\\`*_\[\]<>&~|])?"
)
_TAGS = {"strong": "b", "em": "i", "s": "s"}


class _HtmlWriter(MarkupWriter):
    markup = True

    def escape(self, text: str) -> str:
        return escape_html(text)

    def emphasised(self, kind: str, inner: str) -> str:
        tag = _TAGS[kind]
        return f"<{tag}>{inner}</{tag}>"

    def quote(self, body: str) -> str:
        return f"<blockquote>{body}</blockquote>"

    def preformatted(self, code: str, info: str = "") -> str:
        language = info.split()[0] if info.split() else ""
        if language and _CODE_LANGUAGE.fullmatch(language):
            return f'<pre><code class="language-{language}">{escape_html(code)}</code></pre>'
        return f"<pre>{escape_html(code)}</pre>"

    def code_inline(self, content: str) -> str:
        return f"<code>{escape_html(content)}</code>"

    def hyperlink(self, node: SyntaxTreeNode, href: str, shown: str, label: str, same: bool) -> str:
        inner = self.inlines(node.children) if node.type == "link" else escape_html(label)
        href_attr = escape_html(href).replace('"', "&quot;")
        return f'<a href="{href_attr}">{inner or escape_html(shown)}</a>'


class TelegramHtml(Renderer):
    """Telegram's HTML (see the module docstring)."""

    def render(self, markdown: str) -> str:
        return _HtmlWriter().document(markdown)

    def size(self, text: str) -> int:
        return len(text.encode("utf-16-le", "surrogatepass")) // 2

    def rendered_and_plain(self, markdown: str) -> tuple[str, str]:
        """Both forms from one parse; a line Markdown leaves as it is needs none."""
        if _PLAIN_LINE.fullmatch(markdown):
            return escape_html(markdown), markdown  # what the parse would give, without it
        root = SyntaxTreeNode(MD.parse(markdown))
        return _HtmlWriter().tree(root), MarkupWriter().tree(root)

    def fallback(self, plain: str) -> str:
        return escape_html(plain)


HTML = TelegramHtml()
