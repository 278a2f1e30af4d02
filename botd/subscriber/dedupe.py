"""Messaging-tool sends and the duplicate test that keeps them from being repeated.

When the agent delivers text itself through a messaging tool (``message``, ``sessions_send``, or
a tool named after a platform), the same text must not go out a second time as a block or
final reply. This module answers the questions the subscriber asks about that:

* Is this tool call a messaging send, with which text, to which target? (``messaging_send``)
* Did the tool fail, so that its send must not count? (``is_failed_tool_result``)
* Is a reply text a duplicate of something already sent? (``is_messaging_duplicate``)
* Did a send go to the conversation the run is answering? (``same_route``)

Targets are normalised per provider so that different spellings of one conversation compare
equal. Each platform brings its spelling as a ``TargetForm`` (its channel spec's); the caller
passes them in, keyed by provider. A provider without a form has its target trimmed, as given.

Threads are part of the target: a send into a thread has, unless the platform's form says
otherwise, the target ``<base target>:thread:<thread id>`` (thread id trimmed and lowercased),
so ``channel:c1`` and ``channel:c1:thread:123`` are different conversations. The thread id
comes from the ``to`` itself when it already has that suffix, else from the tool's
``threadId`` / ``thread_id`` / ``threadTs`` / ``thread_ts`` / ``messageThreadId`` /
``message_thread_id`` argument. Whoever describes the originating conversation for
``same_route`` must use the same form (see ``normalize_messaging_target``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import regex

from ..chat import TargetForm

MIN_DUPLICATE_TEXT_LENGTH = 10
"""Texts (normalised) shorter than this are never treated as duplicates: "OK", "Done." ..."""

MAX_MESSAGING_SENT = 200
"""How many committed sent texts (and targets) a run keeps; older ones are dropped first."""

# Emoji and pictographs are dropped before comparing, since a model often adds or removes them
# when it repeats itself. This also drops ©, ® and ™, but not U+FE0F or zero-width joiners.
_EMOJI = regex.compile(r"\p{Emoji_Presentation}|\p{Extended_Pictographic}")


# --- duplicate test -----------------------------------------------------------------------


def normalize_for_dedupe(text: str) -> str:
    """``text`` lowercased, without emoji, with whitespace runs collapsed to one space, trimmed."""
    without_emoji = _EMOJI.sub("", text.strip().lower())
    # str.split() both collapses and trims, with one definition of whitespace (str.isspace).
    return " ".join(without_emoji.split())


def is_duplicate_normalized(candidate: str, sent_normalized: Sequence[str]) -> bool:
    """Whether the normalised ``candidate`` repeats one of the normalised sent texts.

    Both the candidate and the sent text must be at least ``MIN_DUPLICATE_TEXT_LENGTH`` long.
    A sent text inside the candidate ("I sent: <text>") is a duplicate. A candidate inside a
    sent text is a duplicate only when it is at least half as long as that sent text, so that
    a short remark quoting part of a long message still goes out (PR #76948).
    """
    if len(candidate) < MIN_DUPLICATE_TEXT_LENGTH:
        return False
    for sent in sent_normalized:
        if len(sent) < MIN_DUPLICATE_TEXT_LENGTH:
            continue
        if sent in candidate:
            return True
        if candidate in sent and 2 * len(candidate) >= len(sent):
            return True
    return False


def is_messaging_duplicate(text: str, sent_texts: Sequence[str]) -> bool:
    """``is_duplicate_normalized`` on raw texts: both sides are normalised first."""
    if not sent_texts:
        return False
    candidate = normalize_for_dedupe(text)
    return is_duplicate_normalized(candidate, [normalize_for_dedupe(s) for s in sent_texts])


# --- tool names and results ---------------------------------------------------------------

_TOOL_NAME_ALIASES = {"bash": "exec", "apply-patch": "apply_patch"}


def normalize_tool_name(name: str) -> str:
    """The canonical tool name: trimmed, lowercased, with the known aliases resolved."""
    key = name.strip().lower()
    return _TOOL_NAME_ALIASES.get(key, key)


def is_failed_tool_result(is_error: bool, result: object) -> bool:
    """Whether a tool call failed: ``is_error``, or a result whose ``details.status`` is
    ``error`` or ``timeout`` (trimmed, any case). Tools report some failures that way while
    the call itself succeeds."""
    if is_error:
        return True
    if not isinstance(result, Mapping):
        return False
    details = result.get("details")
    if not isinstance(details, Mapping):
        return False
    status = details.get("status")
    return isinstance(status, str) and status.strip().lower() in {"error", "timeout"}


# --- targets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MessagingTarget:
    """Where a messaging tool sent its text; ``to`` is normalised for ``provider``."""

    tool: str
    provider: str
    to: str
    account_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "provider": self.provider,
            "account_id": self.account_id,
            "to": self.to,
        }


@dataclass(frozen=True)
class MessagingSend:
    """A messaging tool call: the text it sends (if any) and where (if the target is known).

    ``target`` is None when the call names no target (for ``message``, the reply then goes to
    the originating conversation) and always for ``sessions_send``, which talks to another
    agent session rather than a chat.
    """

    text: str | None
    target: MessagingTarget | None


_THREAD_SUFFIX = re.compile(r":thread:", re.IGNORECASE)
_THREAD_ARG_KEYS = (
    "threadId",
    "thread_id",
    "threadTs",
    "thread_ts",
    "messageThreadId",
    "message_thread_id",
)


def normalize_messaging_target(
    forms: Mapping[str, TargetForm], provider: str, to: str, *, thread_id: str | None = None
) -> str:
    """``to`` in the target form of ``provider`` (its ``TargetForm`` in ``forms``, else
    trimmed as given, with a thread as ``:thread:<id>``); "" when empty.

    A ``:thread:<id>`` suffix already in ``to`` wins over ``thread_id``.
    """
    provider = provider.strip().lower()
    base, thread = _split_thread(to.strip())
    if thread is None and thread_id is not None:
        thread = thread_id.strip().lower() or None
    form = forms.get(provider)
    base = form.normalize(base) if form else base
    if not base:
        return ""
    if thread is None:
        return base
    return form.in_thread(base, thread) if form else f"{base}:thread:{thread}"


def _split_thread(to: str) -> tuple[str, str | None]:
    matches = list(_THREAD_SUFFIX.finditer(to))
    if not matches:
        return to, None
    last = matches[-1]
    thread = to[last.end() :].strip().lower()
    return to[: last.start()].strip(), thread or None


def same_route(
    forms: Mapping[str, TargetForm],
    target: MessagingTarget,
    *,
    provider: str,
    to: str,
    account_id: str | None,
) -> bool:
    """Whether ``target`` is the conversation given by ``provider``/``to``/``account_id``.

    Same provider (any case), same target once both are normalised for it (a thread is part
    of the target), and the same account when both account ids are known.
    """
    wanted_provider = provider.strip().lower()
    if target.provider.strip().lower() != wanted_provider:
        return False
    sent_account = (target.account_id or "").strip().lower()
    wanted_account = (account_id or "").strip().lower()
    if sent_account and wanted_account and sent_account != wanted_account:
        return False
    wanted_to = normalize_messaging_target(forms, wanted_provider, to)
    return bool(wanted_to) and (
        normalize_messaging_target(forms, wanted_provider, target.to) == wanted_to
    )


# --- which tool calls are sends -----------------------------------------------------------

MESSAGE_SEND_ACTIONS = frozenset({"send", "reply", "thread-reply"})
"""Actions of the ``message`` tool that send text (botd's own tool uses ``send``/``reply``)."""


def _string_arg(args: Mapping[str, Any], *keys: str) -> str | None:
    """The first of ``keys`` whose value is a non-blank string (numbers count, as ids)."""
    for key in keys:
        value = args.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            value = str(value)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _action(args: Mapping[str, Any]) -> str:
    value = args.get("action")
    return value.strip().lower() if isinstance(value, str) else ""


def messaging_send(
    forms: Mapping[str, TargetForm], tool_name: str, args: Mapping[str, Any]
) -> MessagingSend | None:
    """The send this tool call makes, or None when it is not a messaging send.

    ``message`` sends with the actions in ``MESSAGE_SEND_ACTIONS`` (any case); its provider is
    ``args.provider``, else ``args.channel``, else ``"message"``. ``sessions_send`` always
    sends, with no chat target. A tool named after a platform sends as its form's
    ``tool_send`` says (OpenClaw's ``telegram`` tool: ``sendMessage`` with a ``to``).
    """
    tool = normalize_tool_name(tool_name)
    text = _string_arg(args, "content", "message")
    account_id = _string_arg(args, "accountId", "account_id")
    account_id = account_id.strip() if account_id else None
    thread_id = _string_arg(args, *_THREAD_ARG_KEYS)

    if tool == "sessions_send":
        return MessagingSend(text=text, target=None)

    action = _action(args)
    if tool == "message":
        if action not in MESSAGE_SEND_ACTIONS:
            return None
        provider_arg = _string_arg(args, "provider", "channel")
        provider = provider_arg.strip().lower() if provider_arg else "message"
        to = _string_arg(args, "to")
        target = _target(forms, tool, provider, to, thread_id, account_id)
        return MessagingSend(text=text, target=target)

    form = forms.get(tool)
    if form is not None and form.tool_send is not None:
        sent = form.tool_send(action, args, thread_id)
        # A platform tool call only counts as a send when it names a target.
        target = None if sent is None else _target(forms, tool, tool, *sent, account_id)
        return MessagingSend(text=text, target=target) if target else None

    return None


def _target(
    forms: Mapping[str, TargetForm],
    tool: str,
    provider: str,
    to: str | None,
    thread_id: str | None,
    account_id: str | None,
) -> MessagingTarget | None:
    if to is None:
        return None
    normalized = normalize_messaging_target(forms, provider, to, thread_id=thread_id)
    if not normalized:
        return None
    return MessagingTarget(tool=tool, provider=provider, to=normalized, account_id=account_id)
