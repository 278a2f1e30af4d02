"""The agent runtime: the loop (turns, tools, steering, cancellation) and its providers."""
