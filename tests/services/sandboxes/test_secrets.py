"""Masking a config document copies only what holds a secret (issue 15 item 7): the
result is what a full deep copy gave, and the stored document is never changed."""

from __future__ import annotations

import copy

import pytest

from app.security.config_secrets import LostDocument, LostSecret, lost
from app.services.sandboxes.secrets import mask, masked, upgraded_docker


def deep_copy_masked(doc):
    """The former implementation: deep-copy everything, then mask in place."""
    out = copy.deepcopy(doc)
    for kind in ("cube", "e2b"):
        if out.get(kind):
            out[kind]["api_key"] = mask(out[kind].get("api_key"))
    if out.get("docker"):
        out["docker"] = upgraded_docker(out["docker"])
    out["env_vars"] = {k: mask(v) for k, v in (out.get("env_vars") or {}).items()}
    network = out.get("network") or {}
    for rule in network.get("cube_rules") or []:
        for item in rule.get("inject") or []:
            item["secret"] = mask(item.get("secret"))
    for rule in network.get("e2b_host_rules") or []:
        rule["headers"] = {k: mask(v) for k, v in (rule.get("headers") or {}).items()}
    return out


DOCS = [
    {"sandbox_type": "docker", "docker": {"image": "x", "engine": "local"},
     "env_vars": {"A": "secret-a", "B": ""}, "network": {"allow_out": ["pypi.org"]}},
    {"sandbox_type": "cube", "cube": {"api_key": "cube-key", "api_url": "http://c"},
     "network": {"cube_rules": [{"name": "gh", "host": "api.github.com",
                                 "inject": [{"header": "Authorization", "secret": "tok"},
                                            {"header": "X-Empty", "secret": ""}]},
                                {"name": "no-inject", "host": "example.org"}],
                 "deny_out": ["10.0.0.0/8"]}},
    {"sandbox_type": "e2b", "e2b": {"api_key": LostSecret("gAAAA-old")}, "docker": {},
     "network": {"e2b_host_rules": [{"host": "api.openai.com",
                                     "headers": {"Authorization": "Bearer sk"}},
                                    {"host": "bare.example"}]}},
    {"sandbox_type": "e2b", "e2b": {}},
]


@pytest.mark.parametrize("doc", DOCS)
def test_same_result_as_a_deep_copy_and_the_stored_document_is_untouched(doc):
    before = copy.deepcopy(doc)
    shown = masked(doc)
    assert shown == deep_copy_masked(doc)
    assert lost(shown) == lost(deep_copy_masked(doc))
    assert doc == before
    # Whatever holds a secret is the copy's own: changing it cannot reach the stored doc.
    for rule in (shown.get("network") or {}).get("cube_rules") or []:
        for item in rule.get("inject") or []:
            item["secret"] = "changed"
    for rule in (shown.get("network") or {}).get("e2b_host_rules") or []:
        rule["headers"]["Authorization"] = "changed"
    for kind in ("cube", "e2b"):
        if shown.get(kind):
            shown[kind]["api_key"] = "changed"
    shown["env_vars"]["A"] = "changed"
    assert doc == before


def test_a_lost_document_stays_a_lost_document():
    doc = LostDocument("gAAAA-token")
    doc["sandbox_type"] = "docker"
    shown = masked(doc)
    assert isinstance(shown, LostDocument) and lost(shown) == lost(doc)
