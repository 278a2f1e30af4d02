"""The inbound path: a platform's message -> the dedupe ledger -> access and pairing -> mention
gating -> commands -> the conversation; and the same access rules asked for the agent's
``message`` tool."""
