"""Witnesses of the tests' own (c2sp.org/tlog-witness), on loopback.

No public witness can be reached from the tests, so they run witnesses of their own, written
here from the C2SP specifications (tlog-witness, tlog-cosignature, tlog-checkpoint,
signed-note) and RFC 6962, with the standard library and `cryptography` only. Nothing here
imports the site or its client: a witness that shared the site's note or Merkle code would
agree with the site's mistakes instead of catching them.

    with TestWitness(log_vkey, folder=tmp_path / "w1") as witness:
        ...                      # the site submits to witness.url; the test reads
        witness.state()          # what it persisted, per origin
        witness.requests()       # what it received and answered

A witness is its own process (`python tests/witnesses.py --port 0 --state FILE --key-file
PEM --name NAME --log-vkey VKEY [--mode MODE]`), so that stopping it, killing it or making it
slow is what a submitter would meet in the field. It prints its port on stdout once it
listens, logs one line per request on stderr, and exits 0 on SIGTERM. Its modes:

- `ok`: the specification's add-checkpoint, exactly.
- `refuse`: 403 to every add-checkpoint; `unknown`: 404 to every add-checkpoint.
- `slow`: sleeps `--delay` seconds, then answers as `ok` does (so it may cosign and persist
  after the submitter gave up, as a slow witness in the field does).
- `wrong-key`: answers 200 with a cosignature line under its advertised name and key id,
  signed by another key (it fails to verify: a submitter must not store it).
- `other-key`: answers 200 with a valid cosignature by another key, under that key's own id
  (a submitter must ignore it, as the spec says of unknown keys).

`--preload-size N --preload-root B64 [--preload-origin ORIGIN]` makes it start holding that
size for the origin (when its state holds nothing for it yet), so that a first submission with
`old 0` gets a 409. `--time-offset S` moves the clock its cosignatures' timestamps read (for
tests of times before or after a key's compromise). A witness that is down is a TestWitness
that was stopped, or a URL that nobody listens on.

The same module holds what the tests need to speak to it: RFC 6962 tree hashes and proofs
(`tree_root`, `consistency_proof`, `verify_consistency`), signed notes and vkeys
(`parse_note`, `sign_note`, `verifier_key`), cosignatures (`cosign`, `verify_cosignature`),
a log of the test's own in memory (`MemoryLog`) and a tlog-policy file naming witnesses
(`policy_text`).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import fcntl
import hashlib
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

SCRIPT = Path(__file__).resolve()
START_TIMEOUT = 20  # seconds until a witness process says it listens
STOP_TIMEOUT = 10  # seconds between SIGTERM and SIGKILL
HTTP_TIMEOUT = 30  # seconds, for one HTTP call unless told otherwise
MODES = ("ok", "refuse", "unknown", "slow", "wrong-key", "other-key")

# --- RFC 6962, section 2.1 ----------------------------------------------------------------------

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()  # MTH({}), the hash of the empty string


def leaf_hash(entry: bytes) -> bytes:
    """MTH({d}) = SHA-256(0x00 || d)."""
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right): an interior node."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def split_point(n: int) -> int:
    """k, the largest power of two smaller than n (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def tree_root(hashes: Sequence[bytes], start: int = 0, end: int | None = None) -> bytes:
    """MTH of the leaves whose leaf hashes are hashes[start:end], by RFC 6962's recursion (no
    copy of the list: the ranges are indexes)."""
    end = len(hashes) if end is None else end
    n = end - start
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return hashes[start]
    k = split_point(n)
    return node_hash(tree_root(hashes, start, start + k), tree_root(hashes, start + k, end))


def consistency_proof(hashes: Sequence[bytes], old: int, new: int | None = None) -> list[bytes]:
    """PROOF(old, D[new]) of RFC 6962, section 2.1.2, over the leaf hashes `hashes`, by its
    recursive definition (SUBPROOF). Empty when old is 0 or old == new."""
    new = len(hashes) if new is None else new
    if not 0 <= old <= new <= len(hashes):
        raise ValueError(f"no consistency proof from {old} to {new} in a tree of {len(hashes)}")
    if old == 0:
        return []

    def subproof(m: int, start: int, end: int, whole: bool) -> list[bytes]:
        n = end - start
        if m == n:
            return [] if whole else [tree_root(hashes, start, end)]
        k = split_point(n)
        if m <= k:
            return [*subproof(m, start, start + k, whole), tree_root(hashes, start + k, end)]
        return [*subproof(m - k, start + k, end, False), tree_root(hashes, start, start + k)]

    return subproof(old, 0, new, True)


def verify_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """Whether `proof` shows the tree of size `new` and root `new_root` extends the tree of
    size `old` and root `old_root`. The iterative check RFC 9162, section 2.1.4.2 gives for
    RFC 6962's proofs (a derivation independent of consistency_proof's recursion, so that the
    two check each other); the trivial cases as tlog-witness states them."""
    if not 0 <= old <= new:
        return False
    if old == 0:
        return not proof
    if old == new:
        return not proof and old_root == new_root
    path = list(proof)
    if not path:
        return False
    if old & (old - 1) == 0:  # old is a power of two: its root is a node of the new tree
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old_root and sr == new_root


# --- signed notes (c2sp.org/signed-note) and vkeys -----------------------------------------------

NOTE_ED25519 = 0x01  # a note signature: a log's signature on its checkpoint
COSIGNATURE_V1 = 0x04  # a timestamped Ed25519 checkpoint cosignature (tlog-cosignature)
EM_DASH = "\u2014"
SIGNATURE_PREFIX = EM_DASH + " "
MAX_SIGNATURES = 64  # the spec asks a verifier to cap them and to accept at least 16

_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f]")  # ASCII controls other than newline
_DECIMAL = re.compile("0|[1-9][0-9]*")  # [0-9], not \d, which takes other scripts' digits


