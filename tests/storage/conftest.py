"""The storage tests' local S3: moto's server on loopback."""

from __future__ import annotations

import os

import pytest

from tests.serving import free_port


@pytest.fixture(scope="module")
def moto_endpoint():
    """A local S3 (moto's server) on loopback; fake credentials, no metadata lookups."""
    server_module = pytest.importorskip("moto.server")
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                             "AWS_EC2_METADATA_DISABLED")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                      AWS_EC2_METADATA_DISABLED="true")
    port = free_port()
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
