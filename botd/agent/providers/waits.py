"""How long a model provider waits, and what the user reads when the wait runs out: the same
for every provider."""

from __future__ import annotations

from ...retry import Backoff

DEFAULT_IDLE_TIMEOUT = 60.0
"""Seconds a model stream may stay silent (not one byte) before it is abandoned."""

CONNECT_TIMEOUT = 30.0
"""Longest wait for a connection to the model's server (capped by the idle timeout)."""

NO_ANSWER_IN_TIME = "The model did not answer in time; please try again."
"""The error a stalled model call ends with: the one line the user reads, whoever the provider."""


def retry_backoff() -> Backoff:
    """Delays between model-call retries the server gave no wait for (one per request).

    0.5 s doubling up to 8 s, each up to a quarter shorter at random so that clients that
    failed together spread out.
    """
    return Backoff(0.5, factor=2.0, cap=8.0, jitter=0.25)
