"""``session_scope``: where a group's setting comes from, whose conversation a message to the
bot is in a user-scoped group, and how the group's kept chatter is shared by its members'
conversations (each shown a line once, none consuming it for the others)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from botd.chat import Button, InboundMessage, MessageRef, Press, PressAnswer, Target
from botd.config.schema import ChatChannelSection
from botd.conversation.dispatcher import lease_name
from botd.inbound.access import AccessPolicy, GroupRule
from botd.inbound.kept_context import CONTEXT_HEADER
from botd.inbound.session_scope import NOT_YOURS, user_conversation_key
from botd.store import PostedButtons, Store
from botd.store.postgres import PostgresStore
from botd.wiring import access_policy
from tests.inbound.routing import Recorder, group, router

USER_SCOPED = AccessPolicy(groups={"g1": GroupRule()}, session_scopes={"g1": "user"})


def section(**settings: Any) -> ChatChannelSection:
    return ChatChannelSection.model_validate(settings)


def test_a_groups_scope_is_its_own_else_the_channels_and_an_unlisted_groups_is_stars() -> None:
    assert section(groups={"g1": {}}).group_session_scope("g1") == "group"  # the default
    channel_wide = section(
        session_scope="user", groups={"g1": {}, "g2": {"session_scope": "group"}}
    )
    assert channel_wide.group_session_scope("g1") == "user"
    assert channel_wide.group_session_scope("g2") == "group"
    assert channel_wide.group_session_scope("unlisted") == "user"
    star = section(groups={"*": {"session_scope": "user"}, "g1": {"require_mention": False}})
    assert star.group_session_scope("g1") == "group"  # listed, sets none: the channel's
    assert star.group_session_scope("unlisted") == "user"
    policy = access_policy(star)
    assert not policy.user_scoped("g1") and policy.user_scoped("unlisted")
    mixed = access_policy(section(groups={"*": {}, "g1": {"session_scope": "user"}}))
    assert mixed.user_scoped("g1") and not mixed.user_scoped("g2")


def test_the_per_user_key_follows_the_group_key() -> None:
    assert user_conversation_key("telegram:-100123", "42") == "telegram:-100123:user:42"
    assert (
        user_conversation_key("telegram:-100123:topic:7", "42")
        == "telegram:-100123:topic:7:user:42"
    )
    assert user_conversation_key("slack:C1:thread:17.1", "U1") == "slack:C1:thread:17.1:user:U1"


async def test_each_member_has_a_conversation_and_the_chatter_reaches_all(store: Store) -> None:
    rec = Recorder()
    r = router(store, rec, USER_SCOPED)
    await r.handle(group("lunch at noon?", sender="eve", n=1))  # chatter
    assert (await r.handle(group("@bot hi", mention=True, sender="alice", n=2))).accepted
    assert (await r.handle(group("@bot hello", mention=True, sender="bob", n=3))).accepted
    alice, bob = rec.submitted
    assert alice.conversation_key == "telegram:g1:user:alice"
    assert bob.conversation_key == "telegram:g1:user:bob"
    # Each is shown the line once; neither consumed it for the other.
    for prompt in (alice, bob):
        assert prompt.context == f"{CONTEXT_HEADER}\n[Eve (id eve)] lunch at noon?"
    await r.handle(group("pizza!", sender="eve", n=4))
    await r.handle(group("@bot again", mention=True, sender="alice", n=5))
    assert rec.submitted[-1].context == f"{CONTEXT_HEADER}\n[Eve (id eve)] pizza!"
    # A command is its sender's too; what one asked the bot is not the others' chatter.
    await r.handle(group("/new", sender="bob", n=6))
    await r.handle(group("@bot and now?", mention=True, sender="bob", n=7))
    assert rec.submitted[-2].conversation_key == "telegram:g1:user:bob"
    assert rec.submitted[-1].context == f"{CONTEXT_HEADER}\n[Eve (id eve)] pizza!"
    # The group's lines stay kept (for a member who has not spoken yet).
    assert [line.text for line in await store.kept_chatter("telegram:g1")] == [
        "lunch at noon?",
        "pizza!",
    ]


async def test_a_group_scoped_group_keeps_one_conversation(store: Store) -> None:
    rec = Recorder()
    r = router(store, rec, AccessPolicy(groups={"g1": GroupRule()}, session_scopes={"g2": "user"}))
    await r.handle(group("lunch?", sender="eve", n=1))
    await r.handle(group("@bot hi", mention=True, sender="alice", n=2))
    await r.handle(group("@bot hello", mention=True, sender="bob", n=3))
    assert [m.conversation_key for m in rec.submitted] == ["telegram:g1", "telegram:g1"]
    assert rec.submitted[1].context == ""  # consumed by the first
    assert await store.kept_chatter("telegram:g1") == []


async def test_a_forum_topic_is_scoped_per_topic_and_member(store: Store) -> None:
    rec = Recorder()
    r = router(store, rec, USER_SCOPED)

    def in_topic(message: InboundMessage, topic: str) -> InboundMessage:
        return replace(message, thread_id=topic, conversation_key=f"telegram:g1:topic:{topic}")

    await r.handle(in_topic(group("in seven", sender="eve", n=1), "7"))
    await r.handle(in_topic(group("@bot a", mention=True, sender="alice", n=2), "7"))
    await r.handle(in_topic(group("@bot b", mention=True, sender="alice", n=3), "8"))
    seven, eight = rec.submitted
    assert seven.conversation_key == "telegram:g1:topic:7:user:alice"
    assert seven.context == f"{CONTEXT_HEADER}\n[Eve (id eve)] in seven"
    assert (eight.conversation_key, eight.context) == ("telegram:g1:topic:8:user:alice", "")
    assert seven.thread_id == "7" and seven.reply_target().thread_id == "7"


async def test_buttons_in_a_user_scoped_group_take_their_members_press(store: Store) -> None:
    rec = Recorder()
    r = router(store, rec, USER_SCOPED)
    alice = "telegram:g1:user:alice"
    _post_buttons(store, "m9", conversation=alice)

    def press(sender: str, n: int, message_id: str = "m9") -> InboundMessage:
        pressed = Press(callback_id=f"cb{n}", value="yes", message_id=message_id)
        return replace(group("", sender=sender, n=n), press=pressed)

    refused = await r.handle(press("bob", 1))
    assert not refused.accepted and refused.answer == PressAnswer(NOT_YOURS)
    assert (await r.handle(press("alice", 2))).accepted
    assert rec.submitted[-1].conversation_key == alice
    assert rec.submitted[-1].text == "(pressed: Yes)"
    # Buttons whose conversation was not recorded (posted before): the presser's own.
    _post_buttons(store, "m10", conversation=None)
    assert (await r.handle(press("bob", 3, "m10"))).accepted
    assert rec.submitted[-1].conversation_key == "telegram:g1:user:bob"


def _post_buttons(store: Store, message_id: str, *, conversation: str | None) -> None:
    ref = MessageRef(Target("telegram", "g1"), message_id)
    rows = ((Button("Yes", "yes"),),)
    store.buttons_posted_soon(PostedButtons(ref, rows, time.time(), conversation=conversation))


async def test_on_postgresql_each_members_conversation_is_leased_apart(
    migrated_postgres_dsn: str,
) -> None:
    # Alice's and Bob's messages in one user-scoped group are two conversations, each with
    # its own lease, which two nodes hold at once.
    store = await PostgresStore.open(migrated_postgres_dsn)
    try:
        rec = Recorder()
        r = router(store, rec, USER_SCOPED)
        await r.handle(group("@bot hi", mention=True, sender="alice", n=1))
        await r.handle(group("@bot hello", mention=True, sender="bob", n=2))
        await r.handle(group("@bot again", mention=True, sender="alice", n=3))
        entries = await store.unfinished_entries()
        alice, bob = "telegram:g1:user:alice", "telegram:g1:user:bob"
        assert sorted(e.message.conversation_key for e in entries) == [alice, alice, bob]
        leases = store.lease_table()
        assert await leases.claim(lease_name(alice), "node-a", 60) == 1
        assert await leases.claim(lease_name(bob), "node-b", 60) == 1
        assert await leases.claim(lease_name(alice), "node-b", 60) is None
        assert await leases.claim(lease_name("telegram:g1"), "node-b", 60) == 1  # not theirs
    finally:
        await store.aclose()
