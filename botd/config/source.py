"""The config file as data: YAML whose mappings remember their lines, with ``${VAR}``s filled.

``read_yaml`` parses with a safe loader whose mappings know the line of each of their keys,
so every later problem can name its line; a key written twice in one mapping is a problem
naming both lines (YAML would silently keep the last). A syntax error names the line where
the mistake most likely is (where an unclosed quote or bracket opened, the line missing its
``:``) and the key path that line belongs to, read from the indentation. ``interpolate``
replaces ``${VAR}`` and ``${VAR:-default}`` in string values from the environment (``$$``
is a literal dollar) and remembers which values came from which variables, so errors never
echo them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from .problems import ConfigError, ConfigProblem, Loc, format_path

__all__ = ["Sourced", "duplicate_keys", "interpolate", "line_of", "read_yaml", "unset_variable"]

Sourced = dict[Loc, list[str]]
"""For each value read from the environment: the variables it was made of."""


class LineDict(dict[Any, Any]):
    """A YAML mapping that knows its own line and the line of each of its keys."""

    line: int
    key_lines: dict[Any, int]
    duplicates: list[tuple[Any, int, int]]
    """Keys written more than once: the key, its first line and the repeated line."""


class _LineLoader(yaml.SafeLoader):
    """A SafeLoader whose mappings are ``LineDict``s (1-based lines)."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> Iterator[LineDict]:
    data = LineDict()
    data.line = node.start_mark.line + 1
    data.key_lines = {}
    data.duplicates = []
    yield data
    # Keys written in this mapping (not merged in with <<), before merging flattens them.
    written: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
            continue
        key = loader.construct_object(key_node)
        line = key_node.start_mark.line + 1
        if key in written:
            data.duplicates.append((key, written[key], line))
        else:
            written[key] = line
    data.update(loader.construct_mapping(node))  # flattens merge keys into node.value
    # The line of the value kept: YAML keeps the last of a repeated key, and a key of the
    # mapping's own over one merged in (merged keys come first in the flattened node).
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if isinstance(key, str | int | float | bool) or key is None:
            data.key_lines[key] = key_node.start_mark.line + 1


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


