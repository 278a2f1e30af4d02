"""``botd init``: a starting config written from a few answers, never over an existing file.

It asks for the channel, the names of the environment variables holding its secrets (the
file refers to them as ``${NAME}``, so no secret is ever written or asked for), who may DM
the bot, and the model provider (what it asks of a channel, and which channels it offers,
each channel's spec says: ``ChannelSpec.init``); each question shows its default, taken
with an empty answer. The text is validated with the variables standing in before anything
is written, and the file is created exclusively: an existing path is refused, even one that
appears while the questions are being answered.

Files ship inside the package (``botd/data``, so an install from a wheel has them too): the
full config reference, which ``botd init --example FILE`` writes the same way, the systemd
unit, which ``botd unit`` prints, and its drop-ins (``botd unit --drop-in NAME``: ``mcp-node``
for MCP servers on Node.js, ``exec`` for the ``exec`` tool's bubblewrap).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from ..channels.registry import ChannelSpec

__all__ = ["Answers", "init", "offered", "print_unit", "render", "shipped", "write_example"]

DM_POLICIES = ("pairing", "allowlist", "open", "disabled")
PROVIDERS = ("anthropic", "openai", "scripted")


def offered(specs: Mapping[str, ChannelSpec[Any]] | None = None) -> list[ChannelSpec[Any]]:
    """The channels ``botd init`` offers (default: the registered ones), in the order their
    specs rank them; the first is the default answer."""
    if specs is None:
        from ..channels.registry import channel_specs

        specs = channel_specs()
    return sorted(
        (spec for spec in specs.values() if spec.init is not None),
        key=lambda spec: (spec.init.rank if spec.init is not None else 0, spec.name),
    )


class Aborted(Exception):
    """The questions ended before every answer was given (end of input)."""


class Answers:
    """What the operator chose."""

    def __init__(
        self,
        platform: str,
        secret_vars: dict[str, str],
        dm_policy: str | None,
        provider: str,
        model_name: str | None = None,
        key_var: str | None = None,
        base_url: str | None = None,
        settings: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.platform = platform
        self.secret_vars = secret_vars
        self.dm_policy = dm_policy
        """None: the channel has no DM policy (a terminal)."""
        self.settings = settings
        """Keys of the channel's section written as they are (its spec's)."""
        self.provider = provider
        self.model_name = model_name
        self.key_var = key_var
        self.base_url = base_url


def render(answers: Answers) -> str:
    """The config file's text for ``answers``."""
    lines = [
        "# botd config written by `botd init`; `botd init --example FILE` writes the reference",
        "# of every key, explained.",
        "# Secrets come from the environment: ${NAME} is replaced by that variable.",
        "state_dir: ./var",
        "",
        "model:",
        f"  provider: {answers.provider}",
    ]
    if answers.model_name:
        lines.append(f"  name: {json.dumps(answers.model_name)}")
    if answers.key_var:
        lines.append(f"  api_key: ${{{answers.key_var}}}")
    if answers.base_url:
        lines.append(f"  base_url: {json.dumps(answers.base_url)}")
    lines += ["", "channels:", f"  {answers.platform}:"]
    for key, name in answers.secret_vars.items():
        lines.append(f"    {key}: ${{{name}}}")
    for key, value in answers.settings:
        lines.append(f"    {key}: {value}")
    if answers.dm_policy is not None:
        lines.append(f"    dm_policy: {answers.dm_policy}")
        if answers.dm_policy == "allowlist":
            lines.append("    allow_from: []   # the user ids allowed to DM the bot")
    return "\n".join(lines) + "\n"


def _asker(stdin: TextIO, stdout: TextIO) -> Callable[[str, str, Sequence[str]], str]:
    def ask(question: str, default: str, choices: Sequence[str]) -> str:
        hint = f" [{'/'.join(choices)}]" if choices else ""
        while True:
            stdout.write(f"{question}{hint} (default {default}): ")
            stdout.flush()
            line = stdin.readline()
            if not line:
                raise Aborted
            answer = line.strip() or default
            if not choices or answer in choices:
                return answer
            stdout.write(f"  please answer one of: {', '.join(choices)}\n")

    return ask


def _env_name(text: str) -> bool:
    return bool(text) and (text[0].isalpha() or text[0] == "_") and text.replace("_", "a").isalnum()


