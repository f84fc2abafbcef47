"""The resolver (reference 8.4): layer order, missing names, a constant number of SQL
statements, and refusal (never a fallback) when the caller's values cannot be read."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from app.errors import Unavailable
from app.extensions import db
from app.models import InstalledSkill
from app.services.personal import (
    capture as exec_capture,
)
from app.services.personal import (
    resolver as env_resolver,
)
from app.services.personal import (
    values as personal_env,
)
from app.services.personal.values import Who
from tests.personal.helpers import config, declare, skill


@contextmanager
def statements():
    seen: list[str] = []

    def count(conn, cursor, statement, *args):
        seen.append(statement)

    engine = db.engine
    event.listen(engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", count)


@pytest.fixture
def w(two_tenants):
    a, _ = two_tenants
    cfg = config(a.tenant)
    return a, cfg, Who.user(a.tenant, a.contributor), Who.user(a.tenant, a.admin)


def _fill(who: Who, cfg: str, sk: InstalledSkill, n: int) -> None:
    for i in range(n):
        personal_env.set_config_value(who, cfg, f"V{i}", f"wide-{i}")
        personal_env.set_skill_value(who, sk.id, f"V{i}", f"skill-{i}")


def test_layers_in_order_and_missing_required(w):
    a, cfg, me, other = w
    sk = skill(a.tenant, cfg, declare("A", "B", "C", required=True) + declare("D"),
               {"A": "ws-a", "B": "ws-b", "C": "", "UNDECLARED": "x"})
    personal_env.set_config_value(me, cfg, "B", "wide-b")
    personal_env.set_config_value(me, cfg, "A", "wide-a")
    personal_env.set_skill_value(me, sk.id, "A", "skill-a")
    got = env_resolver.resolve(me, cfg, sk)
    assert got.env == {"A": "skill-a", "B": "wide-b"}
    assert got.missing == ["C"] and got.capturable == ["C", "D"]
    assert env_resolver.resolve(other, cfg, sk).env == {"A": "ws-a", "B": "ws-b"}
    assert env_resolver.resolve(me, cfg, None).env == {"A": "wide-a", "B": "wide-b"}


def test_a_constant_number_of_statements_whatever_the_number_of_variables(w):
    a, cfg, me, _ = w
    small = skill(a.tenant, cfg, declare("V0"), {"V0": "ws"}, name="small")
    big = skill(a.tenant, cfg, declare(*(f"V{i}" for i in range(50))),
                {f"V{i}": "ws" for i in range(50)}, name="big")
    _fill(me, cfg, small, 1)
    _fill(me, cfg, big, 50)
    counts = []
    for sk in (small, big):
        db.session.expire_all()
        row = db.session.get(InstalledSkill, sk.id)  # loaded by the exec path anyway
        _ = row.env_values
        with statements() as seen:
            env_resolver.resolve(me, cfg, row)
        counts.append(len(seen))
    assert counts == [1, 1]


def test_a_failing_read_refuses_never_falls_back(w):
    a, cfg, me, _ = w
    sk = skill(a.tenant, cfg, declare("A"), {"A": "workspace-key"})

    def fail(conn, cursor, statement, *args):
        if "personal_env_vars" in statement:
            raise OperationalError(statement, {}, Exception("connection lost"))

    db.session.get(InstalledSkill, sk.id).env_values  # noqa: B018 - load before failing
    event.listen(db.engine, "before_cursor_execute", fail)
    try:
        with pytest.raises(Unavailable) as caught:
            env_resolver.resolve(me, cfg, sk)
    finally:
        event.remove(db.engine, "before_cursor_execute", fail)
    assert "not run" in caught.value.message and "workspace-key" not in str(caught.value.data)


def test_capture_stores_only_unset_declared_names_and_never_overwrites(w):
    a, cfg, me, other = w
    sk = skill(a.tenant, cfg, declare("A", "B", "C", "D"), {"A": "ws"})
    personal_env.set_config_value(me, cfg, "B", "mine-wide")
    personal_env.set_skill_value(me, sk.id, "C", "mine")
    stored = env_resolver.capture(me, sk, {"A": "x", "B": "x", "C": "x", "D": "new",
                                           "E": "undeclared", "PATH": "/evil"})
    assert stored == ["D"]
    assert env_resolver.resolve(me, cfg, sk).env == {"A": "ws", "B": "mine-wide",
                                                    "C": "mine", "D": "new"}
    assert env_resolver.resolve(other, cfg, sk).env == {"A": "ws"}


def test_capture_wrapper_never_puts_an_unsafe_name_into_shell_text():
    wrapped = exec_capture.wrap("echo hi", ["GOOD", "BAD;rm -rf /", "$(x)"], "/tmp/d")
    assert "GOOD" in wrapped and "rm -rf" not in wrapped and "$(x)" not in wrapped
    assert exec_capture.wrap("echo hi", ["a b"], "/tmp/d") == "echo hi"
    assert exec_capture.parse("A: 68 69\n;\nB: zz;\n") == {"A": "hi"}
