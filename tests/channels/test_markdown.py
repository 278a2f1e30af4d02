"""Markdown rendering per platform and chunking of rendered replies: each platform's renderer
(``botd.channels.<platform>.markup``) and the plain one (``botd.text.markup``)."""

from __future__ import annotations

import re
from typing import Literal, get_args

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from botd.channels.discord.adapter import LINE_LIMIT as DISCORD_LINE_LIMIT
from botd.channels.discord.adapter import TEXT_LIMIT as DISCORD_LIMIT
from botd.channels.discord.markup import MARKDOWN
from botd.channels.slack.adapter import TEXT_LIMIT as SLACK_LIMIT
from botd.channels.slack.markup import MRKDWN
from botd.channels.telegram.adapter import TEXT_LIMIT as TELEGRAM_LIMIT
from botd.channels.telegram.markup import HTML
from botd.text.chunks import chunk_text
from botd.text.fences import fences_balanced
from botd.text.markup import PLAIN, RenderedChunk, Renderer

Flavour = Literal["slack", "telegram_html", "discord", "plain"]
"""The renderers under test, by name."""
FLAVOURS: tuple[Flavour, ...] = get_args(Flavour)
RENDERERS: dict[Flavour, Renderer] = {
    "slack": MRKDWN,
    "telegram_html": HTML,
    "discord": MARKDOWN,
    "plain": PLAIN,
}


def render(markdown: str, flavour: Flavour) -> str:
    return RENDERERS[flavour].render(markdown)


def render_chunks(
    markdown: str, flavour: Flavour, limit: int, *, line_limit: int | None = None
) -> list[RenderedChunk]:
    return RENDERERS[flavour].chunks(markdown, limit, line_limit=line_limit)


ZWSP = "\u200b"

# --- a small checker for Telegram's HTML subset -------------------------------------------

_ALLOWED = {"b", "i", "u", "s", "code", "pre", "a", "blockquote", "tg-spoiler"}
_TAG = re.compile(r'<(/?)([a-z-]+)((?: [a-z]+="[^"<>]*")*)>')
_ENTITY = re.compile(r"&(?:amp|lt|gt|quot);")


def telegram_problems(text: str) -> list[str]:
    """Why Telegram would refuse ``text`` with "can't parse entities" (empty: it would not)."""
    problems: list[str] = []
    stack: list[str] = []
    pos = 0
    while pos < len(text):
        lt = text.find("<", pos)
        segment = text[pos : len(text) if lt < 0 else lt]
        if ">" in segment:
            problems.append(f"raw '>' in {segment!r}")
        for amp in re.finditer("&", segment):
            if not _ENTITY.match(segment, amp.start()):
                problems.append(f"raw '&' in {segment!r}")
        if lt < 0:
            break
        tag = _TAG.match(text, lt)
        if tag is None:
            problems.append(f"raw '<' at {lt}: {text[lt : lt + 20]!r}")
            pos = lt + 1
            continue
        closing, name, attrs = tag.groups()
        if name not in _ALLOWED:
            problems.append(f"tag {name!r} not allowed")
        elif closing:
            if not stack or stack[-1] != name:
                problems.append(f"</{name}> closes {stack[-1:]}")
            else:
                stack.pop()
        else:
            if name == "a" and not attrs.startswith(' href="'):
                problems.append("<a> without href")
            if name == "code" and attrs and not (stack and stack[-1] == "pre"):
                problems.append("<code class> outside <pre>")
            if name not in ("a", "code") and attrs:
                problems.append(f"<{name}> with attributes")
            if stack and stack[-1] in ("pre", "code") and name != "code":
                problems.append(f"<{name}> inside <{stack[-1]}>")
            stack.append(name)
        pos = tag.end()
    if stack:
        problems.append(f"unclosed {stack}")
    return problems


def test_checker_catches_bad_html() -> None:
    assert telegram_problems('<b>x</b> &amp; <pre><code class="language-py">y</code></pre>') == []
    assert telegram_problems("<b>x")
    assert telegram_problems("<script>x</script>")
    assert telegram_problems("a < b")
    assert telegram_problems("a & b")
    assert telegram_problems("<b><i>x</b></i>")


def alnum(text: str) -> str:
    """The letters and digits of ``text`` in order: the words, ignoring where they were cut."""
    return "".join(re.findall(r"[A-Za-z0-9]", text))


# --- Slack ----------------------------------------------------------------------------------


