"""A run's tool status in its chat (``agent.tool_progress: status``), never left behind.

``ChatStatus`` is the ``ToolStatus`` a run gets (``ToolStatuses.open``, below). The run says
what should show (``show``); one task of its own makes the chat show it, coalescing changes
and calling the platform at most once per edit interval, so a run of quick tools costs one
edit, not one per tool, and no platform's per-chat limit is reached.

Where it shows:

* in a thread of an adapter with an assistant status (``AssistantStatus``, Slack's
  assistant threads), as that status: set, replaced, and cleared with '' at the end;
* elsewhere, or once the platform refused that status in this conversation (not an
  assistant thread, a missing scope: logged once, in the platform's words), as a status line
  message of its own: posted without a notification (``SendScope.silent``: it is not the
  answer), edited in place, deleted at the end.

It is never a piece of the run: not journaled in the outbox, not counted, not deduplicated
against. What shows is kept in the ``StatusJournal`` (before an assistant status is set,
right after a status line is posted) and forgotten once removed, so a run resumed after a
crash removes what the crashed process left (``ToolStatuses.remove``). A post or an edit
that fails is logged and the status gives up for the run; the removal is retried like a
reply's final edit, and a removal that still fails is logged and stays kept.

``ToolStatuses`` serves every conversation's: it remembers where the platform refused the
assistant status (a status line there from then on) and holds "typing…" back while a
thread's assistant status shows a tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from ..bounded import Recent
from ..channels.base import AssistantStatus, ChannelAdapter
from ..chat import MessageRef, Target
from .base import PlanStep, StatusJournal, StatusKind, ToolActivity
from .presence import TypingIndicator
from .routing import ChannelRoutes, ChatKey, chat_key
from .scope import RunScope, status_scope
from .sender import Sender

log = logging.getLogger(__name__)

_REFUSED_KEPT = 4096
"""How many conversations are remembered as refusing the assistant status (the oldest
forgotten, then refused and logged again at most once)."""


class StatusOutlet(Protocol):
    """What a ``ChatStatus`` needs of the delivery (``ToolStatuses``)."""

    def adapter_for(self, target: Target) -> ChannelAdapter: ...

    def assistant_status(self, target: Target) -> AssistantStatus | None:
        """The adapter's assistant status for ``target``, unless it has none there or the
        platform refused it in this conversation before."""
        ...

    def assistant_refused(self, target: Target, error: Exception) -> None:
        """The platform refused the assistant status in ``target``'s conversation."""
        ...

    def status_showing(self, target: Target, showing: bool) -> None:
        """Whether an assistant status shows there now ("typing…" must not replace it)."""
        ...

    async def delete_status_line(self, ref: MessageRef, scope: RunScope | None = None) -> None:
        """Delete a status line message, retried as a final edit is (for ``scope``'s
        conversation)."""
        ...


