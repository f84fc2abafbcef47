"""Issue 15 item 2: errors name a field as its label does ("Image is required"), never by
its document path or an internal name; the path stays in the envelope's details."""

from __future__ import annotations

import re

import pytest

BASE = "/api/v1/sandbox-configs"
INTERNAL = re.compile(r"allow_out|deny_out|deny_egress_by_default|cube_rules|e2b_host_rules"
                      r"|\w+\.\w+\[\d+\]|backend requires|skill_rollout|[A-Z]\w*Block\b")


@pytest.fixture
def admin_api(two_tenants, bearer):
    a, _ = two_tenants
    return bearer(a.admin, a.tenant)

IMAGE = "sandlot/sandbox:base"


def refused(api, config, name="words"):
    response = api.post(BASE, json={"name": name, "config": config})
    assert response.status_code == 400, response.json
    return response.json["error"]


def test_a_missing_image_is_named_by_its_label(admin_api):
    error = refused(admin_api, {"sandbox_type": "docker"})
    assert error["message"] == "Image is required."
    assert error["data"]["errors"] == [{"field": "docker.image", "message": "Image is required."}]


def test_a_list_row_is_named_by_its_position(admin_api):
    error = refused(admin_api, {"sandbox_type": "docker", "docker": {"image": IMAGE},
                                "network": {"allow_out": ["1.2.3.4", "bad host"]}})
    assert error["message"].startswith("Allowed destination 2: ")
    assert error["data"]["errors"][0]["field"] == "network.allow_out[1]"


CASES = [
    {"sandbox_type": "docker", "docker": {"image": IMAGE},
     "network": {"allow_out": ["example.com"]}},
    {"sandbox_type": "docker", "docker": {"image": IMAGE}, "skill_rollout": "always"},
    {"sandbox_type": "e2b", "e2b": "key"},
    {"sandbox_type": "cube", "cube": {"api_url": "https://c.example.com",
                                      "proxy_url": "https://p.example.com",
                                      "sandbox_domain": "s.example.com", "template_id": "t"},
     "network": {"cube_rules": [{"name": "", "inject": [{"header": "bad header"}]}]}},
    {"sandbox_type": "e2b", "e2b": {"api_key": "k", "template_id": "t"},
     "network": {"e2b_host_rules": [{"host": "a.example.com"}], "deny_out": ["x.com"]}},
]


@pytest.mark.parametrize("config", CASES)
def test_no_sentence_carries_a_path_or_internal_name(admin_api, config):
    error = refused(admin_api, config)
    sentences = [error["message"], *(e["message"] for e in error["data"]["errors"])]
    for sentence in sentences:
        assert not INTERNAL.search(sentence), sentence
        assert sentence[0].isupper() and sentence.endswith("."), sentence


def test_several_problems_say_how_many_more(admin_api):
    error = refused(admin_api, {"sandbox_type": "cube"}, name="")
    count = len(error["data"]["errors"])
    assert count > 2
    assert error["message"] == f"Name is required. There are {count - 1} more problems."


def test_every_api_body_error_names_its_field(admin_api):
    response = admin_api.post("/api/v1/api-keys", json={"name": "x" * 500, "full_access": 1.5})
    error = response.json["error"]
    assert response.status_code == 400
    fields = {e["field"] for e in error["data"]["errors"]}
    assert "name" in fields
    for item in error["data"]["errors"]:
        assert not INTERNAL.search(item["message"]), item
    assert error["message"].split(":")[0].split(" ")[0] in ("Name", "Full")