def test_slack_basic_markup() -> None:
    out = render("**bold** _it_ ~~gone~~ `a<b>&c` [x](https://e.com/?a=1&b=2)", "slack")
    assert out == "*bold* _it_ ~gone~ `a&lt;b&gt;&amp;c` <https://e.com/?a=1&amp;b=2|x>"


def test_slack_escapes_text_and_raw_html() -> None:
    out = render("a < b && c > d <script>alert(1)</script> <b>hi</b>", "slack")
    assert out == (
        "a &lt; b &amp;&amp; c &gt; d &lt;script&gt;alert(1)&lt;/script&gt; &lt;b&gt;hi&lt;/b&gt;"
    )


def test_slack_escaped_backticks_never_open_a_code_block() -> None:
    # Found by test_chunks_respect_limits_and_markup: "\\```" is three literal backticks.
    for chunk in render_chunks("\\```\n", "slack", 40):
        assert "```" not in chunk.text
        assert chunk.text.replace(ZWSP, "") == "```" == chunk.plain


def test_slack_tokens_kept_verbatim() -> None:
    tokens = [
        "<@U123ABC>",
        "<#C123>",
        "<#C123|general>",
        "<!here>",
        "<!channel>",
        "<!subteam^S123|@team>",
        "<https://example.com/a?b=1&c=2|the site>",
        "<mailto:a@b.com>",
    ]
    out = render("hi " + " & ".join(tokens) + " <x>", "slack")
    assert out == "hi " + " &amp; ".join(tokens) + " &lt;x&gt;"


def test_slack_tokens_inside_emphasis_and_lists() -> None:
    out = render("- **ping <@U1>** now\n- <!here>", "slack")
    assert out == "• *ping <@U1>* now\n• <!here>"


def test_slack_fenced_code_drops_language_and_escapes() -> None:
    out = render("```python\nif a < b and c > d & e:\n    pass\n```", "slack")
    assert out == "```\nif a &lt; b and c &gt; d &amp; e:\n    pass\n```"


def test_slack_links_with_parentheses_and_bare_urls() -> None:
    src = "[x](https://en.wikipedia.org/wiki/Foo_(bar)) and see https://e.com/a_(b)?q=1&r=2."
    out = render(src, "slack")
    assert out == (
        "<https://en.wikipedia.org/wiki/Foo_(bar)|x> and see <https://e.com/a_(b)?q=1&amp;r=2>."
    )


def test_slack_structure() -> None:
    src = "# Title *x*\n\n1. one\n2. two\n   - sub\n\n> quoted **b**\n\n---\n\ntext"
    out = render(src, "slack")
    assert out == "*Title _x_*\n\n1. one\n2. two\n   • sub\n\n> quoted *b*\n\n──────────\n\ntext"


def test_slack_nested_emphasis_is_not_doubled() -> None:
    assert render("**bold **inner** bold**", "slack") == "*bold inner bold*"
    assert render("***both***", "slack") in ("_*both*_", "*_both_*")


def test_slack_table_as_code_block() -> None:
    out = render("| a | b |\n|---|---|\n| c&d | <e> |", "slack")
    assert out == "```\na   | b\n----+----\nc&amp;d | &lt;e&gt;\n```"


# --- Telegram -------------------------------------------------------------------------------


def test_telegram_basic_markup() -> None:
    out = render("**b** *i* ~~s~~ `x<y` [l](https://e.com/?a=1&b=2)", "telegram_html")
    assert out == (
        '<b>b</b> <i>i</i> <s>s</s> <code>x&lt;y</code> <a href="https://e.com/?a=1&amp;b=2">l</a>'
    )


def test_telegram_escapes_raw_html_from_the_model() -> None:
    out = render('<script>alert("x")</script> <b>bold?</b> a@b <c@d.com>', "telegram_html")
    assert "<script>" not in out and "<b>bold?</b>" not in out
    assert "&lt;script&gt;" in out and "&lt;b&gt;bold?&lt;/b&gt;" in out
    assert telegram_problems(out) == []


def test_telegram_pre_with_language() -> None:
    out = render("```python\na < b & c\n```\n\n```\nplain\n```", "telegram_html")
    assert out == (
        '<pre><code class="language-python">a &lt; b &amp; c</code></pre>\n\n<pre>plain</pre>'
    )


def test_telegram_odd_language_is_dropped() -> None:
    out = render('```"><script>\nx\n```', "telegram_html")
    assert out == "<pre>x</pre>"


