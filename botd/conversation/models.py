"""Which model a conversation uses, and what its runs spent: ``/model`` and ``/usage``.

``ModelBook`` knows the configured models (the primary, then its fallbacks) and each
conversation's choice, kept in the store so that it survives a restart. A run asks the book
for its conversation's model (``current``) and names it in its request; the failover
provider tries that model first and the others, in configured order, after it.

The conversation's explicit choice wins over its chat's configured model (a topic's,
group's or channel's ``model``), which wins over the primary. Choosing the model the chat's
settings name (or ``/model default``) keeps no choice, so the conversation follows the
config again; ``/new`` drops the choice (``forget``). A choice naming a model the
configuration no longer has is ignored, and so is a configured one the running provider
does not have (a reload named it: the models apply after a restart).

``usage_of`` reads a run's token counts off its assistant messages, per model that answered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from ..config.overrides import Setting
from ..events import Message
from ..store import ModelUsage, StoreError, UsageTotals
from ..store.protocols import ModelChoices

log = logging.getLogger(__package__)


class ModelBook:
    """The configured models and each conversation's choice among them."""

    def __init__(
        self, store: ModelChoices, names: Sequence[str], clock: Callable[[], float]
    ) -> None:
        if not names:
            raise ValueError("at least one model must be configured")
        self._store = store
        self.names: tuple[str, ...] = tuple(names)
        self._clock = clock
        self._choices: dict[str, str | None] = {}

    @property
    def primary(self) -> str:
        return self.names[0]

    def configured(self, default: str | None) -> str:
        """``default`` (the model a chat's settings name) when it is one of the models this
        book has, else the primary."""
        return default if default in self.names else self.primary

    async def choice(self, conversation_key: str) -> str | None:
        """The model ``/model`` chose for the conversation, if it is still configured (None:
        none, or one the config no longer has, or the store cannot tell now)."""
        if conversation_key not in self._choices:
            try:
                self._choices[conversation_key] = await self._store.model_choice(conversation_key)
            except StoreError as exc:
                log.error("reading the model of %s failed: %s", conversation_key, exc)
                return None
        chosen = self._choices[conversation_key]
        return chosen if chosen in self.names else None

    async def current(self, conversation_key: str, default: str | None = None) -> str:
        """The model the conversation's runs ask first: its ``/model`` choice, else
        ``default`` (what its chat's settings name; None or unknown: the primary)."""
        return await self.choice(conversation_key) or self.configured(default)

    async def answer(
        self,
        conversation_key: str,
        argument: str,
        store: ModelChoices | None = None,
        default: str | None = None,
    ) -> str:
        """``/model`` (list), ``/model <name or number>`` (switch), ``/model default``;
        a switch is written through ``store`` (the conversation's view, fenced by its lease;
        None: the book's own). ``default``: the model the chat's settings name (None: the
        primary); choosing it, or ``default``, forgets the conversation's choice."""
        argument = argument.strip()
        configured = self.configured(default)
        if not argument:
            return await self.listing(conversation_key, default)
        if argument.lower() == "default":
            chosen = configured
        else:
            found = self._find(argument)
            if found is None:
                known = ", ".join(f"{i}: {n}" for i, n in enumerate(self.names, 1))
                return f"Unknown model {argument!r}. Configured: {known}."
            chosen = found
        kept = None if chosen == configured else chosen
        try:
            await (store or self._store).set_model_choice(conversation_key, kept)
        except StoreError as exc:
            log.error("keeping the model of %s failed: %s", conversation_key, exc)
            return "The model cannot be switched now (storage failing)."
        self._choices[conversation_key] = kept
        others = [n for n in self.names if n != chosen]
        tail = f"; fallbacks: {', '.join(others)}" if others else ""
        said = " (the default)" if kept is None else ""
        return f"This conversation now uses {chosen}{said}{tail}."

    async def forget(self, conversation_key: str, store: ModelChoices | None = None) -> bool:
        """``/new``: the conversation's ``/model`` choice is dropped, written through
        ``store`` (None: the book's own). True when there was one."""
        try:
            had = await self._store.model_choice(conversation_key) is not None
            if had:
                await (store or self._store).set_model_choice(conversation_key, None)
        except StoreError as exc:
            log.error("forgetting the model of %s failed: %s", conversation_key, exc)
            return False
        self._choices[conversation_key] = None
        return had

    async def listing(self, conversation_key: str, default: str | None = None) -> str:
        current = await self.current(conversation_key, default)
        lines = ["Models:"]
        for number, name in enumerate(self.names, 1):
            role = "primary" if number == 1 else "fallback"
            mark = " ← current" if name == current else ""
            lines.append(f"{number}: {name} ({role}){mark}")
        lines.append("/model <name or number> switches; /model default goes back.")
        return "\n".join(lines)

    async def status_line(self, conversation_key: str, default: Setting[str] | None = None) -> str:
        """``/status``'s line: the conversation's model and where it came from (``/model``,
        or ``default``: the chat's settings; None: the primary, the agent's) and, with
        fallbacks configured, the one that answered last (with a single model no other one
        can have answered)."""
        chosen = await self.choice(conversation_key)
        if chosen is not None:
            line = f"Model: {chosen} (chosen with /model)"
        elif default is None or default.value not in self.names:
            line = f"Model: {self.primary} (agent's)"
        else:
            line = f"Model: {default.value} ({default.whose})"
        if len(self.names) < 2:
            return line + "."
        try:
            last = await self._store.last_model(conversation_key)
        except StoreError as exc:
            log.error("reading the last model of %s failed: %s", conversation_key, exc)
            last = None
        if last is not None:
            line += f"; the last answer came from {last}"
        return line + "."

    async def usage(self, conversation_key: str) -> str:
        """``/usage``: the conversation's token totals, all time and today (UTC).

        Only the asking conversation's: anyone allowed to talk to the bot may ask, and what
        other chats spend is not theirs to see. Totals across conversations are for the
        operator (the ``botd_tokens_total`` metric).
        """
        now = datetime.fromtimestamp(self._clock(), UTC)
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
        try:
            mine = await self._store.usage_totals(conversation_key=conversation_key)
            today = await self._store.usage_totals(
                conversation_key=conversation_key, since=midnight
            )
        except StoreError as exc:
            log.error("reading token usage failed: %s", exc)
            return "Token usage cannot be read now (storage failing)."
        return (
            f"This conversation: {_totals(mine)}.\n"
            f"Today ({now:%Y-%m-%d} UTC), this conversation: {_totals(today)}."
        )

    def _find(self, argument: str) -> str | None:
        if argument.isdigit():
            number = int(argument)
            return self.names[number - 1] if 1 <= number <= len(self.names) else None
        wanted = argument.lower()
        return next((n for n in self.names if n.lower() == wanted), None)


