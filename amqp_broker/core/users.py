"""Users of the internal auth backend: password hashing as RabbitMQ stores it, tags, a store.

A RabbitMQ password hash (``rabbit_password_hashing_sha256``, the default since 3.6) is
``base64(salt + sha256(salt + utf8(password)))`` with a 4-byte random salt; sha512 and md5
variants exist for imported definitions. Hashes exported by RabbitMQ verify here and the
other way round. Randomness comes from an injected ``random_bytes(n)`` (``os.urandom`` by
default) so tests are repeatable.

Callers: the broker checks logins with ``UserStore.authenticate`` and the loopback rule with
``loopback_allowed``; the CLI and management API add, delete and change users; definitions
import/export goes through ``User.as_definition`` / ``User.from_definition``. Pure: no IO.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

__all__ = [
    "HASHING_ALGORITHMS", "KNOWN_TAGS", "NoSuchUser", "RandomBytes", "SHA256", "SHA512", "MD5", "User",
    "UserAlreadyExists", "UserError", "UserStore", "check_password", "hash_password",
    "is_loopback_address", "loopback_allowed",
]

SHA256 = "rabbit_password_hashing_sha256"
SHA512 = "rabbit_password_hashing_sha512"
MD5 = "rabbit_password_hashing_md5"
_DIGESTS: dict[str, Callable[[bytes], Any]] = {SHA256: hashlib.sha256, SHA512: hashlib.sha512, MD5: hashlib.md5}
HASHING_ALGORITHMS = tuple(_DIGESTS)

# Tags RabbitMQ gives a meaning to; like RabbitMQ, other tags are stored and listed unchanged.
KNOWN_TAGS = ("administrator", "monitoring", "management", "policymaker", "impersonator")

RandomBytes = Callable[[int], bytes]
_SALT_LEN = 4


class UserError(ValueError):
    """A user operation that cannot be done; the text is meant for an operator."""


class NoSuchUser(UserError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no such user: '{name}'")
        self.name = name


class UserAlreadyExists(UserError):
    def __init__(self, name: str) -> None:
        super().__init__(f"user '{name}' already exists")
        self.name = name


def hash_password(password: str, algorithm: str = SHA256, random_bytes: RandomBytes = os.urandom) -> str:
    """RabbitMQ's stored form: base64(salt + H(salt + utf8(password))), salt = 4 random bytes."""
    digest = _digest(algorithm)
    salt = random_bytes(_SALT_LEN)
    if len(salt) != _SALT_LEN:
        raise ValueError("random_bytes must return the number of bytes asked for")
    return base64.b64encode(salt + digest(salt + password.encode("utf-8")).digest()).decode("ascii")


def check_password(password: str, password_hash: str, algorithm: str = SHA256) -> bool:
    """True if ``password`` matches; an empty or malformed hash never matches (no password set)."""
    digest = _digest(algorithm)
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except (binascii.Error, ValueError):
        return False
    if len(raw) <= _SALT_LEN:
        return False
    salt, expected = raw[:_SALT_LEN], raw[_SALT_LEN:]
    return hmac.compare_digest(digest(salt + password.encode("utf-8")).digest(), expected)


def _digest(algorithm: str) -> Callable[[bytes], Any]:
    try:
        return _DIGESTS[algorithm]
    except KeyError:
        raise UserError(f"unknown hashing algorithm '{algorithm}' (known: {', '.join(HASHING_ALGORITHMS)})") from None


