"""Where the secrets of a sandbox config document sit (reference 1.3), and what a secret
that no longer decrypts looks like in Python.

Secrets are `cube.api_key`, `e2b.api_key`, every `env_vars` value, every Cube inject
`secret` and every E2B host-rule header value. The config column encrypts each of them on
its own (models.types.SecretFieldsJSON), so a lost or rotated-away key blanks only the
secrets it sealed: the rest of the document still reads (reference 1.3: "if a stored
secret fails to decrypt, the value is blanked instead of failing the request").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from app.security.redaction import MASK


class LostSecret(str):
    """A stored secret that no longer decrypts: equal to "" (unset) wherever it is used,
    but recognisable, so responses and pages can say "needs re-entry".

    It keeps the stored token: a row written back for another reason (a skill image
    pointer, say) stores the same token again, so restoring the old key still recovers
    the secret."""

    token: str

    def __new__(cls, token: str = "") -> LostSecret:
        self = super().__new__(cls, "")
        self.token = token
        return self

    def __reduce__(self):  # copies (deepcopy, pickle) stay lost, not plain ""
        return (LostSecret, (self.token,))


class LostMapping(dict):
    """A stored mapping of secrets (an installed skill's admin env values) that no longer
    decrypts: empty, recognisable as lost, and keeping its token as LostSecret does."""

    def __init__(self, token: str = "") -> None:
        super().__init__()
        self.token = token

    def __reduce__(self):  # copies keep the class, the token and any items filled in
        return (type(self), (self.token,), None, None, iter(self.items()))


class LostDocument(LostMapping):
    """A whole config document stored as one token (before secrets were sealed one by
    one) that no key opens: nothing of it can be read. The model fills in the backend
    from its own column so the config still lists; every setting needs re-entry."""


WHOLE = "config"  # the path `lost` reports for a LostDocument: all of it


def is_lost(value: Any) -> bool:
    return isinstance(value, (LostSecret, LostMapping))


Slot = tuple[str, dict, str]  # (path shown to users, the dict holding it, its key)


def slots(doc: Any) -> Iterator[Slot]:
    """Every secret position of a config document, with its field path.

    Tolerates any shape (an unvalidated request body): only dicts and lists are walked,
    and only string values are yielded.
    """
    if not isinstance(doc, dict):
        return
    for kind in ("cube", "e2b"):
        block = doc.get(kind)
        if isinstance(block, dict):
            yield from _string(f"{kind}.api_key", block, "api_key")
    env = doc.get("env_vars")
    if isinstance(env, dict):
        for name in list(env):
            yield from _string(f"env_vars.{name}", env, name)
    network = doc.get("network")
    if not isinstance(network, dict):
        return
    for r, rule in _items(network.get("cube_rules")):
        for i, item in _items(rule.get("inject")):
            yield from _string(f"network.cube_rules[{r}].inject[{i}].secret", item, "secret")
    for r, rule in _items(network.get("e2b_host_rules")):
        headers = rule.get("headers")
        if isinstance(headers, dict):
            for name in list(headers):
                yield from _string(f"network.e2b_host_rules[{r}].headers.{name}", headers, name)


def _string(path: str, holder: dict, key: str) -> Iterator[Slot]:
    if isinstance(holder.get(key), str):
        yield path, holder, key


def _items(value: Any) -> Iterator[tuple[int, dict]]:
    if isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, dict):
                yield index, item


def transform(doc: dict[str, Any], fn: Callable[[str, str], str]) -> dict[str, Any]:
    """`doc` with every set (or lost) secret replaced by fn(path, value), in place."""
    for path, holder, key in list(slots(doc)):
        if holder[key] or isinstance(holder[key], LostSecret):
            holder[key] = fn(path, holder[key])
    return doc


def lost(doc: Any) -> list[str]:
    """Paths of the secrets in `doc` that no longer decrypt ("needs re-entry");
    [WHOLE] when none of the document can be read."""
    if isinstance(doc, LostDocument):
        return [WHOLE]
    return [path for path, holder, key in slots(doc) if isinstance(holder[key], LostSecret)]


def unmask_new(raw: Any) -> Any:
    """A new config's secrets: `***` with nothing stored means no secret (issue 14 item 7),
    never the three asterisks. Changes `raw` in place; returns it."""
    for _path, holder, key in list(slots(raw)):
        if holder[key] == MASK:
            holder[key] = ""
    return raw
