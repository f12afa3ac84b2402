"""The site's Ed25519 signing key: read from SIGNING_KEY_FILE once, at start (settings.py
loads and checks it), its public half kept in the database for ever.

The key is recorded by a write path only, never by a read: the first time a process signs with
it (an ingest, `migrate`, `manage.py signcheckpoint`) it records the public key as active and
marks every other active key retired (still published, so what they signed keeps verifying),
each change a signed statement of the keys' history (key_history.py) that the outgoing key
signs too. Rotating is therefore: point SIGNING_KEY_FILE at a new key and
PREVIOUS_SIGNING_KEY_FILE at the old one, restart, and let a write path run (README, "Rotating
the signing key"). The one exception is a key found compromised under the
append lock: `compromisekey` may have written the new key in place of it, so the file is read
again then (taken_over), and the new key signs from that write on, with no restart.

A rotation only goes forward: a retired key is never made active again (a shell or a host
whose SIGNING_KEY_FILE still names the old key would otherwise take the site back to it), and
a process whose key was retired since it recorded it (another host rotated) signs nothing
more: the write path reads the key's status under the append lock (found_retired), and
/healthz says so (check_status).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.db import transaction

from receiptsite import config
from receiptsite.integrity import keys
from receiptsite.ledger import key_history
from receiptsite.problems import Problem
from receiptsite.receipts.models import SigningKey

logger = logging.getLogger(__name__)


class CannotSign(Problem):
    """The site has no signing key it may use: nothing can be stored or signed."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            503,
            "cannot-sign",
            "The site cannot sign",
            f"The site has no signing key it may use: {reason}.",
        )
        self.reason = reason


@dataclass(frozen=True)
class ConfiguredKey:
    private: Ed25519PrivateKey
    public: bytes
    kid: str


@dataclass(frozen=True)
class ActiveKey(ConfiguredKey):
    row: SigningKey


# The configured key's public half and kid, computed once per key object.
_configured: list[ConfiguredKey] = []
# kid -> its row, once this process has recorded the key as active.
_recorded: dict[str, SigningKey] = {}
# kid -> the private half of every key this process has activated (not compromised since): the
# outgoing key signs the statement of its successor's activation when it is at hand.
_held: dict[str, Ed25519PrivateKey] = {}


def forget() -> None:
    """Forget the recorded row (tests that roll back the database call this)."""
    _recorded.clear()


def configured() -> ConfiguredKey:
    """The key from SIGNING_KEY_FILE. Reads nothing and writes nothing. Raises CannotSign."""
    private = settings.SIGNING_KEY
    if private is None:
        raise CannotSign("SIGNING_KEY_FILE is not set")
    if not _configured or _configured[0].private is not private:
        public = keys.public_raw(private)
        _configured[:] = [ConfiguredKey(private, public, keys.jwk_thumbprint(public))]
    return _configured[0]


def configured_kid() -> str:
    """The configured key's kid, or "" when none may be configured (check_status, given the
    status of "", raises the CannotSign configured() raises)."""
    try:
        return configured().kid
    except CannotSign:
        return ""


def active_key() -> ActiveKey:
    """The configured key, recorded as the active one. For write paths only. Raises
    CannotSign."""
    return record(configured())


def recorded() -> ActiveKey | None:
    """The configured key when this process has recorded it as the active one already, else
    None (no key, or not recorded yet). Reads and writes nothing: the ingest signs a receipt
    with it before it waits for the append lock, and signs again under the lock whenever the
    key the lock approves (log.lock_for_append) is another."""
    try:
        key = configured()
    except CannotSign:
        return None
    row = _recorded.get(key.kid)
    return None if row is None else ActiveKey(key.private, key.public, key.kid, row)


def configured_from(private: Ed25519PrivateKey) -> ConfiguredKey:
    """Another key than SIGNING_KEY_FILE's (the one `compromisekey` activates)."""
    public = keys.public_raw(private)
    return ConfiguredKey(private, public, keys.jwk_thumbprint(public))


def record(key: ConfiguredKey, compromising: str | None = None) -> ActiveKey:
    """`key`, recorded as the active one (once per process). Raises CannotSign for a key
    marked compromised. `compromising`: the key `compromisekey` replaces (_activate)."""
    row = _recorded.get(key.kid)
    if row is None:
        row = _recorded[key.kid] = _activate(key, compromising)
    return ActiveKey(key.private, key.public, key.kid, row)


def taken_over(kid: str) -> ConfiguredKey:
    """The configured key `kid` is marked compromised: the key that replaced it, when
    `compromisekey` wrote that one in place of it in SIGNING_KEY_FILE (the file is read again,
    and becomes the configured key), else CannotSign. Reads and writes no row."""
    path = settings.SIGNING_KEY_FILE
    try:
        private = config.signing_key(path) if path else None
    except config.ConfigurationError:
        private = None
    if private is None or configured_from(private).kid == kid:
        raise found_compromised(kid)
    settings.SIGNING_KEY = private
    return configured()


def found_compromised(kid: str) -> CannotSign:
    """The key `kid` turned out compromised since this process recorded it (the write path
    reads its status under the append lock): forget it and refuse to sign with it."""
    _recorded.pop(kid, None)
    return _compromised(kid)


