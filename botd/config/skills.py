"""The operator's skills: folders in the Agent Skills format beneath ``agent.skills_dir``, read
and checked like the config file.

Each folder of the directory is one skill: a ``SKILL.md`` that opens with YAML front matter
between two ``---`` lines, then the Markdown instructions the model follows (its body); other
files beside it (``scripts/``, ``references/``…) are read only when the model asks for one
(``botd.skills``). The front matter's rules are the format's:

* ``name``: 1 to 64 characters, lowercase letters, digits and hyphens, neither first nor last
  a hyphen, no two hyphens in a row; the same as its folder's name (so two skills never share
  a name: a directory has one folder of each name);
* ``description``: a non-empty string of at most 1024 characters (what it does, when to use it);
* ``compatibility`` (optional): at most 500 characters; ``metadata`` (optional): a mapping.

Other keys (``license``, ``allowed-tools``, a client's own) are allowed and not used.

``read_skills`` reads every folder and returns the valid skills with a ``SkillProblem`` for
each thing wrong (the file and, where it can, the line); ``override_problems`` checks the
``skills`` lists of the channels, groups and topics against them. The loader reports both as
config problems, so ``botd check``, a start and a reload (SIGHUP) refuse the same things.
Hidden entries (``.git``) and plain files of the directory are passed over.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .problems import Loc
from .schema import BotdConfig

__all__ = [
    "MAX_DESCRIPTION",
    "MAX_NAME",
    "MAX_SKILL_BYTES",
    "SKILL_FILE",
    "Skill",
    "SkillInvalid",
    "SkillProblem",
    "SkillSet",
    "override_problems",
    "read_skill",
    "read_skills",
    "skills_named",
]

SKILL_FILE = "SKILL.md"
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
MAX_SKILL_BYTES = 128 * 1024
"""A larger ``SKILL.md`` is refused: its body goes whole to the model when loaded."""

_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_FENCE = "---"
_NAME_RULE = (
    "lowercase letters, digits and single hyphens, not first or last, "
    f"at most {MAX_NAME} characters"
)


@dataclass(frozen=True, slots=True)
class Skill:
    """One valid skill: its name and description (offered in the prompt), its folder (its
    links resolved when it was read) and the instructions of its ``SKILL.md``."""

    name: str
    description: str
    folder: Path
    body: str


@dataclass(frozen=True, slots=True)
class SkillProblem:
    """One thing wrong with a skill: the file (or folder), the line if known, what."""

    file: Path
    line: int | None
    message: str

    def render(self) -> str:
        """``file:line: message``."""
        where = str(self.file) if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}"


@dataclass(frozen=True, slots=True)
class SkillSet:
    """The skills of a directory, by name in name order, and what was wrong there."""

    skills: Mapping[str, Skill]
    problems: tuple[SkillProblem, ...] = ()


class SkillInvalid(Exception):
    """A skill folder that is not a valid skill: every problem found in it."""

    def __init__(self, problems: list[SkillProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(p.render() for p in problems))


def _front_matter(text: str, file: Path) -> tuple[str, str]:
    """The front matter's YAML and the body after it; raises ``SkillInvalid``."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != _FENCE:
        raise SkillInvalid(
            [
                SkillProblem(
                    file,
                    1,
                    "no front matter: the file must begin with a line '---', then YAML with "
                    "name and description, then a line '---'",
                )
            ]
        )
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() == _FENCE:
            return "".join(lines[1:index]), "".join(lines[index + 1 :])
    raise SkillInvalid([SkillProblem(file, 1, "the front matter is not closed by a line '---'")])


def _fields(matter: str, file: Path) -> tuple[dict[Any, Any], dict[Any, int]]:
    """The front matter's mapping and the file line of each key; raises ``SkillInvalid``."""
    try:
        node = yaml.compose(matter, Loader=yaml.SafeLoader)
        data = yaml.safe_load(matter)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = None if mark is None else mark.line + 2  # after the opening '---'
        words = "; ".join(p for p in (exc.context, exc.problem) if p) or "not valid YAML"
        problem = SkillProblem(file, line, f"the front matter is not YAML: {words}")
        raise SkillInvalid([problem]) from None
    except yaml.YAMLError:
        raise SkillInvalid([SkillProblem(file, 2, "the front matter is not YAML")]) from None
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise SkillInvalid([SkillProblem(file, 2, "the front matter must be a mapping of keys")])
    lines = {key.value: key.start_mark.line + 2 for key, _ in node.value}
    return data, lines


