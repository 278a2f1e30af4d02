"""Which config values are secrets, marked in the models and collected from a loaded config.

A field holds a secret when its type carries the ``SECRET`` mark (``Secret``,
``OptionalSecret``, or the mark anywhere inside it: ``dict[str, Secret]`` for headers), or
when its name is one of ``SECRET_KEYS`` (so a plugin's ``token`` field is covered even
unmarked). ``secret_values`` walks a validated config, every section and every channel's
included, and returns each secret's value; the password of a URL with credentials
(``https://user:pass@host``) counts too. Whoever writes logs registers these values for
masking; this module only finds them. ``Secret`` and ``OptionalSecret`` refuse a blank
value (``""``, spaces, an empty ``${VAR:-}``): a token left empty is a mistake.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel
from pydantic.fields import FieldInfo

from .problems import SECRET_KEYS

__all__ = [
    "SECRET",
    "OptionalSecret",
    "Secret",
    "SecretMark",
    "blank_secrets",
    "is_secret_field",
    "secret_locations",
    "secret_values",
]


class SecretMark:
    """The mark on a field type whose values are secrets (see ``Secret``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "SECRET"


SECRET = SecretMark()


def _not_blank(value: str | None) -> str | None:
    """A secret that is empty or only spaces (``""``, ``${X:-}``) is a mistake, not a value."""
    if value is not None and not value.strip():
        raise ValueError("is blank: a secret needs a value (is its variable set and not empty?)")
    return value


Secret = Annotated[str, SECRET, AfterValidator(_not_blank)]
"""A secret string: masked in every log line, error and traceback botd writes; never blank."""
OptionalSecret = Annotated[str | None, SECRET, AfterValidator(_not_blank)]
"""A secret string that may be left out (but not left blank)."""


def _marked(annotation: Any) -> bool:
    """Whether the ``SECRET`` mark appears anywhere in a type."""
    if get_origin(annotation) is Annotated and any(
        isinstance(meta, SecretMark) for meta in annotation.__metadata__
    ):
        return True
    return any(_marked(arg) for arg in get_args(annotation))


def is_secret_field(name: str, info: FieldInfo) -> bool:
    """Whether a model's field holds a secret (marked, or named like one)."""
    if name in SECRET_KEYS or (info.alias is not None and info.alias in SECRET_KEYS):
        return True
    return any(isinstance(meta, SecretMark) for meta in info.metadata) or _marked(info.annotation)


def secret_values(model: BaseModel) -> set[str]:
    """Every non-empty secret value in ``model`` and the models inside it."""
    found: set[str] = set()
    _collect(model, False, found)
    return found


def blank_secrets(model: BaseModel) -> list[tuple[str | int, ...]]:
    """The paths (by the file's key names) of secrets in ``model`` that are blank strings.

    ``Secret`` refuses a blank value itself; this finds the fields that are secrets only by
    their name (a plugin's unmarked ``token: str``).
    """
    return [loc for loc, value in secret_locations(model) if not value.strip()]


def secret_locations(model: BaseModel) -> list[tuple[tuple[str | int, ...], str]]:
    """Every secret string in ``model`` with its path (by the file's key names, dict keys as
    text): the values of secret fields, blank ones included, and the password of a URL with
    credentials (its path is the URL's)."""
    found: list[tuple[tuple[str | int, ...], str]] = []

    def visit(value: Any, secret: bool, loc: tuple[str | int, ...]) -> None:
        if isinstance(value, BaseModel):
            for name, info in type(value).model_fields.items():
                key = info.alias or name
                inner = secret or is_secret_field(name, info)
                visit(getattr(value, name, None), inner, (*loc, key))
            for name, extra in (value.__pydantic_extra__ or {}).items():
                visit(extra, secret or name in SECRET_KEYS, (*loc, name))
        elif isinstance(value, str) and (secret or _url_password(value)):
            found.append((loc, value))
        elif isinstance(value, Mapping):
            for key, item in value.items():
                visit(item, secret, (*loc, str(key)))
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                visit(item, secret, (*loc, index))

    visit(model, False, ())
    return found


def _url_password(value: str) -> str | None:
    """The password of a URL with credentials (``https://user:pass@host``), if any."""
    if "://" not in value or "@" not in value:
        return None
    try:
        return urlsplit(value).password or None
    except ValueError:
        return None


def _collect(value: Any, secret: bool, found: set[str]) -> None:
    if isinstance(value, BaseModel):
        for name, info in type(value).model_fields.items():
            _collect(getattr(value, name, None), secret or is_secret_field(name, info), found)
        for name, extra in (value.__pydantic_extra__ or {}).items():
            _collect(extra, secret or name in SECRET_KEYS, found)
    elif isinstance(value, str):
        if secret:
            if value:
                found.add(value)
        else:
            password = _url_password(value)
            if password:
                found.add(password)
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect(item, secret, found)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            _collect(item, secret, found)