class ChatStatus:
    """One run's ``ToolStatus`` over a ``StatusOutlet`` (see the module docstring).

    Open it inside a running event loop: its task starts at once."""

    def __init__(
        self,
        outlet: StatusOutlet,
        target: Target,
        journal: StatusJournal | None,
        interval: float,
        scope: RunScope | None = None,
    ) -> None:
        """``scope``: the run's, whose lease fences what the status posts."""
        # A status line goes to the conversation's chat and thread, replying to nothing.
        self._target = Target(target.channel, target.chat_id, target.account_id, target.thread_id)
        self._outlet = outlet
        self._journal = journal
        self._interval = interval
        self._scope = scope
        self._loop = asyncio.get_running_loop()
        self._wanted: ToolActivity | PlanStep | None = None
        self._shown: ToolActivity | PlanStep | None = None
        self._kind: StatusKind | None = None
        self._ref: MessageRef | None = None
        self._last = float("-inf")
        self._broken = False
        self._closing = False
        self._changed = asyncio.Event()
        self._close_asked = asyncio.Event()
        name = f"status:{target.channel}:{target.chat_id}"
        self._task = asyncio.create_task(self._work(), name=name)

    def show(self, activity: ToolActivity | PlanStep | None) -> None:
        self._wanted = activity
        self._changed.set()

    async def close(self) -> None:
        self._closing = True
        self._wanted = None
        self._close_asked.set()
        self._changed.set()
        await self._task

    async def _work(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            wait = self._last + self._interval - self._loop.time()
            if wait > 0 and not self._closing:
                # At most one call per interval; closing cuts the wait short.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._close_asked.wait(), wait)
            closing = self._closing
            wanted = None if closing else self._wanted
            if wanted != self._shown and not (self._broken and wanted is not None):
                self._last = self._loop.time()
                await self._make_show(wanted)
            if closing:
                return  # removed, or its failure logged (then it stays kept)

    async def _make_show(self, wanted: ToolActivity | PlanStep | None) -> None:
        try:
            if wanted is None:
                await self._remove()
            elif self._shown is None:
                await self._post(wanted)
            else:
                await self._edit(wanted)
        except Exception as exc:
            target = self._target
            what = "removing" if wanted is None else "showing"
            log.warning(
                "%s tool status in %s: %s failed: %s", target.channel, target.route(), what, exc
            )
            if wanted is not None:
                self._broken = True  # not tried again in this run; what shows is removed

    async def _post(self, activity: ToolActivity | PlanStep) -> None:
        target = self._target
        assistant = self._outlet.assistant_status(target)
        if assistant is not None and target.thread_id is not None:
            ref = MessageRef(target, target.thread_id)
            await self._keep("assistant", ref)  # before it shows: a crash leaves it kept
            try:
                await assistant.set_assistant_status(target, activity.status())
            except Exception as exc:
                await self._forget("assistant", ref)
                if getattr(exc, "retryable", False):
                    raise
                self._outlet.assistant_refused(target, exc)
            else:
                self._kind, self._ref, self._shown = "assistant", ref, activity
                self._outlet.status_showing(target, True)
                return
        adapter = self._outlet.adapter_for(target)
        refs = await adapter.send(target, activity.line(), scope=status_scope(self._scope))
        if not refs:
            return
        self._kind, self._ref, self._shown = "message", refs[0], activity
        await self._keep("message", refs[0])

    async def _edit(self, activity: ToolActivity | PlanStep) -> None:
        ref = self._ref
        assert ref is not None
        if self._kind == "assistant":
            assistant = self._outlet.assistant_status(self._target)
            if assistant is not None:
                await assistant.set_assistant_status(self._target, activity.status())
        else:
            adapter = self._outlet.adapter_for(self._target)
            await adapter.edit(ref, activity.line(), scope=status_scope(self._scope))
        self._shown = activity

    async def _remove(self) -> None:
        kind, ref = self._kind, self._ref
        if kind is None or ref is None:
            self._shown = None
            return
        if kind == "assistant":
            self._outlet.status_showing(self._target, False)
            assistant = self._outlet.assistant_status(self._target)
            if assistant is not None:
                await assistant.set_assistant_status(self._target, "")
        else:
            await self._outlet.delete_status_line(ref, self._scope)
        self._kind = self._ref = self._shown = None
        await self._forget(kind, ref)

    async def _keep(self, kind: StatusKind, ref: MessageRef) -> None:
        if self._journal is None:
            return
        try:
            await self._journal.kept(kind, ref)
        except Exception as exc:
            log.warning("keeping the tool status of %s failed: %s", ref.target.route(), exc)

    async def _forget(self, kind: StatusKind, ref: MessageRef) -> None:
        if self._journal is None:
            return
        try:
            await self._journal.removed(kind, ref)
        except Exception as exc:
            log.warning("forgetting the tool status of %s failed: %s", ref.target.route(), exc)


class ToolStatuses:
    """The ``StatusOutlet`` of every conversation's ``ChatStatus`` (see the module docstring)."""

    def __init__(
        self,
        routes: ChannelRoutes,
        sender: Sender,
        typing: TypingIndicator,
        *,
        interval: float = 1.0,
    ) -> None:
        """``interval``: the seconds between two calls that change what a status shows."""
        self._routes = routes
        self._sender = sender
        self._typing = typing
        self._interval = interval
        self._no_assistant_status: Recent[ChatKey, None] = Recent(_REFUSED_KEPT)
        """Conversations whose platform refused the assistant status (a status line instead)."""

    def open(
        self, target: Target, journal: StatusJournal | None = None, scope: RunScope | None = None
    ) -> ChatStatus:
        """A run's tool status in ``target``'s chat, kept in ``journal`` while it shows."""
        return ChatStatus(self, target, journal, self._interval, scope)

    async def remove(
        self, kind: StatusKind, ref: MessageRef, scope: RunScope | None = None
    ) -> None:
        """Remove a tool status an earlier process left: delete its status line, or clear
        the thread's assistant status."""
        if kind == "message":
            await self.delete_status_line(ref, scope)
            return
        adapter = self._routes.adapter(ref.target.channel)
        if isinstance(adapter, AssistantStatus):
            await adapter.set_assistant_status(ref.target, "")

    def adapter_for(self, target: Target) -> ChannelAdapter:
        return self._routes.adapter_for(target)

    def assistant_status(self, target: Target) -> AssistantStatus | None:
        adapter = self._routes.adapter(target.channel)
        if not isinstance(adapter, AssistantStatus) or target.thread_id is None:
            return None
        if chat_key(target) in self._no_assistant_status:
            return None
        return adapter

    def assistant_refused(self, target: Target, error: Exception) -> None:
        """Log once per conversation that its tool status shows as a status line instead."""
        key = chat_key(target)
        if key in self._no_assistant_status:
            return
        self._no_assistant_status.remember(key, None)
        log.info(
            "%s: no assistant status in %s (%s); tool progress shows as a status line there",
            target.channel,
            target.route(),
            error,
        )

    def status_showing(self, target: Target, showing: bool) -> None:
        self._typing.hold(target, showing)

    async def delete_status_line(self, ref: MessageRef, scope: RunScope | None = None) -> None:
        target = ref.target
        await self._sender.delete(self._routes.adapter_for(target), target, ref, scope=scope)


__all__ = ["ChatStatus", "StatusOutlet", "ToolStatuses"]
