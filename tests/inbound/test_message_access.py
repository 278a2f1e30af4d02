"""Where the message tool may post: the run's own conversation, listed targets the access
policy allows, nothing else; the policy question asked without side effects; the config key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from botd.channels.registry import channel_specs
from botd.chat import Target
from botd.config import BotdConfig, ConfigError, load_config, parse_config
from botd.config.schema import MessageTargetSection
from botd.inbound.access import AccessPolicy, GroupRule
from botd.inbound.message_access import NOT_LISTED, MessageAccess
from botd.inbound.router import Router
from botd.store import Store
from botd.store.pairing import PairingFile
from botd.wiring import access_policies, scheduler_jobs


async def _nothing(*_args: object) -> None:
    return None


TELEGRAM_IDS = channel_specs()["telegram"].chat_kind
"""How Telegram's chat ids read (a policy of a Telegram channel tells the router)."""
SLACK_IDS = channel_specs()["slack"].chat_kind


def _router(store: Store, policy: AccessPolicy, pairing: PairingFile | None = None) -> Router:
    return Router(store, _nothing, _nothing, {"telegram": policy}, pairing=pairing)


POLICY = AccessPolicy(
    chat_kind=TELEGRAM_IDS,
    dm_policy="pairing",
    allow_from=frozenset({"111"}),
    group_policy="allowlist",
    groups={
        "-100200": GroupRule(allow_from=frozenset({"111"})),
        "-100300": GroupRule(enabled=False),
    },
)


# --------------------------------------------------------------------------- the policy question


def test_chat_kind_follows_each_platforms_ids() -> None:
    """Each channel's policy reads chat ids as its platform does, a channel of another name
    (``support``, a second Telegram bot) as its platform's too."""
    config = parse_config(
        textwrap.dedent(
            """
            channels:
              telegram: {token: "1:a"}
              support: {platform: telegram, token: "2:b"}
              slack: {bot_token: b, app_token: a}
              discord: {token: d}
            """
        ),
        {},
    )
    policies = access_policies(config)
    for telegram in ("telegram", "support"):
        kind = policies[telegram].kind_of
        assert kind("777") == ("direct", "777")
        assert kind("-100123") == ("group", None)
        assert kind("@news") == ("group", None)
        assert kind("²") == ("group", None)  # a digit int() refuses
    kind = policies["slack"].kind_of
    assert kind("U0ABC") == ("direct", "U0ABC")
    assert kind("W0ABC") == ("direct", "W0ABC")
    assert kind("D0ABC") == ("direct", None)
    assert kind("C0ABC") == ("group", None)
    assert policies["discord"].kind_of("123456") == ("unknown", None)


async def test_a_dm_is_allowed_only_with_a_user_who_would_be_let_in(
    store: Store, tmp_path: Path
) -> None:
    pairing = PairingFile(tmp_path / "pairing.json")
    router = _router(store, POLICY, pairing)

    assert router.may_post(Target("telegram", "111")).accepted  # allowlisted
    stranger = router.may_post(Target("telegram", "999"))
    assert not stranger.accepted
    assert stranger.reason == "user 999 has not been paired or allowlisted"

    code = await pairing.request("telegram", "999")
    assert await pairing.approve("telegram", code) == "999"
    assert router.may_post(Target("telegram", "999")).accepted  # paired


