"""Ed25519 keys: generate, load, sign, verify, and name a public key by its fingerprint.

Signatures use the `cryptography` package (OpenSSL's Ed25519), never hand-written crypto.
A signing (private) key signs; only its public key is needed to verify, so the machines
that execute plans hold public keys only and cannot approve anything themselves.

Keys are PEM files (PKCS#8 private keys, SubjectPublicKeyInfo public keys), or the same
PEM text in an environment variable. A public key is named by its *key id*: the SHA-256
of its 32 raw bytes, as 64 hex digits; audit records carry the key id (and the public key
itself, which is not a secret), never a private key.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from pte._core._errors import KeyFileError
from pte._core._key_files import read_key_file

__all__ = [
    "PublicKey",
    "SignedDecision",
    "SigningKey",
    "TrustedKeys",
    "check_signature_fields",
    "sign_decision",
]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX128 = re.compile(r"[0-9a-f]{128}")


def check_signature_fields(key_id: object, public_key: object, signature: object) -> None:
    """The shape of a signed decision's key id, raw public key and Ed25519 signature (hex), all
    three or none; raises ValueError naming the first that is wrong. Whether the signature
    verifies is `PublicKey.verify`'s question."""
    if key_id is None and public_key is None and signature is None:
        return
    if not (isinstance(key_id, str) and _HEX64.fullmatch(key_id)):
        raise ValueError("key_id must be 64 lowercase hex digits")
    if not (isinstance(public_key, str) and _HEX64.fullmatch(public_key)):
        raise ValueError("public_key must be the 32 raw key bytes as 64 lowercase hex digits")
    if not (isinstance(signature, str) and _HEX128.fullmatch(signature)):
        raise ValueError("signature must be 128 lowercase hex digits (an Ed25519 signature)")


_PEM_BLOCK = re.compile(rb"-----BEGIN PUBLIC KEY-----.+?-----END PUBLIC KEY-----", re.DOTALL)


class PublicKey:
    """An Ed25519 public key: verifies signatures; named by `key_id`."""

    def __init__(self, key: Ed25519PublicKey) -> None:
        self._key = key
        self.raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        #: SHA-256 of the 32 raw key bytes, lowercase hex.
        self.key_id = hashlib.sha256(self.raw).hexdigest()

    @classmethod
    def from_raw(cls, raw: bytes) -> PublicKey:
        """The key from its 32 raw bytes (audit records carry them as hex)."""
        try:
            return cls(Ed25519PublicKey.from_public_bytes(raw))
        except (ValueError, TypeError) as exc:
            raise KeyFileError(f"not an Ed25519 public key: {exc}") from None

    def verify(self, signature: bytes, message: bytes) -> bool:
        """True when `signature` is this key's Ed25519 signature of `message`."""
        try:
            self._key.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    def to_pem(self) -> bytes:
        return self._key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def __repr__(self) -> str:
        return f"PublicKey({self.key_id[:16]}…)"


class SignedDecision:
    """What every signed decision (an approval of a run or of a procedure, an endorsement)
    shares: its signature checks, in one copy. A subclass (a frozen dataclass) has the fields
    `key_id`, `public_key` and `signature` (all None when unsigned, their shape checked by
    `check_signature_fields`) and `message()`, the exact bytes signed."""

    key_id: str | None
    public_key: str | None
    signature: str | None

    def message(self) -> bytes:
        raise NotImplementedError

    @property
    def signed(self) -> bool:
        """Whether it carries a signature (not whether it verifies: see `verify`)."""
        return self.signature is not None

    def self_consistent(self) -> bool:
        """Signed, its key id names its public key, and the signature verifies under that key."""
        if self.signature is None or self.public_key is None:
            return False
        raw = bytes.fromhex(self.public_key)
        if hashlib.sha256(raw).hexdigest() != self.key_id:
            return False
        try:
            key = PublicKey.from_raw(raw)
        except KeyFileError:
            return False
        return key.verify(bytes.fromhex(self.signature), self.message())

    def verify(self, keys: Mapping[str, PublicKey]) -> bool:
        """True when the signature verifies under the trusted key its `key_id` names."""
        if self.key_id is None or self.key_id not in keys:
            return False
        return keys[self.key_id].raw.hex() == self.public_key and self.self_consistent()


class SigningKey:
    """An Ed25519 private key: signs. Never written to a log or shown in a message."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public_key = PublicKey(key.public_key())

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, data: bytes, *, source: str = "<key text>") -> SigningKey:
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise KeyFileError(
                f"{source} is not an unencrypted PEM private key: {_first_line(exc)}"
            ) from None
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyFileError(f"{source} holds a {type(key).__name__}, not an Ed25519 private key")
        return cls(key)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SigningKey:
        return cls.from_pem(_read(path, "signing key"), source=f"signing key file {os.fspath(path)!r}")

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)

    def to_pem(self) -> bytes:
        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def __repr__(self) -> str:  # no key material, ever
        return f"SigningKey(public {self.public_key.key_id[:16]}…)"


_D = TypeVar("_D", bound=SignedDecision)


def sign_decision(cls: Callable[..., _D], fields: dict[str, Any], signing_key: SigningKey | None) -> _D:
    """`cls(**fields)`, signed with `signing_key` when given (its key id, public key and the
    Ed25519 signature of its `message()`): the one signing path of every signed decision."""
    if signing_key is None:
        return cls(**fields)
    public = signing_key.public_key
    unsigned = cls(**fields, key_id=public.key_id, public_key=public.raw.hex(), signature="0" * 128)
    signature = signing_key.sign(unsigned.message()).hex()
    return cls(**fields, key_id=public.key_id, public_key=public.raw.hex(), signature=signature)


class TrustedKeys(Mapping[str, PublicKey]):
    """The public keys whose signatures count (key id -> key): the deployment's approvers."""

    def __init__(self, keys: Iterable[PublicKey] = ()) -> None:
        self._keys = {key.key_id: key for key in keys}

    @classmethod
    def from_pem(cls, data: bytes, *, source: str = "<key text>") -> TrustedKeys:
        """Every PEM public key block in `data` (a file may list several approvers' keys)."""
        blocks = _PEM_BLOCK.findall(data)
        if not blocks:
            raise KeyFileError(f"{source} holds no PEM public key (-----BEGIN PUBLIC KEY-----)")
        keys = []
        for block in blocks:
            try:
                key = serialization.load_pem_public_key(block)
            except (ValueError, TypeError) as exc:
                raise KeyFileError(f"{source}: unreadable public key: {_first_line(exc)}") from None
            if not isinstance(key, Ed25519PublicKey):
                raise KeyFileError(f"{source} holds a {type(key).__name__}, not an Ed25519 public key")
            keys.append(PublicKey(key))
        return cls(keys)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TrustedKeys:
        return cls.from_pem(_read(path, "public key"), source=f"public key file {os.fspath(path)!r}")

    def __getitem__(self, key_id: str) -> PublicKey:
        return self._keys[key_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"TrustedKeys({[k[:16] for k in self._keys]})"


def _read(path: str | os.PathLike[str], what: str) -> bytes:
    # Regular files only, bounded: a FIFO named as a key file must not hang the command.
    try:
        return read_key_file(path, what)
    except ValueError as exc:
        raise KeyFileError(str(exc)) from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