class NoteError(ValueError):
    """A note, checkpoint or vkey that its specification does not allow."""


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode_strict(text: str) -> bytes:
    """Standard base64 (RFC 4648, section 4), in its one canonical spelling."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        raise NoteError(f"{text[:60]!r} is not base64") from error
    if b64(data) != text:
        raise NoteError(f"{text[:60]!r} is not canonical base64")
    return data


def check_key_name(name: str) -> None:
    if not name or "+" in name or any(c.isspace() for c in name) or _CONTROL.search(name):
        raise NoteError(f"{name!r} is not a key name (non-empty, no spaces, no '+')")


def key_id(name: str, kind: int, public: bytes) -> bytes:
    """SHA-256(key name || 0x0A || signature type || public key)[:4]."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([kind]) + public).digest()[:4]


def raw_public(key: Ed25519PrivateKey | Ed25519PublicKey) -> bytes:
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def verifier_key(name: str, kind: int, public: bytes) -> str:
    """`<name>+<hex key id>+<base64(type || public key)>`."""
    check_key_name(name)
    return f"{name}+{key_id(name, kind, public).hex()}+{b64(bytes([kind]) + public)}"


@dataclass(frozen=True)
class VerifierKey:
    name: str
    key_id: bytes
    kind: int
    public: bytes  # the raw Ed25519 public key

    @property
    def text(self) -> str:
        return verifier_key(self.name, self.kind, self.public)


def parse_vkey(text: str, kind: int | None = None) -> VerifierKey:
    """A vkey of an Ed25519 type (0x01 or 0x04; `kind` to require one), its key id checked."""
    parts = text.strip().split("+", 2)  # base64 may hold '+', a name and a key id may not
    if len(parts) != 3:
        raise NoteError(f"{text!r} is not a vkey (<name>+<key id>+<key>)")
    name, hex_id, material = parts
    check_key_name(name)
    if not re.fullmatch("[0-9a-f]{8}", hex_id):
        raise NoteError(f"{text!r}: the key id is not 8 lowercase hex digits")
    raw = b64decode_strict(material)
    if not raw or raw[0] not in (NOTE_ED25519, COSIGNATURE_V1) or len(raw) != 33:
        raise NoteError(f"{text!r}: not an Ed25519 key of type 0x01 or 0x04")
    if kind is not None and raw[0] != kind:
        raise NoteError(f"{text!r}: signature type {raw[0]:#04x}, not {kind:#04x}")
    if key_id(name, raw[0], raw[1:]) != bytes.fromhex(hex_id):
        raise NoteError(f"{text!r}: the key id does not match the name and key")
    return VerifierKey(name, bytes.fromhex(hex_id), raw[0], raw[1:])


@dataclass(frozen=True)
class NoteSignature:
    name: str
    key_id: bytes
    signature: bytes  # what follows the key id
    line: str  # as it was, with its newline


@dataclass(frozen=True)
class Note:
    text: str  # the signed text, with its final newline, without the blank line
    signatures: tuple[NoteSignature, ...]


def parse_note(note: str) -> Note:
    """A signed note: text ending in a newline, a blank line, one or more signature lines
    (`— <name> base64(key id || signature)`); the text ends at the last blank line."""
    if _CONTROL.search(note):
        raise NoteError("a note holds no control characters other than newline")
    cut = note.rfind("\n\n")
    if cut < 0:
        raise NoteError("a note has a blank line between its text and its signatures")
    text, block = note[: cut + 1], note[cut + 2 :]
    if not block.endswith("\n"):
        raise NoteError("a note's signature lines end in a newline, and there is one at least")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError(f"more than {MAX_SIGNATURES} signatures")
    signatures = []
    for line in lines:
        if not line.startswith(SIGNATURE_PREFIX):
            raise NoteError(f"{line[:60]!r} is not a signature line (— <name> <signature>)")
        name, space, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
        if not space:
            raise NoteError(f"{line[:60]!r} is not a signature line (— <name> <signature>)")
        check_key_name(name)
        raw = b64decode_strict(encoded)
        if len(raw) < 5:
            raise NoteError(f"{line[:60]!r}: a signature is a key id and at least one byte")
        signatures.append(NoteSignature(name, raw[:4], raw[4:], line + "\n"))
    return Note(text, tuple(signatures))


