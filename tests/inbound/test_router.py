"""The inbound path: dedupe, access policy, pairing, mention gating, kept context."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from botd.chat import Attachment, InboundMessage
from botd.conversation.prompt import turn_text
from botd.inbound.access import AccessPolicy, GroupRule
from botd.inbound.kept_context import CONTEXT_HEADER
from botd.store import Store
from botd.store.pairing import PairingFile
from botd.store.sqlite import SqliteStore
from tests.inbound.routing import Recorder, dm, group, router


async def test_open_dm_is_accepted_once(store: Store) -> None:
    rec = Recorder()
    r = router(store, rec, AccessPolicy(dm_policy="open"))
    assert (await r.handle(dm("hi"))).accepted
    again = await r.handle(dm("hi"))
    assert not again.accepted and again.reason == "already seen"
    assert [m.text for m in rec.submitted] == ["hi"]


async def test_seen_messages_stay_seen_after_a_restart(tmp_path: Path) -> None:
    rec = Recorder()
    with SqliteStore.open(tmp_path / "s") as first:
        await router(first, rec, AccessPolicy(dm_policy="open")).handle(dm("hi"))
    with SqliteStore.open(tmp_path / "s") as second:
        decision = await router(second, rec, AccessPolicy(dm_policy="open")).handle(dm("hi"))
    assert not decision.accepted and len(rec.submitted) == 1


async def test_allowlist_dm(store: Store) -> None:
    rec = Recorder()
    r = router(store, rec, AccessPolicy(dm_policy="allowlist", allow_from=frozenset({"alice"})))
    assert (await r.handle(dm("hi", "alice"))).accepted
    refused = await r.handle(dm("hi", "mallory", n=2))
    assert not refused.accepted and "mallory" in refused.reason
    assert rec.replies == []


async def test_disabled_dm(store: Store) -> None:
    rec = Recorder()
    decision = await router(store, rec, AccessPolicy(dm_policy="disabled")).handle(dm("hi"))
    assert not decision.accepted and decision.reason == "direct messages are disabled"


async def test_pairing_issues_a_code_the_admin_approves(tmp_path: Path, store: Store) -> None:
    rec = Recorder()
    book = PairingFile(tmp_path / "pairing.json")
    r = router(store, rec, AccessPolicy(dm_policy="pairing"), pairing=book)
    first = await r.handle(dm("hello?", "carol", n=1))
    assert not first.accepted and "pairing code" in first.reason
    ((_target, text),) = rec.replies
    code = text.split("pairing code ")[1].split()[0]
    assert len(code) == 8 and not set(code) & set("01IO")
    again = await r.handle(dm("again?", "carol", n=2))
    assert not again.accepted and "already sent" in again.reason
    assert len(rec.replies) == 1  # one reply per code, however often the stranger writes
    assert await book.approve("telegram", code.lower()) == "carol"
    assert (await r.handle(dm("now?", "carol", n=3))).accepted
    # Approvals survive a restart.
    assert PairingFile(tmp_path / "pairing.json").is_approved("telegram", "carol")


async def test_wrong_pairing_code_admits_nobody(store: Store) -> None:
    book = PairingFile(None)
    router(store, Recorder(), AccessPolicy(dm_policy="pairing"), pairing=book)
    assert await book.approve("telegram", "NOPE1234") is None


async def test_pairing_code_expires(store: Store) -> None:
    now = [0.0]
    book = PairingFile(None, clock=lambda: now[0])
    code = await book.request("telegram", "dave")
    now[0] += 3601
    assert await book.approve("telegram", code) is None


async def test_group_not_on_allowlist_is_refused(store: Store) -> None:
    rec = Recorder()
    decision = await router(store, rec, AccessPolicy()).handle(group("hi", mention=True))
    assert not decision.accepted and "allowlist" in decision.reason


async def test_group_needs_a_mention_and_keeps_context(store: Store) -> None:
    rec = Recorder()
    policy = AccessPolicy(groups={"g1": GroupRule()})
    r = router(store, rec, policy)
    skipped = await r.handle(group("lunch at noon?", n=1))
    assert not skipped.accepted and "kept as context" in skipped.reason
    await r.handle(group("pizza!", sender="eve", n=2))
    assert (await r.handle(group("@bot what did they say?", mention=True, n=3))).accepted
    (message,) = rec.submitted
    # The message is as sent; the chatter is its context, each line labelled by its sender.
    assert message.text == "@bot what did they say?"
    assert turn_text(message).splitlines() == [
        CONTEXT_HEADER,
        "[Bob (id bob)] lunch at noon?",
        "[Eve (id eve)] pizza!",
        "",
        "[Bob (id bob)] @bot what did they say?",
    ]
    # The context is used once.
    await r.handle(group("@bot and now?", mention=True, n=4))
    assert rec.submitted[-1].context == ""
    assert turn_text(rec.submitted[-1]) == "[Bob (id bob)] @bot and now?"


async def test_context_the_adapter_brought_replaces_the_kept_chatter(store: Store) -> None:
    # A Slack thread fetched on the first mention there already holds what was kept of it.
    rec = Recorder()
    r = router(store, rec, AccessPolicy(groups={"g1": GroupRule()}))
    await r.handle(group("in the thread", n=1))
    thread = "[Earlier messages in this thread]\n[Bob (id bob)] in the thread"
    mention = replace(group("@bot so?", mention=True, n=2), context=thread)
    assert (await r.handle(mention)).accepted
    assert rec.submitted[-1].context == thread  # shown once, not twice
    assert await store.kept_chatter("telegram:g1") == []  # and consumed


async def test_group_without_mention_requirement(store: Store) -> None:
    rec = Recorder()
    policy = AccessPolicy(groups={"g1": GroupRule(require_mention=False)})
    assert (await router(store, rec, policy).handle(group("anyone?"))).accepted


async def test_open_group_policy_and_wildcard_rule(store: Store) -> None:
    rec = Recorder()
    r = router(store, rec, AccessPolicy(group_policy="open"))
    assert (await r.handle(group("hey", mention=True, chat="any"))).accepted
    r2 = router(store, rec, AccessPolicy(groups={"*": GroupRule(require_mention=False)}))
    assert (await r2.handle(group("hey", chat="other", n=9))).accepted


async def test_group_sender_allowlist_and_disabled_group(store: Store) -> None:
    rec = Recorder()
    policy = AccessPolicy(
        groups={
            "g1": GroupRule(allow_from=frozenset({"bob"})),
            "g2": GroupRule(enabled=False),
        }
    )
    r = router(store, rec, policy)
    assert (await r.handle(group("hi", mention=True, sender="bob"))).accepted
    assert not (await r.handle(group("hi", mention=True, sender="eve", n=2))).accepted
    assert not (await r.handle(group("hi", mention=True, chat="g2", n=3))).accepted


async def test_a_refused_group_sender_is_not_kept_as_context(store: Store) -> None:
    rec = Recorder()
    r = router(store, rec, AccessPolicy(groups={"g1": GroupRule(allow_from=frozenset({"bob"}))}))
    refused = await r.handle(group("psst, tell it this", sender="eve", n=1))
    assert not refused.accepted and "eve may not address the bot" in refused.reason
    await r.handle(group("lunch at noon?", n=2))
    assert [line.sender_id for line in await store.kept_chatter("telegram:g1")] == ["bob"]
    assert (await r.handle(group("@bot so?", mention=True, n=3))).accepted
    assert "eve" not in rec.submitted[-1].context.lower()


async def test_lines_kept_from_a_sender_the_policy_stopped_admitting_are_not_shown(
    store: Store,
) -> None:
    rec = Recorder()
    r = router(store, rec, AccessPolicy(groups={"g1": GroupRule()}))
    photo = Attachment(kind="image", ref="eve-photo", name="eve.jpg")
    await r.handle(group("lunch at noon?", n=1))
    await r.handle(replace(group("my plan", sender="eve", n=2), attachments=(photo,)))
    # A reload takes Eve off the group's allow_from before anyone addresses the bot.
    r.update_policies(
        {"telegram": AccessPolicy(groups={"g1": GroupRule(allow_from=frozenset({"bob"}))})}
    )
    assert (await r.handle(group("@bot so?", mention=True, n=3))).accepted
    prompt = rec.submitted[-1]
    assert prompt.context.splitlines() == [CONTEXT_HEADER, "[Bob (id bob)] lunch at noon?"]
    assert prompt.attachments == ()  # her file stays behind too
    assert await store.kept_chatter("telegram:g1") == []  # consumed all the same
    # Let back in, her old line does not come back.
    r.update_policies({"telegram": AccessPolicy(groups={"g1": GroupRule()})})
    assert (await r.handle(group("@bot and now?", mention=True, sender="eve", n=4))).accepted
    assert rec.submitted[-1].context == ""


async def test_mention_pattern_counts(store: Store) -> None:
    rec = Recorder()
    policy = AccessPolicy(groups={"g1": GroupRule()}, mention_patterns=(r"\bbotty\b",))
    assert (await router(store, rec, policy).handle(group("hey Botty, help"))).accepted


async def test_commands_pass_without_a_mention_and_without_context(store: Store) -> None:
    rec = Recorder()
    r = router(store, rec, AccessPolicy(groups={"g1": GroupRule()}))
    await r.handle(group("chatter", n=1))
    assert (await r.handle(group("/stop@mybot", n=2))).accepted
    assert rec.submitted[-1].text == "/stop@mybot"


async def test_disabled_groups(store: Store) -> None:
    decision = await router(store, Recorder(), AccessPolicy(group_policy="disabled")).handle(
        group("hi", mention=True)
    )
    assert not decision.accepted and decision.reason == "group messages are disabled"


async def test_pairing_is_approved_from_another_process_while_running(
    tmp_path: Path, store: Store
) -> None:
    """The admin runs `botd pairing approve` while the daemon (this router) keeps running."""
    import subprocess
    import sys

    rec = Recorder()
    state = tmp_path / "botd-state"
    r = router(
        store, rec, AccessPolicy(dm_policy="pairing"), pairing=PairingFile(state / "pairing.json")
    )
    await r.handle(dm("hello?", "frank", n=1))
    code = rec.replies[-1][1].split("pairing code ")[1].split()[0]
    config = tmp_path / "botd.yaml"
    config.write_text(f"state_dir: {state}\n", encoding="utf-8")
    botd = [sys.executable, "-m", "botd", "pairing"]
    listed = subprocess.run(
        [*botd, "list", "--config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0 and f"{code}  telegram  frank" in listed.stdout
    wrong = subprocess.run(
        [*botd, "approve", "telegram", "WRONG123", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert wrong.returncode == 1 and "no pending code" in wrong.stderr
    approved = subprocess.run(
        [*botd, "approve", "telegram", code, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert approved.returncode == 0 and "approved frank on telegram" in approved.stdout
    assert (await r.handle(dm("now?", "frank", n=2))).accepted


async def test_a_message_is_recorded_under_all_its_keys_and_a_repeat_of_any_is_dropped(
    store: Store,
) -> None:
    rec = Recorder()
    r = router(store, rec, AccessPolicy(dm_policy="open"))
    first = replace(dm("hi"), dedupe_keys=("EvA", "alice:1.0"))
    twin = replace(dm("hi again"), dedupe_keys=("EvB", "alice:1.0"))
    retry = replace(dm("hi"), dedupe_keys=("EvA",))
    assert (await r.handle(first)).accepted
    for repeat in (twin, retry):
        decision = await r.handle(repeat)
        assert not decision.accepted and decision.reason == "already seen"
    assert [m.text for m in rec.submitted] == ["hi"]
    # Every key of a message is recorded, the twin's own event id included.
    assert await store.seen_inbound("telegram", "EvB")
    # A message without keys is recorded under its account, chat and message id.
    assert (await r.handle(dm("plain", n=9))).accepted
    assert await store.seen_inbound("telegram", "default:alice:9")


async def test_the_router_records_a_message_in_one_write(sqlite_store: SqliteStore) -> None:
    # Accepted: its keys and the message itself go into the database in one transaction.
    writes: list[tuple[str, ...]] = []
    accept, record = sqlite_store.accept_inbound, sqlite_store.seen_inbound

    async def counting_accept(
        channel: str,
        keys: Sequence[str],
        message: InboundMessage,
        *,
        consume_chatter: tuple[str, int] | None = None,
        unless_chatter_kept: bool = False,
        chatter_read_by: str | None = None,
    ) -> int | None:
        writes.append(tuple(keys))
        return await accept(
            channel,
            keys,
            message,
            consume_chatter=consume_chatter,
            unless_chatter_kept=unless_chatter_kept,
            chatter_read_by=chatter_read_by,
        )

    async def counting_record(channel: str, *keys: str) -> bool:
        writes.append(keys)
        return await record(channel, *keys)

    sqlite_store.accept_inbound = counting_accept  # type: ignore[method-assign]
    sqlite_store.seen_inbound = counting_record  # type: ignore[method-assign]
    rec = Recorder()
    r = router(sqlite_store, rec, AccessPolicy(dm_policy="open"))
    await r.handle(replace(dm("hi"), dedupe_keys=("EvA", "alice:1.0")))
    assert writes == [("EvA", "alice:1.0")]
    inbox_id = rec.submitted[0].inbox_id
    assert inbox_id is not None and sqlite_store.inbox_state(inbox_id) == "accepted"
