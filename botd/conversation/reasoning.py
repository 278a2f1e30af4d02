"""The reasoning stream (``agent.reasoning: stream``) posted as messages of its own.

The subscriber streams a message's reasoning as it grows (``on_reasoning``: the whole
formatted reasoning so far, ``format_reasoning``). ``ReasoningPoster`` stands between the
subscriber and the run's output: it keeps the latest version and posts it once per assistant
message, as a block of its own, right before whatever follows the reasoning: the answer's
first block or preview, a tool start, the next message, or the run's end. So each message's
reasoning comes before its answer, in the run's order, and goes the way every block goes
(written to the outbox before it is sent, a flush after it so it is joined to nothing). A
resumed run does not post again a reasoning its interrupted attempt posted.

By delivery mode:

* ``blocks``: every message's reasoning, each right before that message's answer.
* ``edit``: the preview is one message edited in place, and a message posted once it shows
  would land below the answer. So reasoning that is complete before the answer starts
  showing (a model thinks, then answers; the steps before the answer, tool calls included)
  is posted above the preview, and reasoning arriving while the preview shows is not posted.
* ``final``: no poster; the run is given reasoning ``on``, whose final replies lead with the
  last answer's reasoning as a message of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..delivery import RunOutput
from ..subscriber import BlockReply, PartialReply, normalize_for_dedupe
from .notices import NoticeFirst


class ReasoningPoster:
    """Posts the reasoning stream of one run (see the module docstring).

    Its methods are the subscriber's callbacks: ``reasoning``, ``message_start``, and
    ``block``, ``partial`` and ``flush``, which pass the answer on after the reasoning
    waiting to go before it. ``close`` posts what is still waiting when the run is over.
    """

    def __init__(self, shown: NoticeFirst, output: RunOutput, posted: Sequence[str] = ()) -> None:
        self._shown = shown
        self._output = output
        self._posted = {normalize_for_dedupe(text) for text in posted}
        """What the interrupted attempt of a resumed run posted."""
        self._waiting: str | None = None
        self._message_done = False
        """This message's reasoning went out (or was let go): later versions are not posted."""
        self._preview_showing = False

    def reasoning(self, text: str) -> None:
        if not self._message_done:
            self._waiting = text

    def message_start(self) -> None:
        self._post_waiting()
        self._message_done = False

    def block(self, reply: BlockReply) -> None:
        self._post_waiting()
        self._shown.block(reply)

    def partial(self, reply: PartialReply) -> None:
        self._post_waiting()
        self._preview_showing = True
        self._shown.partial(reply)

    def flush(self) -> None:
        self._post_waiting()
        self._output.flush()

    def close(self) -> None:
        self._post_waiting()

    def _post_waiting(self) -> None:
        text, self._waiting = self._waiting, None
        if not text:
            return
        self._message_done = True
        if self._preview_showing:
            return  # it would land below the answer (edit mode)
        if normalize_for_dedupe(text) in self._posted:
            return  # the interrupted attempt posted it
        # Alone: joined neither to the blocks before it nor to the answer's first block.
        self._output.flush()
        self._shown.block(BlockReply(text=text))
        self._output.flush()


__all__ = ["ReasoningPoster"]
