"""Capacity leases (decisions 17): what holds terminals, streams, runs and transfers is
counted across processes. Two apps on one Redis (two processes of one deployment) count
together, never past a limit even when they race; a process that died stops counting
once its leases run out; another deployment on the same Redis counts apart."""

from __future__ import annotations

import os
import threading
import time

import pytest

from app.errors import Unavailable
from app.services import capacity
from app.services.quotas import OverQuota

LIMITS = (capacity.Limit("runs_per_member", "member", 2),
          capacity.Limit("runs_per_workspace", "workspace", 3))
USE = capacity.Use("run", 7, "user:1")
OTHER = capacity.Use("run", 7, "user:2")


@pytest.fixture(params=["redis", "memory"])
def apps(request, app_factory, db_url):
    """Two apps of one deployment (its database), on Redis or, without it, one process."""
    if request.param == "memory":
        yield app_factory(), None
        return
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        pytest.skip("TEST_REDIS_URL is not set")
    yield app_factory(REDIS_URL=url), app_factory(REDIS_URL=url)


def admit(app, use=USE):
    with app.app_context():
        return capacity.admit(use, LIMITS, "commands running", "wait.")


def release(app, lease):
    with app.app_context():
        capacity.release(lease)


def test_uses_count_across_processes_and_come_back_when_released(apps):
    first, second = apps
    second = second or first
    held = [admit(second), admit(first)]
    with pytest.raises(OverQuota) as refused:
        admit(second)
    assert refused.value.data == {"quota": "runs_per_member", "limit": 2, "used": 2}
    assert "A member may have at most 2 commands running" in refused.value.message
    held.append(admit(first, OTHER))
    with pytest.raises(OverQuota) as full:
        admit(second, OTHER)
    assert full.value.data["quota"] == "runs_per_workspace"
    release(second, held.pop(0))  # given back by the process that took it
    held.append(admit(first, OTHER))
    for lease in held:
        release(first, lease)
    with first.app_context():
        assert capacity.used(USE, "workspace") == 0


def test_racing_admissions_never_pass_a_limit(apps):
    first, second = apps
    second = second or first
    taken, refused = [], []

    def race(app, member):
        try:
            taken.append(admit(app, capacity.Use("run", 7, f"user:{member}")))
        except OverQuota:
            refused.append(1)

    # one member per thread (thread idents are reused once a thread ends, so never
    # name a member after one: two racers would share a member's limit of 2)
    threads = [threading.Thread(target=race, args=(app, member))
               for member, app in enumerate((first, second) * 6, start=100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (len(taken), len(refused)) == (3, 9)
    for lease in taken:
        release(first, lease)


def test_a_dead_process_s_leases_run_out_and_live_ones_are_renewed(apps, monkeypatch):
    first, _ = apps
    monkeypatch.setattr(capacity, "LEASE_SEC", 1)
    monkeypatch.setattr(capacity, "RENEW_SEC", 0.2)
    kept = admit(first)
    dead = admit(first)
    with first.app_context():
        capacity._renewer(first).discard(dead)  # its process died: nobody renews it
    time.sleep(1.5)
    with first.app_context():
        assert capacity.used(USE, "member") == 1  # the renewed one only
    release(first, kept)


def test_another_deployment_on_the_same_redis_counts_apart(app_factory, tmp_path):
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        pytest.skip("TEST_REDIS_URL is not set")
    ours = app_factory(REDIS_URL=url)
    theirs = app_factory(REDIS_URL=url,
                         SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'other.db'}")
    held = [admit(ours), admit(ours)]
    lease = admit(theirs)  # their user:1 of their workspace 7 is not ours
    release(theirs, lease)
    for lease in held:
        release(ours, lease)


def test_an_unreachable_redis_is_a_503_not_a_free_pass(app_factory):
    app = app_factory(REDIS_URL="redis://127.0.0.1:9/0")
    with app.app_context(), pytest.raises(Unavailable):
        capacity.admit(USE, LIMITS, "commands running", "wait.")
