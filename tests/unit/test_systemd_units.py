"""The systemd units of deploy/systemd (README, "Running it under systemd"): each passes
`systemd-analyze verify` with nothing to say, is hardened, and runs a management command the
site has, with the options it has, as the OS user and with the database role the README says;
every periodic job of the schedule has its timer; the OS users and folders they name are the
ones receiptsite.sysusers.conf and receiptsite.tmpfiles.conf declare; and monitor.py, the
monitors' helper, keeps the head and the checkpoint between runs as it says.

`systemd-analyze verify` needs no running systemd, but it checks that each command of a unit
exists: the units are checked in a copy where their install directory, /srv/receiptsite, is a
folder whose .venv is the one running these tests and whose deploy/ is this repository's."""

from __future__ import annotations

import http.server
import importlib
import inspect
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "deploy" / "systemd"
MONITOR = UNITS / "monitor.py"
INSTALL = "/srv/receiptsite"  # the units' install directory (README, deployment step 1)
SITE_USER, ADMIN_USER = "receiptsite", "receiptsite-admin"
SITE_ENV, OWNER_ENV = "/etc/receiptsite/site.env", "/etc/receiptsite/owner.env"
SITE_STATE, ADMIN_STATE = "/var/lib/receiptsite", "/var/lib/receiptsite-admin"
# The periodic jobs of the one schedule (issue 22), each a timer's: the command and the options
# its run must pass. `checkwithdrawals` is the README's third periodic check (deployment, step 7).
PERIODIC = {
    "pruneauditlog": set(),
    "checklog": {"--against"},
    "checkdecisions": {"--head"},
    "checkwithdrawals": {"--head"},
    "scrubwithdrawn": set(),
    "clearsessions": set(),
}
# Commands that need the owner although they do not refuse the site role themselves: VACUUM
# (scrubwithdrawn) is the tables' owner's, and row-level security hides the audit log from the
# site role (pruneauditlog would remove nothing).
OWNER_ONLY = {"scrubwithdrawn", "pruneauditlog"}
MAX_EXPOSURE = 25  # `systemd-analyze security`, in tenths: 2.5 of 10 at most ("OK")

analyze = shutil.which("systemd-analyze")
needs_systemd = pytest.mark.skipif(
    analyze is None,
    reason="systemd-analyze is missing: install Debian's systemd (scripts/bootstrap.sh does)",
)


# --- reading units ---------------------------------------------------------------------------


