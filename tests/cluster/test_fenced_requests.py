"""Each platform's HTTP client checks the lease given with a send (``SendScope.fence``) as a
request is written: a send that passed the delivery's check and was then held up
(in the SDK's rate limiter, or by a node paused between the two) is not written once the
lease is at its end, and the delivery sees ``LeaseLost``, not a failure to retry or report.

The adapters are the real ones over the loopback fakes; the lease is one node's (kept in
memory), its deadline moved as a pause would leave it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from botd.channels.base import SendScope
from botd.channels.errors import ChannelError
from botd.chat import Capabilities, MessageRef, PieceKey, Target
from botd.cluster.fencing import Fence, LeaseLost, RunScope, lost_in
from botd.cluster.leases import Lease, LeaseKeeper, ProcessLeases
from botd.delivery import ChannelDelivery, RunOptions
from botd.store import Store
from botd.subscriber import BlockReply
from botd.text.markup import PLAIN
from tests.channels.discord.harness import Sink, make_adapter
from tests.channels.routed import through_router
from tests.channels.slack.harness import slack_adapter
from tests.channels.telegram.harness import DM, started
from tests.fakes.discord_api import FakeDiscordAPI
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.waiting import HANG_GUARD

pytestmark = pytest.mark.no_nodes

MARGIN = 1.0


async def claimed(key: str) -> Lease:
    keeper = LeaseKeeper(ProcessLeases(), "node-a", 60)
    lease = await keeper.try_claim(f"conversation:{key}")
    assert lease is not None
    return lease


def held(lease: Lease) -> SendScope:
    """The scope of a send made under ``lease``."""
    return SendScope(Fence(lease, "node-a", MARGIN))


def at_its_end(lease: Lease) -> SendScope:
    """The scope of a send under ``lease`` whose deadline is nearer than the margin now: the
    node was paused after the delivery's own check."""
    lease.deadline = time.monotonic() + MARGIN / 2
    return held(lease)


def refused_for_the_lease(exc: BaseException, lease: Lease) -> None:
    assert lost_in(exc) is not None, f"not for the lease: {exc!r}"
    assert lease.lost.is_set()  # given up: the conversation's work stops


async def test_telegram_writes_no_request_past_the_lease() -> None:
    async with FakeTelegramAPI() as fake:
        bot = await started(fake)
        try:
            lease = await claimed(f"telegram:{DM}")
            await bot.adapter.send(Target("telegram", str(DM)), "while it holds", scope=held(lease))
            with pytest.raises(ChannelError) as raised:
                await bot.adapter.send(Target("telegram", str(DM)), "late", scope=at_its_end(lease))
            refused_for_the_lease(raised.value, lease)
            texts = [c.params["text"] for c in fake.calls_to("sendMessage")]
            assert texts == ["while it holds"]
            # Work with no lease (the poller, a command's answer outside a run) is not checked.
            await bot.adapter.send(Target("telegram", str(DM)), "unfenced")
            assert len(fake.calls_to("sendMessage")) == 2
        finally:
            await bot.adapter.stop()


class EndsAtTheFirstWrite(Fence):
    """A lease that ends just after the first check passed: the node froze after writing a
    request's headers, and thawed past the lease's end with its body still to write."""

    def check_send(self, now: float) -> None:
        super().check_send(now)
        self.lease.deadline = now


async def test_telegram_leaves_a_request_cut_between_headers_and_body_undone() -> None:
    async with FakeTelegramAPI() as fake:
        bot = await started(fake)
        try:
            lease = await claimed(f"telegram:{DM}")
            target = Target("telegram", str(DM))
            ending = EndsAtTheFirstWrite(lease, "node-a", MARGIN)
            with pytest.raises(ChannelError) as raised:
                await bot.adapter.send(target, "cut in two", scope=SendScope(ending))
            refused_for_the_lease(raised.value, lease)
            # The headers went out, the body did not: Telegram never had a request to carry
            # out, and the next send goes through on a connection of its own.
            await bot.adapter.send(target, "after")
            assert [c.params["text"] for c in fake.calls_to("sendMessage")] == ["after"]
        finally:
            await bot.adapter.stop()


