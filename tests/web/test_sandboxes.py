"""The Sandboxes section: the configs list and kill switch, the editor drawer with live
policy validation, secrets that never reach the page, inventory and delete."""

from __future__ import annotations

import re

import pytest

from app.extensions import db
from app.models import Role, SandboxConfig
from app.models.types import utcnow
from app.services import audit
from app.services.sandboxes import configs as service
from app.services.sandboxes.configs import Inventory
from tests.factories import config_doc
from tests.web._support import post_form, text

# Configs here point at loopback fakes: the operator allows private endpoints.
pytestmark = pytest.mark.usefixtures("private_endpoints")

UNREACHABLE = "missing"  # an engine of the test settings whose socket does not exist
IMAGE = "sandlot/sandbox:base"
CANARY = "canary-e2b-key-7f3a9c"
ENV_CANARY = "canary-env-value-51d0"
HEADER_CANARY = "canary-header-value-92be"


def make(group, name: str, doc: dict, description: str = "") -> SandboxConfig:
    return service.create_config(group.tenant, audit.SystemActor("tests"), name, description, doc)


def docker(group, name: str = "Local Docker", **extra) -> SandboxConfig:
    return make(group, name, config_doc("docker", {"image": IMAGE, **extra.pop("docker", {})},
                                        **extra))


def e2b(group, name: str = "E2B production") -> SandboxConfig:
    return make(group, name, config_doc(
        "e2b", {"api_key": CANARY, "api_url": "http://127.0.0.1:3000"},
        env_vars={"OPENAI_API_KEY": ENV_CANARY, "LOG_LEVEL": "debug"},
        network={"deny_egress_by_default": True, "allow_out": ["api.github.com"],
                 "e2b_host_rules": [{"host": "api.github.com",
                                     "headers": {"Authorization": HEADER_CANARY}}]},
    ), "Agents' default sandboxes.")


def stored(row: SandboxConfig) -> dict:
    db.session.expire_all()
    return db.session.get(SandboxConfig, row.id).config


def slot(body: str, slot_id: str) -> str:
    """The text in one error slot of a page or an out-of-band fragment."""
    match = re.search(rf'<p class="field-error" id="{re.escape(slot_id)}"[^>]*>(.*?)</p>', body)
    assert match, f"no slot {slot_id}"
    return re.sub(r"<[^>]+>", " ", match.group(1)).strip()


DOCKER_FORM = {"name": "Local Docker", "sandbox_type": "docker", "docker.image": IMAGE,
               "docker.network_mode": "bridge"}


# -- the list --------------------------------------------------------------------------------

def test_a_viewer_sees_the_configs_and_the_switch_state_but_no_admin_action(two_tenants,
                                                                             login_as):
    a, _ = two_tenants
    row = docker(a, network={"deny_egress_by_default": True, "allow_out": ["1.2.3.4"]})
    e2b(a)
    body = text(login_as(a.viewer, a.tenant).get("/sandboxes"))
    assert "Local Docker" in body and f"docker · <span class=\"mono\">{IMAGE}</span>" in body
    assert "e2b · <span class=\"mono\">127.0.0.1:3000</span>" in body
    assert "Default deny · 1 allowed" in body and "Agents&#39; default sandboxes." in body
    assert "Workspace scripts" in body and 'role="switch"' not in body
    for action in ("Add sandbox config", f"/sandboxes/{row.id}/edit",
                   f"/sandboxes/{row.id}/delete", f"/sandboxes/{row.id}/inventory"):
        assert action not in body
    assert CANARY not in body and ENV_CANARY not in body


def test_an_admin_sees_edit_inventory_delete_and_the_add_card(two_tenants, login_as):
    a, _ = two_tenants
    row = docker(a)
    body = text(login_as(a.admin, a.tenant).get("/sandboxes"))
    for action in ("Add sandbox config", f"/sandboxes/{row.id}/edit",
                   f"/sandboxes/{row.id}/delete", f"/sandboxes/{row.id}/inventory"):
        assert action in body
    assert 'hx-confirm="Delete “Local Docker”?' in body
    assert 'role="switch" aria-checked="true"' in body


