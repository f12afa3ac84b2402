"""What receipt-verify is pointed at, and checking it: a TARGET (a `/run/<id>` URL, a verify
URL, a bundle URL, a saved verification JSON or bundle) and a KEY (a keys document file or a
base64url Ed25519 `x`), read or fetched over HTTP(S); then the keys to trust are chosen and the
verification or bundle checked (verify_target). Anything that cannot be had is CouldNotCheck.

Whom to trust: a pinned KEY, and the keys the keys document's history hands over to from it
(keys.py); or the `log` keys of a --policy file, each taken as a pinned key is (the site signs
receipts and checkpoints with one key, so a policy alone pins the site); given both, only the
keys both vouch for (checks.choose_trust). Else, for a URL, the key the site publishes (said to
be not independent); a saved file checked with neither cannot say who signed it, whatever keys
it carries, so its signatures are not checked and the verdict is at best "could not check".
With --policy the witnesses' cosignatures are required too (witnesses.py)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from receiptsite_client.verify.bundle import BUNDLE_FORMAT, verify_bundle
from receiptsite_client.verify.checks import verify_verification
from receiptsite_client.verify.encoding import b64url_decode
from receiptsite_client.verify.keys import PUBLIC_KEY_SIZE
from receiptsite_client.verify.policy import Policy, parse_policy
from receiptsite_client.verify.result import UNCHECKED, Check, Result

DEFAULT_TIMEOUT = 15.0  # seconds, for one HTTP request
MAX_POLICY_BYTES = 1 << 20  # a policy of 32 logs, witnesses and groups is a few KiB

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_RUN_PATH = re.compile(rf"^(?P<prefix>.*)/run/(?P<id>{_UUID})/?$")
_BUNDLE_PATH = re.compile(rf"^(?P<prefix>.*)/run/(?P<id>{_UUID})/bundle\.json$")
_VERIFY_PATH = re.compile(rf"^(?P<prefix>.*)/api/receipt/(?P<id>{_UUID})/verify/?$")

TRUST_NOTE = (
    "The key was taken from the site itself ({source}): this check is not independent of "
    "the site. Pin a key you got elsewhere with --key (a keys document file or its base64url "
    "x) to check without trusting it."
)


SAVED_FILE_NOTE = (
    "The signer was not checked: {source} is a saved file, and a saved file cannot say who "
    "signed it, whatever keys it carries. Pin a key you got elsewhere with --key=KEY (a keys "
    "document file or its base64url x), or give --policy FILE (a tlog-policy file whose log "
    "lines name the site's keys), to check its signatures."
)


class CouldNotCheck(Exception):
    """The target or the key could not be read or fetched: nothing was decided."""


def fetch_json(url: str, timeout: float = DEFAULT_TIMEOUT) -> Any:
    """GET a JSON document; CouldNotCheck for anything but a JSON answer (a 410 withdrawal
    answer counts: it is the receipt's verification)."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise CouldNotCheck(f"{url} is not an http(s) URL")
    request = urllib.request.Request(
        url, headers={"Accept": "application/json", "User-Agent": "receipt-verify/1"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            body = answer.read()
    except urllib.error.HTTPError as error:
        with error:
            if error.code != 410:
                raise CouldNotCheck(f"{url} answered {error.code} {error.reason}") from None
            body = error.read()
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise CouldNotCheck(f"cannot reach {url} ({reason})") from None
    try:
        return json.loads(body)
    except ValueError:
        raise CouldNotCheck(f"{url} did not answer JSON") from None


@dataclass
class Target:
    verification: dict[str, Any]
    keys: dict[str, Any] | None = None  # a bundle's keys document
    expected_id: str | None = None
    source: str = ""
    bundle: dict[str, Any] | None = None  # the whole bundle, when TARGET is one
    saved: bool = False  # read from a file, not fetched from the site


def _as_target(obj: Any, source: str, expected_id: str | None = None) -> Target:
    if not isinstance(obj, dict):
        raise CouldNotCheck(f"{source} is not a JSON object")
    if "bundle" in obj:
        if obj["bundle"] != BUNDLE_FORMAT:
            raise CouldNotCheck(f"{source} is a bundle of an unknown format {obj['bundle']!r}")
        verification, keys = obj.get("verification"), obj.get("keys")
        if not isinstance(verification, dict):
            raise CouldNotCheck(f"the bundle {source} holds no verification")
        return Target(
            verification, keys if isinstance(keys, dict) else None, expected_id, source, obj
        )
    if "receipt_id" not in obj:
        raise CouldNotCheck(f"{source} is neither a verification JSON nor a bundle")
    return Target(obj, None, expected_id, source)


def load_target(target: str, timeout: float = DEFAULT_TIMEOUT) -> Target:
    """The verification (and a bundle's keys) that TARGET names; CouldNotCheck if it cannot
    be had."""
    parts = urllib.parse.urlsplit(target)
    if parts.scheme in ("http", "https"):
        expected_id = None
        url = target
        for pattern in (_BUNDLE_PATH, _VERIFY_PATH):
            match = pattern.match(parts.path)
            if match:
                expected_id = match["id"]
                break
        else:
            match = _RUN_PATH.match(parts.path)
            if match:
                # The receipt page's verification lives on the same origin.
                expected_id = match["id"]
                path = f"{match['prefix']}/api/receipt/{match['id']}/verify"
                url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        return _as_target(fetch_json(url, timeout), url, expected_id)
    file = Path(target)
    try:
        obj = json.loads(file.read_bytes())
    except OSError as error:
        raise CouldNotCheck(f"cannot read {target} ({error.strerror or error})") from None
    except ValueError:
        raise CouldNotCheck(f"{target} is not JSON") from None
    loaded = _as_target(obj, target)
    loaded.saved = True
    return loaded


def load_key(key: str) -> tuple[dict[str, Any] | None, str | None]:
    """(keys document, pinned x) of a --key value; CouldNotCheck if it is neither."""
    path = Path(key)
    if path.is_file():
        try:
            document = json.loads(path.read_bytes())
        except (OSError, ValueError):
            raise CouldNotCheck(f"the key file {key} is not a JSON keys document") from None
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise CouldNotCheck(f'the key file {key} is not a keys document ({{"keys": [...]}})')
        return document, None
    try:
        raw = b64url_decode(key.strip())
    except ValueError:
        raw = b""
    if len(raw) != PUBLIC_KEY_SIZE:
        raise CouldNotCheck(
            f"--key {key!r} is neither a keys document file nor a base64url "
            "Ed25519 public key (43 characters)"
        )
    return None, key.strip()


def load_policy(path: str) -> Policy:
    """The tlog policy in the file `path`; CouldNotCheck if it cannot be read or is not one
    (the words name the line)."""
    try:
        with Path(path).open("rb") as file:
            data = file.read(MAX_POLICY_BYTES + 1)
    except OSError as error:
        raise CouldNotCheck(f"cannot read the policy {path} ({error.strerror or error})") from None
    if len(data) > MAX_POLICY_BYTES:
        raise CouldNotCheck(f"the policy {path} is larger than {MAX_POLICY_BYTES} bytes")
    try:
        return parse_policy(data)
    except ValueError as error:
        problem = f"the policy {path} is not a c2sp.org/tlog-policy file: {error}"
    raise CouldNotCheck(problem)


def _site_keys(loaded: Target, timeout: float) -> dict[str, Any] | None:
    """The keys document the verification names, or None when it names none or it cannot be
    had (the pinned key alone is then trusted)."""
    signature = loaded.verification.get("signature")
    keys_url = signature.get("keys_url") if isinstance(signature, dict) else None
    if not isinstance(keys_url, str):
        return None
    try:
        fetched = fetch_json(keys_url, timeout)
    except CouldNotCheck:
        return None
    return fetched if isinstance(fetched, dict) else None


def verify_target(
    target: str,
    key: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    policy: str | None = None,
) -> Result:
    """What receipt-verify does: load TARGET, KEY and the policy file, fetch what is missing,
    check."""
    try:
        pinned_keys, pinned_x = load_key(key) if key is not None else (None, None)
        witness_policy = load_policy(policy) if policy is not None else None
        loaded = load_target(target, timeout)
    except CouldNotCheck as error:
        return Result(checks=[Check("target", UNCHECKED, f"Could not check: {error}.")])

    notes: list[str] = []
    keys: dict[str, Any] | None
    if key is not None or (witness_policy is not None and witness_policy.logs):
        # The pinned key, or the policy's log keys, decide; a bundle's keys can still mark
        # them compromised, and their history hand over from them to a later key
        # (keychain.py).
        keys = pinned_keys if pinned_keys is not None else loaded.keys
        if keys is None and not loaded.saved:
            # A live site: its keys document, believed only as far as its history leads from
            # the pinned key.
            keys = _site_keys(loaded, timeout)
    elif loaded.saved:
        # Whoever made the file chose the keys inside it and the keys_url it names.
        keys = None
        notes.append(SAVED_FILE_NOTE.format(source=loaded.source))
    elif loaded.keys is not None:
        keys = loaded.keys
        notes.append(TRUST_NOTE.format(source=f"the keys document inside {loaded.source}"))
    else:
        signature = loaded.verification.get("signature")
        keys_url = signature.get("keys_url") if isinstance(signature, dict) else None
        keys = None
        if not isinstance(keys_url, str):
            notes.append("The verification names no keys document, and no key was pinned.")
        else:
            try:
                fetched = fetch_json(keys_url, timeout)
                keys = fetched if isinstance(fetched, dict) else None
                notes.append(TRUST_NOTE.format(source=keys_url))
            except CouldNotCheck as error:
                notes.append(f"No key: {error}; pin one with --key.")
    keys_pinned = pinned_keys is not None
    if loaded.bundle is not None:
        # A bundle also carries its log proof as a c2sp.org/tlog-proof text.
        result = verify_bundle(
            loaded.bundle,
            keys,
            pinned_x,
            expected_id=loaded.expected_id,
            policy=witness_policy,
            keys_pinned=keys_pinned,
        )
    else:
        result = verify_verification(
            loaded.verification,
            keys,
            pinned_x,
            expected_id=loaded.expected_id,
            policy=witness_policy,
            keys_pinned=keys_pinned,
        )
    result.notes[:0] = notes
    return result
