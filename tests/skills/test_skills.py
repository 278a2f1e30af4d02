"""Skills read from their folders (``botd.config.skills``) and offered to a run
(``botd.skills``, the ``skill`` tool): the format's rules, each broken one a problem naming
the file and line; the prompt's list, bounded; a body and a file loaded on request, and no way
out of a skill's folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from botd.agent.tools.base import ToolContext
from botd.agent.tools.skill.tool import SkillTool
from botd.cluster.fencing import RunScope
from botd.config.skills import MAX_DESCRIPTION, Skill, SkillProblem, read_skills
from botd.skills import MAX_FILE_BYTES, PROMPT_CHARS, PROMPT_SKILLS, Skills, SkillsHere
from tests.skills.harness import EXAMPLE, write_skill


def _problems(root: Path) -> list[str]:
    return [p.render().replace(f"{root}/", "") for p in read_skills(root).problems]


def test_the_documented_example_is_a_valid_skill() -> None:
    found = read_skills(EXAMPLE)
    assert found.problems == ()
    skill = found.skills["release-notes"]
    assert skill.description.startswith("Write release notes from a list of merged changes.")
    assert skill.body.startswith("# Release notes\n\n1. Ask for the list")


def test_a_valid_skill_keeps_its_description_on_one_line_and_its_body(tmp_path: Path) -> None:
    write_skill(
        tmp_path,
        "pdf-forms",
        "name: pdf-forms\ndescription: >\n  Fill PDF forms.\n  Use for forms.\nlicense: MIT\n"
        "allowed-tools: exec\nx-client-own: 1\n",
        "\n# Forms\n\nStep one.\n",
    )
    (tmp_path / "README.md").write_text("not a skill")  # plain files are passed over
    (tmp_path / ".git").mkdir()  # and hidden folders
    found = read_skills(tmp_path)
    assert found.problems == ()
    folder = tmp_path / "pdf-forms"
    expected = Skill("pdf-forms", "Fill PDF forms. Use for forms.", folder, "# Forms\n\nStep one.")
    assert found.skills == {"pdf-forms": expected}


def test_each_broken_rule_is_a_problem_naming_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "SKILL.md").write_text("# No front matter\n")
    write_skill(tmp_path, "open", "name: open\n", "").joinpath("SKILL.md").write_text(
        "---\nname: open\ndescription: never closed\n"
    )
    write_skill(tmp_path, "yaml", "name: yaml\ndescription: [unclosed\n")
    write_skill(tmp_path, "list", "- name\n- description\n")
    write_skill(tmp_path, "no-name", "description: Has no name.\n")
    write_skill(tmp_path, "upper", "description: Bad name.\nname: Upper--Case\n")
    write_skill(tmp_path, "moved", "name: elsewhere\ndescription: Not its folder's name.\n")
    write_skill(tmp_path, "quiet", "name: quiet\ndescription: '  '\n")
    long = "x" * (MAX_DESCRIPTION + 1)
    write_skill(tmp_path, "wordy", f"name: wordy\ndescription: {long}\n")
    write_skill(tmp_path, "meta", "name: meta\ndescription: Ok.\nmetadata: [a]\n")
    (tmp_path / "empty").mkdir()
    write_skill(tmp_path, "good", "name: good\ndescription: Fine.\n")
    assert _problems(tmp_path) == [
        "bare/SKILL.md:1: no front matter: the file must begin with a line '---', then YAML "
        "with name and description, then a line '---'",
        "empty: holds no SKILL.md: every folder here is a skill",
        "list/SKILL.md:2: the front matter must be a mapping of keys",
        "meta/SKILL.md:4: metadata must be a mapping of keys to values",
        "moved/SKILL.md:2: name 'elsewhere' is not its folder's name 'moved'",
        "no-name/SKILL.md:1: name is missing (lowercase letters, digits and single hyphens, "
        "not first or last, at most 64 characters; its folder's name)",
        "open/SKILL.md:1: the front matter is not closed by a line '---'",
        "quiet/SKILL.md:3: description is missing, empty or not text: say what it does, when",
        "upper/SKILL.md:3: name 'Upper--Case' is not a skill name: lowercase letters, digits "
        "and single hyphens, not first or last, at most 64 characters",
        "wordy/SKILL.md:3: description has 1025 characters, at most 1024",
        "yaml/SKILL.md:4: the front matter is not YAML: while parsing a flow sequence; "
        "expected ',' or ']', but got '<stream end>'",
    ]
    assert list(read_skills(tmp_path).skills) == ["good"]


def test_a_missing_directory_is_one_problem(tmp_path: Path) -> None:
    assert read_skills(tmp_path / "gone").problems == (
        SkillProblem(tmp_path / "gone", None, "no such directory"),
    )


def _skill(name: str, description: str = "Does a thing.") -> Skill:
    return Skill(name, description, Path("/nowhere") / name, f"Body of {name}.")


def test_the_prompt_names_each_skill_with_its_description_and_the_tool_to_load_it() -> None:
    note = SkillsHere([_skill("alpha", "First."), _skill("beta", "Second.")]).note()
    head, *listed = note.splitlines()
    assert "call the skill tool with its name" in head
    assert listed == ["- alpha: First.", "- beta: Second."]
    assert SkillsHere([]).note() == ""


def test_the_prompts_list_is_cut_at_its_count_and_its_size_and_says_so() -> None:
    many = [_skill(f"s{n:03}") for n in range(PROMPT_SKILLS + 5)]
    lines = SkillsHere(many).note().splitlines()
    assert len(lines) == 1 + PROMPT_SKILLS + 1
    assert lines[-1] == "(5 more skills not listed here, to keep this prompt short.)"
    wordy = [_skill(f"w{n}", "d" * 1000) for n in range(12)]
    note = SkillsHere(wordy).note()
    assert len(note) < PROMPT_CHARS + 600  # the head and the last line beside the list
    assert note.endswith("more skills not listed here, to keep this prompt short.)")


def test_a_chats_list_offers_only_the_skills_it_names() -> None:
    skills = Skills({"alpha": _skill("alpha"), "beta": _skill("beta")})
    assert list(skills.here(None).skills) == ["alpha", "beta"]
    assert list(skills.here(["beta", "gone"]).skills) == ["beta"]
    assert skills.here([]).note() == ""


def _context() -> ToolContext:
    return ToolContext(RunScope("telegram:dm:1"), None, "call-1")


async def test_the_tool_loads_a_body_and_a_file_and_refuses_a_skill_not_offered(
    tmp_path: Path,
) -> None:
    skills = Skills(read_skills(EXAMPLE).skills)
    write_skill(tmp_path, "hidden", "name: hidden\ndescription: Not offered here.\n")
    tool = SkillTool(skills.here(["release-notes"]))
    body = await tool.run({"name": "release-notes"}, _context())
    assert not body.is_error and body.text.startswith("# Release notes")
    assert body.untrusted_from is None  # the operator's own instructions, to be followed
    style = await tool.run({"name": "release-notes", "file": "references/style.md"}, _context())
    assert not style.is_error and style.text.startswith("# Style of the release notes")
    unknown = await tool.run({"name": "hidden"}, _context())
    assert unknown.is_error
    assert unknown.text == "No skill named 'hidden' here. Skills offered: release-notes."


@pytest.fixture
def outside(tmp_path: Path) -> tuple[SkillTool, Path]:
    """The tool over one skill (``tricks``), and a secret file beside its folder."""
    folder = write_skill(tmp_path / "skills", "tricks", "name: tricks\ndescription: Tricks.\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret")
    return SkillTool(Skills(read_skills(tmp_path / "skills").skills).here(None)), folder


@pytest.mark.parametrize(
    ("file", "why"),
    [
        ("../../secret.txt", "'../../secret.txt': give a path inside the skill's folder"),
        ("/etc/passwd", "'/etc/passwd': give a path inside the skill's folder"),
        ("", "'': give a path inside the skill's folder"),
        ("link.txt", "tricks/link.txt cannot be read: a link"),
        ("linked/secret.txt", "tricks/linked/secret.txt cannot be read: a link"),
        ("hard.txt", "tricks/hard.txt cannot be read: more than one hard link"),
        ("missing.md", "tricks/missing.md cannot be read: no such file"),
        ("scripts", "tricks/scripts cannot be read: not a file"),
        ("big.md", f"tricks/big.md cannot be read: larger than {MAX_FILE_BYTES // 1024} KiB"),
        ("blob.bin", "tricks/blob.bin is not a text file"),
    ],
)
async def test_the_tool_reads_nothing_outside_the_skills_folder(
    outside: tuple[SkillTool, Path], file: str, why: str
) -> None:
    tool, folder = outside
    secret = folder.parent.parent / "secret.txt"
    (folder / "link.txt").symlink_to(secret)
    (folder / "linked").symlink_to(secret.parent)
    os.link(secret, folder / "hard.txt")
    (folder / "scripts").mkdir()
    (folder / "big.md").write_text("x" * (MAX_FILE_BYTES + 1))
    (folder / "blob.bin").write_bytes(b"\xff\xfe\x00")
    result = await tool.run({"name": "tricks", "file": file}, _context())
    assert result.is_error
    assert result.text == why
