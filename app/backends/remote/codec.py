"""The wire format of calls to a node: JSON with tagged values for what JSON lacks.

Only the types listed here cross the wire, in both directions: the backend protocol's
dataclasses and enum, bytes, tuples, sets and dicts. Anything else is refused when it
is encoded or decoded, so neither side ever builds an object the other named freely.
Errors travel as a backend error class name from `app.backends.base` and its reason.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
from typing import Any

from app.backends import base
from app.backends.docker.carry import Packed

_DATACLASSES: dict[str, type] = {cls.__name__: cls for cls in (
    base.SandboxSpec, base.ResolvedNetworkPolicy, base.HostRule, base.CubeRule,
    base.SandboxInfo, base.ExecResult, base.FileEntry, base.TemplateInfo,
    base.TemplateBuild, Packed)}
_ENUMS: dict[str, type[enum.Enum]] = {"SandboxState": base.SandboxState}
ERRORS: dict[str, type[base.BackendError]] = {
    name: value for name, value in vars(base).items()
    if isinstance(value, type) and issubclass(value, base.BackendError)}


class WireError(ValueError):
    """A message that is not in the format (from a peer that is not a Sandlot node)."""


def encode(value: Any) -> Any:
    """A JSON-ready form of `value`."""
    if isinstance(value, enum.Enum):  # before str: SandboxState is a str too
        name = type(value).__name__
        if name not in _ENUMS:
            raise WireError(f"enum {name} does not cross the wire")
        return {"$e": name, "v": value.value}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$b": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, tuple):
        return {"$t": [encode(item) for item in value]}
    if isinstance(value, (set, frozenset)):
        return {"$s": [encode(item) for item in value]}
    if isinstance(value, list):
        return [encode(item) for item in value]
    if isinstance(value, dict):
        return {"$d": [[encode(key), encode(item)] for key, item in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # a subclass crosses as the protocol's class it extends (RemotePacked as Packed)
        kind = next((cls for cls in type(value).__mro__
                     if _DATACLASSES.get(cls.__name__) is cls), None)
        if kind is None:
            raise WireError(f"{type(value).__name__} does not cross the wire")
        return {"$c": kind.__name__, "f": {f.name: encode(getattr(value, f.name))
                                           for f in dataclasses.fields(kind)}}
    raise WireError(f"{type(value).__name__} does not cross the wire")


def decode(value: Any) -> Any:
    """The value `encode` made; WireError for anything else."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [decode(item) for item in value]
    if not isinstance(value, dict) or len(value) not in (1, 2):
        raise WireError("not a tagged value")
    try:
        if "$b" in value:
            return base64.b64decode(value["$b"], validate=True)
        if "$t" in value:
            return tuple(decode(item) for item in value["$t"])
        if "$s" in value:
            return frozenset(decode(item) for item in value["$s"])
        if "$d" in value:
            return {decode(key): decode(item) for key, item in value["$d"]}
        if "$e" in value:
            return _ENUMS[value["$e"]](value["v"])
        if "$c" in value:
            cls = _DATACLASSES[value["$c"]]
            return cls(**{key: decode(item) for key, item in value["f"].items()})
    except WireError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"a tagged value that does not decode: {exc}") from None
    raise WireError("an unknown tag")


def dumps(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def loads(raw: bytes) -> dict[str, Any]:
    try:
        message = json.loads(raw)
    except ValueError as exc:
        raise WireError(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise WireError("not a message")
    return message


def error(exc: base.BackendError) -> dict[str, Any]:
    """The reply that raises `exc` again on the caller's side."""
    name = type(exc).__name__ if type(exc).__name__ in ERRORS else "BackendError"
    return {"t": "err", "class": name, "reason": exc.reason}


def raise_error(message: dict[str, Any]) -> None:
    cls = ERRORS.get(str(message.get("class")), base.BackendError)
    raise cls(str(message.get("reason") or "The Docker engine's node failed the call."))
