"""The ACP channel: editors that speak the Agent Client Protocol talk to botd's agent."""
