"""Conversations: one ``Conversation`` per conversation key, and the promise it keeps —
every accepted message answered once, every reply piece posted once, across crashes.

The state machine
=================

Inbox entries (one per accepted message)::

    accepted ──start──▶ running ──end(answered)──▶ answered
        │                  ├─────end(failed)────▶ failed
        └──drop(skipped)───┴─────end(skipped)───▶ skipped

=============  =========================================  ================================
transition     who triggers it                            what is durable when it returns
=============  =========================================  ================================
accept         the inbound side (``Store.accept_inbound``)  committed, with the message's
               before the platform is told it arrived      dedupe keys, in one transaction
start          the turn's run, as it starts                a lazy record, with the run's
               (``Promise.running``)                       user turn in the same commit
end answered   the run's last piece confirmed (``RunEnd``  a record, committed with that
               in the same step), a command's answer sent  piece's sent mark
end failed     the run raised or the model failed; an      a record
               answer refused; the store failed the run
end skipped    ``/stop``, ``/new``, an interrupt: the      a record
               waiting entries, a cut preparation, the
               cut run's own (as it ends)
=============  =========================================  ================================

Outbox pieces (each block or final reply of a run, keyed to the run's first entry)::

    written ──sent──▶ sent
       ├────failed──▶ failed
       └──supersede─▶ superseded

=============  =========================================  ================================
written        the run's outbox, before the send           committed (awaited)
               (``PieceJournal.written``)
sent / failed  the outbox, after the platform answered     a record
superseded     a takeover: a piece of a run that goes on   committed
               (the run makes it again)
=============  =========================================  ================================

A run cancelled by the shutdown ends nothing: its entries stay ``running`` (or ``accepted``
while they waited or were prepared) and the next start resumes them. A record is committed
with the next group commit (``store/sqlite/deferred.py``): a crash loses at most the last moment's
records, which the machine reads as a crash just before them.

One door
========

Every producer (the router: a message, a press, a chat command; the scheduler: a job's fire)
accepts into the inbox, and nothing reaches a conversation but from there: this node's
dispatcher (``dispatcher``) hands accepted entries to the conversations it holds by lease
``conversation:<key>``, in ``seq`` (commit) order, one pull at a time per conversation
(commands too: ``/stop`` reaches the run in its place among the messages). A conversation
nobody holds is claimed (on the arrival's signal, or by the dispatcher's poll, which also
finds an accept whose commit reply was cut), and a claim is a **takeover**: the same machine
started from the stored states of that one conversation (``Conversations.resume_conversation``,
``Promise.plan``), before any later entry of it is pulled. A restart is "claim everything":
nothing is resumed at start but by the dispatcher's first poll, which runs once the channels
can send. One node (SQLite) is the same algorithm over the in-process lease table, whose
leases never lapse.

A takeover:

* ``accepted`` entries are queued again as they came, in order;
* a ``running`` entry whose user turn is still in the live transcript has the transcript
  trimmed to its last finished step, and its run goes on from there (no new user turn; it
  skips blocks the chat already shows and says once that it was interrupted); one whose turn
  is gone (a ``/new`` since) runs again from its text;
* ``written`` pieces of a run that goes on are superseded, unless their platform recognises a
  piece sent again with its key (``PieceKey``, ``Capabilities.resend_window``: Discord's
  nonce, Slack's look-up by metadata): those are sent again, keyed, when the run goes on,
  before it reads what it posted. Those of finished runs are sent at once, keyed (and on one
  node, at start, those of runs that answered no entry).
  **The ambiguous window**: elsewhere (Telegram, the console, past Discord's window) a piece
  whose send reached the platform but whose sent record was lost in the crash is posted a
  second time; so is a command's one-line answer (not journaled: it is sent, then its entry
  is answered) whose answered record was lost. Everything else is posted at most once
  (``tests/conversation/test_promise_machine.py``, ``test_keyed_resends.py``).

Several nodes (cluster mode)
============================

On the PostgreSQL backend the same machine runs across nodes: any node accepts a message, and
the node holding the conversation's lease pulls it. Every write of the conversation's work is
fenced by the lease (``botd.cluster.fencing``; the dispatcher gives the conversation its
``RunScope``, and its work passes it on explicitly: ``conversation.Work``, its store view, its
sends, its tools): the store makes it only while the lease holds at this epoch, and no send
starts within a margin of the lease's end. A stale holder (paused, cut off from the database)
thus writes nothing and posts nothing; its run stops and ends none of its entries (``RunEnd``),
which the next holder resumes like a crash's. The sent mark of a piece already posted is kept.
(A node alone has nothing to fence against: its work is not fenced.)

The parts
=========

* ``conversation``: ``Conversation``, a key's queue, worker, current turn and session; the
  commands act through its methods (``stop``, ``start_over``, ``status_lines``);
* ``promise``: every transition above, in one place (``Promise``, ``RunEnd``,
  ``PieceJournal``), and resume;
* ``queue``: the queue mode as a strategy (steer, followup, collect, interrupt; each chat's
  own, as its settings resolve), the album and debounce windows on an injectable timer,
  steering;
* ``registry``: ``Conversations``, the map of key -> conversation, the global run cap,
  commands dispatch, a takeover's resume, drain and shutdown, every task owned (``tasks``);
* ``dispatcher``: ``Dispatcher``, the one door (arrivals, pulls, claims, takeovers, the
  poller; on several nodes fencing and idle conversations let go);
* ``run``, ``steps``, ``notices``, ``reasoning``: one agent run, what it records of its steps
  and the notices it posts; ``commands``, ``models``, ``prompt``, ``settings``: the chat
  commands, ``/model``, the user turn, the settings.

The conversations depend on storage only through ``store.protocols.ConversationLedger``, the
dispatcher through ``ConversationInbox``.
"""

from .conversation import Conversation
from .registry import Conversations
from .settings import (
    DEFAULT_QUEUE_MODE,
    CoalesceSettings,
    QueueMode,
    ResetPolicy,
    RunHooks,
    SessionSettings,
)

__all__ = [
    "DEFAULT_QUEUE_MODE",
    "CoalesceSettings",
    "Conversation",
    "Conversations",
    "QueueMode",
    "ResetPolicy",
    "RunHooks",
    "SessionSettings",
]
