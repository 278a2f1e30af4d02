"""What the cluster tests say and what the fake model answers, and the checks on what the
platform showed.

Users: each of many DMs sends ``dm<k> msg<i>`` prompts, the next one once the answer to the
last one shows (as a person would). The model (``ModelScript``, the fake's responder) answers
``Answer to dm<k> msg<i>.`` at once, except for prompts it was told to stretch: a given prompt
(``stretch_prompt``), on whichever node asks it, or the first new prompt asked through one of
the given nodes (``stretch_next``) gets a long answer streamed slowly (``PARAGRAPHS``, one
piece each), so a fault lands while its pieces go out; asked again (the run resumed on
another node), the same answer comes at once. The scheduled
job's prompt is answered ``JOB_ANSWER``.

``check_answers`` holds what the platform showed against what was asked: every prompt
answered exactly once and in the order asked in each chat, where a repeated piece of a long
answer (the ambiguous window: the piece sent, the node killed before it knew) is counted, not
failed, and the interrupted notice may come once per resumed answer.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.conversation.crash import NOTICE, PARAGRAPHS
from tests.fakes.anthropic_api import FakeAnthropicAPI, Reply, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI

PROMPT = re.compile(r"dm(\d+) msg(\d+)")
JOB_PROMPT = "scheduled tick for the cluster"
JOB_ANSWER = "Tick answered."


def prompt(dm: int, number: int) -> str:
    return f"dm{dm} msg{number}"


def answer(asked: str) -> str:
    return f"Answer to {asked}."


def ask_every_dm(telegram: FakeTelegramAPI, first_dm: int, dms: int) -> None:
    """The first prompt of each of ``dms`` DMs (chat ids ``first_dm`` on), all at once."""
    for k in range(dms):
        telegram.push_text(first_dm + k, prompt(k, 0))


def every_dm_answered(telegram: FakeTelegramAPI, first_dm: int, dms: int) -> bool:
    """Each of the DMs ``ask_every_dm`` asked shows something of an answer."""
    return all(telegram.visible(first_dm + k) for k in range(dms))


def last_user_text(body: dict[str, Any]) -> str:
    """The last user turn of a Messages API request, as JSON text (its blocks joined)."""
    turns = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return json.dumps(turns[-1]["content"]) if turns else ""


@dataclass
class Stretch:
    """A long answer to stretch over the next prompt asked through one of ``nodes`` (None:
    over ``prompt`` itself, on whichever node asks it first)."""

    nodes: frozenset[str] | None
    delay: float
    prompt: str | None = None
    """The prompt it went to (None: not asked yet)."""
    asked_via: str = ""
    """The node that asked it first ('' until then)."""


@dataclass
class ModelScript:
    """The fake model's responder for the cluster tests (module docstring)."""

    model: FakeAnthropicAPI
    stretches: list[Stretch] = field(default_factory=list)
    job_fires: list[tuple[float, str]] = field(default_factory=list)
    """(time.time(), node) of each request carrying the job's prompt."""
    seen: set[str] = field(default_factory=set)
    """The prompts asked so far (one asked again, its run resumed, is answered the same)."""

    def __post_init__(self) -> None:
        self.model.responder = self.reply

    def stretch_next(self, nodes: Iterable[str], delay: float = 0.6) -> Stretch:
        """Stretch the answer to the next new prompt asked through one of ``nodes``."""
        stretch = Stretch(frozenset(nodes), delay)
        self.stretches.append(stretch)
        return stretch

    def stretch_prompt(self, asked: str, delay: float = 0.6) -> Stretch:
        """Stretch the answer to ``asked``, on whichever node asks it first."""
        stretch = Stretch(None, delay, prompt=asked)
        self.stretches.append(stretch)
        return stretch

    def long_prompts(self) -> set[str]:
        return {s.prompt for s in self.stretches if s.prompt is not None}

    def reply(self, body: dict[str, Any]) -> Reply:
        via = self.model.requests[-1].via
        last = last_user_text(body)
        if JOB_PROMPT in last:
            self.job_fires.append((time.time(), via))
            return stream(text(JOB_ANSWER))
        found = PROMPT.findall(last)
        if not found:
            return stream(text("Noted."))
        asked = prompt(int(found[-1][0]), int(found[-1][1]))
        new = asked not in self.seen
        self.seen.add(asked)
        for stretch in self.stretches:
            if not new or stretch.asked_via:
                continue
            named = stretch.nodes is None and stretch.prompt == asked
            if named or (stretch.prompt is None and via in (stretch.nodes or ())):
                stretch.prompt, stretch.asked_via = asked, via
                return stream(text(*(p + "\n\n" for p in PARAGRAPHS)), delay=stretch.delay)
        if asked in self.long_prompts():
            return stream(text(*(p + "\n\n" for p in PARAGRAPHS)))  # resumed: all at once
        return stream(text(answer(asked)))


@dataclass(frozen=True)
class Post:
    """One message the bot posted, as the platform fake recorded it."""

    chat: str
    text: str
    via: str
    """The node that posted it."""
    index: int
    """Its place among every call the fake recorded (later calls: higher)."""


@dataclass
class Tally:
    """What ``check_answers`` found beside the failures: repeated pieces, notices."""

    repeats: list[Post] = field(default_factory=list)
    notices: int = 0
    told: int = 0
    """Notices of ``check_answers``' ``told`` shown."""


def check_answers(
    posts: Sequence[Post],
    asked: dict[str, list[str]],
    long_prompts: set[str],
    *,
    told: str | None = None,
) -> Tally:
    """Assert every chat shows the answers to what was ``asked`` there, each once, in order
    (a long answer: its paragraphs; the interrupted notice allowed before the rest of one);
    the pieces repeated (the Telegram window) are returned, not failed. ``told``: a notice a
    sender may be given once per message besides its answer (the store could not take it)."""
    tally = Tally()
    for chat, prompts in asked.items():
        shown = [p for p in posts if p.chat == chat]
        if told is not None:
            notices = [p for p in shown if p.text.strip() == told.strip()]
            assert len(notices) <= len(prompts), f"chat {chat}: told {len(notices)} times"
            tally.told += len(notices)
            shown = [p for p in shown if p not in notices]
        expected: list[str] = []
        for asked_prompt in prompts:
            if asked_prompt in long_prompts:
                expected += [p.strip() for p in PARAGRAPHS]
            else:
                expected.append(answer(asked_prompt))
        seen: list[str] = []
        for post in shown:
            body = post.text.strip()
            if body == NOTICE:
                tally.notices += 1
                continue
            if seen and body == seen[-1]:  # sent again: its first send was not confirmed
                tally.repeats.append(post)
                continue
            seen.append(body)
        assert seen == expected, f"chat {chat}: shown {seen!r}, expected {expected!r}"
    return tally
