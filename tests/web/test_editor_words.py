"""Issue 15 item 2 in the sandbox editor: the Image field starts with the deployment's
default image, switching the backend keeps what was typed for the other one, and "Load
templates" is not blocked by an unrelated policy problem."""

from __future__ import annotations

import re

from tests.web._support import post_form, text

IMAGE = "sandlot/sandbox:base"


def image_input(body: str) -> str:
    match = re.search(r'<input[^>]*name="docker\.image"[^>]*>', body)
    assert match, "no image input"
    return match.group(0)


def test_a_new_docker_config_starts_with_the_default_image(two_tenants, login_as, app):
    a, _ = two_tenants
    body = text(login_as(a.admin, a.tenant).get("/sandboxes/new"))
    field = image_input(body)
    assert f'value="{app.config["SANDBOX_DEFAULT_IMAGE"]}"' in field
    assert f'placeholder="{IMAGE}"' not in field  # no placeholder that looks like a value


def test_switching_back_finds_what_was_typed_for_the_other_backend(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    to_e2b = text(post_form(client, "/sandboxes/editor/backend", {
        "sandbox_type": "e2b", "docker.image": "team/custom:1", "docker.pids_limit": "99",
        "docker.engine": "local"}, htmx=True))
    assert 'type="hidden" name="docker.image" value="team/custom:1"' in to_e2b
    carried = dict(re.findall(r'type="hidden" name="(docker\.[\w]+)" value="([^"]*)"', to_e2b))
    back = text(post_form(client, "/sandboxes/editor/backend", {
        "sandbox_type": "docker", "e2b.template_id": "tpl", "e2b.api_key": "typed-key",
        **carried}, htmx=True))
    assert 'value="team/custom:1"' in image_input(back)
    assert re.search(r'name="docker\.pids_limit"\s+value="99"', back)
    assert 'type="hidden" name="e2b.template_id" value="tpl"' in back
    assert "typed-key" not in back  # a typed secret never travels back


def test_a_policy_problem_does_not_block_load_templates(two_tenants, login_as):
    a, _ = two_tenants
    body = text(post_form(login_as(a.admin, a.tenant), "/sandboxes/editor/templates", {
        "sandbox_type": "docker", "docker.image": "", "network.allow_out[0]": "bad host",
        "network.deny_out[0]": "example.com"}, htmx=True))
    assert "Fix the connection settings first" not in body
    assert f'data-pick="{IMAGE}"' in body
