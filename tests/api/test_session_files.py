"""Issue 26 item 3: a session's files under /workspace through the API, on the real
engine: listing, byte-for-byte downloads, folders as zips, uploads into /workspace/input,
deletes; links that lead out of /workspace, traversal and other people's sessions refused."""

from __future__ import annotations

import io
import zipfile

import pytest

from app.extensions import db
from app.models import AuditEvent
from app.services import audit
from app.services.sandboxes import configs as service
from app.services.sessions import lifecycle as sessions
from tests.backends.conftest import BASE_IMAGE, require_docker
from tests.factories import config_doc

EVERY_BYTE = bytes(range(256)) * 64


@pytest.fixture
def world(app, two_tenants):
    require_docker()
    a, b = two_tenants
    config = service.create_config(a.tenant, audit.SystemActor("tests"), "Local", "",
                                   config_doc("docker", {"image": BASE_IMAGE,
                                                         "network_mode": "none"}))
    session = sessions.create_session(a.tenant, a.contributor, config.id, "work")
    assert sessions.exec_command(a.tenant, a.contributor, session, "true").exit_code == 0
    yield a, b, config, session
    sessions.destroy_sandboxes(session)


def sh(group, session, command: str) -> str:
    outcome = sessions.exec_command(group.tenant, group.contributor, session, command)
    assert outcome.exit_code == 0, outcome.stderr
    return outcome.stdout


def url(session, tail: str = "") -> str:
    return f"/api/v1/sessions/{session.id}/files{tail}"


def upload(api, session, *files, path=None):
    data = {"file": [(io.BytesIO(content), name) for name, content in files]}
    if path is not None:
        data["path"] = path
    return api.post(url(session), data=data, content_type="multipart/form-data")


def test_upload_list_download_zip_and_delete_round_trip(world, bearer):
    a, _, _, session = world
    api = bearer(a.contributor, a.tenant)

    sent = upload(api, session, ("data.bin", EVERY_BYTE), ("notes é.txt", b"hello\n"))

    assert sent.status_code == 201, sent.json
    assert [(e["path"], e["size"]) for e in sent.json["data"]] == [
        ("/workspace/input/data.bin", len(EVERY_BYTE)), ("/workspace/input/notes é.txt", 6)]
    assert sh(a, session, "stat -c %U /workspace/input/data.bin").strip() == "sandbox"
    listed = api.get(url(session), query_string={"path": "/workspace/input"}).json["data"]
    assert [(e["name"], e["type"], e["size"]) for e in listed["entries"]] == [
        ("data.bin", "file", len(EVERY_BYTE)), ("notes é.txt", "file", 6)]
    assert listed["entries"][0]["modified"]

    got = api.get(url(session, "/content"), query_string={"path": "input/data.bin"})
    assert got.status_code == 200 and got.data == EVERY_BYTE
    assert got.headers["Content-Disposition"].startswith("attachment")
    folder = api.get(url(session, "/content"), query_string={"path": "/workspace/input"})
    assert folder.mimetype == "application/zip"
    with zipfile.ZipFile(io.BytesIO(folder.data)) as archive:
        assert archive.read("data.bin") == EVERY_BYTE
        assert archive.read("notes é.txt") == b"hello\n"

    gone = api.delete(url(session), query_string={"path": "/workspace/input/data.bin"})
    assert gone.status_code == 200, gone.json
    assert "data.bin" not in sh(a, session, "ls /workspace/input")
    actions = [(e.action, e.data.get("path"), e.data.get("size")) for e in db.session.scalars(
        db.select(AuditEvent).where(AuditEvent.action.like("session_file.%"))
        .order_by(AuditEvent.id))]
    assert actions == [
        ("session_file.uploaded", "/workspace/input/data.bin", len(EVERY_BYTE)),
        ("session_file.uploaded", "/workspace/input/notes é.txt", 6),
        ("session_file.downloaded", "/workspace/input/data.bin", len(EVERY_BYTE)),
        ("session_file.downloaded", "/workspace/input", len(folder.data)),
        ("session_file.deleted", "/workspace/input/data.bin", None)]


