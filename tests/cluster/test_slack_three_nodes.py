"""Slack on three ``botd run`` nodes sharing one PostgreSQL, each with its own Socket Mode
connection: Slack (the fake) spreads events over the open connections and sends one again
when it is not acknowledged in time (a paused node's). One node is SIGKILLed mid-answer,
another SIGSTOPped mid-answer until its conversation was taken over (``tests/cluster/
scenario.py``). Checked as for Telegram, except that no piece may show twice: a piece whose
send is in doubt is looked up by its metadata before it is sent again.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.cluster.harness import MODEL_KEY, Cluster, Job
from tests.cluster.scenario import EVERY, SlackChats, check_outcome, kill_and_pause
from tests.cluster.script import JOB_PROMPT, ModelScript
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.slack_api import FakeSlack

JOB = Job("tick", f"{EVERY:g}s", JOB_PROMPT, "slack", "C0JOBS")


async def test_three_nodes_on_socket_mode_survive_a_kill_and_a_pause(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        # Message ts from the real clock, as Slack's: the look-up of a piece in doubt asks
        # for the messages since it was written (``oldest``).
        FakeSlack(clock=time.time) as slack,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Cluster(tmp_path, postgres_dsn, model, slack=slack, jobs=[JOB]) as cluster,
    ):
        script = ModelScript(model)
        chats = SlackChats(slack)
        await cluster.start_all()
        outcome = await kill_and_pause(cluster, chats, script, JOB, dms=6, messages=2)
    check_outcome(chats, script, JOB, outcome, window=False)
