"""Discord on three ``botd run`` nodes sharing one PostgreSQL: one gateway session for the
shard, held by the node with its lease. That node is SIGKILLed mid-answer (another one must
take the shard over), and a node streaming another answer is SIGSTOPped until its
conversation was taken over (``tests/cluster/scenario.py``). Checked as for Telegram, except
that no piece may show twice: each message carries its piece's nonce with
``enforce_nonce``, so a piece sent again makes no second message.

The fake gateway hands an event to every session open on the event's shard, and one dispatched
while none is open waits for the next one (real Discord would give it only to a session that
resumes the old one).
"""

from __future__ import annotations

from pathlib import Path

from tests.cluster.harness import MODEL_KEY, Cluster, Job
from tests.cluster.scenario import EVERY, DiscordChats, check_outcome, kill_and_pause
from tests.cluster.script import JOB_PROMPT, ModelScript
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.discord_api import CHANNEL_ID, FakeDiscordAPI

JOB = Job("tick", f"{EVERY:g}s", JOB_PROMPT, "discord", str(CHANNEL_ID))


async def test_three_nodes_sharing_the_shard_survive_a_kill_and_a_pause(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        FakeDiscordAPI() as discord,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Cluster(tmp_path, postgres_dsn, model, discord=discord, jobs=[JOB]) as cluster,
    ):
        script = ModelScript(model)
        chats = DiscordChats(discord)
        await cluster.start_all()
        outcome = await kill_and_pause(
            cluster, chats, script, JOB, dms=6, messages=2, poller="discord:"
        )
    check_outcome(chats, script, JOB, outcome, window=False)
