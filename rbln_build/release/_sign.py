"""Detached Ed25519 signatures of ``release.json`` (the ``cryptography`` package: ``rbln-build[sign]``).

Keys are PEM files as OpenSSL writes them (``openssl genpkey -algorithm ed25519 -out release.key``;
``openssl pkey -in release.key -pubout -out release.pub``), unencrypted. A signature is the 64 raw
bytes Ed25519 defines, so ``openssl pkeyutl -verify -pubin -inkey release.pub -rawin -in release.json
-sigfile release.json.sig`` checks it too. Ed25519 is deterministic: one key and one release.json
always give the same signature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UserError

__all__ = ["sign", "signature_ok", "SIGNATURE_BYTES"]

SIGNATURE_BYTES = 64
_MAX_KEY_BYTES = 16 * 1024


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError:
        raise UserError(
            "signing and checking signatures need the cryptography package: pip install 'rbln-build[sign]'"
        ) from None
    return serialization


def _read_key(path: Path, what: str) -> bytes:
    """The key file's bytes: a regular file of at most 16 KiB (a FIFO or a device is refused, never
    waited on or read without end)."""
    from .._documents import read_document

    try:
        return read_document(path, limit=_MAX_KEY_BYTES, error=UserError, hint="pass a PEM key file")
    except UserError as exc:
        raise UserError(f"{what} {exc}") from None


def sign(data: bytes, key_file: Path) -> bytes:
    """The Ed25519 signature of ``data`` with the private key in ``key_file`` (PEM, PKCS#8)."""
    serialization = _crypto()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(_read_key(key_file, "--sign"), password=None)
    except (ValueError, TypeError) as exc:
        raise UserError(
            f"--sign {key_file}: not an unencrypted PEM private key ({exc}); make one with: "
            "openssl genpkey -algorithm ed25519 -out release.key"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UserError(
            f"--sign {key_file}: a {type(key).__name__}, not an Ed25519 key; releases are signed with Ed25519."
        )
    return key.sign(data)


def signature_ok(data: bytes, signature: bytes, public_key_file: Path) -> bool:
    """Does ``signature`` sign ``data`` for the Ed25519 public key in ``public_key_file`` (PEM)?"""
    serialization = _crypto()
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        key = serialization.load_pem_public_key(_read_key(public_key_file, "--key"))
    except (ValueError, TypeError) as exc:
        raise UserError(
            f"--key {public_key_file}: not a PEM public key ({exc}); export it with: "
            "openssl pkey -in release.key -pubout -out release.pub"
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise UserError(f"--key {public_key_file}: a {type(key).__name__}, not an Ed25519 public key.")
    try:
        key.verify(signature, data)
        return True
    except InvalidSignature:
        return False
