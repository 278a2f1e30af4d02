"""The config file as data: YAML whose mappings remember their lines, with ``${VAR}``s filled.

``read_yaml`` parses with a safe loader whose mappings know the line of each of their keys,
so every later problem can name its line. ``interpolate`` replaces ``${VAR}`` and
``${VAR:-default}`` in string values from the environment (``$$`` is a literal dollar) and
remembers which values came from which variables, so errors never echo them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from .problems import ConfigError, ConfigProblem, Loc, format_path

__all__ = ["Sourced", "interpolate", "line_of", "read_yaml"]

Sourced = dict[Loc, list[str]]
"""For each value read from the environment: the variables it was made of."""


class LineDict(dict[Any, Any]):
    """A YAML mapping that knows its own line and the line of each of its keys."""

    line: int
    key_lines: dict[Any, int]


class _LineLoader(yaml.SafeLoader):
    """A SafeLoader whose mappings are ``LineDict``s (1-based lines)."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> Iterator[LineDict]:
    data = LineDict()
    data.line = node.start_mark.line + 1
    data.key_lines = {}
    yield data
    data.update(loader.construct_mapping(node))  # flattens merge keys into node.value
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if isinstance(key, str | int | float | bool) or key is None:
            data.key_lines.setdefault(key, key_node.start_mark.line + 1)


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


def read_yaml(text: str, source: str) -> dict[Any, Any]:
    """The top-level mapping of ``text`` (an empty file is an empty mapping).

    Raises ``ConfigError`` for text that is not YAML or not a mapping, quoting only the
    parser's words: its snippet of the file could show a secret.
    """
    try:
        root = yaml.load(text, Loader=_LineLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        words = "; ".join(p for p in (exc.context, exc.problem) if p) or "not valid YAML"
        raise ConfigError(
            [ConfigProblem("", mark.line + 1 if mark else None, f"not valid YAML: {words}")],
            source,
        ) from None
    except yaml.YAMLError:
        raise ConfigError([ConfigProblem("", None, "not valid YAML")], source) from None
    if root is None:
        root = LineDict()
        root.line, root.key_lines = 1, {}
    if not isinstance(root, dict):
        raise ConfigError([ConfigProblem("", 1, "the file must be a mapping of keys")], source)
    return root


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
            return f"<{name} unset>"

        return _VARIABLE.sub(replace, node)

    visit(root, ())
    return problems, sourced