def _activate(key: ConfiguredKey, compromising: str | None = None) -> SigningKey:
    """Record `key` as the active key and every other active key as retired, each change a
    signed statement of the keys' history (key_history.py), signed by `key` and by the
    outgoing keys: each key active until now signs over to its successor, so a rotation needs
    the old key's private half (held by this process since it activated it, or in
    PREVIOUS_SIGNING_KEY_FILE), else CannotSign. `compromising`: the active key `compromisekey`
    marks compromised next, which signs nothing and is not retired here."""
    with transaction.atomic():
        row = SigningKey.objects.filter(kid=key.kid).first()
        if row is not None and row.status == SigningKey.COMPROMISED:
            raise _compromised(key.kid)
        if row is not None and row.status == SigningKey.RETIRED:
            raise _retired(key.kid)
        _held[key.kid] = key.private
        previous = settings.PREVIOUS_SIGNING_KEY
        if previous is not None:
            _held.setdefault(keys.jwk_thumbprint(keys.public_raw(previous)), previous)
        taking_over = key_history.Signer(key.kid, key.private)
        others = list(
            SigningKey.objects.filter(status=SigningKey.ACTIVE)
            .exclude(kid=key.kid)
            .exclude(kid=compromising or "")
        )
        missing = [other.kid for other in others if other.kid not in _held]
        if missing:
            raise CannotSign(
                f"the key {missing[0]} is active, and its private half is not at hand to sign "
                f"over to the new key {key.kid} in the keys' history: set "
                "PREVIOUS_SIGNING_KEY_FILE to it for the rotation, or, if it leaked, mark it "
                "compromised with `compromisekey`"
            )
        outgoing = [key_history.Signer(other.kid, _held[other.kid]) for other in others]
        if row is None or row.status != SigningKey.ACTIVE:
            row = key_history.key_status_record(
                kid=key.kid,
                public=key.public,
                status=SigningKey.ACTIVE,
                taking_over=taking_over,
                outgoing=outgoing,
            )
        for other, signer in zip(others, outgoing, strict=True):
            key_history.key_status_record(
                kid=other.kid,
                public=bytes(other.public_key),
                status=SigningKey.RETIRED,
                taking_over=taking_over,
                outgoing=[signer],
            )
    return row


def disown(kid: str) -> None:
    """The key `kid` is compromised: this process signs nothing more with it, not even as the
    outgoing key of a statement."""
    _held.pop(kid, None)
    _recorded.pop(kid, None)


def found_retired(kid: str) -> CannotSign:
    """The key `kid`, configured here, is retired (read under the append lock): another process
    rotated to a new key since this one recorded it, or SIGNING_KEY_FILE still names the old
    key. Forget it, say so in the log, and refuse to sign with it."""
    _recorded.pop(kid, None)
    error = _retired(kid)
    logger.error("signing key: refusing to sign: %s", error.reason)
    return error


def _retired(kid: str) -> CannotSign:
    active = (
        SigningKey.objects.filter(status=SigningKey.ACTIVE).values_list("kid", flat=True).first()
    )
    now = f"the active key is {active}" if active else "no key is active"
    return CannotSign(
        f"the key in SIGNING_KEY_FILE ({kid}) is retired and is never made active again "
        f"({now}): point SIGNING_KEY_FILE at the active key's file and restart (or, to rotate, "
        "at a new key)"
    )


def _compromised(kid: str) -> CannotSign:
    return CannotSign(
        f"the key in SIGNING_KEY_FILE ({kid}) is marked compromised; point SIGNING_KEY_FILE "
        "at the new key `compromisekey` named and restart"
    )


def _is_compromised(kid: str) -> bool:
    return SigningKey.objects.filter(kid=kid, status=SigningKey.COMPROMISED).exists()


def check_usable() -> None:
    """Raise CannotSign unless the configured key may sign (check_status), its status read
    now: one query when it may."""
    kid = configured().kid
    check_status(SigningKey.objects.filter(kid=kid).values_list("status", flat=True).first())


def check_status(status: str | None) -> None:
    """For /healthz and /metrics, a read: raise CannotSign unless the configured key, whose
    recorded status is `status` (log.readiness() reads it with the log, in one query), may
    sign: after `compromisekey`, the key it wrote into SIGNING_KEY_FILE counts (one more
    query, then); a key retired since, by a rotation elsewhere, does not."""
    key = configured()
    if status == SigningKey.COMPROMISED and _is_compromised(taken_over(key.kid).kid):
        raise _compromised(configured().kid)
    if status == SigningKey.RETIRED:
        raise _retired(key.kid)


def signing_now() -> ActiveKey:
    """The key to sign with, its status read from the database now (one query): for the
    write paths that sign a statement outside the log's append (a decision, a withdrawal's
    statement), which the log's own check (ledger/log.py, under the append lock) does not
    cover. Call under the lock that serialises `compromisekey` with them. A key marked
    compromised gives way to the one `compromisekey` wrote in its place (taken_over); a key
    retired by a rotation elsewhere refuses, logged (found_retired): CannotSign."""
    kid = configured().kid
    status = SigningKey.objects.filter(kid=kid).values_list("status", flat=True).first()
    if status == SigningKey.COMPROMISED:
        return record(taken_over(kid))
    if status == SigningKey.RETIRED:
        raise found_retired(kid)
    return active_key()


def sign(data: bytes, key: ActiveKey | None = None) -> tuple[bytes, SigningKey]:
    key = key or active_key()
    return keys.sign(key.private, data), key.row