def _clean_tags(tags: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for tag in tags:
        tag = tag.strip()
        if tag and tag not in out:
            out.append(tag)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class User:
    """One user. ``password_hash`` is "" for a user without a password (cannot log in with one)."""

    name: str
    password_hash: str = ""
    hashing_algorithm: str = SHA256
    tags: tuple[str, ...] = ()
    limits: Mapping[str, int] = field(default_factory=dict)  # max-connections, max-channels

    def verify(self, password: str) -> bool:
        return bool(self.password_hash) and check_password(password, self.password_hash, self.hashing_algorithm)

    def with_password(self, password: str, random_bytes: RandomBytes = os.urandom) -> "User":
        """New hash with the default algorithm (RabbitMQ re-hashes on change, as here)."""
        return replace(self, password_hash=hash_password(password, SHA256, random_bytes), hashing_algorithm=SHA256)

    def without_password(self) -> "User":
        return replace(self, password_hash="")

    def with_tags(self, tags: Iterable[str]) -> "User":
        return replace(self, tags=_clean_tags(tags))

    def has_tag(self, tag: str) -> bool:
        return tag in self.tags

    @property
    def is_administrator(self) -> bool:
        return "administrator" in self.tags

    def as_definition(self) -> dict[str, Any]:
        """The object in the definitions JSON "users" list."""
        return {"name": self.name, "password_hash": self.password_hash,
                "hashing_algorithm": self.hashing_algorithm, "tags": list(self.tags),
                "limits": dict(self.limits)}

    @classmethod
    def from_definition(cls, d: Mapping[str, Any]) -> "User":
        """From a definitions "users" entry. ``tags`` may be a list or RabbitMQ 3.x's "a,b" string."""
        tags = d.get("tags", [])
        if isinstance(tags, str):
            tags = tags.split(",")
        algorithm = d.get("hashing_algorithm") or SHA256
        _digest(algorithm)
        return cls(name=d["name"], password_hash=d.get("password_hash") or "", hashing_algorithm=algorithm,
                   tags=_clean_tags(tags), limits=dict(d.get("limits") or {}))


# A hash no password matches in practice, checked when there is no user to check against.
_UNGUESSABLE = hash_password(base64.b64encode(os.urandom(24)).decode())


class UserStore:
    """Users by name. Mutable; the metadata layer owns one and replicates the operations."""

    def __init__(self, users: Iterable[User] = (), random_bytes: RandomBytes = os.urandom) -> None:
        self._users: dict[str, User] = {}
        self._random = random_bytes
        for user in users:
            self.put(user)

    def __contains__(self, name: object) -> bool:
        return name in self._users

    def __len__(self) -> int:
        return len(self._users)

    def get(self, name: str) -> User | None:
        return self._users.get(name)

    def __getitem__(self, name: str) -> User:
        try:
            return self._users[name]
        except KeyError:
            raise NoSuchUser(name) from None

    def list(self) -> list[User]:
        """Sorted by name (RabbitMQ lists users sorted)."""
        return [self._users[n] for n in sorted(self._users)]

    def put(self, user: User) -> None:
        """Insert or replace as is (definitions import, replication)."""
        self._users[user.name] = user

    def add(self, name: str, password: str | None, tags: Iterable[str] = ()) -> User:
        """rabbitmqctl add_user; ``password=None`` creates a user without a password."""
        if not name:
            raise UserError("user name must not be empty")
        if name in self._users:
            raise UserAlreadyExists(name)
        user = User(name, tags=_clean_tags(tags))
        if password is not None:
            user = user.with_password(password, self._random)
        self._users[name] = user
        return user

    def delete(self, name: str) -> User:
        user = self[name]
        del self._users[name]
        return user

    def change_password(self, name: str, password: str) -> User:
        return self._replace(self[name].with_password(password, self._random))

    def clear_password(self, name: str) -> User:
        return self._replace(self[name].without_password())

    def set_tags(self, name: str, tags: Iterable[str]) -> User:
        return self._replace(self[name].with_tags(tags))

    def authenticate(self, name: str, password: str) -> User | None:
        """The user if the password matches, else None (unknown user and bad password alike).
        An unknown user, or one without a password, costs the same hash as a real check, so
        the time of the answer does not tell whether the name exists."""
        user = self._users.get(name)
        if user is None or not user.password_hash:
            check_password(password, _UNGUESSABLE)
            return None
        return user if user.verify(password) else None

    def _replace(self, user: User) -> User:
        self._users[user.name] = user
        return user


def is_loopback_address(address: str | tuple | None) -> bool:
    """rabbit_net:is_loopback: 127/8, ::1 and ::ffff:127.x; ``None`` stands for a Unix socket.

    ``address`` may be a socket address tuple (host first) or a host string (``[::1]`` too).
    """
    if address is None:
        return True
    host = address[0] if isinstance(address, tuple) else address
    host = host.strip("[]").split("%", 1)[0]  # zone index of link-local IPv6
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def loopback_allowed(username: str, address: str | tuple | None, loopback_users: Iterable[str]) -> bool:
    """False if ``username`` is loopback-only and ``address`` is not a loopback address.

    The caller refuses such a login exactly like a bad password (RabbitMQ gives the same 403).
    """
    return username not in tuple(loopback_users) or is_loopback_address(address)