def sign_note(text: str, name: str, key: Ed25519PrivateKey) -> str:
    """The signature line of a note signature (type 0x01) by `key` under `name` on `text`."""
    kid = key_id(name, NOTE_ED25519, raw_public(key))
    return f"{SIGNATURE_PREFIX}{name} {b64(kid + key.sign(text.encode('utf-8')))}\n"


def verify_note_signature(signature: NoteSignature, text: str, vkey: VerifierKey) -> bool:
    """Whether a type 0x01 signature line by `vkey` (same name and id) verifies on `text`."""
    if signature.name != vkey.name or signature.key_id != vkey.key_id:
        raise ValueError("the signature line is not by this key")
    if len(signature.signature) != 64:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(vkey.public).verify(
            signature.signature, text.encode("utf-8")
        )
    except InvalidSignature:
        return False
    return True


# --- checkpoints (c2sp.org/tlog-checkpoint) ---------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The note text: origin, size, root and extension lines, each with its newline."""
        lines = [self.origin, str(self.size), b64(self.root), *self.extensions]
        return "".join(f"{line}\n" for line in lines)


def parse_checkpoint(text: str) -> Checkpoint:
    """A checkpoint's note text (with its final newline, without signatures)."""
    if not text.endswith("\n"):
        raise NoteError("a checkpoint's text ends in a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise NoteError("a checkpoint has an origin, a size and a root line")
    origin, size, root, *extensions = lines
    if not origin:
        raise NoteError("a checkpoint's origin is not empty")
    if not _DECIMAL.fullmatch(size) or int(size) >= 1 << 63:
        raise NoteError(f"{size[:30]!r} is not a tree size (decimal, no leading zeroes)")
    digest = b64decode_strict(root)
    if len(digest) != HASH_SIZE:
        raise NoteError("a checkpoint's root is the base64 of 32 bytes")
    if any(not line for line in extensions):
        raise NoteError("a checkpoint's extension lines are not empty")
    return Checkpoint(origin, int(size), digest, tuple(extensions))


# --- cosignatures (c2sp.org/tlog-cosignature, cosignature/v1) ----------------------------------


class CosignatureError(ValueError):
    """A cosignature line that is not by the expected key, or does not verify."""


def cosigned_message(text: str, timestamp: int) -> bytes:
    """`cosignature/v1\\ntime <t>\\n` + the checkpoint's note text."""
    return f"cosignature/v1\ntime {timestamp}\n{text}".encode()


def cosign(text: str, name: str, key: Ed25519PrivateKey, timestamp: int) -> str:
    """The cosignature/v1 line: `— <name> base64(key id || u64 BE timestamp || signature)`."""
    kid = key_id(name, COSIGNATURE_V1, raw_public(key))
    signature = key.sign(cosigned_message(text, timestamp))
    return f"{SIGNATURE_PREFIX}{name} {b64(kid + struct.pack('>Q', timestamp) + signature)}\n"


def verify_cosignature(line: str, text: str, vkey: str | VerifierKey) -> int:
    """The timestamp of the cosignature/v1 line `line` by `vkey` on the checkpoint whose note
    text is `text`; CosignatureError when it is not by that key (name and id) or fails."""
    key = vkey if isinstance(vkey, VerifierKey) else parse_vkey(vkey, COSIGNATURE_V1)
    if key.kind != COSIGNATURE_V1:
        raise CosignatureError(f"{key.text} is not a cosignature/v1 key (type 0x04)")
    try:
        (signature,) = parse_note("x\n\n" + line.rstrip("\n") + "\n").signatures
    except (NoteError, ValueError) as error:
        raise CosignatureError(f"{line!r} is not one signature line: {error}") from error
    if signature.name != key.name or signature.key_id != key.key_id:
        raise CosignatureError(f"{line!r} is not by {key.name}+{key.key_id.hex()}")
    if len(signature.signature) != 8 + 64:
        raise CosignatureError("a cosignature/v1 is a key id, a timestamp and 64 bytes")
    (timestamp,) = struct.unpack(">Q", signature.signature[:8])
    try:
        Ed25519PublicKey.from_public_bytes(key.public).verify(
            signature.signature[8:], cosigned_message(text, timestamp)
        )
    except InvalidSignature as error:
        raise CosignatureError(f"the cosignature by {key.name} does not verify") from error
    return int(timestamp)


# --- a log of the test's own ------------------------------------------------------------------


class MemoryLog:
    """A log in memory for driving a witness: leaf hashes, its roots and consistency proofs,
    and checkpoints signed (type 0x01, key name = origin) by an Ed25519 key of its own."""

    def __init__(
        self, origin: str = "log.test.example/receipts", size: int = 0,
        key: Ed25519PrivateKey | None = None,
    ) -> None:
        self.origin = origin
        self.key = key or Ed25519PrivateKey.generate()
        self.hashes: list[bytes] = []
        self.append(size)

    @property
    def size(self) -> int:
        return len(self.hashes)

    @property
    def public(self) -> bytes:
        return raw_public(self.key)

    @property
    def vkey(self) -> str:
        return verifier_key(self.origin, NOTE_ED25519, self.public)

    def append(self, count: int = 1) -> None:
        for _ in range(count):
            self.hashes.append(leaf_hash(f"{self.origin} entry {len(self.hashes)}".encode()))

    def root(self, size: int | None = None) -> bytes:
        size = self.size if size is None else size
        if not 0 <= size <= self.size:
            raise ValueError(f"no tree of size {size} in a log of {self.size}")
        return tree_root(self.hashes, 0, size)

    def proof(self, old: int, new: int | None = None) -> list[bytes]:
        return consistency_proof(self.hashes, old, self.size if new is None else new)

    def text(self, size: int | None = None, root: bytes | None = None) -> str:
        """The note text of the checkpoint of `size` (default: the whole log), or of any root."""
        size = self.size if size is None else size
        return Checkpoint(self.origin, size, self.root(size) if root is None else root).text

    def checkpoint(
        self, size: int | None = None, *, root: bytes | None = None,
        signers: Iterable[tuple[str, Ed25519PrivateKey]] | None = None,
    ) -> str:
        """The signed checkpoint: by the log's key, or by each (name, key) of `signers`."""
        text = self.text(size, root)
        signers = [(self.origin, self.key)] if signers is None else signers
        return text + "\n" + "".join(sign_note(text, name, key) for name, key in signers)

    def add_checkpoint_body(
        self, old: int, size: int | None = None, *, proof: Sequence[bytes] | None = None,
        checkpoint: str | None = None,
    ) -> bytes:
        """An add-checkpoint request body: `old <old>`, the proof (default: the right one), a
        blank line and the checkpoint (default: the log's, signed)."""
        size = self.size if size is None else size
        proof = self.proof(old, size) if proof is None else proof
        checkpoint = self.checkpoint(size) if checkpoint is None else checkpoint
        head = "".join(f"{line}\n" for line in [f"old {old}", *map(b64, proof)])
        return (head + "\n" + checkpoint).encode("utf-8")


# --- the witness ------------------------------------------------------------------------------

MAX_BODY = 1 << 20
MAX_PROOF = 63  # lines, as tlog-witness caps them


@dataclass
class Answer:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    detail: str = ""  # for the log line


def _plain(status: int, reason: str) -> Answer:
    return Answer(status, (reason + "\n").encode("utf-8"), detail=reason)


class Malformed(ValueError):
    pass


def parse_request(body: bytes) -> tuple[int, list[bytes], str]:
    """(old size, proof hashes, checkpoint note) of an add-checkpoint body: an old size line,
    at most 63 proof lines, a blank line, the checkpoint (each line ends in a newline)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Malformed("the body is not UTF-8") from error
    head, blank, checkpoint = text.partition("\n\n")
    if not blank:
        raise Malformed("no blank line between the proof and the checkpoint")
    first, *proof_lines = head.split("\n")
    match = re.fullmatch("old (0|[1-9][0-9]*)", first)
    if match is None:
        raise Malformed(f"{first[:40]!r} is not an old size line (old <decimal>)")
    if len(proof_lines) > MAX_PROOF:
        raise Malformed(f"{len(proof_lines)} proof lines, more than {MAX_PROOF}")
    proof = []
    for line in proof_lines:
        try:
            digest = b64decode_strict(line)
        except NoteError as error:
            raise Malformed(f"proof line {line[:60]!r} is not base64") from error
        if len(digest) != HASH_SIZE:
            raise Malformed(f"proof line {line[:60]!r} is not a 32-byte hash")
        proof.append(digest)
    return int(match.group(1)), proof, checkpoint


class Witness:
    """The state and the add-checkpoint rules, apart from HTTP. The state file is the one
    truth: every check-and-update reads it, and writes it (temporary file, fsync, rename),
    under a lock held across both, so two submissions can never both pass against the same
    old size (the race tlog-witness describes)."""

    def __init__(
        self, *, name: str, key: Ed25519PrivateKey, logs: Sequence[VerifierKey], state: Path,
        mode: str = "ok", delay: float = 0.0, time_offset: int = 0,
    ) -> None:
        self.name, self.key, self.mode, self.delay = name, key, mode, delay
        self.time_offset = time_offset
        self.logs: dict[str, list[VerifierKey]] = {}
        for log in logs:
            self.logs.setdefault(log.name, []).append(log)
        self.state_file = state
        self.other_key = Ed25519PrivateKey.generate()  # for the wrong-key and other-key modes
        self._lock = threading.Lock()

    @property
    def vkey(self) -> str:
        return verifier_key(self.name, COSIGNATURE_V1, raw_public(self.key))

    # --- state ---

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock, open(f"{self.state_file}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            origins: dict[str, dict[str, Any]] = json.loads(self.state_file.read_text())["origins"]
        except FileNotFoundError:
            return {}
        return origins

    def _write(self, origins: dict[str, dict[str, Any]]) -> None:
        temporary = self.state_file.with_name(f"{self.state_file.name}.{os.getpid()}.tmp")
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump({"witness": self.vkey, "origins": origins}, file, indent=1, sort_keys=True)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.state_file)
        folder = os.open(self.state_file.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)

    def preload(self, origin: str, size: int, root: bytes) -> None:
        """Hold `size` and `root` for `origin`, unless the state already holds that origin."""
        with self._locked():
            origins = self._read()
            if origin not in origins:
                origins[origin] = {"size": size, "root": b64(root), "checkpoint": None}
                self._write(origins)

    def checkpoint(self, origin_hash: str) -> Answer:
        """The monitoring checkpoint: the latest cosigned, with the log's verified signatures
        and this witness's cosignature."""
        for origin, held in self._read().items():
            digest = hashlib.sha256(origin.encode("utf-8")).hexdigest()
            if digest == origin_hash and held.get("checkpoint"):
                return Answer(200, held["checkpoint"].encode("utf-8"), detail=origin)
        return _plain(404, "no checkpoint cosigned for that origin")

    # --- add-checkpoint ---

    def add_checkpoint(self, body: bytes) -> Answer:
        if self.mode == "refuse":
            return _plain(403, "this witness refuses every checkpoint (mode refuse)")
        if self.mode == "unknown":
            return _plain(404, "this witness knows no log (mode unknown)")
        if self.mode == "slow":
            time.sleep(self.delay)
        try:
            old, proof, note_text = parse_request(body)
            note = parse_note(note_text)
            checkpoint = parse_checkpoint(note.text)
        except (Malformed, NoteError) as error:
            return _plain(400, f"malformed: {error}")
        keys = self.logs.get(checkpoint.origin)
        if not keys:
            return _plain(404, f"unknown origin {checkpoint.origin!r}")
        verified = []
        for signature in note.signatures:
            for key in keys:
                if (signature.name, signature.key_id) != (key.name, key.key_id):
                    continue  # a signature of an unknown key: ignored
                if not verify_note_signature(signature, note.text, key):
                    return _plain(403, f"the signature by {key.name} does not verify")
                verified.append(signature.line)
        if not verified:
            return _plain(403, "no signature by a key this witness trusts for the origin")
        if old > checkpoint.size:
            return _plain(400, f"old {old} is larger than the checkpoint's size")
        where = f"{checkpoint.origin} old={old} size={checkpoint.size}"
        with self._locked():
            origins = self._read()
            held = origins.get(checkpoint.origin, {"size": 0, "root": None})
            if old != held["size"]:
                answer = Answer(409, f"{held['size']}\n".encode(), "text/x.tlog.size")
                answer.detail = f"{where} held={held['size']}"
                return answer
            if checkpoint.size == 0 and checkpoint.root != EMPTY_ROOT:
                return _plain(422, "a checkpoint of size 0 has the empty tree's root")
            if old == 0 and proof:
                return _plain(422, "a proof from the empty tree is empty")
            if old == checkpoint.size and old > 0:
                if proof or b64(checkpoint.root) != held["root"]:
                    return _plain(422, f"{where}: not the root this witness holds")
            elif old > 0 and not verify_consistency(
                old, checkpoint.size, b64decode_strict(held["root"]), checkpoint.root, proof
            ):
                return _plain(422, f"{where}: the consistency proof does not verify")
            timestamp = max(1, int(time.time()) + self.time_offset)  # never 0, says the spec
            line = self._cosign(note.text, timestamp)
            origins[checkpoint.origin] = {
                "size": checkpoint.size,
                "root": b64(checkpoint.root),
                "checkpoint": note.text + "\n" + "".join(verified) + line,
                "time": timestamp,
            }
            self._write(origins)  # persisted before the answer leaves
        return Answer(200, line.encode("utf-8"), detail=f"{where} time={timestamp}")

    def _cosign(self, text: str, timestamp: int) -> str:
        if self.mode == "other-key":  # a valid cosignature, by a key nobody was told of
            return cosign(text, self.name, self.other_key, timestamp)
        if self.mode == "wrong-key":  # the advertised name and key id, another key's signature
            own = key_id(self.name, COSIGNATURE_V1, raw_public(self.key))
            signed = struct.pack(">Q", timestamp) + self.other_key.sign(
                cosigned_message(text, timestamp)
            )
            return f"{SIGNATURE_PREFIX}{self.name} {b64(own + signed)}\n"
        return cosign(text, self.name, self.key, timestamp)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # concurrent submissions in the tests must not be refused
    witness: Witness
    prefix: str
    requests_file: Path | None
    record_lock: threading.Lock

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line, not a traceback: e.g. a client that gave up on a slow answer."""
        error = sys.exc_info()[1]
        print(f"{self.witness.name} connection from {client_address[0]}:{client_address[1]} "
              f"ended: {error!r}", file=sys.stderr, flush=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as tlog-witness recommends
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line of our own per request (_answer), not http.server's

    def _read_body(self) -> bytes | Answer:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
                if sum(map(len, chunks)) > MAX_BODY:
                    self.close_connection = True
                    return _plain(413, "the body is too large")
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            return _plain(411, "a body needs a Content-Length")
        if int(length) > MAX_BODY:
            self.close_connection = True
            return _plain(413, "the body is too large")
        return self.rfile.read(int(length))

    def do_POST(self) -> None:
        body = self._read_body()
        if isinstance(body, Answer):
            self._answer(body, b"")
            return
        path = self.path.split("?", 1)[0]
        if path == f"{self.server.prefix}/add-checkpoint":
            answer = self.server.witness.add_checkpoint(body)
        else:
            answer = _plain(404, "no such endpoint")
        self._answer(answer, body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        match = re.fullmatch(re.escape(self.server.prefix) + "/([0-9a-f]{64})/checkpoint", path)
        if match:
            answer = self.server.witness.checkpoint(match.group(1))
        elif path == f"{self.server.prefix}/add-checkpoint":
            answer = _plain(405, "add-checkpoint is a POST")
        else:
            answer = _plain(404, "no such endpoint")
        self._answer(answer, b"")

    def _answer(self, answer: Answer, body: bytes) -> None:
        """Record the request, log its line, then answer (so a test that got an answer finds
        the request in the record)."""
        record = {
            "time": time.time(),
            "method": self.command,
            "path": self.path,
            "headers": dict(self.headers.items()),
            "body": b64(body),
            "status": answer.status,
            "content_type": answer.content_type,
            "response": b64(answer.body),
        }
        if self.server.requests_file is not None:
            with self.server.record_lock, open(self.server.requests_file, "a") as file:
                file.write(json.dumps(record) + "\n")
        print(f"{self.server.witness.name} {self.command} {self.path} {answer.status} "
              f"{answer.detail}".rstrip(), file=sys.stderr, flush=True)
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        if answer.status == 405:
            self.send_header("Allow", "POST")
        self.end_headers()
        self.wfile.write(answer.body)


def read_private_key(path: Path) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise SystemExit(f"{path}: not an Ed25519 private key")
    return key


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: the kernel's choice")
    parser.add_argument("--prefix", default="/w1", help="the URL path of the prefix")
    parser.add_argument("--state", type=Path, required=True, help="the state file (JSON)")
    parser.add_argument("--key-file", type=Path, required=True, help="Ed25519 key, PKCS#8 PEM")
    parser.add_argument("--name", required=True, help="the witness's key name")
    parser.add_argument("--log-vkey", action="append", default=[], required=True,
                        help="a log key it trusts (type 0x01; its name is the origin)")
    parser.add_argument("--mode", choices=MODES, default="ok")
    parser.add_argument("--delay", type=float, default=10.0, help="seconds, in mode slow")
    parser.add_argument("--time-offset", type=int, default=0,
                        help="seconds added to the clock in cosignatures' timestamps")
    parser.add_argument("--requests", type=Path, help="a file to append each request to")
    parser.add_argument("--preload-origin")
    parser.add_argument("--preload-size", type=int)
    parser.add_argument("--preload-root", help="base64")
    options = parser.parse_args(argv)
    try:
        logs = [parse_vkey(text, NOTE_ED25519) for text in options.log_vkey]
        check_key_name(options.name)
    except NoteError as error:
        parser.error(str(error))
    if options.prefix and (not options.prefix.startswith("/") or options.prefix.endswith("/")):
        parser.error("--prefix starts with / and does not end with one")
    witness = Witness(
        name=options.name, key=read_private_key(options.key_file), logs=logs,
        state=options.state, mode=options.mode, delay=options.delay,
        time_offset=options.time_offset,
    )
    if options.preload_size is not None:
        if options.preload_root is None:
            parser.error("--preload-size needs --preload-root")
        witness.preload(options.preload_origin or logs[0].name, options.preload_size,
                        b64decode_strict(options.preload_root))
    server = _Server((options.host, options.port), _Handler)
    server.witness, server.prefix = witness, options.prefix
    server.requests_file, server.record_lock = options.requests, threading.Lock()

    def stop(signum: int, frame: Any) -> None:
        # shutdown() waits for serve_forever(), which runs in this (the main) thread.
        threading.Thread(target=server.shutdown).start()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    print(server.server_address[1], flush=True)  # ready: it listens
    server.serve_forever(poll_interval=0.05)
    server.server_close()
    print(f"{options.name} stopped", file=sys.stderr, flush=True)
    return 0


# --- the tests' handle on one witness process --------------------------------------------------


@dataclass
class Response:
    """An HTTP answer, as tests/livesite.py's Response reads one."""

    status: int
    headers: Message
    body: bytes
    elapsed: float  # seconds

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "")

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def __repr__(self) -> str:
        return f"<Response {self.status} {self.content_type} {self.body[:2000]!r}>"