def test_telegram_headings_lists_quotes() -> None:
    out = render("## Head <x>\n\n- a\n- b\n\n> q", "telegram_html")
    assert out == "<b>Head &lt;x&gt;</b>\n\n• a\n• b\n\n<blockquote>q</blockquote>"


def test_telegram_table_as_pre() -> None:
    out = render("| name | n |\n|:--|--:|\n| <a> | 10 |\n| 😀 | 2 |", "telegram_html")
    assert out == "<pre>name | n\n-----+---\n&lt;a&gt;  | 10\n😀   | 2</pre>"
    assert telegram_problems(out) == []


def test_telegram_relative_link_is_text() -> None:
    assert render("[doc](docs/a.md)", "telegram_html") == "doc (docs/a.md)"


def test_telegram_link_with_quotes_in_url() -> None:
    out = render('[x](https://e.com/?q="a")', "telegram_html")
    assert telegram_problems(out) == []
    assert out.startswith('<a href="https://e.com/?q=%22a%22">')


# --- Discord --------------------------------------------------------------------------------


def test_discord_passthrough() -> None:
    src = (
        "**b** _i_ ~~s~~ `a<b>&` [x](https://en.wikipedia.org/wiki/Foo_(bar)) <@123>\n```py\nx\n```"
    )
    assert render(src, "discord") == src


def test_discord_neutralises_mass_mentions() -> None:
    out = render("hey @everyone and @here, not @hereford", "discord")
    assert out == f"hey @{ZWSP}everyone and @{ZWSP}here, not @hereford"


def test_discord_table_becomes_code_block() -> None:
    src = "before\n\n| a | b |\n|---|---|\n| c | d |\n\nafter"
    assert render(src, "discord") == "before\n\n```\na | b\n--+--\nc | d\n```\n\nafter"


def test_discord_closes_a_fence_left_open() -> None:
    out = render("text\n```\ncode", "discord")
    assert out == "text\n```\ncode\n```"
    assert fences_balanced(out)


# --- plain ----------------------------------------------------------------------------------


def test_plain_strips_markup() -> None:
    src = (
        "# T\n\n**b** _i_ `c<d>` [x](https://e.com) <https://f.com> <@U1>\n\n- a\n\n```\nz & y\n```"
    )
    out = render(src, "plain")
    assert out == "T\n\nb i c<d> x (https://e.com) https://f.com <@U1>\n\n• a\n\nz & y"


# --- nasty inputs, every flavour ------------------------------------------------------------

NASTY = [
    "a < b > c & d &amp; &lt;",
    "`<tag> & more` and\n```\n<div>&nbsp;</div>\n```",
    "***bold italic*** **bold _it **deep** x_ y**",
    "[x](https://en.wikipedia.org/wiki/Foo_(bar)) https://e.com/(a)_b.",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "emoji 😀👍🏽 家族 ✓",
    "x" * 10_000,
    "**bold without close and _open",
    "text\n```python\nnever closes <\n",
    "<script>alert(1)</script><b>b</b><img src=x onerror=y>",
    "<@U1> <#C1|c> <!here> @everyone @here",
    "",
    "   \n\n  ",
    "> quote\n>> nested\n\n1) one\n2) two",
]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("src", NASTY, ids=range(len(NASTY)))
def test_nasty_inputs(src: str, flavour: Flavour) -> None:
    limit = {"slack": SLACK_LIMIT, "telegram_html": TELEGRAM_LIMIT}.get(flavour, DISCORD_LIMIT)
    line_limit = DISCORD_LINE_LIMIT if flavour == "discord" else None
    chunks = render_chunks(src, flavour, limit, line_limit=line_limit)
    assert_chunks_ok(chunks, flavour, limit, line_limit)
    assert alnum("".join(c.plain for c in chunks)) == alnum(render(src, "plain"))
    if flavour == "discord":
        assert all("@everyone" not in c.text and "@here" not in c.text for c in chunks)
    if flavour == "slack":
        assert "<script>" not in "".join(c.text for c in chunks)


def test_long_line_without_spaces_is_cut_for_every_flavour() -> None:
    src = "&" * 10_000
    for flavour, limit in (("telegram_html", 4096), ("slack", 4000), ("discord", 2000)):
        chunks = render_chunks(src, flavour, limit)
        assert all(len(c.text) <= limit for c in chunks)
        assert "".join(c.plain for c in chunks) == src


