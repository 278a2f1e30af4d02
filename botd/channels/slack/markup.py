"""Slack's mrkdwn: the agent's Markdown as Slack writes it.

``*bold*``, ``_italic_``, ``~strike~``, ``<url|label>``, headings as bold lines, ``•``/numbered
list lines, ``>`` quotes, code and tables as code blocks. ``&``, ``<``, ``>`` are escaped
everywhere except Slack's own angle tokens (``<@U…>``, ``<!here>``, ``<https://…|…>``), which
are kept verbatim. ``defuse_mass_mentions`` turns the tokens that notify a whole channel or
user group into plain readable text.
"""

from __future__ import annotations

import re

from markdown_it.tree import SyntaxTreeNode

from ...text.markup import MarkupWriter, Renderer, escape_html

__all__ = ["MRKDWN", "SlackMrkdwn", "defuse_mass_mentions"]

# Slack's own angle tokens: user/channel/group mentions, special mentions and links.
_SLACK_TOKEN = re.compile(
    r"<(?:[@#][A-Z0-9][A-Za-z0-9_]*(?:\|[^<>\n]*)?"
    r"|![a-z][^<>\n]*"
    r"|(?:https?|mailto|tel|slack):[^<>\s|]+(?:\|[^<>\n]*)?)>"
)
# Private-use characters are excluded: Slack token placeholders use them.
_BARE_URL = re.compile(r"https?://[^\s<>\"\ue000-\uf8ff]+")
# Slack's special mentions and user-group mentions, with or without a label.
_SPECIAL_MENTION = re.compile(r"<!(channel|here|everyone|group)(?:\|[^<>\n]*)?>", re.I)
_GROUP_MENTION = re.compile(r"<!subteam\^[^<>|\n]*(?:\|([^<>\n]*))?>", re.I)
_ZWSP = "\u200b"
_BACKTICK_RUN = re.compile("``(?=`)")
_MARKS = {"strong": "*", "em": "_", "s": "~"}


def _break_backtick_runs(text: str) -> str:
    """A run of three backticks broken by a ZWSP, so it cannot open or end a code block."""
    return _BACKTICK_RUN.sub("``" + _ZWSP, text)


def _url(url: str) -> str:
    return escape_html(url.replace("|", "%7C"))


def _trim_url(url: str) -> str:
    """A bare URL without trailing punctuation or an unbalanced closing parenthesis."""
    while url and url[-1] in ".,:;!?'*_~":
        url = url[:-1]
    while url.endswith(")") and url.count(")") > url.count("("):
        url = url[:-1]
    return url


def _fresh_char(text: str, avoid: str = "") -> str:
    """A private-use character that occurs neither in ``text`` nor in ``avoid``."""
    for code in range(0xE000, 0xF900):
        ch = chr(code)
        if ch not in text and ch not in avoid:
            return ch
    raise ValueError("no private-use character left for a placeholder")


class _MrkdwnWriter(MarkupWriter):
    markup = True

    def escape(self, text: str) -> str:
        return escape_html(text)

    def emphasised(self, kind: str, inner: str) -> str:
        mark = _MARKS[kind]
        return f"{mark}{inner}{mark}"

    def preformatted(self, code: str, info: str = "") -> str:
        return "```\n" + _break_backtick_runs(escape_html(code)) + "\n```"

    def code_inline(self, content: str) -> str:
        return f"`{escape_html(content)}`"

    def text(self, content: str) -> str:
        # Backticks that were escaped in the Markdown are literal: a run of three must not
        # read as a Slack code block, so it is broken by a ZWSP.
        content = _break_backtick_runs(content)
        # Slack links bare URLs only when they are wrapped in angle brackets.
        parts: list[str] = []
        last = 0
        for match in _BARE_URL.finditer(content):
            url = _trim_url(match.group())
            parts.append(escape_html(content[last : match.start()]))
            parts.append(f"<{_url(url)}>")
            last = match.start() + len(url)
        parts.append(escape_html(content[last:]))
        return "".join(parts)

    def hyperlink(self, node: SyntaxTreeNode, href: str, shown: str, label: str, same: bool) -> str:
        return f"<{_url(href)}>" if same else f"<{_url(href)}|{escape_html(label)}>"


class SlackMrkdwn(Renderer):
    """Slack's mrkdwn (see the module docstring)."""

    def render(self, markdown: str) -> str:
        """mrkdwn, with Slack's own angle tokens swapped out before parsing and restored after."""
        tokens: list[str] = []
        open_mark = _fresh_char(markdown)
        close_mark = _fresh_char(markdown, open_mark)

        def hold(match: re.Match[str]) -> str:
            tokens.append(match.group())
            return f"{open_mark}{len(tokens) - 1}{close_mark}"

        held = _SLACK_TOKEN.sub(hold, markdown)
        rendered = _MrkdwnWriter().document(held)
        if not tokens:
            return rendered
        placeholder = re.compile(re.escape(open_mark) + r"(\d+)" + re.escape(close_mark))
        return placeholder.sub(lambda match: tokens[int(match.group(1))], rendered)

    def fallback(self, plain: str) -> str:
        return _break_backtick_runs(escape_html(plain))


MRKDWN = SlackMrkdwn()


def defuse_mass_mentions(mrkdwn: str) -> str:
    """``mrkdwn`` with every mention that notifies many people turned into plain text.

    ``<!channel>``, ``<!here>``, ``<!everyone>`` (also with a label, ``<!here|here>``) read
    ``@channel``, ``@here``, ``@everyone``; a user-group mention ``<!subteam^ID|@handle>`` reads
    ``@handle`` (``@usergroup`` without a label). Plain ``@channel`` text notifies nobody in a
    message posted without ``link_names``, so the result pings no one; user mentions
    (``<@U…>``), channel links and dates stay as they are.
    """
    text = _SPECIAL_MENTION.sub(lambda match: "@" + match.group(1).lower(), mrkdwn)

    def group(match: re.Match[str]) -> str:
        handle = (match.group(1) or "").strip().lstrip("@")
        return "@" + (handle or "usergroup")

    return _GROUP_MENTION.sub(group, text)
