"""The two shipped configs: the small ``config.example.yaml`` and the full reference,
``docs/config-reference.yaml``, with its commented-out examples switched on when a test
needs every key.

In the reference, a list or mapping that would start something is written empty
(``jobs: []``) and followed by its example in comments: a line ``# jobs:`` at the same
indentation, then the example's lines, each ``# `` plus deeper indentation.
``with_examples`` puts each example in place of the empty value above it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config.example.yaml"
REFERENCE = ROOT / "docs" / "config-reference.yaml"
REFERENCE_ENV = {
    "ANTHROPIC_API_KEY": "sk-ant-example",
    "TELEGRAM_TOKEN": "123:tg-example",
    "SLACK_BOT_TOKEN": "xoxb-example",
    "SLACK_APP_TOKEN": "xapp-example",
    "DISCORD_TOKEN": "discord-example",
}
"""The variables the reference needs (its examples need SEARCH_TOKEN, OPENAI_API_KEY,
GEMINI_API_KEY, PROXY_PASSWORD and BOTD_WEB_TOKEN too)."""
EXAMPLES_ENV = {
    **REFERENCE_ENV,
    "SEARCH_TOKEN": "search-example",
    "OPENAI_API_KEY": "sk-oa-x",
    "GEMINI_API_KEY": "gemini-example",
    "PROXY_PASSWORD": "proxy-example",
    "BOTD_WEB_TOKEN": "web-example",
}

_KEY = re.compile(r"( *)([A-Za-z_]+): .*")


def with_examples(text: str) -> str:
    """The reference with every commented-out example in place of the empty value above it."""
    lines = text.splitlines()
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        key = _KEY.fullmatch(line)
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if key is None or not following.startswith(f"{key[1]}# {key[2]}:"):
            out.append(line)
            index += 1
            continue
        indent = key[1]
        out.append(indent + following[len(indent) + 2 :])
        index += 2
        while index < len(lines) and lines[index].startswith(f"{indent}#   "):
            out.append(indent + lines[index][len(indent) + 2 :])
            index += 1
    return "\n".join(out) + "\n"


def switched_on(directory: Path) -> Path:
    """A copy of the reference in ``directory`` with its examples switched on."""
    path = directory / "reference-with-examples.yaml"
    path.write_text(with_examples(REFERENCE.read_text(encoding="utf-8")), encoding="utf-8")
    return path
