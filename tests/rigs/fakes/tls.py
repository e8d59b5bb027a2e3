"""A self-signed certificate for 127.0.0.1 (made with the openssl command), so a fake far end can
speak HTTPS and a test can check which certificates a client trusts."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path


def self_signed(folder: Path) -> tuple[Path, ssl.SSLContext]:
    """(the certificate file, a server context using it)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return cert, context