def parse(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A unit file's sections, each its (key, value) pairs in order (a key may repeat)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None, f"{path.name}: {line!r} before any section"
        key, equals, value = line.partition("=")
        assert equals, f"{path.name}: {line!r} is no setting"
        assert not value.endswith("\\"), f"{path.name}: keep each setting on one line"
        current.append((key.strip(), value.strip()))
    return sections


def values(unit: dict[str, list[tuple[str, str]]], section: str, key: str) -> list[str]:
    return [value for name, value in unit.get(section, []) if name == key]


def value(unit: dict[str, list[tuple[str, str]]], section: str, key: str) -> str:
    found = values(unit, section, key)
    assert len(found) == 1, f"[{section}] {key}= is set {len(found)} times, not once"
    return found[0]


def unit_files() -> list[Path]:
    return sorted([*UNITS.glob("*.service"), *UNITS.glob("*.timer")])


def services() -> dict[str, dict[str, list[tuple[str, str]]]]:
    return {path.name: parse(path) for path in sorted(UNITS.glob("*.service"))}


def exec_start(unit: dict[str, list[tuple[str, str]]]) -> list[str]:
    words = shlex.split(value(unit, "Service", "ExecStart"))
    return [words[0].lstrip("-@:+!"), *words[1:]]


def command_of(words: list[str]) -> tuple[str, list[str]]:
    """The management command an ExecStart runs, and the words after it."""
    assert words.count("manage.py") == 1, f"{words}: no `manage.py <command>`"
    at = words.index("manage.py")
    return words[at + 1], words[at + 2 :]


def monitor_option(words: list[str]) -> tuple[str, str] | None:
    """(option, FILE) when the ExecStart runs its command through monitor.py."""
    if "deploy/systemd/monitor.py" not in words:
        return None
    before = words[words.index("deploy/systemd/monitor.py") + 1 : words.index("--")]
    assert len(before) == 2 and before[0] in {"--head", "--against"}, before
    return before[0], before[1]


def read_write_paths(unit: dict[str, list[tuple[str, str]]]) -> set[str]:
    return {path for line in values(unit, "Service", "ReadWritePaths") for path in line.split()}


# --- systemd-analyze verify -----------------------------------------------------------------


def verify(units: list[Path], scratch: Path) -> str:
    """What `systemd-analyze verify` says of copies of `units` whose INSTALL is a folder made
    of this test run's virtualenv and this repository; raises unless it exits 0."""
    root = scratch / "install"
    root.mkdir()
    (root / ".venv").symlink_to(sys.prefix)
    for name in ("deploy", "manage.py", "gunicorn.conf.py"):
        (root / name).symlink_to(REPO / name)
    copies = scratch / "units"
    copies.mkdir()
    for path in units:
        (copies / path.name).write_text(path.read_text().replace(INSTALL, str(root)))
    assert analyze is not None
    done = subprocess.run(
        [analyze, "verify", "--man=no", "--recursive-errors=no",
         *sorted(str(p) for p in copies.iterdir())],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    said = (done.stdout + done.stderr).replace(str(copies) + "/", "")
    return f"exit {done.returncode}\n{said}" if done.returncode else said


@needs_systemd
def test_every_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    # An unknown key or a value systemd cannot parse is only a warning ("ignoring"), with exit
    # 0: nothing said is the pass.
    assert verify(unit_files(), tmp_path) == ""


@needs_systemd
def test_verify_as_run_here_catches_a_typo(tmp_path: Path) -> None:
    # The check above is only as good as what systemd-analyze says of a broken unit: a
    # misspelt key, a value it cannot parse, a command that is not there.
    broken = tmp_path / "broken"
    broken.mkdir()
    for path in unit_files():
        (broken / path.name).write_text(path.read_text())
    service = broken / "receiptsite.service"
    text = service.read_text()
    for good, bad in [
        ("\nNoNewPrivileges=yes", "\nNoNewPrivilege=yes"),
        ("ProtectSystem=strict", "ProtectSystem=strikt"),
        ("/.venv/bin/python ", "/.venv/bin/pythn "),
    ]:
        assert good in text
        text = text.replace(good, bad)
    service.write_text(text)
    timer = broken / "receiptsite-checklog.timer"
    timer.write_text(timer.read_text().replace("OnCalendar=hourly", "OnCalendar=hourlyy"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    said = verify(sorted(broken.iterdir()), scratch)
    assert said.startswith("exit ")
    for expected in ["NoNewPrivilege", "strikt", "pythn", "hourlyy"]:
        assert expected in said, said


@needs_systemd
@pytest.mark.parametrize("name", sorted(services()))
def test_each_service_is_hardened(name: str, tmp_path: Path) -> None:
    copy = tmp_path / name
    copy.write_text((UNITS / name).read_text())
    assert analyze is not None
    done = subprocess.run(
        [analyze, "security", "--offline=yes", f"--threshold={MAX_EXPOSURE}", str(copy)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    overall = [line for line in done.stdout.splitlines() if "Overall exposure" in line]
    assert done.returncode == 0, overall or done.stdout + done.stderr


# --- what the units run -----------------------------------------------------------------------


def test_every_periodic_job_has_a_timer() -> None:
    timers = {path.stem: parse(path) for path in UNITS.glob("*.timer")}
    scheduled: dict[str, str] = {}
    for stem, timer in timers.items():
        assert values(timer, "Timer", "OnCalendar"), stem
        assert value(timer, "Timer", "Persistent") == "true", f"{stem}: a missed run is made up"
        assert values(timer, "Install", "WantedBy") == ["timers.target"], stem
        service = UNITS / (values(timer, "Timer", "Unit") or [f"{stem}.service"])[0]
        assert service.exists(), f"{stem}.timer starts {service.name}, which is not there"
        unit = parse(service)
        assert value(unit, "Service", "Type") == "oneshot", service.name
        assert not values(unit, "Install", "WantedBy"), f"{service.name}: its timer starts it"
        command, _ = command_of(exec_start(unit))
        scheduled[command] = stem
    assert set(scheduled) == set(PERIODIC), scheduled


def test_the_witness_runs_beside_gunicorn() -> None:
    site = services()["receiptsite.service"]
    # gunicorn with the repository's gunicorn.conf.py, the settings checked first
    assert exec_start(site)[1:] == ["-m", "receiptsite.serve"]
    assert exec_start(site)[0] == f"{INSTALL}/.venv/bin/python"
    assert value(site, "Service", "Type") == "notify"  # gunicorn says READY=1
    assert value(site, "Service", "ExecReload") == "/bin/kill -HUP $MAINPID"
    assert value(site, "Service", "Restart") == "on-failure"
    witness = services()["receiptsite-witness.service"]
    assert command_of(exec_start(witness)) == ("witness", [])
    assert value(witness, "Service", "Restart") == "on-failure"
    assert value(witness, "Service", "Type") != "oneshot"  # it runs until stopped
    assert value(witness, "Unit", "PartOf") == "receiptsite.service"
    for unit in (site, witness):
        assert values(unit, "Install", "WantedBy") == ["multi-user.target"]


@pytest.mark.parametrize("name", sorted(services()))
def test_each_command_is_one_of_the_site_with_its_options(name: str) -> None:
    unit = services()[name]
    words = exec_start(unit)
    assert words[0].startswith(f"{INSTALL}/.venv/bin/"), words[0]
    assert value(unit, "Service", "WorkingDirectory") == INSTALL
    for word in words[1:]:  # the files it names in the install directory are this repository's
        if word.endswith(".py") and not word.startswith("/"):
            assert (REPO / word).is_file(), f"{name}: {word} is not in the repository"
    if name == "receiptsite.service":
        return
    command, rest = command_of(words)
    commands = get_commands()
    assert command in commands, f"{name} runs `manage.py {command}`, which the site lacks"
    parser = load_command_class(commands[command], command).create_parser("manage.py", command)
    known = {option for action in parser._actions for option in action.option_strings}
    passed = {word.partition("=")[0] for word in rest if word.startswith("--")}
    kept = monitor_option(words)
    if kept is not None:
        option, path = kept
        passed.add(option)  # monitor.py passes it, with what the last run kept
        assert path.startswith(ADMIN_STATE + "/"), f"{name}: keep {path} out of the site's reach"
        assert ADMIN_STATE in read_write_paths(unit), f"{name} cannot write {path}"
    assert passed <= known, f"{name}: `{command}` has no {passed - known}"
    if command in PERIODIC:
        assert PERIODIC[command] <= passed, f"{name}: `{command}` runs without {PERIODIC[command]}"


def refuses_the_site_role(command: str) -> bool:
    """The command checks that no row is hidden from it (receipts/rowsecurity.py): the
    monitors, which exit 2 as the site role."""
    app = get_commands()[command]
    module = importlib.import_module(f"{app}.management.commands.{command}")
    return "refuse_hidden_rows(" in inspect.getsource(module)


@pytest.mark.parametrize("name", sorted(services()))
def test_each_runs_as_the_os_user_and_database_role_the_readme_says(name: str) -> None:
    unit = services()[name]
    words = exec_start(unit)
    command = "gunicorn" if name == "receiptsite.service" else command_of(words)[0]
    owner = command in OWNER_ONLY or (command != "gunicorn" and refuses_the_site_role(command))
    files = values(unit, "Service", "EnvironmentFile")
    assert value(unit, "Service", "NoNewPrivileges") == "yes"
    assert value(unit, "Service", "ProtectSystem") == "strict"
    assert value(unit, "Service", "PrivateTmp") == "yes"
    assert value(unit, "Service", "ProtectHome") == "yes"
    if owner:
        # The owner's URL over the site's configuration, in a user of its own, who may read the
        # site's files and write only what the monitors keep.
        assert files == [SITE_ENV, OWNER_ENV], f"{name}: `{command}` needs the owner"
        assert value(unit, "Service", "User") == ADMIN_USER
        assert read_write_paths(unit) <= {ADMIN_STATE}
        assert value(unit, "Service", "CapabilityBoundingSet") == "CAP_DAC_READ_SEARCH"
    else:
        assert files == [SITE_ENV], f"{name}: the site role's, never the owner's URL"
        assert value(unit, "Service", "User") == SITE_USER
        assert read_write_paths(unit) <= {SITE_STATE}
        assert value(unit, "Service", "CapabilityBoundingSet") == ""
    assert value(unit, "Service", "Group") == value(unit, "Service", "User")


def test_the_monitors_refuse_the_site_role() -> None:
    # What the test above derives the owner's units from (commands run by hand, such as
    # `continuelog`, refuse it too).
    refusing = {command for command in get_commands() if refuses_the_site_role(command)}
    assert {"checklog", "checkdecisions", "checkwithdrawals"} <= refusing


# --- the OS users and their folders -----------------------------------------------------------


@needs_systemd
def test_the_users_and_folders_are_declared_with_their_owners(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("systemd-tmpfiles can give files to other users only as root")
    root = tmp_path / "root"
    (root / "etc" / "receiptsite" / "keys").mkdir(parents=True)
    sysusers = shutil.which("systemd-sysusers")
    tmpfiles = shutil.which("systemd-tmpfiles")
    assert sysusers and tmpfiles, "Debian's systemd brings both"

    def run(tool: str, conf: str, *options: str) -> None:
        done = subprocess.run(
            [tool, f"--root={root}", *options, str(UNITS / conf)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr

    run(sysusers, "receiptsite.sysusers.conf")
    ids = {
        line.split(":")[0]: int(line.split(":")[2])
        for line in (root / "etc" / "passwd").read_text().splitlines()
    }
    groups = {
        line.split(":")[0]: int(line.split(":")[2])
        for line in (root / "etc" / "group").read_text().splitlines()
    }
    # What the operator made, with modes too open: tmpfiles holds each to its own. The key
    # was made by the site's user (README, step 2): a file of root's in a folder of another
    # user's is an "unsafe path transition" that systemd-tmpfiles refuses to touch.
    for path in ["site.env", "owner.env", "witnesses.txt", "keys/signing.pem"]:
        (root / "etc" / "receiptsite" / path).write_text("x\n")
        (root / "etc" / "receiptsite" / path).chmod(0o666)
    os.chown(root / "etc/receiptsite/keys/signing.pem", ids[SITE_USER], groups[SITE_USER])
    run(tmpfiles, "receiptsite.tmpfiles.conf", "--create")
    names = {uid: name for name, uid in ids.items()} | {0: "root"}
    group_names = {gid: name for name, gid in groups.items()} | {0: "root"}
    assert {SITE_USER, ADMIN_USER} <= set(ids)

    def owned(path: str) -> tuple[str, str, str]:
        info = (root / path.lstrip("/")).stat()
        return oct(stat.S_IMODE(info.st_mode)), names[info.st_uid], group_names[info.st_gid]

    assert owned("/etc/receiptsite") == ("0o750", "root", SITE_USER)
    assert owned(SITE_ENV) == ("0o640", "root", SITE_USER)
    assert owned(OWNER_ENV) == ("0o600", "root", "root")
    assert owned("/etc/receiptsite/witnesses.txt") == ("0o640", "root", SITE_USER)
    assert owned("/etc/receiptsite/keys") == ("0o700", SITE_USER, SITE_USER)
    assert owned("/etc/receiptsite/keys/signing.pem") == ("0o600", SITE_USER, SITE_USER)
    assert owned(SITE_STATE) == ("0o700", SITE_USER, SITE_USER)
    assert owned(ADMIN_STATE) == ("0o700", ADMIN_USER, ADMIN_USER)
    # Every folder a unit writes is one of these, its user's.
    for name, unit in services().items():
        for path in read_write_paths(unit):
            assert owned(path)[1] == value(unit, "Service", "User"), f"{name}: {path}"


# --- monitor.py -------------------------------------------------------------------------------

HEAD_A, HEAD_B = "a" * 64, "b" * 64
CHECKPOINT = "example.org/receipts\n2\nXMBcwFDvVdZsH5Bfoltn1Bul7y0oFofFnnMEkOL6f84=\n\n\u2014 k x\n"


@pytest.fixture
def fake_manage(tmp_path: Path) -> Path:
    """A stand-in for manage.py: records its arguments, prints what FAKE_OUTPUT says and exits
    with FAKE_STATUS."""
    script = tmp_path / "manage.py"
    script.write_text(
        "import os, sys\n"
        "with open(os.environ['FAKE_ARGS'], 'a') as f: f.write(' '.join(sys.argv[1:]) + '\\n')\n"
        "print(os.environ.get('FAKE_OUTPUT', ''))\n"
        "sys.exit(int(os.environ.get('FAKE_STATUS', '0')))\n"
    )
    return script


def monitor(fake: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "FAKE_ARGS": str(fake.parent / "args"), **env}
    return subprocess.run(
        [sys.executable, str(MONITOR), *args, "--", str(fake), "check"],
        capture_output=True, text=True, env=environment, timeout=60,
    )  # fmt: skip


def calls(fake: Path) -> list[str]:
    return (fake.parent / "args").read_text().splitlines()


def test_monitor_passes_the_kept_head_and_keeps_the_new_one(fake_manage: Path) -> None:
    kept = fake_manage.parent / "state" / "decisions.head"
    kept.parent.mkdir()
    said = f"OK: ... the head is decision hash {HEAD_A} at position 3."
    done = monitor(fake_manage, "--head", str(kept), FAKE_OUTPUT=said)
    assert done.returncode == 0, done.stderr
    assert said in done.stdout and "no head kept" in done.stdout
    assert kept.read_text() == HEAD_A + "\n"
    # The next run passes it; a failing run keeps nothing new.
    said = f"OK: ... the head is statement hash {HEAD_B} at position 4."
    failed = monitor(fake_manage, "--head", str(kept), FAKE_OUTPUT=said, FAKE_STATUS="1")
    assert failed.returncode == 1
    assert kept.read_text() == HEAD_A + "\n"
    assert monitor(fake_manage, "--head", str(kept), FAKE_OUTPUT=said).returncode == 0
    assert kept.read_text() == HEAD_B + "\n"
    assert calls(fake_manage) == ["check", f"check --head {HEAD_A}", f"check --head {HEAD_A}"]
    # A record with nothing in it prints no head: what was kept stays.
    said = "OK: The record of review decisions checks out: it holds no decision yet."
    assert monitor(fake_manage, "--head", str(kept), FAKE_OUTPUT=said).returncode == 0
    assert kept.read_text() == HEAD_B + "\n"
    # The wrong role (exit 2) is passed on; a kept file that is no hash is exit 3, unrun.
    assert monitor(fake_manage, "--head", str(kept), FAKE_STATUS="2").returncode == 2
    kept.write_text("not a hash\n")
    done = monitor(fake_manage, "--head", str(kept))
    assert done.returncode == 3 and "holds no head hash" in done.stderr
    assert len(calls(fake_manage)) == 5
    assert list(kept.parent.iterdir()) == [kept]  # no temporary file left behind


@pytest.fixture
def site() -> Iterator[str]:
    """A site serving CHECKPOINT at /api/log/checkpoint, on a port of its own."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            ok = self.path == "/api/log/checkpoint"
            body = CHECKPOINT.encode() if ok else b"not found"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_monitor_checks_against_the_kept_checkpoint_and_keeps_the_served_one(
    fake_manage: Path, site: str
) -> None:
    kept = fake_manage.parent / "checkpoint.txt"
    done = monitor(fake_manage, "--against", str(kept), SITE_URL=site + "/")
    assert done.returncode == 0, done.stderr
    assert kept.read_text() == CHECKPOINT
    assert re.search(r"kept the checkpoint of 2 leaves", done.stdout), done.stdout
    assert monitor(fake_manage, "--against", str(kept), SITE_URL=site).returncode == 0
    assert calls(fake_manage) == ["check", f"check --against {kept}"]
    # The log does not check out: exit 1, and the checkpoint it was checked against stays.
    kept.write_text("an older checkpoint\n")
    assert monitor(fake_manage, "--against", str(kept), SITE_URL=site, FAKE_STATUS="1"
                   ).returncode == 1  # fmt: skip
    assert kept.read_text() == "an older checkpoint\n"
    # The site does not serve one: exit 3, saying where it looked.
    done = monitor(fake_manage, "--against", str(kept), SITE_URL=site + "/nowhere")
    assert done.returncode == 3 and "/nowhere/api/log/checkpoint" in done.stderr
    assert kept.read_text() == "an older checkpoint\n"
    done = monitor(fake_manage, "--against", str(kept), SITE_URL="")
    assert done.returncode == 3 and "SITE_URL is not set" in done.stderr
