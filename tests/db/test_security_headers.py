"""Issue 16 item 12: Content-Security-Policy and Permissions-Policy on pages and the API."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/accounts/login/", "/api/openapi.json", "/healthz"])
def test_every_response_carries_a_csp_and_a_permissions_policy(client, path):
    response = client.get(path)
    csp = response["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert "'unsafe-eval'" not in csp and "frame-ancestors 'none'" in csp
    assert "camera=()" in response["Permissions-Policy"]
