"""Discord's Markdown: the agent's source itself (Discord reads Markdown), with top-level
tables turned into code blocks, a fence left open closed, and ``@everyone``/``@here`` broken
by a zero-width space so they notify nobody."""

from __future__ import annotations

import re

from markdown_it.tree import SyntaxTreeNode

from ...text.fences import open_fence_at_end
from ...text.markup import MD, Renderer, table_text

__all__ = ["MARKDOWN", "DiscordMarkdown"]

_MASS_MENTION = re.compile(r"@(everyone|here)\b")
_ZWSP = "\u200b"


def _neutralise_mentions(text: str) -> str:
    return _MASS_MENTION.sub("@" + _ZWSP + r"\1", text)


class DiscordMarkdown(Renderer):
    """Discord's Markdown (see the module docstring)."""

    def render(self, markdown: str) -> str:
        lines = markdown.split("\n")
        root = SyntaxTreeNode(MD.parse(markdown))
        # Replace from the bottom so earlier line numbers stay valid.
        for node in reversed(root.children):
            if node.type != "table" or node.map is None:
                continue
            start, end = node.map
            body = table_text(node)
            longest_run = max((len(run) for run in re.findall(r"`+", body)), default=0)
            fence = "`" * max(3, longest_run + 1)
            lines[start:end] = [fence, *body.split("\n"), fence]
        text = "\n".join(lines)
        unclosed = open_fence_at_end(text)
        if unclosed is not None:
            text = text.rstrip("\n") + "\n" + unclosed.close_line
        return _neutralise_mentions(text)

    def fallback(self, plain: str) -> str:
        return _neutralise_mentions(plain)


MARKDOWN = DiscordMarkdown()
