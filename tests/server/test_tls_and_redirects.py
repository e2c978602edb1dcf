"""LAN mode can speak TLS, and no answer reflects the request's Host header (issue 23, #9)."""

from __future__ import annotations

import datetime
import http.client
import ssl

import httpx2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from app.server.config import ServerConfig
from app.server.errors import ServerConfigError

KEY = "tls-test-key"


def _self_signed(folder) -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


def test_the_server_speaks_tls_when_given_a_certificate(serve, gqa_model_dir, tmp_path):
    cert, key = _self_signed(tmp_path)
    served = serve(gqa_model_dir, api_key=KEY, ssl_certfile=cert, ssl_keyfile=key)
    assert served.url.startswith("https://")
    context = ssl.create_default_context(cafile=cert)
    client = httpx2.Client(verify=context)
    url = served.url.replace("127.0.0.1", "localhost")
    reply = client.get(f"{url}/models", headers={"Authorization": f"Bearer {KEY}"})
    assert reply.status_code == 200 and reply.json()["data"]
    # plain http to a TLS port gets no answer from the API
    with pytest.raises(httpx2.HTTPError):
        httpx2.get(url.replace("https://", "http://") + "/models", timeout=5)


def test_tls_needs_both_files_that_exist(tmp_path):
    cert, _ = _self_signed(tmp_path)
    with pytest.raises(ServerConfigError, match="both a certificate and its key"):
        ServerConfig(ssl_certfile=cert).validate()
    with pytest.raises(ServerConfigError, match="does not exist"):
        ServerConfig(ssl_certfile=cert, ssl_keyfile=str(tmp_path / "missing.pem")).validate()


def test_a_stray_slash_is_not_redirected_to_the_requests_host(serve, gqa_model_dir):
    # a Host the server accepts but did not choose (a LAN bind checks none; here an added name)
    served = serve(gqa_model_dir, api_key=KEY, allowed_hosts=("evil.example",))
    connection = http.client.HTTPConnection("127.0.0.1", served.address.port, timeout=10)
    connection.request("GET", "/v1/chat/completions/", headers={
        "Host": "evil.example", "Authorization": f"Bearer {KEY}"})
    response = connection.getresponse()
    response.read()
    assert response.status == 404
    assert response.getheader("Location") is None