def http(
    method: str, url: str, body: bytes | None = None, *, timeout: float = HTTP_TIMEOUT,
    headers: dict[str, str] | None = None,
) -> Response:
    """One HTTP call with a timeout; an error status is an answer, not an exception."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return Response(answer.status, answer.headers, answer.read(),
                            time.monotonic() - started)
    except urllib.error.HTTPError as error:
        return Response(error.code, error.headers, error.read(), time.monotonic() - started)


@dataclass(frozen=True)
class WitnessRequest:
    """One request as the witness process received and answered it."""

    time: float
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    content_type: str
    response: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class TestWitness:
    """One witness process on loopback, started and stopped by a test.

    `url` is its submission prefix (POST `<url>/add-checkpoint`), which is also its monitoring
    prefix; `vkey` its cosignature key (type 0x04); `policy_line(label)` the tlog-policy line
    that names it. `stop()` then `start()` restart it on the same port, key and state, and its
    mode may change in between (`restart(mode=...)`)."""

    __test__ = False  # a helper, not a class of tests

    def __init__(
        self,
        log_vkeys: Sequence[str] | str,
        *,
        name: str = "witness-1.test.example/w",
        prefix: str = "/w1",
        mode: str = "ok",
        delay: float = 10.0,
        time_offset: int = 0,
        preload: tuple[int, bytes] | None = None,
        preload_origin: str | None = None,
        folder: Path | None = None,
        key: Ed25519PrivateKey | None = None,
    ) -> None:
        """`log_vkeys`: the log keys it trusts (type 0x01; a key's name is its log's origin).
        `delay`: seconds it sleeps in mode slow. `time_offset`: seconds added to its clock in
        its cosignatures' timestamps. `preload`: (size, root) it holds for `preload_origin`
        (default: the first log key's name) when it starts with nothing for that origin.
        `folder`: where its key, state, request record and stderr go (default: a temporary
        folder that close() removes). `key`: its Ed25519 key (default: a new one)."""
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        self.log_vkeys = [log_vkeys] if isinstance(log_vkeys, str) else list(log_vkeys)
        self.name, self.prefix, self.mode, self.delay = name, prefix, mode, delay
        self.time_offset, self.preload, self.preload_origin = time_offset, preload, preload_origin
        self.key = key or Ed25519PrivateKey.generate()
        self._own_folder = folder is None
        self.folder = Path(tempfile.mkdtemp(prefix="test-witness-")) if folder is None else folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = 0  # the kernel's choice at the first start, then kept across restarts
        self.returncode: int | None = None  # of the last process that stopped
        self._process: subprocess.Popen[bytes] | None = None
        pem = self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        self.key_file.write_bytes(pem)
        self.key_file.chmod(0o600)

    @classmethod
    def numbered(cls, number: int, log_vkeys: Sequence[str] | str, **options: Any) -> TestWitness:
        """Witness `number` of several: its own name (witness-<n>.test.example/w) and prefix
        (/w<n>)."""
        return cls(log_vkeys, name=f"witness-{number}.test.example/w", prefix=f"/w{number}",
                   **options)

    def __repr__(self) -> str:
        return f"<TestWitness {self.name} {self.mode} port {self.port or '-'}>"

    # --- what it is ---

    @property
    def key_file(self) -> Path:
        return self.folder / "witness-key.pem"

    @property
    def state_file(self) -> Path:
        return self.folder / "state.json"

    @property
    def requests_file(self) -> Path:
        return self.folder / "requests.jsonl"

    @property
    def stderr_file(self) -> Path:
        return self.folder / "stderr.log"

    @property
    def public(self) -> bytes:
        return raw_public(self.key)

    @property
    def vkey(self) -> str:
        return verifier_key(self.name, COSIGNATURE_V1, self.public)

    @property
    def url(self) -> str:
        if not self.port:
            raise RuntimeError("the witness has not started yet: it has no port")
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    def policy_line(self, label: str = "w1") -> str:
        """`witness <label> <vkey> <url>` (c2sp.org/tlog-policy)."""
        return f"witness {label} {self.vkey} {self.url}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # --- life cycle ---

    def __enter__(self) -> TestWitness:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def command(self) -> list[str]:
        arguments = [
            sys.executable, str(SCRIPT), "--port", str(self.port), "--prefix", self.prefix,
            "--state", str(self.state_file), "--key-file", str(self.key_file),
            "--name", self.name, "--mode", self.mode, "--delay", str(self.delay),
            "--time-offset", str(self.time_offset), "--requests", str(self.requests_file),
        ]
        for vkey in self.log_vkeys:
            arguments += ["--log-vkey", vkey]
        if self.preload is not None:
            size, root = self.preload
            arguments += ["--preload-size", str(size), "--preload-root", b64(root)]
            if self.preload_origin is not None:
                arguments += ["--preload-origin", self.preload_origin]
        return arguments

    def start(self) -> None:
        """Start the process (on its port of before, if it ran) and wait until it listens."""
        if self.running:
            return
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {MODES}")
        with open(self.stderr_file, "ab") as stderr:
            process = subprocess.Popen(
                self.command(), stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._process = process
        assert process.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready = select.select([process.stdout], [], [], max(left, 0))[0] if left > 0 else []
            chunk = os.read(process.stdout.fileno(), 64) if ready else b""
            if not chunk:
                self.stop(graceful=False)
                why = "exited" if process.returncode not in (None, -signal.SIGKILL) else (
                    f"did not say it listens within {START_TIMEOUT} s")
                raise RuntimeError(f"the witness {why} (exit {process.returncode}):\n"
                                   f"{self.stderr()[-4000:]}")
            line += chunk
        self.port = int(line)

    def stop(self, graceful: bool = True) -> None:
        """SIGTERM (it exits 0 once its server closed), SIGKILL if it hangs; `graceful=False`:
        SIGKILL at once, a crash."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            if graceful:
                process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=STOP_TIMEOUT)
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=STOP_TIMEOUT)
        if process.stdout is not None:
            process.stdout.close()
        self.returncode = process.returncode

    def restart(self, **changes: Any) -> None:
        """Stop, change attributes (mode=..., delay=...), start on the same port and state."""
        self.stop()
        for name, value in changes.items():
            if not hasattr(self, name):
                raise AttributeError(name)
            setattr(self, name, value)
        self.start()

    def close(self) -> None:
        self.stop()
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    # --- what it did ---

    def state(self) -> dict[str, dict[str, Any]]:
        """What it persisted, read from its state file: per origin, {"size", "root" (base64),
        "checkpoint" (the monitoring checkpoint, None for a preloaded size), "time"}."""
        try:
            origins: dict[str, dict[str, Any]] = json.loads(self.state_file.read_text())["origins"]
        except FileNotFoundError:
            return {}
        return origins

    def requests(self) -> list[WitnessRequest]:
        """Every request it received, in the order it answered them, across restarts."""
        try:
            lines = self.requests_file.read_text().splitlines()
        except FileNotFoundError:
            return []
        records = []
        for line in lines:
            record = json.loads(line)
            record["body"] = base64.b64decode(record["body"])
            record["response"] = base64.b64decode(record["response"])
            records.append(WitnessRequest(**record))
        return records

    def stderr(self) -> str:
        try:
            return self.stderr_file.read_text("utf-8", "replace")
        except FileNotFoundError:
            return ""

    # --- speaking to it, for tests of the witness itself ---

    def add_checkpoint(self, body: bytes | str, timeout: float = HTTP_TIMEOUT) -> Response:
        data = body.encode("utf-8") if isinstance(body, str) else body
        return http("POST", f"{self.url}/add-checkpoint", data, timeout=timeout)

    def monitoring_checkpoint(self, origin: str, timeout: float = HTTP_TIMEOUT) -> Response:
        digest = hashlib.sha256(origin.encode("utf-8")).hexdigest()
        return http("GET", f"{self.url}/{digest}/checkpoint", timeout=timeout)

    def verify(self, line: str, text: str) -> int:
        """The timestamp of this witness's cosignature `line` on the note text `text`."""
        return verify_cosignature(line, text, self.vkey)


def policy_text(
    log_vkeys: Sequence[str] | str, witnesses: Sequence[TestWitness], quorum: str | int = "all"
) -> str:
    """A c2sp.org/tlog-policy file naming the logs and the witnesses (w1, w2, ... with their
    submission URLs), in one group `witnesses` of threshold `quorum` (all, any or k), which is
    the quorum."""
    logs = [log_vkeys] if isinstance(log_vkeys, str) else list(log_vkeys)
    labels = [f"w{i}" for i in range(1, len(witnesses) + 1)]
    return "".join(f"{line}\n" for line in [
        *(f"log {vkey}" for vkey in logs),
        *(witness.policy_line(label) for witness, label in zip(witnesses, labels, strict=True)),
        f"group witnesses {quorum} {' '.join(labels)}",
        "quorum witnesses",
    ])


if __name__ == "__main__":
    sys.exit(main())
