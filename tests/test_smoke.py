def test_me_with_bearer(two_tenants, bearer):
    a, _ = two_tenants
    response = bearer(a.admin, a.tenant).get("/api/v1/auth/me")
    assert response.status_code == 200
    assert response.json["data"]["role"] == "admin"
