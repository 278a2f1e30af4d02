"""One Telegram bot's budget shared by three ``botd run`` nodes on one PostgreSQL: at
saturation (many DMs at once, reaching the nodes round-robin through the webhook, status
reactions on by default) the fake Bot API, answering 429 past Telegram's limits for the
token, refuses nothing, and every message is answered once. Each node alone would keep to
30 requests a second; together they keep to it only by drawing from the one rate in the
database (``botd.cluster.budget``).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from tests.cluster.harness import MODEL_KEY, TOKEN, Cluster
from tests.cluster.script import ModelScript, answer, ask_every_dm, every_dm_answered, prompt
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.waiting import until

DMS = 90
FIRST_DM = 3000


async def test_three_nodes_at_saturation_get_no_429_and_answer_every_message_once(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        FakeTelegramAPI(TOKEN) as telegram,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Cluster(tmp_path, postgres_dsn, model, telegram=telegram, telegram_mode="webhook") as nodes,
    ):
        ModelScript(model)
        await nodes.start_all()
        await nodes.ready("telegram")
        telegram.limit_like_telegram()
        ask_every_dm(telegram, FIRST_DM, DMS)
        await until(partial(every_dm_answered, telegram, FIRST_DM, DMS), "every DM answered")
        await until(lambda: len(telegram.reactions) == DMS, "every message's reaction")
        await nodes.stop_all()
    senders = {call.via for call in telegram.calls_to("sendMessage", ok_only=True)}
    assert len(senders) > 1, "the answers came from more than one node"
    assert telegram.rate_limited == []
    for k in range(DMS):
        assert telegram.visible(FIRST_DM + k) == [answer(prompt(k, 0))]