async def test_slack_makes_no_call_past_the_lease() -> None:
    async with FakeSlack() as fake:
        adapter = slack_adapter(fake)
        lease = await claimed("slack:D1")
        await adapter.send(Target("slack", "D1"), "while it holds", scope=held(lease))
        with pytest.raises(LeaseLost) as raised:
            await adapter.send(Target("slack", "D1"), "late", scope=at_its_end(lease))
        refused_for_the_lease(raised.value, lease)
        assert [c.args["text"] for c in fake.calls_to("chat.postMessage")] == ["while it holds"]


@pytest.fixture
async def discord_fake() -> AsyncIterator[FakeDiscordAPI]:
    async with FakeDiscordAPI() as server:
        yield server


async def test_discord_writes_no_request_past_the_lease(
    discord_fake: FakeDiscordAPI, store: Store
) -> None:
    adapter = make_adapter(discord_fake)
    await asyncio.wait_for(adapter.start(through_router(store, Sink(), "discord")), HANG_GUARD)
    try:
        channel = "4242"
        target = Target("discord", channel)
        lease = await claimed(f"discord:{channel}")
        sent = adapter.send(target, "while it holds", scope=held(lease))
        await asyncio.wait_for(sent, HANG_GUARD)
        with pytest.raises(Exception) as raised:
            await asyncio.wait_for(
                adapter.send(target, "late", scope=at_its_end(lease)), HANG_GUARD
            )
        refused_for_the_lease(raised.value, lease)
        assert [r.body["content"] for r in discord_fake.message_posts()] == ["while it holds"]
    finally:
        await asyncio.wait_for(adapter.stop(), HANG_GUARD)


class WrappingAdapter:
    """An adapter whose SDK wraps what its HTTP client's hook raised, as PTB does."""

    name = "fake"
    capabilities = Capabilities(text_limit=100, markup=PLAIN)

    def __init__(self) -> None:
        self.attempts = 0

    async def start(self, sink: object) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        self.attempts += 1
        try:
            if scope is not None and scope.fence is not None:
                scope.fence.check_send(time.monotonic())
        except LeaseLost as exc:
            raise ChannelError("Unknown error in HTTP implementation", retryable=True) from exc
        return [MessageRef(target, str(self.attempts))]

    async def edit(self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None) -> None:
        return None

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None


async def test_the_delivery_stops_the_run_on_a_lease_lost_inside_the_sdk() -> None:
    # The delivery's own check passes; the lease ends before the request is written. The
    # SDK's retryable-looking error is the lease: no retry, nothing posted, no notice.
    adapter = WrappingAdapter()
    lease = await claimed("fake:c1")
    delivery = ChannelDelivery({"fake": adapter})  # type: ignore[dict-item]
    scope = RunScope("fake:c1", Fence(lease, "node-a", MARGIN))
    output = delivery.open_run(Target("fake", "c1"), RunOptions(), scope=scope)
    real_send = adapter.send

    async def paused_after_the_check(
        target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        lease.deadline = time.monotonic()  # the pause came after the delivery's check
        return await real_send(target, markdown, scope=scope)

    adapter.send = paused_after_the_check  # type: ignore[method-assign]
    output.block(BlockReply("First paragraph."))
    output.final(BlockReply("Second paragraph."))
    async with asyncio.timeout(HANG_GUARD):  # a retry would wait out its backoff
        await output.close()
    assert adapter.attempts == 1
    assert lease.lost.is_set()


async def test_telegram_sends_go_through_a_proxy_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # httpx honours HTTP(S)_PROXY; the fenced transport does not, so with a proxy named the
    # adapter keeps httpx's transport (and checks the lease as each request starts).
    relayed: list[str] = []

    async def relay(request: web.BaseRequest) -> web.Response:
        relayed.append(request.path.rsplit("/", 1)[-1])
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method, str(request.url), data=await request.read(), headers=request.headers
            ) as answer,
        ):
            return web.Response(
                status=answer.status, body=await answer.read(), content_type=answer.content_type
            )

    server = web.Server(relay)
    runner = web.ServerRunner(server)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with FakeTelegramAPI() as fake:
            monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
            for name in ("NO_PROXY", "no_proxy"):  # the suite keeps loopback off proxies
                monkeypatch.delenv(name)
            bot = await started(fake)
            try:
                await bot.adapter.send(Target("telegram", str(DM)), "through the proxy")
            finally:
                await bot.adapter.stop()
            assert [c.params["text"] for c in fake.calls_to("sendMessage")] == ["through the proxy"]
            assert "sendMessage" in relayed
    finally:
        await runner.cleanup()


