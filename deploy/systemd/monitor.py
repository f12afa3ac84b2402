"""Run one of the site's monitors with what its previous run kept, and keep what this run saw:
the helper of the units receiptsite-checklog, -checkdecisions and -checkwithdrawals (README,
"Running it under systemd"). Run from the install directory, with the site's Python:

    .venv/bin/python deploy/systemd/monitor.py --head FILE -- manage.py checkdecisions
    .venv/bin/python deploy/systemd/monitor.py --against FILE -- manage.py checklog

`--head FILE`: a chain (`checkdecisions`, `checkwithdrawals`) shows a cut in its middle by
itself, but a cut at its end only against a head kept somewhere else. When FILE holds one, the
command runs with `--head <that hash>`; once it exits 0, the head it printed ("... hash <64 hex
digits> at position N") replaces FILE's. A record with nothing in it yet prints no head, and
FILE is left as it is.

`--against FILE`: when FILE exists, `checklog` runs with `--against FILE`, which proves that
today's log extends that checkpoint; once it exits 0, the checkpoint the site serves to its
readers ($SITE_URL/api/log/checkpoint) replaces FILE, so that the next run proves the log only
grew since.

FILE is replaced whole (a new file renamed over it), never half written. Keep it where the
site's own user cannot write (the units: /var/lib/receiptsite-admin, the admin user's): a head
or a checkpoint the site could rewrite would prove nothing about the site.

The exit status is the command's (0 sound, 1 the record does not check out, 2 the wrong
database role), or 3 when what was kept cannot be read or the new head or checkpoint cannot be
kept: either way the unit fails, and `systemctl --failed` lists it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

KEEP_FAILED = 3
# "... the head is decision hash <hex> at position N." (review/chain.py), "... the head is
# statement hash <hex> at position N." (withdrawal/statements.py)
HEAD = re.compile(r"\bhash ([0-9a-f]{64}) at position \d+")
HASH = re.compile(r"[0-9a-f]{64}")
CHECKPOINT_ROUTE = "/api/log/checkpoint"
TIMEOUT = 30  # seconds for the site to serve its checkpoint
MAX_CHECKPOINT = 64 * 1024  # a checkpoint is a few lines; anything larger is not one


class CannotKeep(Exception):
    """What was kept cannot be read, or what this run saw cannot be kept (exit 3)."""


def keep(path: Path, text: str) -> None:
    """Replace `path` with `text`: written in full and synced, then renamed over it."""
    try:
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as error:
        raise CannotKeep(f"cannot write in {path.parent}: {error.strerror or error}") from None
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except OSError as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise CannotKeep(f"cannot write {path}: {error.strerror or error}") from None


def kept_head(path: Path) -> str | None:
    """The head hash kept in `path`; None when there is none yet."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise CannotKeep(f"cannot read the head kept in {path}: {error}") from None
    if not text:
        return None
    if not HASH.fullmatch(text):
        raise CannotKeep(f"{path} holds no head hash (64 hex digits): remove it, or fix it")
    return text


def served_checkpoint() -> tuple[str, str]:
    """The checkpoint the site serves its readers, as text, and where it was read."""
    site = os.environ.get("SITE_URL", "").strip().rstrip("/")
    if not site:
        raise CannotKeep("SITE_URL is not set: there is no site to read the checkpoint of")
    url = site + CHECKPOINT_ROUTE
    request = urllib.request.Request(url, headers={"User-Agent": "receiptsite-monitor"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
            text = response.read(MAX_CHECKPOINT + 1).decode("utf-8")
    except (OSError, ValueError) as error:  # URLError and HTTPError are OSErrors
        raise CannotKeep(f"cannot read the checkpoint the site serves at {url}: {error}") from None
    # A signed note: the checkpoint's lines, a blank line, signature lines ("— <name> <sig>").
    if len(text) > MAX_CHECKPOINT or "\n\n\u2014 " not in text:
        raise CannotKeep(f"{url} served something that is not a signed checkpoint")
    return text, url


def run(command: list[str]) -> tuple[int, str]:
    """Run `command` with this Python: its output is passed on (and returned), its errors
    go straight through."""
    done = subprocess.run([sys.executable, *command], stdout=subprocess.PIPE, text=True)
    sys.stdout.write(done.stdout)
    sys.stdout.flush()
    status = done.returncode
    return (128 - status if status < 0 else status), done.stdout  # killed by a signal: 128+N


def with_head(path: Path, command: list[str]) -> int:
    head = kept_head(path)
    if head is None:
        print(f"monitor: no head kept in {path} yet: checking without --head")
    status, output = run(command + ([] if head is None else ["--head", head]))
    if status != 0:
        return status
    printed = HEAD.findall(output)
    if printed:
        keep(path, printed[-1] + "\n")
        print(f"monitor: kept the head {printed[-1]} in {path}")
    return 0


def against(path: Path, command: list[str]) -> int:
    if path.exists():
        status, _ = run(command + ["--against", str(path)])
    else:
        print(f"monitor: no checkpoint kept in {path} yet: checking without --against")
        status, _ = run(command)
    if status != 0:
        return status
    text, url = served_checkpoint()
    keep(path, text)
    size = text.split("\n")[1] if text.count("\n") > 1 else "?"
    print(f"monitor: kept the checkpoint of {size} leaves that {url} serves in {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run a monitor with the head or checkpoint its previous run kept, and keep "
        "this run's."
    )
    kept = parser.add_mutually_exclusive_group(required=True)
    kept.add_argument("--head", type=Path, metavar="FILE", help="checkdecisions, checkwithdrawals")
    kept.add_argument("--against", type=Path, metavar="FILE", help="checklog")
    parser.add_argument("command", nargs="+", help="after --: manage.py <command> [options]")
    options = parser.parse_args(argv)
    # The journal reads a pipe: each line of ours in its place among the command's.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    try:
        if options.head is not None:
            return with_head(options.head, options.command)
        return against(options.against, options.command)
    except CannotKeep as error:
        print(f"monitor: {error}", file=sys.stderr)
        return KEEP_FAILED


if __name__ == "__main__":
    sys.exit(main())
