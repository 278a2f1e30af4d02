"""The README and the pages under docs/: every relative link points at a file that exists
(and, with a ``#fragment``, at a heading of that page), and every page can be reached from
the README. Links are read with markdown-it-py, so code blocks and code spans are left alone.
The Slack app manifest in docs/slack.md grants what ``botd doctor`` checks a bot token for.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml
from markdown_it import MarkdownIt
from markdown_it.token import Token

from tests.fakes.slack_api import FakeSlack
from tests.support.daemon_process import BOTD, HANG_GUARD, daemon_env

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))

_PARSER = MarkdownIt("commonmark").enable("table")


def _inline_text(token: Token) -> str:
    return "".join(child.content for child in token.children or [])


def anchors(text: str) -> set[str]:
    """The fragments GitHub gives a page's headings: lower case, punctuation dropped, spaces
    made ``-``; a repeated heading gets ``-1``, ``-2``, ... after the first."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    tokens = _PARSER.parse(text)
    for opening, inline in itertools.pairwise(tokens):
        if opening.type != "heading_open":
            continue
        slug = re.sub(r"[^\w\- ]", "", _inline_text(inline).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(text: str) -> list[str]:
    """Every link target of a markdown text, in order (code blocks and spans hold none)."""
    targets: list[str] = []

    def walk(tokens: list[Token]) -> None:
        for token in tokens:
            if token.type == "link_open":
                targets.append(str(token.attrGet("href")))
            walk(token.children or [])

    walk(_PARSER.parse(text))
    return targets


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` that lead nowhere, each with why."""
    problems: list[str] = []
    for target in links(page.read_text(encoding="utf-8")):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc:
            continue  # a web address: not checked here
        path = unquote(parts.path)
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            problems.append(f"{target}: no file {destination}")
            continue
        if not parts.fragment or destination.suffix != ".md":
            continue
        if unquote(parts.fragment) not in anchors(destination.read_text(encoding="utf-8")):
            problems.append(f"{target}: no heading #{parts.fragment} in {destination.name}")
    return problems


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    assert PAGES, "no pages under docs/"
    problems = [
        f"{page.relative_to(ROOT)}: {p}" for page in [README, *PAGES] for p in broken_links(page)
    ]
    assert problems == []


def test_every_docs_page_is_reachable_from_the_readme() -> None:
    reached: set[Path] = set()
    todo = [README]
    while todo:
        page = todo.pop()
        if page in reached:
            continue
        reached.add(page)
        for target in links(page.read_text(encoding="utf-8")):
            parts = urlsplit(target)
            if parts.scheme or parts.netloc or not parts.path.endswith(".md"):
                continue
            found = (page.parent / unquote(parts.path)).resolve()
            if found.exists():
                todo.append(found)
    assert [p.name for p in PAGES if p.resolve() not in reached] == []


def test_the_check_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Under systemd\n\n## Under systemd\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n## `botd doctor`: probes\n\n"
        "[ok](other.md#under-systemd) [again](other.md#under-systemd-1) [here](#botd-doctor-probes)"
        " [web](https://example.com/x.md) [gone](missing.md) [no heading](other.md#upgrade)\n\n"
        "    [in code](also-missing.md)\n\n`[span](missing-too.md)`\n"
    )
    assert broken_links(page) == [
        f"missing.md: no file {tmp_path / 'missing.md'}",
        "other.md#upgrade: no heading #upgrade in other.md",
    ]


def slack_manifest() -> Any:
    """The app manifest docs/slack.md tells operators to paste: its one YAML code block."""
    fences = [
        token.content
        for token in _PARSER.parse((ROOT / "docs" / "slack.md").read_text(encoding="utf-8"))
        if token.type == "fence" and token.info.strip() == "yaml"
    ]
    assert len(fences) == 1, fences
    return yaml.safe_load(fences[0])


def test_the_slack_manifest_subscribes_to_the_messages_its_scopes_read() -> None:
    manifest = slack_manifest()
    scopes = manifest["oauth_config"]["scopes"]["bot"]
    events = manifest["settings"]["event_subscriptions"]["bot_events"]
    history = [scope.removesuffix(":history") for scope in scopes if scope.endswith(":history")]
    assert sorted(events) == sorted(["app_mention", *(f"message.{kind}" for kind in history)])
    assert manifest["settings"]["socket_mode_enabled"] is True
    # The slash command botd's pages name, and the DM tab people write to the bot in.
    assert [c["command"] for c in manifest["features"]["slash_commands"]] == ["/botd"]
    assert manifest["features"]["app_home"]["messages_tab_enabled"] is True


async def test_botd_doctor_finds_nothing_missing_in_the_slack_manifest_s_scopes(
    tmp_path: Path,
) -> None:
    scopes = slack_manifest()["oauth_config"]["scopes"]["bot"]
    async with FakeSlack() as slack:
        slack.scopes = list(scopes)
        config = tmp_path / "botd.yaml"
        config.write_text(
            f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n"
            "health: {enabled: false}\n"
            "channels:\n  slack:\n    bot_token: ${S_BOT}\n    app_token: ${S_APP}\n"
            f"    api_base_url: {json.dumps(slack.base_url)}\n",
            encoding="utf-8",
        )
        process = await asyncio.create_subprocess_exec(
            *BOTD,
            "doctor",
            "--json",
            "--config",
            str(config),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=tmp_path,
            env=daemon_env(S_BOT="xoxb-Qm4tR8wZp2Lk", S_APP="xapp-Vn7yB3cXe5Hd"),
        )
        out, err = await asyncio.wait_for(process.communicate(), HANG_GUARD)
    report = json.loads(out)
    check = next((c for c in report["checks"] if c["name"] == "slack.scopes"), None)
    assert check is not None, out.decode() + err.decode()
    assert check["status"] == "ok", check
    # Only the scope the manifest leaves commented out (it needs a feature of its own).
    assert re.findall(r"without (\S+)", check["detail"]) == ["assistant:write"], check