def test_tabs_count_each_backend_and_filter_by_query_string(two_tenants, login_as):
    a, _ = two_tenants
    docker(a, "One")
    docker(a, "Two")
    e2b(a)
    client = login_as(a.viewer, a.tenant)
    body = text(client.get("/sandboxes"))
    counts = dict(re.findall(r'class="tab[^"]*"[^>]*>(\w+)<span class="count">(\d+)</span>', body))
    assert counts == {"All": "3", "Docker": "2", "E2B": "1", "Cube": "0"}
    fragment = text(client.get("/sandboxes?backend=e2b", headers={"HX-Request": "true"}))
    assert fragment.lstrip().startswith('<section id="sandbox-list"') and "<html" not in fragment
    assert "E2B production" in fragment and "One" not in fragment
    assert 'hx-push-url="true"' in fragment
    cube = text(client.get("/sandboxes?backend=cube"))
    assert "No Cube configs" in cube


def test_an_empty_workspace_has_an_empty_state(two_tenants, login_as):
    a, _ = two_tenants
    assert "No sandbox configs yet" in text(login_as(a.viewer, a.tenant).get("/sandboxes"))
    admin = text(login_as(a.admin, a.tenant).get("/sandboxes"))
    assert "No sandbox configs yet" in admin and "Add sandbox config" in admin


def test_the_nav_links_to_sandboxes_for_every_role(two_tenants, login_as):
    a, _ = two_tenants
    for role in Role:
        page = text(login_as(a.by_role[role], a.tenant).get("/sandboxes"))
        assert 'href="/sandboxes"' in page and 'aria-current="page"><svg' in page


# -- the kill switch ---------------------------------------------------------------------------