def read_yaml(text: str, source: str) -> dict[Any, Any]:
    """The top-level mapping of ``text`` (an empty file is an empty mapping).

    Raises ``ConfigError`` for text that is not YAML or not a mapping, quoting only the
    parser's words: its snippet of the file could show a secret.
    """
    try:
        root = yaml.load(text, Loader=_LineLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([_syntax_problem(exc, text)], source) from None
    except yaml.YAMLError:
        raise ConfigError([ConfigProblem("", None, "not valid YAML")], source) from None
    if root is None:
        root = LineDict()
        root.line, root.key_lines = 1, {}
    if not isinstance(root, dict):
        raise ConfigError([ConfigProblem("", 1, "the file must be a mapping of keys")], source)
    return root


def _syntax_problem(exc: yaml.MarkedYAMLError, text: str) -> ConfigProblem:
    """A YAML syntax error at the line it most likely is, with the key path of that line.

    Only the parser's words are quoted: its snippet of the file could show a secret.
    """
    words = "; ".join(p for p in (exc.context, exc.problem) if p) or "not valid YAML"
    context = exc.context or ""
    mark = exc.problem_mark or exc.context_mark
    if exc.context_mark is not None and context.startswith(
        ("while scanning a quoted scalar", "while parsing a flow", "while scanning a simple key")
    ):
        # An unclosed quote or bracket: the parser stops far below where it opened.
        mark = exc.context_mark
    if mark is None:
        return ConfigProblem("", None, f"not valid YAML: {words}")
    line = mark.line + 1
    lines = text.splitlines()
    if exc.problem == "mapping values are not allowed here":
        # `key value` without its colon reads as text continuing onto the next key's line.
        before = line - 1
        while before >= 1 and (not lines[before - 1].strip() or _comment(lines[before - 1])):
            before -= 1
        if before >= 1 and ":" not in lines[before - 1]:
            line = before
            words += " (is the ':' after a key missing?)"
    return ConfigProblem(_path_at(lines, line), line, f"not valid YAML: {words}")


def _comment(line: str) -> bool:
    return line.lstrip().startswith("#")


_KEY = re.compile(r"""\s*(?:-\s+)*(?:"([^"]*)"|'([^']*)'|([^\s#'"{\[][^:#]*?))\s*:(?:\s|$)""")


def _path_at(lines: list[str], line: int) -> str:
    """The key path of block-style YAML at ``line`` (1-based), read from the indentation."""
    stack: list[tuple[int, str | int]] = []  # (indent, key or list index)
    items: dict[tuple[int, tuple[str | int, ...]], int] = {}
    for text in lines[: max(line, 0)]:
        if not text.strip() or _comment(text):
            continue
        indent = len(text) - len(text.lstrip(" "))
        body = text[indent:]
        while body.startswith("-") and body[1:2] in (" ", ""):
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = tuple(part for _, part in stack)
            index = items.get((indent, parent), -1) + 1
            items[(indent, parent)] = index
            stack.append((indent, index))
            step = 1 + len(body[1:]) - len(body[1:].lstrip(" "))
            indent += step
            body = body[step:]
        match = _KEY.match(body)
        if match is None:
            continue
        key = next(group for group in match.groups() if group is not None).strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
    return format_path(tuple(part for _, part in stack))


def duplicate_keys(root: Any) -> list[ConfigProblem]:
    """Every key written twice in one mapping of ``root``, named with both its lines."""
    problems: list[ConfigProblem] = []

    def visit(node: Any, loc: Loc) -> None:
        if isinstance(node, LineDict):
            for key, first, again in getattr(node, "duplicates", ()):
                problems.append(
                    ConfigProblem(
                        format_path((*loc, str(key))),
                        again,
                        f"key {str(key)!r} is written twice (lines {first} and {again}); keep one",
                    )
                )
        if isinstance(node, dict):
            for key, value in node.items():
                visit(value, (*loc, key if isinstance(key, str | int) else str(key)))
        elif isinstance(node, list):
            for index, item in enumerate(node):
                visit(item, (*loc, index))

    visit(root, ())
    return problems


def line_of(root: Any, loc: Loc) -> int | None:
    """The line of the deepest key along ``loc`` that the file has."""
    line = root.line if isinstance(root, LineDict) else None
    node = root
    for part in loc:
        if isinstance(node, LineDict):
            key: Any = part
            if key not in node and isinstance(part, str):
                # Ids YAML read as numbers were turned into strings by validation.
                key = next((k for k in node if str(k) == part), part)
            if key not in node:
                break
            line = node.key_lines.get(key, line)
            node = node[key]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
            if isinstance(node, LineDict):
                line = node.line
        else:
            break
    return line


_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate(root: Any, env: Mapping[str, str]) -> tuple[list[ConfigProblem], Sourced]:
    """Replace every ``${VAR}`` in ``root``'s strings in place.

    Returns the problems (variables that are unset and have no default) and, for each value
    that used a variable, the variables' names.
    """
    problems: list[ConfigProblem] = []
    sourced: Sourced = {}

    def visit(node: Any, loc: Loc) -> Any:
        if isinstance(node, dict):
            for key in list(node):
                node[key] = visit(node[key], (*loc, key))
            return node
        if isinstance(node, list):
            for index, item in enumerate(node):
                node[index] = visit(item, (*loc, index))
            return node
        if not isinstance(node, str) or "$" not in node:
            return node

        def replace(match: re.Match[str]) -> str:
            if match.group(0) == "$$":
                return "$"
            name, default = match.group(1), match.group(2)
            sourced.setdefault(loc, []).append(name)
            if name in env:
                return env[name]
            if default is not None:
                return default
            problems.append(
                ConfigProblem(
                    format_path(loc),
                    line_of(root, loc),
                    f"environment variable {name} is not set "
                    f"(set it, or write ${{{name}:-default}})",
                )
            )
            # A stand-in, so the missing variable is not reported again as a missing value.
            return _STAND_IN.format(name=name)

        return _VARIABLE.sub(replace, node)

    visit(root, ())
    return problems, sourced


_STAND_IN = "<{name} unset>"
_STAND_IN_FOUND = re.compile(r"<(\w+) unset>")


def unset_variable(value: str) -> str | None:
    """The variable whose stand-in ``value`` holds, left where a ``${VAR}`` was not set (a
    config loaded with ``unset_ok``: its value must not be used), else None."""
    found = _STAND_IN_FOUND.search(value)
    return None if found is None else found.group(1)