async def test_asking_issues_no_pairing_code_and_records_nothing(
    store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "pairing.json"
    router = _router(store, POLICY, PairingFile(path))

    for _ in range(3):
        assert not router.may_post(Target("telegram", "999")).accepted

    assert not path.exists()
    assert await PairingFile(path).pending() == []
    assert not await store.seen_inbound("telegram", "probe")  # the ledger was empty before


def test_dm_policies(store: Store) -> None:
    def verdict(dm_policy: str) -> tuple[bool, str]:
        policy = AccessPolicy(dm_policy=dm_policy, chat_kind=TELEGRAM_IDS)  # type: ignore[arg-type]
        decision = _router(store, policy).may_post(Target("telegram", "999"))
        return decision.accepted, decision.reason

    assert verdict("open") == (True, "allowed")
    assert verdict("allowlist") == (False, "sender 999 is not on the allowlist")
    assert verdict("disabled") == (False, "direct messages are disabled")


def test_a_group_is_allowed_only_when_the_group_policy_allows_it(store: Store) -> None:
    router = _router(store, POLICY)

    # Allowed although its allow_from names who may address the bot, not where it may post.
    assert router.may_post(Target("telegram", "-100200")).accepted
    assert router.may_post(Target("telegram", "-100200", thread_id="5")).accepted
    other = router.may_post(Target("telegram", "-100999"))
    assert (other.accepted, other.reason) == (False, "group -100999 is not on the allowlist")
    off = router.may_post(Target("telegram", "-100300"))
    assert (off.accepted, off.reason) == (False, "group -100300 is disabled")

    router.update_policies({"telegram": AccessPolicy(group_policy="open", chat_kind=TELEGRAM_IDS)})
    assert router.may_post(Target("telegram", "-100999")).accepted
    router.update_policies(
        {"telegram": AccessPolicy(group_policy="disabled", chat_kind=TELEGRAM_IDS)}
    )
    assert not router.may_post(Target("telegram", "-100200")).accepted


def test_a_chat_of_unknown_kind_must_be_named_under_groups(store: Store) -> None:
    router = Router(
        store,
        _nothing,
        _nothing,
        {
            "discord": AccessPolicy(
                dm_policy="open", group_policy="open", groups={"42": GroupRule()}
            )
        },
    )

    assert router.may_post(Target("discord", "42")).accepted
    # Maybe a stranger's DM channel: an open policy or "*" does not reach it.
    assert not router.may_post(Target("discord", "43")).accepted


def test_a_slack_dm_channel_of_unknown_user_needs_open_dms(store: Store) -> None:
    closed = AccessPolicy(dm_policy="allowlist", chat_kind=SLACK_IDS)
    opened = AccessPolicy(dm_policy="open", chat_kind=SLACK_IDS)
    closed_router = Router(store, _nothing, _nothing, {"slack": closed})
    opened_router = Router(store, _nothing, _nothing, {"slack": opened})

    assert not closed_router.may_post(Target("slack", "D0ABC")).accepted
    assert opened_router.may_post(Target("slack", "D0ABC")).accepted


# --------------------------------------------------------------------------- the tool's rules


def _access(
    store: Store,
    targets: list[MessageTargetSection],
    channels: tuple[str, ...] = ("telegram",),
) -> tuple[MessageAccess, Router]:
    router = _router(store, POLICY)
    return MessageAccess(router, lambda: targets, channels), router


def _target(text: str) -> MessageTargetSection:
    return MessageTargetSection.model_validate(text, context={"channels": ["telegram"]})


def test_the_own_conversation_is_always_reachable(store: Store) -> None:
    access, _ = _access(store, [])
    origin = Target("telegram", "-100999", thread_id="7", reply_to_id="55")

    # Even a group off the allowlist: a scheduled job's deliver_to, say.
    assert access.refusal(Target("telegram", "-100999", thread_id="7"), origin) is None
    assert access.refusal(origin, origin) is None


def test_anything_else_must_be_listed(store: Store) -> None:
    access, _ = _access(store, [])
    origin = Target("telegram", "111")

    assert access.refusal(Target("telegram", "-100200"), origin) == NOT_LISTED
    # Another thread of the same chat, or another account, is another conversation.
    here = Target("telegram", "-100200", thread_id="1")
    assert access.refusal(Target("telegram", "-100200", thread_id="2"), here) == NOT_LISTED
    assert access.refusal(Target("telegram", "111", account_id="other"), origin) == NOT_LISTED
    assert access.refusal(Target("telegram", "-100200"), None) == NOT_LISTED


def test_a_listed_target_still_needs_the_policy(store: Store) -> None:
    listed = [_target("telegram/-100200"), _target("telegram/-100999"), _target("telegram/999")]
    access, router = _access(store, listed)
    origin = Target("telegram", "111")

    assert access.refusal(Target("telegram", "-100200"), origin) is None
    assert access.refusal(Target("telegram", "-100999"), origin) == (
        "the access policy refuses chat -100999 (group -100999 is not on the allowlist)"
    )
    assert access.refusal(Target("telegram", "999"), origin) == (
        "the access policy refuses chat 999 (user 999 has not been paired or allowlisted)"
    )
    # An entry without a thread names the chat, not its threads.
    assert access.refusal(Target("telegram", "-100200", thread_id="5"), origin) == NOT_LISTED

    reloaded = AccessPolicy(group_policy="open", chat_kind=TELEGRAM_IDS)
    router.update_policies({"telegram": reloaded})  # a reload
    assert access.refusal(Target("telegram", "-100999"), origin) is None


def test_targets_are_read_at_each_call(store: Store) -> None:
    targets: list[MessageTargetSection] = []
    access = MessageAccess(_router(store, POLICY), lambda: targets, ("telegram",))
    origin = Target("telegram", "111")

    assert access.refusal(Target("telegram", "-100200"), origin) == NOT_LISTED
    targets.append(_target("telegram/-100200"))
    assert access.refusal(Target("telegram", "-100200"), origin) is None


def test_a_channel_that_is_not_running_is_refused(store: Store) -> None:
    access, _ = _access(store, [_target("telegram/-100200")], channels=())

    assert access.refusal(Target("telegram", "-100200"), None) == "channel telegram is not running"


# --------------------------------------------------------------------------- the config key


def _load(tmp_path: Path, body: str) -> BotdConfig:
    path = tmp_path / "botd.yaml"
    text = "channels:\n  console: {enabled: true}\n" + textwrap.dedent(body)
    path.write_text(text, encoding="utf-8")
    return load_config(path, {})


def test_message_targets_as_strings_and_mappings(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        """
        agent:
          message_targets:
            - console/me
            - console/room/7
            - {channel: console, chat: 42, thread: 5}
        """,
    )
    targets = config.agent.message_targets
    assert [(t.channel, t.chat, t.thread) for t in targets] == [
        ("console", "me", None),
        ("console", "room", "7"),
        ("console", "42", "5"),
    ]
    assert [t.describe() for t in targets] == ["console/me", "console/room/7", "console/42/5"]


def test_bad_message_targets_are_named_by_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(
            tmp_path,
            """
            agent:
              message_targets:
                - console
                - console//x
                - {channel: telgram, chat: "1"}
                - {channel: console}
                - {channel: console, chat: "1", topic: "2"}
            """,
        )
    found = [(p.path, p.message) for p in caught.value.problems]
    assert found[0][0] == "agent.message_targets[0]"
    assert "is not channel/chat or channel/chat/thread" in found[0][1]
    assert found[1][0] == "agent.message_targets[1]"
    assert found[2] == (
        "agent.message_targets[2].channel",
        "unknown channel 'telgram'; did you mean 'telegram'?",
    )
    assert found[3][0] == "agent.message_targets[3].chat"
    assert found[4][0] == "agent.message_targets[4].topic"
    assert len(found) == 5


def test_a_message_target_on_a_channel_not_configured(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, "agent:\n  message_targets: [telegram/-100123]\n")
    assert [(p.path, p.line, p.message) for p in caught.value.problems] == [
        ("agent.message_targets[0].channel", 4, "channel 'telegram' is not configured")
    ]


def test_a_scheduled_jobs_run_may_post_to_its_deliver_to(tmp_path: Path, store: Store) -> None:
    path = tmp_path / "botd.yaml"
    path.write_text(
        textwrap.dedent(
            """
            channels:
              telegram: {token: "123:abc", group_policy: allowlist}
            scheduler:
              jobs:
                - id: digest
                  every: 1h
                  prompt: post the digest
                  deliver_to: {channel: telegram, chat: -100999, thread: 3}
            """
        ),
        encoding="utf-8",
    )
    job = scheduler_jobs(load_config(path, {}))[0]
    access, _ = _access(store, [])
    # The job's run answers in its deliver_to conversation (the scheduler's message targets
    # it), so that is the run's own conversation even off the group allowlist; no other chat.
    assert access.refusal(job.target, job.target) is None
    assert access.refusal(Target("telegram", "-100999"), job.target) == NOT_LISTED


def test_an_unreadable_pairing_file_refuses(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "pairing.json"
    book = PairingFile(path)
    path.write_text("{not json", encoding="utf-8")  # damaged after botd read it
    access = MessageAccess(
        _router(store, POLICY, book), lambda: [_target("telegram/999")], ("telegram",)
    )

    assert access.refusal(Target("telegram", "999"), Target("telegram", "111")) == (
        "the access policy for chat 999 could not be read"
    )
