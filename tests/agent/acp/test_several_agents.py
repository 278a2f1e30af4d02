"""Several ACP agents at once: ``agent.acp`` and the named ``agent.acp_agents``, each group
answered by the one its ``backend`` names, each agent its own process (started when first
needed). The agents are the tiny ``shell_agent.py``, told apart by ``AGENT_NAME``."""

from __future__ import annotations

from pathlib import Path

from tests.agent.acp.harness import shell_agent_entry
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.support.chat import DM, chatting
from tests.support.waiting import until

ONE, TWO = -100111, -100222
ALICE = user(DM, "Alice")


async def test_two_groups_are_answered_by_two_agents_each_its_own_process(
    tmp_path: Path,
) -> None:
    section = (
        "agent:\n"
        "  backend: model\n"
        f"  acp: {shell_agent_entry('agent-one')}\n"
        "  acp_agents:\n"
        f"    second: {shell_agent_entry('agent-two')}\n"
        f"    unused: {shell_agent_entry('agent-3')}\n"
    )
    groups = (
        f'groups: {{"{ONE}": {{require_mention: false, backend: acp}}, '
        f'"{TWO}": {{require_mention: false, backend: "acp:second"}}}}'
    )
    async with (
        FakeTelegramAPI() as telegram,
        chatting(tmp_path, telegram, telegram_options=[groups], sections=[section]) as chat,
    ):
        runtime = chat.daemon.runtime
        assert runtime is not None
        assert all(agent.pid is None for agent in runtime.acp.values())  # none started yet
        telegram.push_text(ONE, "who", sender=ALICE)
        [one] = await until(lambda: telegram.visible(ONE), "the first group's answer")
        telegram.push_text(TWO, "who", sender=ALICE)
        [two] = await until(lambda: telegram.visible(TWO), "the second group's answer")
        first, second = runtime.acp["acp"].pid, runtime.acp["acp:second"].pid
        assert first is not None and second is not None and first != second
        assert (one, two) == (f"agent-one pid {first}", f"agent-two pid {second}")
        assert runtime.acp["acp:unused"].pid is None  # configured, used by no chat
