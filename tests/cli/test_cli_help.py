"""The command line explains itself: a version flag, and help text on every command and flag."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version

from botd.cli import build_parser

BOTD = [sys.executable, "-m", "botd"]


def _parsers(
    parser: argparse.ArgumentParser, name: str = "botd"
) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(name, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                found += _parsers(sub, f"{name} {command}")
    return found


def test_every_command_and_flag_has_help() -> None:
    missing = []
    for name, parser in _parsers(build_parser()):
        if name != "botd" and not parser.description:
            missing.append(f"{name}: no description")
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    if not choice.help:
                        missing.append(f"{name} {choice.dest}: no help")
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def test_version_flag_prints_the_installed_version() -> None:
    result = subprocess.run([*BOTD, "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"botd {version('botd')}"


def test_run_help_describes_the_command() -> None:
    result = subprocess.run([*BOTD, "run", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "connect the configured channels" in result.stdout