def test_chunks_fit_after_escaping_expands() -> None:
    src = "<>&" * 2000  # 6000 chars, rendering to 4 or 5 times as many
    chunks = render_chunks(src, "telegram_html", TELEGRAM_LIMIT)
    assert len(chunks) > 2
    assert all(len(c.text) <= TELEGRAM_LIMIT and not telegram_problems(c.text) for c in chunks)
    # A cut mid-line may start a chunk with ``>``, which then reads as a quote ("> ").
    assert "".join("".join(c.plain for c in chunks).split()) == src


def test_discord_line_limit() -> None:
    src = "\n".join(f"line {i}" for i in range(60))
    chunks = render_chunks(src, "discord", DISCORD_LIMIT, line_limit=DISCORD_LINE_LIMIT)
    assert all(c.text.count("\n") < DISCORD_LINE_LIMIT for c in chunks)
    assert alnum("".join(c.text for c in chunks)) == alnum(src)


def test_discord_line_limit_inside_a_fence() -> None:
    src = "```py\n" + "\n".join(f"x{i} = {i}" for i in range(50)) + "\n```"
    chunks = render_chunks(src, "discord", DISCORD_LIMIT, line_limit=DISCORD_LINE_LIMIT)
    assert len(chunks) > 2
    for chunk in chunks:
        assert chunk.text.count("\n") < DISCORD_LINE_LIMIT
        assert chunk.text.startswith("```py\n") and chunk.text.endswith("```")
        assert fences_balanced(chunk.text)
    assert alnum("".join(c.plain for c in chunks)) == alnum(render(src, "plain"))


def test_plain_chunks_are_the_plain_text() -> None:
    chunks = render_chunks("**a** " * 10, "plain", 100)
    assert chunks == [RenderedChunk("a " * 9 + "a", "a " * 9 + "a")]


# --- a 9,000-character answer ---------------------------------------------------------------


def long_answer() -> str:
    words = iter(f"w{n:04d}" for n in range(5000))
    parts = []
    for _ in range(16):
        parts.append(" ".join(next(words) for _ in range(60)) + " & <x> **" + next(words) + "**")
    code = "\n".join(f"    {next(words)} = a < b && c > d" for _ in range(80))
    parts.insert(6, "```python\n" + code + "\n```")
    for _ in range(8):
        parts.append("- " + " ".join(next(words) for _ in range(20)))
    text = "\n\n".join(parts)
    assert len(text) >= 9000
    return text


@pytest.mark.parametrize(
    ("flavour", "limit", "line_limit"),
    [
        ("telegram_html", TELEGRAM_LIMIT, None),
        ("slack", SLACK_LIMIT, None),
        ("discord", DISCORD_LIMIT, DISCORD_LINE_LIMIT),
        ("plain", TELEGRAM_LIMIT, None),
    ],
)
def test_long_answer_with_code_block(flavour: Flavour, limit: int, line_limit: int | None) -> None:
    src = long_answer()
    chunks = render_chunks(src, flavour, limit, line_limit=line_limit)
    assert len(chunks) > 1
    assert_chunks_ok(chunks, flavour, limit, line_limit)
    source_words = re.findall(r"w\d{4}", src)
    for texts in ([c.text for c in chunks], [c.plain for c in chunks]):
        found = [word for text in texts for word in re.findall(r"w\d{4}", text)]
        assert sorted(found) == sorted(source_words)
        assert found == source_words  # in order, each exactly once


# --- properties -----------------------------------------------------------------------------


def assert_chunks_ok(
    chunks: list[RenderedChunk], flavour: Flavour, limit: int, line_limit: int | None
) -> None:
    for chunk in chunks:
        assert chunk.text.strip()
        assert len(chunk.text) <= limit and len(chunk.plain) <= limit
        if line_limit is not None:
            assert chunk.text.count("\n") < line_limit
            assert chunk.plain.count("\n") < line_limit
        if flavour == "telegram_html":
            assert telegram_problems(chunk.text) == []
        elif flavour == "slack":
            # Code blocks the renderer writes: a line of three backticks opens and closes them.
            assert chunk.text.split("\n").count("```") % 2 == 0
        elif flavour == "discord":
            assert fences_balanced(chunk.text)


WORD = st.text(alphabet="abcxyzABC", min_size=1, max_size=12)
MARKUP = st.sampled_from(
    [
        *(" ", " ", "\n", "\n\n", "*", "**", "_", "~~", "`", "```\n", "\n```\n", "<", ">", "&"),
        *("&&", "# ", "\n- ", "\n> ", "[", "](https://ex.com/a_(b))", "https://e.com/x?y=1&z=(2)"),
        *("@everyone", "@here", "<@U1>", "<!here>", "😀", "\\", "    ", "---", "<b>", "</b>"),
    ]
)
TABLE = st.lists(st.tuples(WORD, WORD), min_size=1, max_size=4).map(
    lambda rows: "\n\n| h | k |\n|---|--:|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows) + "\n"
)
MARKDOWNISH = st.lists(st.one_of(WORD, WORD, MARKUP, TABLE), max_size=80).map("".join)