def read_skill(folder: Path) -> Skill:
    """The skill in ``folder`` (its ``SKILL.md`` checked by the rules of the module
    docstring); raises ``SkillInvalid`` with every problem found."""
    file = folder / SKILL_FILE
    try:
        with file.open("rb") as handle:
            raw = handle.read(MAX_SKILL_BYTES + 1)
    except FileNotFoundError:
        raise SkillInvalid(
            [SkillProblem(folder, None, f"holds no {SKILL_FILE}: every folder here is a skill")]
        ) from None
    except OSError as exc:
        raise SkillInvalid([SkillProblem(file, None, f"cannot be read: {exc.strerror}")]) from None
    if len(raw) > MAX_SKILL_BYTES:
        raise SkillInvalid(
            [SkillProblem(file, None, f"is larger than {MAX_SKILL_BYTES // 1024} KiB")]
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillInvalid([SkillProblem(file, None, "is not UTF-8 text")]) from None
    matter, body = _front_matter(text, file)
    data, lines = _fields(matter, file)
    problems: list[SkillProblem] = []

    def add(key: str, message: str) -> None:
        problems.append(SkillProblem(file, lines.get(key, 1), message))

    name = data.get("name")
    if name is None:
        add("name", f"name is missing ({_NAME_RULE}; its folder's name)")
    elif not isinstance(name, str) or len(name) > MAX_NAME or not _NAME.fullmatch(name):
        add("name", f"name {str(name)[:80]!r} is not a skill name: {_NAME_RULE}")
    elif name != folder.name:
        add("name", f"name {name!r} is not its folder's name {folder.name!r}")
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        add("description", "description is missing, empty or not text: say what it does, when")
    elif len(description) > MAX_DESCRIPTION:
        add(
            "description",
            f"description has {len(description)} characters, at most {MAX_DESCRIPTION}",
        )
    compatibility = data.get("compatibility")
    if compatibility is not None and (
        not isinstance(compatibility, str) or len(compatibility) > MAX_COMPATIBILITY
    ):
        add("compatibility", f"compatibility: text of at most {MAX_COMPATIBILITY} characters")
    if "metadata" in data and not isinstance(data["metadata"], dict):
        add("metadata", "metadata must be a mapping of keys to values")
    if problems:
        raise SkillInvalid(problems)
    assert isinstance(name, str) and isinstance(description, str)
    return Skill(name, " ".join(description.split()), folder.resolve(), body.strip())


def read_skills(directory: Path) -> SkillSet:
    """Every skill folder of ``directory``: the valid skills and the problems of the rest."""
    try:
        entries = sorted(directory.iterdir())
    except FileNotFoundError:
        return SkillSet({}, (SkillProblem(directory, None, "no such directory"),))
    except NotADirectoryError:
        return SkillSet({}, (SkillProblem(directory, None, "is not a directory"),))
    except OSError as exc:
        return SkillSet({}, (SkillProblem(directory, None, f"cannot be read: {exc.strerror}"),))
    skills: dict[str, Skill] = {}
    problems: list[SkillProblem] = []
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        try:
            skill = read_skill(entry)
        except SkillInvalid as exc:
            problems.extend(exc.problems)
            continue
        skills[skill.name] = skill
    return SkillSet(dict(sorted(skills.items())), tuple(problems))


def skills_named(config: BotdConfig) -> dict[Loc, list[str]]:
    """Every ``skills`` list a chat channel, a group or a topic sets, by its key."""
    return {
        (*loc, "skills"): o.skills for loc, o in config.override_places() if o.skills is not None
    }


def override_problems(
    config: BotdConfig, known: Mapping[str, Skill] | None
) -> list[tuple[Loc, str]]:
    """Each ``skills`` entry that names no skill of ``known`` (None: ``agent.skills_dir`` is
    not set), by its key, with why."""
    found: list[tuple[Loc, str]] = []
    for loc, names in skills_named(config).items():
        for index, name in enumerate(names):
            if known is None:
                found.append(((*loc, index), "names a skill, but agent.skills_dir is not set"))
            elif name not in known:
                have = ", ".join(known) or "none"
                found.append(
                    ((*loc, index), f"unknown skill {name!r}: not in agent.skills_dir ({have})")
                )
    return found