def _totals(totals: UsageTotals) -> str:
    runs = f"{totals.runs} run{'' if totals.runs == 1 else 's'}"
    return (
        f"{runs}, {totals.input} input, {totals.output} output, "
        f"{totals.cache_read} cache read, {totals.cache_write} cache write tokens"
    )


def usage_of(messages: Sequence[Message], default_model: str) -> list[ModelUsage]:
    """The token counts of a run's assistant messages, summed per model that answered.

    A failed call counts when it reported tokens; an answer counts even without any (its
    model still answered the run).
    """
    sums: dict[str, dict[str, int]] = {}
    for message in messages:
        if message.role != "assistant":
            continue
        raw = message.usage or {}
        counts = {
            "input": _count(raw.get("input_tokens")),
            "output": _count(raw.get("output_tokens")),
            "cache_read": _count(raw.get("cache_read_input_tokens")),
            "cache_write": _count(raw.get("cache_creation_input_tokens")),
        }
        if message.stop_reason == "error" and not any(counts.values()):
            continue
        model = message.model or default_model
        total = sums.setdefault(model, dict.fromkeys(counts, 0))
        for kind, value in counts.items():
            total[kind] += value
    return [ModelUsage(model, **counts) for model, counts in sums.items()]


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


__all__ = ["ModelBook", "usage_of"]
