"""Edits of earlier messages: context for the next prompt, once; never a prompt themselves."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from botd.chat import Attachment, InboundMessage
from botd.conversation.prompt import turn_text
from botd.inbound.access import AccessPolicy, GroupRule
from botd.inbound.kept_context import CONTEXT_HEADER, EDITED
from botd.store import Store
from botd.store.pairing import PairingFile
from tests.inbound.routing import Recorder, dm, group, router


def edit(message: InboundMessage, text: str, version: int = 1) -> InboundMessage:
    """``message`` edited to ``text`` (its ``version``-th edit), as an adapter hands it over."""
    key = f"{message.chat_id}:{message.message_id}:edit:{version}"
    return replace(message, text=text, edited=True, dedupe_keys=(key,), mentions_bot=False)


async def test_a_dm_edit_is_shown_with_the_next_message_once(store: Store) -> None:
    rec = Recorder()
    r = router(store, rec, AccessPolicy(dm_policy="open"))
    first = dm("meet at noon?", n=1)
    assert (await r.handle(first)).accepted
    decision = await r.handle(edit(first, "meet at one?"))
    assert not decision.accepted and "edit" in decision.reason
    assert len(rec.submitted) == 1  # no run of its own
    assert (await r.handle(dm("and where?", n=2))).accepted
    assert turn_text(rec.submitted[-1]).splitlines() == [
        CONTEXT_HEADER,
        f"[id alice] {EDITED} meet at one?",
        "",
        "and where?",  # a DM's own prompt is not labelled
    ]
    assert (await r.handle(dm("thanks", n=3))).accepted
    assert rec.submitted[-1].context == ""  # shown once


async def test_the_same_edit_delivered_again_is_dropped_and_a_second_edit_is_kept(
    store: Store,
) -> None:
    rec = Recorder()
    r = router(store, rec, AccessPolicy(dm_policy="open"))
    first = dm("draft", n=1)
    await r.handle(first)
    await r.handle(edit(first, "second draft", 1))
    again = await r.handle(edit(first, "second draft", 1))
    assert again.reason == "already seen"
    await r.handle(edit(first, "final draft", 2))
    await r.handle(dm("done?", n=2))
    lines = rec.submitted[-1].context.splitlines()
    assert lines[1:] == [f"[id alice] {EDITED} second draft", f"[id alice] {EDITED} final draft"]


async def test_an_edit_that_adds_a_mention_or_a_command_starts_nothing(store: Store) -> None:
    rec = Recorder()
    r = router(store, rec, AccessPolicy(groups={"g1": GroupRule()}))
    plain = group("what time is it", n=1)
    await r.handle(plain)
    mentioned = replace(edit(plain, "@bot what time is it"), mentions_bot=True)
    assert not (await r.handle(mentioned)).accepted
    assert not (await r.handle(edit(dm("x", n=2), "/new", 1))).accepted
    assert rec.submitted == [] and rec.replies == []
    assert (await r.handle(group("@bot so?", mention=True, n=3))).accepted
    context = rec.submitted[-1].context
    assert "[Bob (id bob)] what time is it" in context
    assert f"[Bob (id bob)] {EDITED} @bot what time is it" in context


async def test_an_edit_from_whom_the_bot_does_not_take_is_not_kept(
    tmp_path: Path, store: Store
) -> None:
    rec = Recorder()
    pairing = AccessPolicy(dm_policy="pairing")
    r = router(store, rec, pairing, pairing=PairingFile(tmp_path / "pairing.json"))
    stranger = dm("hello", "mallory", n=1)
    decision = await r.handle(edit(stranger, "hello again"))
    assert not decision.accepted and decision.reason.startswith("an edit:")
    assert rec.replies == []  # no pairing code for an edit
    assert await store.kept_chatter(stranger.conversation_key) == []
    assert (await r.handle(edit(stranger, "hello again"))).reason == "already seen"


async def test_an_edit_keeps_no_files(store: Store) -> None:
    rec = Recorder()
    r = router(store, rec, AccessPolicy(dm_policy="open"))
    photo = Attachment(kind="image", ref="f1", name="cat.jpg")
    first = replace(dm("look", n=1), attachments=(photo,))
    await r.handle(first)
    await r.handle(edit(first, "look at this"))
    await r.handle(dm("well?", n=2))
    assert rec.submitted[-1].attachments == ()
    assert f"{EDITED} look at this" in rec.submitted[-1].context


async def test_an_edit_by_a_sender_the_group_refuses_is_not_kept(store: Store) -> None:
    rec = Recorder()
    r = router(store, rec, AccessPolicy(groups={"g1": GroupRule(allow_from=frozenset({"bob"}))}))
    decision = await r.handle(edit(group("hello", sender="eve", n=1), "psst, tell it this"))
    assert not decision.accepted and decision.reason.startswith("an edit: sender eve")
    await r.handle(edit(group("lunch?", n=2), "lunch at one?"))
    assert (await r.handle(group("@bot so?", mention=True, n=3))).accepted
    assert rec.submitted[-1].context.splitlines() == [
        CONTEXT_HEADER,
        f"[Bob (id bob)] {EDITED} lunch at one?",
    ]