@settings(max_examples=200, deadline=None)
@given(
    src=MARKDOWNISH,
    flavour=st.sampled_from(FLAVOURS),
    limit=st.sampled_from([40, 80, 200, 1000]),
    line_limit=st.sampled_from([None, 4, 17]),
)
def test_chunks_respect_limits_and_markup(
    src: str, flavour: Flavour, limit: int, line_limit: int | None
) -> None:
    chunks = render_chunks(src, flavour, limit, line_limit=line_limit)
    assert_chunks_ok(chunks, flavour, limit, line_limit)


_FENCE_WITH_INFO = re.compile(
    r"^(?:[ \t]*(?:>|[-+*]|\d+[.)]))*[ \t]*(?:`{3,}|~{3,})[^\n]*?[^\s`~]", re.MULTILINE
)
"""A fence with an info string, at a line's start or inside block quotes and list items."""


@settings(max_examples=200, deadline=None)
@given(src=MARKDOWNISH, limit=st.sampled_from([40, 100, 4096]))
def test_plain_keeps_every_word(src: str, limit: int) -> None:
    # A fence's info string (its language) is markup: plain text drops it.
    assume(not _FENCE_WITH_INFO.search(src))
    chunks = render_chunks(src, "plain", limit)
    assert alnum("".join(c.text for c in chunks)) == alnum(src)


@settings(max_examples=200, deadline=None)
@given(src=MARKDOWNISH)
def test_telegram_render_is_valid_html(src: str) -> None:
    assert telegram_problems(render(src, "telegram_html")) == []


@settings(max_examples=200, deadline=None)
@given(src=MARKDOWNISH)
def test_a_telegram_chunk_and_its_plain_form_are_the_renderings_of_the_markdown(src: str) -> None:
    # The two come from one parse: each is what rendering the markdown on its own gives.
    assert_rendered_as_a_whole(src)


def assert_rendered_as_a_whole(src: str) -> None:
    """``src`` fits one message: its chunk is the rendering of the one piece ``chunk_text``
    makes of it (which closes a fence left open, trimming the line it ends)."""
    chunks = render_chunks(src, "telegram_html", 1_000_000)
    (piece,) = chunk_text(src, 1_000_000) or [""]
    if not chunks:
        assert not render(piece, "telegram_html").strip() and not render(piece, "plain").strip()
        return
    assert chunks == [RenderedChunk(render(piece, "telegram_html"), render(piece, "plain"))]


ONE_LINE = st.text(
    alphabet=st.sampled_from(
        [
            *"aZ09 .,:;!?-+=#>*_`~|[]()<>&\\\"'@/{}^%$",
            *("\t", "\n", "\r", "\x00", "\x0b", "\x1f", "\x85", "\xa0", "\u2028", "\u3000"),
            *("é", "😀", "\ud7ff"),
        ]
    ),
    max_size=12,
)


@settings(max_examples=500, deadline=None)
@given(src=ONE_LINE)
def test_a_short_line_renders_as_the_full_parse_does(src: str) -> None:
    # Plain lines skip the parse: whichever way a line goes, the result is the parse's.
    assert_rendered_as_a_whole(src)


def test_a_plain_sentence_is_sent_as_written() -> None:
    line = 'Answer to m1-2. It\'s done: 3 of 4 (75%), see ./x/y, "ok"? Yes! #1 @bob'
    assert render_chunks(line, "telegram_html", 4096) == [RenderedChunk(line, line)]


def test_telegram_chunks_fit_in_utf16_units() -> None:
    # Telegram counts UTF-16 code units: every emoji here is two of them.
    markdown = " ".join(f"😀{n}" for n in range(3000))
    chunks = render_chunks(markdown, "telegram_html", TELEGRAM_LIMIT)
    assert len(chunks) > 1
    for chunk in chunks:
        assert len(chunk.text.encode("utf-16-le")) // 2 <= TELEGRAM_LIMIT
        assert len(chunk.plain.encode("utf-16-le")) // 2 <= TELEGRAM_LIMIT
    assert " ".join(c.plain for c in chunks).split() == markdown.split()