# -- the scope a send is given is the one its request carries ------------------------------


async def test_discord_tags_a_send_with_the_key_it_is_given(
    discord_fake: FakeDiscordAPI, store: Store
) -> None:
    adapter = make_adapter(discord_fake)
    await asyncio.wait_for(adapter.start(through_router(store, Sink(), "discord")), HANG_GUARD)
    try:
        target = Target("discord", "4242")
        lease = await claimed("discord:4242")
        key = PieceKey.of(7, "keyed").message(2)
        scope = SendScope(Fence(lease, "node-a", MARGIN), key)
        await asyncio.wait_for(adapter.send(target, "keyed", scope=scope), HANG_GUARD)
        await asyncio.wait_for(adapter.send(target, "plain"), HANG_GUARD)
        keyed, plain = discord_fake.message_posts()
        assert keyed.body["nonce"] == key.token(0)
        assert keyed.body["enforce_nonce"] is True
        assert plain.body["nonce"] != key.token(0)  # a send of no piece: a nonce of its own
        # The fence it was given is the one its request was checked against.
        with pytest.raises(Exception) as raised:
            late = SendScope(at_its_end(lease).fence, key)
            await asyncio.wait_for(adapter.send(target, "keyed", scope=late), HANG_GUARD)
        refused_for_the_lease(raised.value, lease)
        assert len(discord_fake.message_posts()) == 2
    finally:
        await asyncio.wait_for(adapter.stop(), HANG_GUARD)


async def test_slack_tags_a_send_with_the_key_it_is_given() -> None:
    async with FakeSlack() as fake:
        adapter = slack_adapter(fake)
        lease = await claimed("slack:D1")
        key = PieceKey.of(7, "keyed").message(2)
        await adapter.send(Target("slack", "D1"), "keyed", scope=SendScope(held(lease).fence, key))
        await adapter.send(Target("slack", "D1"), "plain", scope=held(lease))
        keyed, plain = fake.calls_to("chat.postMessage")
        assert keyed.args["metadata"]["event_payload"] == {"piece": key.token(0)}
        assert not plain.args.get("metadata")
        with pytest.raises(LeaseLost):
            late = SendScope(at_its_end(lease).fence, key)
            await adapter.send(Target("slack", "D1"), "keyed", scope=late)
        assert len(fake.calls_to("chat.postMessage")) == 2


async def test_telegram_checks_the_fence_it_is_given_and_no_other() -> None:
    async with FakeTelegramAPI() as fake:
        bot = await started(fake)
        try:
            target = Target("telegram", str(DM))
            lost, kept = await claimed(f"telegram:{DM}"), await claimed("telegram:other")
            late = at_its_end(lost)
            # Two sends at once, one under a lease at its end: only that one is refused.
            results = await asyncio.gather(
                bot.adapter.send(target, "late", scope=late),
                bot.adapter.send(target, "held", scope=held(kept)),
                return_exceptions=True,
            )
            assert isinstance(results[0], ChannelError)
            refused_for_the_lease(results[0], lost)
            assert not kept.lost.is_set()
            assert [c.params["text"] for c in fake.calls_to("sendMessage")] == ["held"]
        finally:
            await bot.adapter.stop()
