"""What is wrong with a config file, in words a person can act on.

A ``ConfigProblem`` is one finding (key path, line, message); a ``ConfigError`` carries all
of a file's findings and renders them one per line as ``file:line: key.path: message``.
``translate`` turns pydantic's validation errors into problems: unknown keys get a
did-you-mean, type errors say what was expected, and values are echoed only when they are
neither secrets nor read from the environment.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

__all__ = [
    "SECRET_KEYS",
    "ConfigError",
    "ConfigProblem",
    "Loc",
    "format_path",
    "translate",
    "unwrap_model",
]

Loc = tuple[str | int, ...]
"""A path into the config: mapping keys and list indexes."""

SECRET_KEYS = frozenset(
    {"api_key", "token", "bot_token", "app_token", "signing_secret", "password", "secret", "dsn"}
)
"""Keys whose values are never echoed in an error, whatever their source."""


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong with a config file: where (key path and line) and what."""

    path: str
    line: int | None
    message: str

    def render(self, source: str) -> str:
        """``file:line: key.path: message`` (``source`` names the file)."""
        where = source if self.line is None else f"{source}:{self.line}"
        key = f" {self.path}:" if self.path else ""
        return f"{where}:{key} {self.message}"


class ConfigError(Exception):
    """Every problem found in a config file; ``str()`` lists them one per line."""

    def __init__(self, problems: list[ConfigProblem], source: str = "<config>") -> None:
        self.problems = problems
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(problem.render(self.source) for problem in self.problems)

    def __str__(self) -> str:
        return self.render()


def format_path(loc: Loc) -> str:
    """``("scheduler", "jobs", 0, "cron")`` as ``scheduler.jobs[0].cron``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def unwrap_model(annotation: Any) -> Any:
    """The model type inside ``X | None``, ``list[X]`` or ``dict[str, X]`` (else None)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = get_origin(annotation)
    if origin is Annotated:
        return unwrap_model(get_args(annotation)[0])
    if origin in (Union, list, dict) or str(origin) == "<class 'types.UnionType'>":
        for arg in reversed(get_args(annotation)):
            found = unwrap_model(arg)
            if found is not None:
                return found
    return None


_EXPECTED = {
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "text",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "datetime_parsing": "an ISO datetime like 2026-05-01T17:00",
    "datetime_type": "an ISO datetime like 2026-05-01T17:00",
    "datetime_from_date_parsing": "an ISO datetime like 2026-05-01T17:00",
    "path_type": "a file path",
}

_BOUNDS = {
    "greater_than_equal": "at least",
    "greater_than": "more than",
    "less_than_equal": "at most",
    "less_than": "less than",
}


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    return repr(value) if isinstance(value, str) else str(value)


def _message(error: Any, shown: bool, variables: Sequence[str] | None) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if variables:
        got = f"got the value of ${{{variables[0]}}}"
    elif shown:
        got = f"got {_describe(value)}"
    else:
        got = "got a value that is not shown"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, {got}"
    if kind == "literal_error":
        return f"expected {ctx.get('expected', 'one of the allowed values')}, {got}"
    if kind == "missing":
        return "required key is missing"
    if kind in _BOUNDS:
        limit = next(iter(ctx.values()), "?")
        return f"must be {_BOUNDS[kind]} {limit}, {got}"
    if kind == "value_error":
        text = str(ctx.get("error", error["msg"]))
        if variables and isinstance(value, str) and value.strip():
            # The validator quoted what it got; that came from the environment.
            text = text.replace(repr(value), f"${{{variables[0]}}}").replace(value, "...")
        return text
    message = str(error["msg"])
    return message[:1].lower() + message[1:]


def translate(
    exc: ValidationError,
    *,
    line_of: Callable[[Loc], int | None],
    known_keys: Callable[[Loc], list[str]],
    sourced: Mapping[Loc, Sequence[str]],
    noun: Callable[[Loc], str] = lambda loc: "key",
) -> list[ConfigProblem]:
    """``exc``'s errors as problems: ``line_of`` finds a path's line, ``known_keys`` the keys
    allowed in a mapping (for did-you-mean) and ``noun`` what they are called there ("key"),
    ``sourced`` the variables a value was read from."""
    problems = []
    for error in exc.errors():
        # Drop pydantic's function-validator markers from the path.
        loc: Loc = tuple(
            p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-"))
        )
        path = format_path(loc)
        line = line_of(loc)
        if error["type"] == "extra_forbidden" and loc:
            key = str(loc[-1])
            known = known_keys(loc[:-1])
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
            what = noun(loc[:-1])
            problems.append(ConfigProblem(path, line, f"unknown {what} {key!r}{hint}"))
            continue
        last = loc[-1] if loc else ""
        shown = not (isinstance(last, str) and last in SECRET_KEYS)
        problems.append(ConfigProblem(path, line, _message(error, shown, sourced.get(loc))))
    return problems
