"""Password sign-in is rate limited per client IP and per account (Flask-Limiter), on the web
form and on POST /api/v1/auth/login alike; only failed attempts count."""

from __future__ import annotations

import hashlib
import os
import uuid

import pytest

from tests import factories
from tests.web._support import post_form, text

WRONG = "not-the-password"


@pytest.fixture
def limited(app_factory):
    """An app whose limits are low: 3 failures per account, 5 per IP, per minute."""
    return app_factory(LOGIN_RATE_LIMIT_PER_ACCOUNT="3 per minute",
                       LOGIN_RATE_LIMIT_PER_IP="5 per minute")


@pytest.fixture
def alice():
    tenant = factories.make_tenant("Limits")
    return factories.make_user(f"alice-{uuid.uuid4().hex[:6]}@example.test", tenant)


def api_login(app, email: str, password: str, ip: str = "10.0.0.1"):
    return app.test_client().post("/api/v1/auth/login", json={"email": email, "password": password},
                                  environ_base={"REMOTE_ADDR": ip})


def web_login(app, email: str, password: str, ip: str = "10.0.0.1"):
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = ip
    return post_form(client, "/login", {"email": email, "password": password},
                     token_from="/login")


def assert_rate_limited(response) -> None:
    assert response.status_code == 429, response.get_data(as_text=True)[:300]
    body = response.get_json()
    assert body["success"] is False and body["error"]["code"] == "rate_limited"
    assert int(response.headers["Retry-After"]) > 0


def test_the_fourth_failure_on_an_account_is_refused_even_with_the_right_password(limited,
                                                                                  alice):
    for _ in range(3):
        assert api_login(limited, alice.email, WRONG).status_code == 401
    assert_rate_limited(api_login(limited, alice.email, WRONG))
    assert_rate_limited(api_login(limited, alice.email, factories.PASSWORD))
    # The account is limited from any address, and spelled any way.
    assert_rate_limited(api_login(limited, f"  {alice.email.upper()} ", WRONG, ip="10.0.0.9"))


def test_another_account_from_the_same_ip_is_not_refused(limited, alice):
    bob = factories.make_user("bob-limits@example.test")
    for _ in range(4):
        api_login(limited, alice.email, WRONG)
    assert api_login(limited, bob.email, WRONG).status_code == 401
    assert api_login(limited, bob.email, factories.PASSWORD).status_code in (200, 401)


def test_an_ip_that_tries_many_accounts_is_refused_and_another_ip_is_not(limited, alice):
    for n in range(5):
        assert api_login(limited, f"guess-{n}@example.test", WRONG).status_code == 401
    assert_rate_limited(api_login(limited, "guess-9@example.test", WRONG))
    assert_rate_limited(api_login(limited, alice.email, factories.PASSWORD))
    assert api_login(limited, alice.email, factories.PASSWORD, ip="10.0.0.2").status_code == 200


def test_successful_sign_ins_do_not_count(limited, alice):
    for _ in range(10):
        assert api_login(limited, alice.email, factories.PASSWORD).status_code == 200
    for _ in range(3):
        assert api_login(limited, alice.email, WRONG).status_code == 401
    assert_rate_limited(api_login(limited, alice.email, WRONG))


def test_the_web_form_is_limited_with_a_clear_message(limited, alice):
    for _ in range(3):
        assert web_login(limited, alice.email, WRONG).status_code == 401
    refused = web_login(limited, alice.email, factories.PASSWORD)
    assert refused.status_code == 429
    assert "Too many sign-in attempts" in text(refused)
    assert 'name="email"' in text(refused)  # the form is still there
    assert int(refused.headers["Retry-After"]) > 0
    assert "Location" not in refused.headers
    # Looking at the page is not an attempt.
    assert limited.test_client().get("/login").status_code == 200


def test_web_and_api_attempts_share_the_account_limit(limited, alice):
    web_login(limited, alice.email, WRONG)
    web_login(limited, alice.email, WRONG)
    api_login(limited, alice.email, WRONG)
    assert_rate_limited(api_login(limited, alice.email, WRONG))
    assert web_login(limited, alice.email, WRONG).status_code == 429


def test_the_testing_config_leaves_the_rest_of_the_suite_alone(app):
    assert app.config["RATELIMIT_STORAGE_URI"] == "memory://"
    assert app.config["LOGIN_RATE_LIMIT_PER_ACCOUNT"] == "10000 per minute"


def test_limits_are_kept_in_redis_when_redis_url_is_set(app_factory, alice):
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        pytest.skip("TEST_REDIS_URL not set")
    import redis

    account = hashlib.sha256(alice.email.encode()).hexdigest()[:32]
    built = app_factory(REDIS_URL=url, RATELIMIT_STORAGE_URI=None,
                        LOGIN_RATE_LIMIT_PER_ACCOUNT="2 per minute")
    assert built.config["RATELIMIT_STORAGE_URI"] == url
    connection = redis.Redis.from_url(url)
    try:
        for _ in range(2):
            assert api_login(built, alice.email, WRONG).status_code == 401
        assert_rate_limited(api_login(built, alice.email, WRONG))
        assert connection.keys(f"*{account}*"), "no rate-limit counter in Redis"
    finally:
        for key in connection.scan_iter(f"*{account}*"):
            connection.delete(key)
        connection.close()


def test_a_forged_x_forwarded_for_does_not_dodge_the_ip_limit(limited):
    """Without a trusted proxy configured, X-Forwarded-For is the attacker's to write."""
    for n in range(5):
        limited.test_client().post("/api/v1/auth/login",
                                   json={"email": f"g{n}@example.test", "password": WRONG},
                                   headers={"X-Forwarded-For": f"192.0.2.{n}"},
                                   environ_base={"REMOTE_ADDR": "10.0.0.7"})
    refused = limited.test_client().post(
        "/api/v1/auth/login", json={"email": "g9@example.test", "password": WRONG},
        headers={"X-Forwarded-For": "192.0.2.99"}, environ_base={"REMOTE_ADDR": "10.0.0.7"})
    assert_rate_limited(refused)


def test_behind_a_trusted_proxy_each_client_has_its_own_ip_limit(app_factory):
    proxied = app_factory(LOGIN_RATE_LIMIT_PER_IP="2 per minute", TRUSTED_PROXY_COUNT=1)

    def attempt(client_ip: str):
        return proxied.test_client().post(
            "/api/v1/auth/login", json={"email": f"{uuid.uuid4().hex}@example.test",
                                        "password": WRONG},
            headers={"X-Forwarded-For": client_ip}, environ_base={"REMOTE_ADDR": "127.0.0.1"})

    assert attempt("198.51.100.1").status_code == 401
    assert attempt("198.51.100.1").status_code == 401
    assert_rate_limited(attempt("198.51.100.1"))
    assert attempt("198.51.100.2").status_code == 401  # another client behind the same proxy
