"""The editor form <-> the sandbox config document, without a request."""

from __future__ import annotations

from werkzeug.datastructures import MultiDict

from app.services.sandboxes import document as sandbox_doc
from app.web.sandboxes.form import Editor, form_to_doc


def test_a_docker_form_becomes_the_config_document():
    form = MultiDict({
        "name": "Local", "sandbox_type": "docker", "docker.image": " sandlot/sandbox:base ",
        "docker.host": "", "docker.cpu_limit": "1.5", "docker.memory_limit_mb": "512",
        "docker.pids_limit": "", "docker.network_mode": "bridge", "docker.idle_ttl_seconds": "600",
        "default_timeout_sec": "120", "terminal_idle_disconnect_sec": "", "skill_rollout": "",
        "desktop_enabled": "y",
        "env_vars[0].key": "LOG_LEVEL", "env_vars[0].value": "debug ",
        "env_vars[4].key": "", "env_vars[4].value": "",  # a blank row is not a variable
        "network.deny_egress_by_default": "y",
        "network.allow_out[0]": "pypi.org", "network.allow_out[2]": "",
        "network.allow_out[5]": "10.0.0.0/8", "network.deny_out[1]": "0.0.0.0/0",
    })
    assert form_to_doc(form) == {
        "sandbox_type": "docker", "default_timeout_sec": 120, "desktop_enabled": True,
        "allow_private_endpoints": False,
        "docker": {"image": "sandlot/sandbox:base", "cpu_limit": 1.5, "memory_limit_mb": 512,
                   "network_mode": "bridge", "idle_ttl_seconds": 600},
        "env_vars": {"LOG_LEVEL": "debug "},  # values are verbatim: they may be secrets
        "network": {"deny_egress_by_default": True, "allow_out": ["pypi.org", "10.0.0.0/8"],
                    "deny_out": ["0.0.0.0/0"]},
    }


def test_blank_secrets_are_sent_empty_so_the_stored_value_is_kept():
    doc = form_to_doc(MultiDict({"sandbox_type": "e2b", "e2b.api_key": "",
                                 "e2b.template_id": "base", "env_vars[0].key": "TOKEN",
                                 "env_vars[0].value": ""}))
    assert doc["e2b"]["api_key"] == "" and doc["env_vars"] == {"TOKEN": ""}
    stored = {"sandbox_type": "e2b", "e2b": {"api_key": "stored-key", "template_id": "base"},
              "env_vars": {"TOKEN": "stored-token", "GONE": "x"}}
    merged = sandbox_doc.merge(doc, stored)
    assert merged["e2b"]["api_key"] == "stored-key"
    assert merged["env_vars"] == {"TOKEN": "stored-token"}  # a removed row deletes its key


def test_cube_rules_and_e2b_host_rules_with_their_header_rows():
    doc = form_to_doc(MultiDict({
        "sandbox_type": "cube", "cube.dns_servers": "10.0.0.2, 10.0.0.3 ",
        "network.cube_rules[3].name": "gh", "network.cube_rules[3].host": "api.github.com",
        "network.cube_rules[3].methods": "get, POST", "network.cube_rules[3].action": "deny",
        "network.cube_rules[3].scheme": "https", "network.cube_rules[3].audit": "full",
        "network.cube_rules[3].inject[1].header": "Authorization",
        "network.cube_rules[3].inject[1].secret": "s3cret",
        "network.cube_rules[3].inject[1].format": "Bearer ${SECRET}",
        "network.cube_rules[3].inject[2].header": "", "network.cube_rules[3].inject[2].secret": "",
        "network.cube_rules[9].action": "allow",  # an untouched new rule is blank
        "network.e2b_host_rules[0].host": "api.github.com",
        "network.e2b_host_rules[0].headers[0].name": " X-Key ",
        "network.e2b_host_rules[0].headers[0].value": "v",
    }))
    assert doc["cube"]["dns_servers"] == ["10.0.0.2", "10.0.0.3"]
    assert doc["network"]["cube_rules"] == [{
        "name": "gh", "host": "api.github.com", "sni": "", "scheme": "https", "path": "",
        "audit": "full", "methods": ["get", "POST"], "deny": True,
        "inject": [{"header": "Authorization", "secret": "s3cret", "format": "Bearer ${SECRET}"}],
    }]
    assert doc["network"]["e2b_host_rules"] == [{"host": "api.github.com",
                                                "headers": {"X-Key": "v"}}]


def test_a_number_that_is_not_one_reaches_the_validator_which_names_the_field():
    doc = form_to_doc(MultiDict({"sandbox_type": "docker", "docker.image": "x",
                                 "docker.pids_limit": "lots"}))
    assert doc["docker"]["pids_limit"] == "lots"


def test_errors_about_document_rows_map_back_to_the_rows_as_rendered():
    ed = Editor.parse(MultiDict({
        "sandbox_type": "e2b",
        "network.allow_out[0]": "", "network.allow_out[4]": "ok.example.com",
        "network.allow_out[7]": "bad host",
        "env_vars[3].key": "1BAD", "env_vars[3].value": "v",
        "network.e2b_host_rules[2].host": "api.example.com",
        "network.e2b_host_rules[2].headers[5].name": "Bad Name",
        "network.cube_rules[6].name": "r", "network.cube_rules[6].host": "x.example.com",
        "network.cube_rules[6].inject[0].header": "", "network.cube_rules[6].inject[8].header": "A",
    }))
    ed.document()
    assert ed.slot_for("network.allow_out[1]") == "network.allow_out[7]"
    assert ed.slot_for("network.allow_out") == "network.allow_out"
    assert ed.slot_for("env_vars.1BAD") == "env_vars[3]"
    assert ed.slot_for("network.e2b_host_rules[0].headers.Bad Name") == \
        "network.e2b_host_rules[2].headers[5]"
    assert ed.slot_for("network.cube_rules[0].inject[0].header") == \
        "network.cube_rules[6].inject[8]"
    assert ed.slot_for("e2b.api_key") == "e2b.api_key"
    assert ed.slot_for("config") is None
    placed = ed.place([{"field": "network.cube_rules[0].host", "message": "is bad"}])
    assert placed == {"network.cube_rules[6]": ["host: is bad"]}


def test_a_stored_document_fills_the_form_without_any_secret():
    masked = sandbox_doc.masked({
        "sandbox_type": "e2b", "default_timeout_sec": 0,
        "e2b": {"api_key": "k", "template_id": "base", "e2b_sandbox_ttl_seconds": 600},
        "env_vars": {"A": "secret-a"},
        "network": {"allow_out": ["api.github.com"], "deny_egress_by_default": True,
                    "e2b_host_rules": [{"host": "api.github.com",
                                        "headers": {"Authorization": "tok"}}]},
    })
    ed = Editor.from_doc(masked, "E2B", "d")
    assert ed.stored == {"e2b.api_key"} and "e2b.api_key" not in ed.values
    assert ed.values["e2b.e2b_sandbox_ttl_seconds"] == "600"
    assert ed.values["default_timeout_sec"] == ""  # 0 shows the default placeholder
    env = ed.lists["env_vars"][0]
    assert env.values == {"key": "A", "value": ""} and env.stored
    header = ed.lists["network.e2b_host_rules"][0].children[0]
    assert header.values == {"name": "Authorization", "value": ""} and header.stored
    assert "***" not in repr(ed)