def test_the_kill_switch_asks_before_turning_scripts_off_and_toggles(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    page = text(client.get("/sandboxes"))
    assert "hx-confirm=\"Turn scripts off" in page
    # issue 27 item 12: the switch says what it stops
    assert "emergency stop: off refuses every command and skill install" in page
    response = post_form(client, "/sandboxes/scripts", {"scripts": "off"}, htmx=True)
    body = text(response)
    assert response.status_code == 200 and body.lstrip().startswith('<section id="kill-switch"')
    assert 'aria-checked="false"' in body and "hx-confirm" not in body
    db.session.expire_all()
    assert a.tenant.scripts_disabled is True
    assert "Off: no agent may run scripts" in text(login_as(a.viewer, a.tenant).get("/sandboxes"))
    response = post_form(client, "/sandboxes/scripts", {"scripts": "on"})
    assert response.status_code == 302
    db.session.expire_all()
    assert a.tenant.scripts_disabled is False
    assert post_form(client, "/sandboxes/scripts", {"scripts": "maybe"}).status_code == 400


# -- create and validation ---------------------------------------------------------------------

def test_an_admin_creates_a_docker_config_through_the_form(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    drawer = text(client.get("/sandboxes/new", headers={"HX-Request": "true"}))
    assert 'class="drawer drawer-wide"' in drawer and "<html" not in drawer
    assert "Test connection" in drawer and "Deep check" in drawer  # the sandbox check
    assert 'class="drawer drawer-wide"' in text(client.get("/sandboxes/new"))  # a full page too
    response = post_form(client, "/sandboxes", {
        **DOCKER_FORM, "description": "On this host", "docker.memory_limit_mb": "512",
        "env_vars[0].key": "LOG_LEVEL", "env_vars[0].value": "debug",
        "network.deny_egress_by_default": "y", "network.allow_out[0]": "pypi.org",
    }, htmx=True)
    assert response.status_code == 200
    assert response.headers["HX-Retarget"] == "#sandbox-list"
    body = text(response)
    assert "Local Docker" in body and "Added “Local Docker”." in body
    assert '<div id="drawer-slot" hx-swap-oob="true"></div>' in body
    (row,) = service.list_configs(a.tenant)
    assert "added sandbox config “Local Docker” (docker)" in text(client.get("/"))
    assert row.description == "On this host"
    assert row.config["docker"]["memory_limit_mb"] == 512
    assert row.config["env_vars"] == {"LOG_LEVEL": "debug"}
    assert row.config["network"]["allow_out"] == ["pypi.org"]


def test_a_form_post_without_htmx_redirects_to_the_list(two_tenants, login_as):
    a, _ = two_tenants
    response = post_form(login_as(a.admin, a.tenant), "/sandboxes", DOCKER_FORM)
    assert response.status_code == 302 and response.headers["Location"].endswith("/sandboxes")
    assert [r.name for r in service.list_configs(a.tenant)] == ["Local Docker"]


BAD_POLICY = {**DOCKER_FORM, "network.allow_out[0]": "10.0.0.1",
              "network.allow_out[2]": "bad host", "network.deny_out[0]": "example.com"}


def test_validation_errors_appear_next_to_their_fields(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    response = post_form(client, "/sandboxes", {**BAD_POLICY, "docker.image": ""})
    body = text(response)
    assert response.status_code == 400
    assert "must not contain spaces" in slot(body, "err-network-allow_out-2")
    assert slot(body, "err-network-allow_out-0") == ""
    assert "is not an IPv4 address or CIDR" in slot(body, "err-network-deny_out-0")
    assert "Image is required." in slot(body, "err-docker-image")
    assert "3 problems to fix before saving." in body
    assert 'value="bad host"' in body  # the form comes back as typed
    body = text(post_form(client, "/sandboxes", {**DOCKER_FORM, "docker.pids_limit": "lots"}))
    assert "valid integer" in slot(body, "err-docker-pids_limit")
    assert service.list_configs(a.tenant) == []


def test_htmx_validation_errors_fill_the_slots_and_leave_the_inputs_alone(two_tenants,
                                                                           login_as):
    a, _ = two_tenants
    response = post_form(login_as(a.admin, a.tenant), "/sandboxes", BAD_POLICY, htmx=True)
    body = text(response)
    assert response.status_code == 400
    assert response.headers["HX-Retarget"] == "#editor-alert"
    assert "<input" not in body  # nothing typed is sent back
    assert ('id="err-network-allow_out-2" hx-swap-oob="true"><span>Allowed destination 2: '
            '&#39;bad host&#39; must not') in body
    assert 'id="err-network-allow_out-0" hx-swap-oob="true"></p>' in body  # cleared
    assert "2 problems to fix before saving." in body


def test_a_duplicate_name_is_reported_above_the_form(two_tenants, login_as):
    a, _ = two_tenants
    docker(a)
    response = post_form(login_as(a.admin, a.tenant), "/sandboxes", DOCKER_FORM)
    assert response.status_code == 409
    assert "A sandbox config named &#39;Local Docker&#39; already exists." in text(response)


@pytest.mark.parametrize("field", ["name", "description", "docker.image", "env_vars[0].key",
                                   "env_vars[0].value", "network.allow_out[0]", "docker.engine"])
def test_a_nul_in_any_input_is_a_field_error_not_a_server_error(two_tenants, login_as, field):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    data = {**DOCKER_FORM, "env_vars[0].key": "K", "env_vars[0].value": "v",
            "network.allow_out[0]": "1.2.3.4"}
    data[field] = data.get(field, "") + "\x00x"
    response = post_form(client, "/sandboxes", data)
    assert response.status_code == 400
    slot_name = re.sub(r"\.(key|value)$", "", field)
    assert "must not contain NUL" in slot(text(response), "err-" + re.sub(r"[^\w]+", "-",
                                                                          slot_name).strip("-"))
    for path in ("/sandboxes/editor/validate", "/sandboxes/editor/templates",
                 "/sandboxes/editor/backend"):
        assert post_form(client, path, data).status_code == 200, path
    assert service.list_configs(a.tenant) == []


def test_live_validation_returns_the_error_for_the_right_row(two_tenants, login_as):
    a, _ = two_tenants
    response = post_form(login_as(a.admin, a.tenant), "/sandboxes/editor/validate", {
        **DOCKER_FORM, "network.allow_out[0]": "", "network.allow_out[3]": "1.2.3.4",
        "network.allow_out[7]": "1.2.3.4/32", "network.allow_out[9]": "pypi.org",
    }, htmx=True)
    body = text(response)
    assert response.status_code == 200
    assert slot(body, "err-network-allow_out-3") == ""
    assert "duplicate" in slot(body, "err-network-allow_out-7")
    assert "need a deny-all fallback" in slot(body, "err-network-allow_out")
    assert "2 problems in this policy" in body
    assert "err-docker-image" not in body  # only the policy section is checked live


def test_live_validation_checks_cube_rules_against_stored_secrets(two_tenants, login_as):
    a, _ = two_tenants
    row = make(a, "Cube", {
        "sandbox_type": "cube", "allow_private_endpoints": True,
        "cube": {"api_url": "http://127.0.0.1:8443", "proxy_url": "http://127.0.0.1:8444",
                 "sandbox_domain": "cube.internal", "template_id": "t"},
        "network": {"cube_rules": [{"name": "gh", "host": "api.github.com",
                                    "inject": [{"header": "Authorization", "secret": "s"}]}]},
    })
    response = post_form(login_as(a.admin, a.tenant), "/sandboxes/editor/validate", {
        "config_id": row.id, "sandbox_type": "cube",
        "allow_private_endpoints": "y", "cube.api_url": "http://127.0.0.1:8443",
        "cube.proxy_url": "http://127.0.0.1:8444", "cube.sandbox_domain": "cube.internal",
        "network.cube_rules[4].name": "gh", "network.cube_rules[4].host": "api.github.com",
        "network.cube_rules[4].action": "deny",
        "network.cube_rules[4].inject[2].header": "Authorization",
        "network.cube_rules[4].inject[2].secret": "",
    }, htmx=True)
    # The stored secret is kept by a blank input, and a deny rule never injects.
    assert "HTTP rule 1, header 1 value: a deny rule never injects" in slot(text(response),
                                                       "err-network-cube_rules-4-inject-2")


def test_switching_the_backend_swaps_the_connection_section(two_tenants, login_as):
    a, _ = two_tenants
    response = post_form(login_as(a.admin, a.tenant), "/sandboxes/editor/backend", {
        "sandbox_type": "cube", "e2b.api_url": "https://e2b.example.com",
        "e2b.api_key": "typed-key", "network.allow_out[2]": "1.2.3.4",
    }, htmx=True)
    body = text(response)
    assert body.lstrip().startswith('<div id="editor-backend">')
    assert 'name="cube.api_url"' in body and 'value="https://e2b.example.com"' in body
    assert "HTTP rules" in body and 'name="network.allow_out[2]" value="1.2.3.4"' in body
    assert "typed-key" not in body
    assert 'name="desktop_enabled"' in body
    docker = text(post_form(login_as(a.admin, a.tenant), "/sandboxes/editor/backend", {
        "sandbox_type": "docker", "desktop_enabled": "y"}, htmx=True))
    assert 'name="docker.image"' in docker
    assert 'name="desktop_enabled"' not in docker  # Docker has no desktop template


def test_load_templates_lists_the_local_images(two_tenants, login_as):
    a, _ = two_tenants
    from app.backends import registry

    images = [t.id for t in registry.make_backend("docker", {"image": IMAGE}).list_templates()]
    client = login_as(a.admin, a.tenant)
    body = text(post_form(client, "/sandboxes/editor/templates",
                          {"sandbox_type": "docker", "docker.image": ""}, htmx=True))
    offered = [i for i in images if i.startswith("sandlot/sandbox:")]  # the operator's
    assert IMAGE in offered
    for image in images:
        assert (f'data-pick="{image}"' in body) == (image in offered), image
    unreachable = text(post_form(client, "/sandboxes/editor/templates",
                                 {"sandbox_type": "docker", "docker.engine": UNREACHABLE},
                                 htmx=True))
    assert "The Docker engine “missing” could not be reached" in unreachable
    assert "/tmp/" not in unreachable  # the operator's socket path is not the tenant's


# -- edit and secrets ----------------------------------------------------------------------------

def test_edit_never_renders_a_secret_and_a_blank_secret_keeps_the_stored_one(two_tenants,
                                                                             login_as):
    a, _ = two_tenants
    row = e2b(a)
    client = login_as(a.admin, a.tenant)
    page = text(client.get(f"/sandboxes/{row.id}/edit"))
    for secret in (CANARY, ENV_CANARY, HEADER_CANARY, "***"):
        assert secret not in page
    assert 'name="e2b.api_key" value=""' in page
    assert "Configured — leave blank to keep." in page
    assert "set — leave blank to keep" in page
    response = post_form(client, f"/sandboxes/{row.id}/edit", {
        "name": "E2B prod", "sandbox_type": "e2b", "allow_private_endpoints": "y",
        "e2b.api_key": "", "e2b.api_url": "http://127.0.0.1:3000", "e2b.template_id": "base",
        "env_vars[0].key": "OPENAI_API_KEY", "env_vars[0].value": "",
        "env_vars[1].key": "LOG_LEVEL", "env_vars[1].value": "",
        "network.deny_egress_by_default": "y", "network.allow_out[0]": "api.github.com",
        "network.e2b_host_rules[0].host": "api.github.com",
        "network.e2b_host_rules[0].headers[0].name": "Authorization",
        "network.e2b_host_rules[0].headers[0].value": "",
    }, htmx=True)
    assert response.status_code == 200, text(response)
    for secret in (CANARY, ENV_CANARY, HEADER_CANARY):
        assert secret not in text(response)
    config = stored(row)
    assert config["e2b"]["api_key"] == CANARY
    assert config["env_vars"] == {"OPENAI_API_KEY": ENV_CANARY, "LOG_LEVEL": "debug"}
    assert config["network"]["e2b_host_rules"][0]["headers"] == {"Authorization": HEADER_CANARY}
    assert db.session.get(SandboxConfig, row.id).name == "E2B prod"


def test_a_typed_secret_is_not_echoed_when_the_save_fails(two_tenants, login_as):
    a, _ = two_tenants
    response = post_form(login_as(a.admin, a.tenant), "/sandboxes", {
        "name": "E2B", "sandbox_type": "e2b", "e2b.api_key": "typed-secret-value",
        "env_vars[0].key": "A", "env_vars[0].value": "typed-env-value",
    })
    body = text(response)
    assert response.status_code == 400
    assert "typed-secret-value" not in body and "typed-env-value" not in body
    assert "Not saved yet: enter it again." in body


def test_removing_an_env_row_deletes_the_variable(two_tenants, login_as):
    a, _ = two_tenants
    row = docker(a, env_vars={"KEEP": "kept-value", "DROP": "dropped-value"})
    response = post_form(login_as(a.admin, a.tenant), f"/sandboxes/{row.id}/edit", {
        **DOCKER_FORM, "env_vars[1].key": "KEEP", "env_vars[1].value": "",
        "env_vars[5].key": "NEW", "env_vars[5].value": "new-value",
    })
    assert response.status_code == 302
    assert stored(row)["env_vars"] == {"KEEP": "kept-value", "NEW": "new-value"}


def test_a_listed_twice_variable_is_an_error_on_its_row(two_tenants, login_as):
    a, _ = two_tenants
    response = post_form(login_as(a.admin, a.tenant), "/sandboxes", {
        **DOCKER_FORM, "env_vars[0].key": "A", "env_vars[0].value": "1",
        "env_vars[3].key": "A", "env_vars[3].value": "2"})
    assert response.status_code == 400
    assert "listed twice" in slot(text(response), "err-env_vars-3")


def test_an_identity_change_with_live_sandboxes_opens_the_inventory(two_tenants, login_as,
                                                                     monkeypatch):
    a, _ = two_tenants
    row = docker(a)
    live = Inventory(sandbox_count=2, session_ids=["sess-1", "sess-2"], agent_names=["Scout"])
    monkeypatch.setattr(service, "take_inventory", lambda *args, **kwargs: live)
    response = post_form(login_as(a.admin, a.tenant), f"/sandboxes/{row.id}/edit",
                         {**DOCKER_FORM, "docker.engine": UNREACHABLE}, htmx=True)
    body = text(response)
    assert response.status_code == 409
    assert response.headers["HX-Retarget"] == "#drawer-slot"
    assert "still live" in body and "sess-1" in body and "Scout" in body
    assert stored(row)["docker"]["engine"] == "local"


def test_an_unverifiable_identity_change_offers_save_anyway(two_tenants, login_as):
    a, _ = two_tenants
    row = docker(a, docker={"engine": UNREACHABLE})
    client = login_as(a.admin, a.tenant)
    form = {**DOCKER_FORM, "docker.engine": "local"}
    response = post_form(client, f"/sandboxes/{row.id}/edit", form, htmx=True)
    body = text(response)
    assert response.status_code == 409 and response.headers["HX-Retarget"] == "#editor-alert"
    assert "could not be listed" in body and "Save anyway" in body
    assert f'hx-post="/sandboxes/{row.id}/edit?force=1"' in body and "hx-confirm" in body
    assert stored(row)["docker"]["engine"] == UNREACHABLE
    response = post_form(client, f"/sandboxes/{row.id}/edit?force=1", form, htmx=True)
    assert response.status_code == 200
    assert stored(row)["docker"]["engine"] == "local"


def test_a_cordoned_config_answers_with_a_clear_message(two_tenants, login_as):
    a, _ = two_tenants
    row = docker(a)
    row.cordoned_at = utcnow()
    db.session.commit()
    response = post_form(login_as(a.admin, a.tenant), f"/sandboxes/{row.id}/edit",
                         {**DOCKER_FORM, "description": "x"}, htmx=True)
    assert response.status_code == 423
    assert "Another change to this config is in progress" in text(response)


def test_a_skill_snapshot_blocks_a_template_change(two_tenants, login_as):
    a, _ = two_tenants
    row = docker(a)
    row.config = {**row.config, "skill_image": {"snapshot_id": "snap-1", "generation": 1}}
    db.session.commit()
    response = post_form(login_as(a.admin, a.tenant), f"/sandboxes/{row.id}/edit",
                         {**DOCKER_FORM, "docker.image": "sandlot/sandbox:busybox"})
    assert response.status_code == 409
    assert "Installed skills are baked into this config" in text(response)


# -- inventory and delete ----------------------------------------------------------------------

def test_delete_removes_the_config(two_tenants, login_as):
    a, _ = two_tenants
    row = docker(a)
    response = post_form(login_as(a.admin, a.tenant), f"/sandboxes/{row.id}/delete", htmx=True)
    assert response.status_code == 200 and "Deleted “Local Docker”." in text(response)
    assert service.list_configs(a.tenant) == []


def test_an_unreachable_engine_makes_the_inventory_unverifiable_until_forced(two_tenants,
                                                                            login_as):
    a, _ = two_tenants
    row = docker(a, docker={"engine": UNREACHABLE})
    client = login_as(a.admin, a.tenant)
    page = text(client.get(f"/sandboxes/{row.id}/inventory"))
    assert "Inventory unverifiable." in page and "Force delete" in page
    fragment = text(client.get(f"/sandboxes/{row.id}/inventory",
                               headers={"HX-Request": "true"}))
    assert fragment.lstrip().startswith('<div class="drawer-backdrop"')
    response = post_form(client, f"/sandboxes/{row.id}/delete", htmx=True)
    assert response.status_code == 409
    assert response.headers["HX-Retarget"] == "#drawer-slot"
    assert "Inventory unverifiable." in text(response) and "Force delete" in text(response)
    assert len(service.list_configs(a.tenant)) == 1
    response = post_form(client, f"/sandboxes/{row.id}/delete?force=1", htmx=True)
    assert response.status_code == 200
    assert service.list_configs(a.tenant) == []


def test_force_never_deletes_a_config_with_live_sandboxes(two_tenants, login_as, monkeypatch):
    """Force overrides only an unverifiable inventory (reference 3.1.5, decisions 10)."""
    a, _ = two_tenants
    row = docker(a)
    live = Inventory(sandbox_count=1, session_ids=["sess-9"], sessionless=0)
    monkeypatch.setattr(service, "take_inventory", lambda *args, **kwargs: live)
    response = post_form(login_as(a.admin, a.tenant), f"/sandboxes/{row.id}/delete?force=1")
    assert response.status_code == 409
    assert "sess-9" in text(response) and "still live" in text(response)
    assert len(service.list_configs(a.tenant)) == 1


# -- who may do what ----------------------------------------------------------------------------

@pytest.mark.parametrize("role", [Role.viewer, Role.contributor])
def test_below_admin_the_editor_inventory_and_every_post_are_forbidden(two_tenants, login_as,
                                                                        role):
    a, _ = two_tenants
    row = docker(a)
    client = login_as(a.by_role[role], a.tenant)
    for path in ("/sandboxes/new", f"/sandboxes/{row.id}/edit", f"/sandboxes/{row.id}/inventory"):
        assert client.get(path).status_code == 403, path
    for path in ("/sandboxes", f"/sandboxes/{row.id}/edit", f"/sandboxes/{row.id}/delete",
                 "/sandboxes/scripts", "/sandboxes/editor/validate",
                 "/sandboxes/editor/backend", "/sandboxes/editor/templates"):
        assert post_form(client, path, {**DOCKER_FORM, "scripts": "off"}).status_code == 403, path
    assert len(service.list_configs(a.tenant)) == 1 and not a.tenant.scripts_disabled


def test_another_workspaces_config_is_not_found(two_tenants, login_as):
    a, b = two_tenants
    row = docker(b)
    client = login_as(a.admin, a.tenant)
    for path in (f"/sandboxes/{row.id}/edit", f"/sandboxes/{row.id}/inventory"):
        assert client.get(path).status_code == 404, path
    for path in (f"/sandboxes/{row.id}/edit", f"/sandboxes/{row.id}/delete"):
        assert post_form(client, path, DOCKER_FORM).status_code == 404, path
    for path in ("/sandboxes/editor/validate", "/sandboxes/editor/backend",
                 "/sandboxes/editor/templates"):
        response = post_form(client, path, {**DOCKER_FORM, "config_id": row.id})
        assert response.status_code == 404, path
    assert post_form(client, "/sandboxes/editor/validate",
                     {"config_id": "not-a-uuid"}).status_code == 404
    assert "Local Docker" not in text(client.get("/sandboxes"))
    assert len(service.list_configs(b.tenant)) == 1


def test_a_post_without_csrf_token_changes_nothing(two_tenants, login_as):
    a, _ = two_tenants
    row = docker(a)
    client = login_as(a.admin, a.tenant)
    assert client.post(f"/sandboxes/{row.id}/delete").status_code == 400
    assert client.post("/sandboxes/scripts", data={"scripts": "off"}).status_code == 400
    assert client.post("/sandboxes", data=DOCKER_FORM).status_code == 400
    assert len(service.list_configs(a.tenant)) == 1 and not a.tenant.scripts_disabled


def test_changing_the_api_url_asks_for_every_stored_secret_again(two_tenants, login_as):
    a, _ = two_tenants
    row = e2b(a)
    form = {
        "name": "E2B prod", "sandbox_type": "e2b", "allow_private_endpoints": "y",
        "e2b.api_key": "", "e2b.api_url": "http://127.0.0.1:3999", "e2b.template_id": "base",
        "env_vars[0].key": "OPENAI_API_KEY", "env_vars[0].value": "",
        "env_vars[1].key": "LOG_LEVEL", "env_vars[1].value": "",
        "network.deny_egress_by_default": "y", "network.allow_out[0]": "api.github.com",
        "network.e2b_host_rules[0].host": "api.github.com",
        "network.e2b_host_rules[0].headers[0].name": "Authorization",
        "network.e2b_host_rules[0].headers[0].value": "",
    }
    client = login_as(a.admin, a.tenant)

    response = post_form(client, f"/sandboxes/{row.id}/edit", form, htmx=True)

    body = text(response)
    assert response.status_code == 400
    for slot_id in ("err-e2b-api_key", "err-env_vars-0", "err-env_vars-1",
                    "err-network-e2b_host_rules-0-headers-0"):
        assert "re-enter this secret" in slot(body, slot_id), slot_id
    assert stored(row)["e2b"]["api_url"] == "http://127.0.0.1:3000"
    typed = {**form, "e2b.api_key": "new-key", "env_vars[0].value": "new-env",
             "env_vars[1].value": "info", "network.e2b_host_rules[0].headers[0].value": "h"}
    # Typed again, it saves (forced: the old provider on a closed port cannot be listed).
    saved = post_form(client, f"/sandboxes/{row.id}/edit?force=1", typed, htmx=True)
    assert saved.status_code == 200, text(saved)
    assert stored(row)["e2b"]["api_key"] == "new-key"


def test_would_this_be_allowed_answers_from_the_form(two_tenants, login_as):
    """Issue 24 item 4 in the editor: the unsaved form's policy decides."""
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    form = {**DOCKER_FORM, "network.deny_egress_by_default": "y",
            "network.allow_out[0]": "*.pypi.org"}
    allowed = text(post_form(client, "/sandboxes/editor/explain",
                             {**form, "explain_host": "files.pypi.org"}, htmx=True))
    assert "status-allowed" in allowed and "allow_out[0] *.pypi.org" in allowed
    denied = text(post_form(client, "/sandboxes/editor/explain",
                            {**form, "explain_host": "pypi.org"}, htmx=True))
    assert "status-denied" in denied and "default deny" in denied
    bad = text(post_form(client, "/sandboxes/editor/explain",
                         {**form, "explain_host": "bad host"}, htmx=True))
    assert "must not contain spaces" in bad
    broken = text(post_form(client, "/sandboxes/editor/explain", {
        **DOCKER_FORM, "network.allow_out[0]": "pypi.org", "explain_host": "pypi.org"},
        htmx=True))
    assert "Fix the network policy first" in broken
    # an empty question, an empty answer
    assert text(post_form(client, "/sandboxes/editor/explain", form, htmx=True)).strip() == ""
    viewer = login_as(a.viewer, a.tenant)
    assert post_form(viewer, "/sandboxes/editor/explain", {**form, "explain_host": "pypi.org"},
                     htmx=True).status_code == 403
