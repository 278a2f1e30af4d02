"""botd as the client of an ACP agent (``agent.backend: acp``, docs/acp.md): a coding agent
that speaks the Agent Client Protocol (Claude Code through its ACP adapter, Gemini CLI…)
answers the chats instead of botd's own agent loop.

* ``agent``: an agent's process (one per configured agent, ``agent.acp`` and each of
  ``agent.acp_agents``, started when a chat first needs it and again after it ended) and its
  sessions (one per botd session), each working in its conversation's workspace
  (``botd.workspace``: the agent's cwd and the only place its file requests reach);
* ``turn``: one prompt turn, told as botd's agent events, so the subscriber, tool progress,
  approvals and the transcript work as for botd's own model;
* ``terminals``: the commands an agent runs through botd (``terminal/*``), when its section
  turns them on;
* ``session_ids``: which agent session holds each botd session, across restarts.

Only ``botd.runtime`` imports this package's SDK-using modules, and only when an agent is
configured: the SDK (``agent-client-protocol``) is the extra ``botd[acp]``.
"""
