"""Outbound: each run's replies, in order, to the chat they answer.

* ``base``: what the sessions call (``Delivery.open_run`` -> ``RunOutput``, ``send_text``),
  the delivery modes, and the pieces a run sends (``Outgoing``);
* ``outbox``: ``RunOutbox``, one run's ordered output with coalescing and "typing…";
* ``coalesce``: ``BlockCoalescer``, which joins small blocks (time passed in, no clock);
* ``channel``: ``ChannelDelivery``, the ``Delivery`` and ``Outlet`` over the channel
  adapters, put together from the parts below;
* ``routing``: ``ChannelRoutes``, the adapter, delivery mode and chunking of each channel;
* ``sender``: ``Sender``, which posts texts, files and buttons, retried, keyed and counted;
* ``retrying``: ``Retrier``, which retries a conversation's failed sends in order;
* ``previews``, ``preview``, ``native``: the ``edit`` and ``stream`` previews of a run;
* ``fitting``: how a text is cut into messages of its platform;
* ``media``: the files a reply names, as uploads;
* ``presence``: "typing…", throttled per conversation;
* ``status``: a run's tool status (``agent.tool_progress``), edited in place and removed;
* ``scope``: the run's ``RunScope`` (its lease's fence) and the piece being sent, turned
  into what each adapter call is given (``SendScope``).
"""

from .base import (
    DEFAULT_DELIVERY_MODE,
    ChunkMode,
    ChunkSettings,
    CoalesceSettings,
    Delivery,
    DeliveryCounts,
    DeliveryMode,
    Outgoing,
    Outlet,
    PieceKind,
    PlanStep,
    PreviewJournal,
    ReplyKind,
    RunJournal,
    RunOptions,
    RunOutput,
    StatusJournal,
    StatusKind,
    ToolActivity,
    ToolStatus,
)
from .channel import ChannelDelivery, UnknownChannelError
from .outbox import RunOutbox
from .retrying import DEFAULT_RETRY_BUDGET, DeliveryGivenUp, Retrier, RetrySettings

__all__ = [
    "DEFAULT_DELIVERY_MODE",
    "DEFAULT_RETRY_BUDGET",
    "ChannelDelivery",
    "ChunkMode",
    "ChunkSettings",
    "CoalesceSettings",
    "Delivery",
    "DeliveryCounts",
    "DeliveryGivenUp",
    "DeliveryMode",
    "Outgoing",
    "Outlet",
    "PieceKind",
    "PlanStep",
    "PreviewJournal",
    "ReplyKind",
    "Retrier",
    "RetrySettings",
    "RunJournal",
    "RunOptions",
    "RunOutbox",
    "RunOutput",
    "StatusJournal",
    "StatusKind",
    "ToolActivity",
    "ToolStatus",
    "UnknownChannelError",
]
