"""Skills at run time: the skills of ``agent.skills_dir`` in force, and what a run is offered of
them (``botd.config.skills`` reads and checks the folders).

``Skills`` holds the skills read at start and again on each reload (SIGHUP), so an edited
skill applies from the next run after a reload. ``Skills.here`` narrows them to a chat's
(its topic's, group's or channel's ``skills`` list; unset: all), as ``SkillsHere``:

* ``note``: the part of the system prompt naming each offered skill with its description and
  telling the model to load one with the ``skill`` tool; at most ``PROMPT_SKILLS`` skills and
  ``PROMPT_CHARS`` characters, saying how many were left out when it is cut;
* ``body``: a skill's instructions (its ``SKILL.md`` after the front matter);
* ``read``: one of the skill's other files, by a path beneath its folder, opened with no link
  followed and no ``..`` (``botd.safe_open``), a regular file of one hard link, at most
  ``MAX_FILE_BYTES`` and UTF-8 text.

A skill not offered in a chat is, for a run there, as absent as one that does not exist: an
unknown name's answer lists only the skills offered there.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from .config import BotdConfig
from .config.skills import Skill, SkillProblem, read_skills
from .safe_open import NotRead, Refusal, open_directory, read_beneath

__all__ = [
    "MAX_FILE_BYTES",
    "PROMPT_CHARS",
    "PROMPT_SKILLS",
    "SKILL_TOOL",
    "Loaded",
    "Skills",
    "SkillsHere",
]

log = logging.getLogger(__name__)

SKILL_TOOL = "skill"
"""The tool that loads skills; the prompt names the skills only to a run offered it."""
PROMPT_SKILLS = 40
"""Skills at most named in the system prompt."""
PROMPT_CHARS = 8000
"""Characters at most of the prompt's list of skills."""
MAX_FILE_BYTES = 128 * 1024
"""The largest file of a skill the ``skill`` tool returns."""

_HEAD = (
    "Skills you can use: instructions for particular tasks, kept by the operator. When a "
    "request matches a skill's description, call the skill tool with its name to load its "
    "instructions, then follow them (skill with a file reads one of the files they mention)."
)


@dataclass(frozen=True, slots=True)
class Loaded:
    """What the ``skill`` tool returns: the text, and whether it is an error."""

    text: str
    failed: bool = False


class Skills:
    """The skills in force (read from ``agent.skills_dir``)."""

    def __init__(self, skills: Mapping[str, Skill] | None = None) -> None:
        self._skills: Mapping[str, Skill] = dict(skills or {})

    @property
    def names(self) -> list[str]:
        return list(self._skills)

    def load(self, config: BotdConfig) -> tuple[SkillProblem, ...]:
        """Read ``config``'s skills (none without ``agent.skills_dir``), in place of those
        held; each skill with a problem is left out and the problem logged and returned."""
        directory = config.agent.skills_dir
        if directory is None:
            self._skills = {}
            return ()
        found = read_skills(directory)
        for problem in found.problems:
            log.warning("skill left out: %s", problem.render())
        self._skills = found.skills
        log.info("%d skill(s) read from %s", len(found.skills), directory)
        return found.problems

    def here(self, names: Sequence[str] | None) -> SkillsHere:
        """The skills offered where the ``skills`` list in force is ``names`` (None: all)."""
        if names is None:
            return SkillsHere(tuple(self._skills.values()))
        return SkillsHere(tuple(self._skills[n] for n in names if n in self._skills))


class SkillsHere:
    """The skills a run is offered (see the module docstring)."""

    def __init__(self, skills: Sequence[Skill]) -> None:
        self.skills = {skill.name: skill for skill in skills}

    def note(self) -> str:
        """The system prompt's list of the skills ("" when none is offered)."""
        if not self.skills:
            return ""
        lines: list[str] = []
        room = PROMPT_CHARS
        for skill in self.skills.values():
            line = f"- {skill.name}: {skill.description}"
            if len(lines) == PROMPT_SKILLS or len(line) > room:
                break
            lines.append(line)
            room -= len(line) + 1
        left = len(self.skills) - len(lines)
        if left:
            lines.append(
                f"({left} more skill{'' if left == 1 else 's'} not listed here, to keep this "
                "prompt short.)"
            )
        return "\n".join([_HEAD, *lines])

    def _unknown(self, name: str) -> Loaded:
        offered = ", ".join(self.skills) or "none"
        return Loaded(f"No skill named {name[:80]!r} here. Skills offered: {offered}.", True)

    def body(self, name: str) -> Loaded:
        """Skill ``name``'s instructions."""
        skill = self.skills.get(name)
        if skill is None:
            return self._unknown(name)
        return Loaded(skill.body or "(This skill has no instructions beyond its description.)")

    async def read(self, name: str, file: str) -> Loaded:
        """The text of ``file`` (a path beneath skill ``name``'s folder)."""
        skill = self.skills.get(name)
        if skill is None:
            return self._unknown(name)
        relative = PurePosixPath(file)
        if not file.strip() or relative.is_absolute() or ".." in relative.parts:
            return Loaded(f"{file[:200]!r}: give a path inside the skill's folder", True)
        try:
            data = await asyncio.to_thread(_read, skill, relative)
        except NotRead as exc:
            why = str(exc)
            if exc.refusal is Refusal.TOO_LARGE:
                why = f"larger than {MAX_FILE_BYTES // 1024} KiB"
            return Loaded(f"{name}/{relative} cannot be read: {why}", True)
        try:
            return Loaded(data.decode("utf-8"))
        except UnicodeDecodeError:
            return Loaded(f"{name}/{relative} is not a text file", True)


def _read(skill: Skill, relative: PurePosixPath) -> bytes:
    folder = open_directory(skill.folder)
    try:
        return read_beneath(folder, relative, MAX_FILE_BYTES)
    finally:
        os.close(folder)