def test_links_out_of_the_workspace_are_listed_but_never_followed(world, bearer):
    a, _, _, session = world
    api = bearer(a.contributor, a.tenant)
    sh(a, session, "cd /workspace && echo keep > keep.txt && ln -s /etc/shadow shadow && "
                   "ln -s /etc etc && ln -s keep.txt inside && mkdir -p input && "
                   "ln -s /tmp input/escape")

    entries = {e["name"]: e["type"] for e in api.get(url(session)).json["data"]["entries"]}
    assert entries["shadow"] == entries["etc"] == entries["inside"] == "link"

    for path in ("/workspace/shadow", "/workspace/etc/passwd", "/workspace/etc"):
        refused = api.get(url(session, "/content"), query_string={"path": path})
        assert refused.status_code == 400, (path, refused.json)
        assert refused.json["error"]["code"] == "path_outside_workspace"
    assert api.get(url(session), query_string={"path": "/workspace/etc"}).json["error"][
        "code"] == "path_outside_workspace"
    # A link inside the workspace is read as what it points to.
    assert api.get(url(session, "/content"), query_string={"path": "inside"}).data == b"keep\n"
    # A zip of the workspace holds its regular files, not what links point to.
    with zipfile.ZipFile(io.BytesIO(api.get(url(session, "/content")).data)) as archive:
        assert "keep.txt" in archive.namelist()
        assert not any(n.startswith(("etc", "shadow", "inside")) for n in archive.namelist())
    # Uploads: into a linked folder, or out of /workspace/input by its path.
    assert upload(api, session, ("x.txt", b"x"), path="/workspace/input/escape").json[
        "error"]["code"] == "path_outside_workspace"
    assert upload(api, session, ("x.txt", b"x"), path="/workspace/input/../../etc")\
        .status_code == 400
    assert upload(api, session, ("escape", b"x")).status_code == 400  # the name is a link
    assert upload(api, session, ("bad\x01name", b"x")).status_code == 400
    assert "x.txt" not in sh(a, session, "ls /tmp /etc")
    # Deleting a link removes the link, never what it points to.
    assert api.delete(url(session), query_string={"path": "inside"}).status_code == 200
    assert sh(a, session, "cat /workspace/keep.txt") == "keep\n"
    assert api.delete(url(session), query_string={"path": "/workspace"}).status_code == 400
    assert api.delete(url(session), query_string={"path": "/etc/passwd"}).status_code == 400


def test_only_the_session_s_member_and_only_with_a_sandbox(world, bearer):
    a, b, config, session = world
    for who, group in ((a.viewer, a), (b.contributor, b), (a.admin, a)):
        other = bearer(who, group.tenant)
        assert other.get(url(session)).status_code == 404
        assert other.get(url(session, "/content"), query_string={"path": "input"})\
            .status_code == 404
        assert upload(other, session, ("x.txt", b"x")).status_code == 404
    fresh = sessions.create_session(a.tenant, a.contributor, config.id, "no sandbox yet")
    answer = bearer(a.contributor, a.tenant).get(url(fresh))
    assert answer.status_code == 409 and answer.json["error"]["code"] == "sandbox_not_bound"
    plain = bearer(a.contributor, a.tenant).post(url(session), json={"file": "x"})
    assert plain.status_code == 415


def test_transfers_are_capped_in_size_before_reading_and_in_number(world, bearer, app,
                                                                    monkeypatch):
    a, _, _, session = world
    api = bearer(a.contributor, a.tenant)
    sh(a, session, "truncate -s 65M /workspace/big.bin")  # sparse: nothing to read
    big = api.get(url(session, "/content"), query_string={"path": "big.bin"})
    assert big.status_code == 413 and "64 MiB" in big.json["error"]["message"]

    # Each transfer holds a thread and its bytes: a member's are counted across processes.
    monkeypatch.setitem(app.config, "FILE_TRANSFERS_PER_MEMBER", 0)
    held = api.get(url(session, "/content"), query_string={"path": "input"})
    assert held.status_code == 429
    assert held.json["error"]["code"] == "quota_exceeded"
    assert "file transfers" in held.json["error"]["message"]
    assert upload(api, session, ("x.txt", b"x")).status_code == 429
    monkeypatch.setitem(app.config, "FILE_TRANSFERS_PER_MEMBER", 2)
    assert upload(api, session, ("x.txt", b"x")).status_code == 201  # nothing left held
