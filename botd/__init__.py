"""botd: LLM agents in Slack, Discord and Telegram conversations."""

try:
    from ._version import __version__ as __version__
except ImportError:  # a copy of the tree run as it is, never built nor installed
    __version__ = "0.0.0"
"""botd's version: git's, as setuptools-scm gave it when botd was built or installed
(``pyproject.toml``, ``[tool.setuptools_scm]``); a copy never built has the fallback 0.0.0."""
