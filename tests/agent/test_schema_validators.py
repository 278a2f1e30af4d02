"""Tool schemas are checked and compiled once per schema, not once per run."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from botd.agent.tools import base
from botd.agent.tools.base import schema_validator


def test_the_same_schema_object_gets_the_same_validator_checked_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    checked: list[object] = []
    original = jsonschema.Draft202012Validator.check_schema

    def counting(cls: type, s: Any, *args: Any, **kwargs: Any) -> None:
        checked.append(s)
        original(s, *args, **kwargs)

    monkeypatch.setattr(jsonschema.Draft202012Validator, "check_schema", classmethod(counting))
    first = schema_validator(schema)
    assert schema_validator(schema) is first
    assert checked == [schema]
    assert not list(first.iter_errors({"n": 1}))
    assert list(first.iter_errors({"n": "one"}))


def test_an_equal_but_distinct_schema_is_compiled_on_its_own() -> None:
    one = {"type": "object"}
    two = {"type": "object"}
    assert schema_validator(one) is not schema_validator(two)


def test_an_invalid_schema_raises_every_time_and_is_not_kept() -> None:
    bad = {"type": "no-such-type"}
    for _ in range(2):
        with pytest.raises(jsonschema.SchemaError):
            schema_validator(bad)
    assert all(entry[0] is not bad for entry in base._VALIDATORS.values())


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base._VALIDATORS, "size", 3)
    schemas = [{"type": "object", "title": str(i)} for i in range(5)]
    for schema in schemas:
        schema_validator(schema)
    assert len(base._VALIDATORS) <= 3
    kept = [entry[0] for entry in base._VALIDATORS.values()]
    assert schemas[-1] in kept and all(s is not schemas[0] for s in kept)