def ask_answers(
    stdin: TextIO, stdout: TextIO, specs: Mapping[str, ChannelSpec[Any]] | None = None
) -> Answers:
    """Ask the questions on ``stdout``, read the answers from ``stdin``; the channels offered
    are ``specs``' (default: the registered ones)."""
    ask = _asker(stdin, stdout)
    channels = {spec.name: spec for spec in offered(specs)}

    def ask_var(what: str, default: str) -> str:
        while True:
            name = ask(f"Environment variable holding {what}", default, ())
            if _env_name(name):
                return name
            stdout.write("  a variable name: letters, digits and _, not starting with a digit\n")

    platform = ask("Chat platform", next(iter(channels)), tuple(channels))
    spec = channels[platform]
    questions = spec.init
    assert questions is not None  # offered() lists only channels with questions
    secret_vars = {q.key: ask_var(q.what, q.variable) for q in questions.secrets}
    dm_policy = None
    if "dm_policy" in spec.section.model_fields:
        dm_policy = ask("Who may DM the bot", "pairing", DM_POLICIES)
    provider = ask("Model provider", "anthropic", PROVIDERS)
    model_name = key_var = base_url = None
    if provider == "anthropic":
        key_var = ask_var("the Anthropic API key", "ANTHROPIC_API_KEY")
    elif provider == "openai":
        base_url = ask("OpenAI-compatible base URL", "https://api.openai.com/v1", ())
        model_name = ask("Model name", "gpt-4o-mini", ())
        key_var = ask_var("its API key", "OPENAI_API_KEY")
    return Answers(
        platform,
        secret_vars,
        dm_policy,
        provider,
        model_name,
        key_var,
        base_url,
        settings=questions.settings,
    )


def init(path: Path, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """``botd init PATH``: 0 when written, 1 when PATH exists, 2 when the answers ran out."""
    from ..config import ConfigError, parse_config

    out = stdout or sys.stdout
    if path.exists():
        print(f"botd: {path} exists; botd init never overwrites a file", file=sys.stderr)
        return 1
    try:
        answers = ask_answers(stdin or sys.stdin, out)
    except (Aborted, KeyboardInterrupt):
        print(
            "\nbotd: init stopped before every question was answered; nothing written",
            file=sys.stderr,
        )
        return 2
    text = render(answers)
    names = [*answers.secret_vars.values(), *([answers.key_var] if answers.key_var else [])]
    try:  # placeholders for the variables: the file itself must be valid
        parse_config(text, {name: "placeholder-value" for name in names}, str(path))
    except ConfigError as exc:  # a bug in render, not the operator's fault
        print(f"botd: the config botd init made is invalid:\n{exc}", file=sys.stderr)
        return 2
    status = _create(path, text)
    if status:
        return status
    exports = " ".join(f"{name}=..." for name in names)
    print(f"\nwrote {path}. Next:", file=out)
    if exports:
        print(f"  export {exports}", file=out)
    print(f"  botd doctor --config {path}", file=out)
    print(f"  botd run --config {path}", file=out)
    return 0


def _create(path: Path, text: str) -> int:
    """Write ``text`` to a new file ``path``: 0, 1 when it exists, 2 when it cannot be made."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        print(f"botd: {path} exists; botd init never overwrites a file", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"botd: cannot create {path}: {exc.strerror}", file=sys.stderr)
        return 2
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    return 0


REFERENCE = "config-reference.yaml"
UNIT = "botd.service"
DROP_INS = {"mcp-node": "mcp-node.conf", "exec": "exec.conf"}
"""The unit's drop-ins botd ships, by the name ``botd unit --drop-in`` takes."""


class MissingData(Exception):
    """A file botd ships is not in this installation."""


def shipped(name: str) -> str:
    """The text of ``botd/data/NAME``: ``REFERENCE``, ``UNIT`` or one of ``DROP_INS``."""
    from importlib.resources import files

    try:
        return files("botd").joinpath("data", name).read_text(encoding="utf-8")
    except OSError as exc:
        raise MissingData(f"this botd installation lacks its {name} ({exc.strerror})") from None


def write_example(path: Path, stdout: TextIO | None = None) -> int:
    """``botd init --example PATH``: the full reference; 0, 1 when PATH exists, else 2."""
    if path.exists():
        print(f"botd: {path} exists; botd init never overwrites a file", file=sys.stderr)
        return 1
    try:
        text = shipped(REFERENCE)
    except MissingData as exc:
        print(f"botd: {exc}", file=sys.stderr)
        return 2
    status = _create(path, text)
    if status:
        return status
    out = stdout or sys.stdout
    print(f"wrote {path}: every key botd reads, explained. Keep what you use, then:", file=out)
    print(f"  botd check --config {path}", file=out)
    return 0


def print_unit(stdout: TextIO | None = None, *, drop_in: str | None = None) -> int:
    """``botd unit``: the systemd unit (or the drop-in named) on stdout; 2 when the
    installation lacks it."""
    try:
        text = shipped(UNIT if drop_in is None else DROP_INS[drop_in])
    except MissingData as exc:
        print(f"botd: {exc}", file=sys.stderr)
        return 2
    (stdout or sys.stdout).write(text)
    return 0
