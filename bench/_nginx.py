"""Debian's nginx (/usr/sbin/nginx) serving deploy/nginx/receiptsite.conf, the very file an
operator installs, rendered for a run of its own: tests/live/test_nginx.py tests the file
through it, and `bench/run.py --front nginx` measures the site through it.

The file is rendered by replacing only its operator-edited values (the host name, the
certificate's paths, the listening ports, gunicorn's address, STATIC_ROOT, the log and cache
folders) with the run's, and included from a small nginx.conf of the run's own, as Debian's
stock nginx.conf includes sites-enabled/ (its http block's settings copied, its paths made the
run's folder). Each nginx is a master of our own (`-p` its folder, free loopback ports, `daemon
off`), stopped with SIGQUIT. The certificate is self-signed for HOST (RFC 6761's .test), which
no resolver knows: clients connect to 127.0.0.1 and name HOST in the Host header and in SNI
(`TLSConnection` for http.client, `HostHandler` for urllib, `wrk_scripts()` for wrk).

Only the standard library, and nothing else of bench/: the test imports this file as
`bench._nginx`, bench/run.py as `_nginx` (bench/ on its path).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.client import HTTPConnection, HTTPResponse
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
NGINX = "/usr/sbin/nginx"
CONF = REPO / "deploy" / "nginx" / "receiptsite.conf"
HOST = "receipts.test"  # the site's host name (RFC 6761's .test), resolved by the clients here
START_TIMEOUT = 10  # seconds until nginx listens
STOP_TIMEOUT = 10  # seconds between SIGQUIT and SIGKILL


def free_port() -> int:
    """A port free on the loopback interface now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def version() -> str:
    """`nginx/1.22.1`, say (what `nginx -v` prints, on stderr)."""
    done = subprocess.run([NGINX, "-v"], capture_output=True, text=True, timeout=30)
    return done.stderr.strip().removeprefix("nginx version: ")


@dataclass
class Certificate:
    cert: Path
    key: Path
    context: ssl.SSLContext  # a client's: trusts this certificate alone, checks HOST


def make_certificate(folder: Path) -> Certificate:
    """A self-signed certificate for HOST (P-256, two days), in `folder`."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={HOST}",
         "-addext", f"subjectAltName=DNS:{HOST}"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    context = ssl.create_default_context(cafile=str(cert))
    return Certificate(cert, key, context)


@dataclass
class Nginx:
    """One nginx master of our own, serving the shipped configuration, rendered."""

    certificate: Certificate
    upstream: str = ""  # gunicorn's host:port
    static_root: Path = Path()
    error_level: str = "crit"  # the shipped file's; the test's control nginx says "error"
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="receiptsite-nginx-")))
    http_port: int = field(default_factory=free_port)
    https_port: int = field(default_factory=free_port)
    # The wrapper's events and workers: the test's few requests need one worker; the benchmark
    # gives Debian's stock values (worker_processes auto, worker_connections 768).
    worker_processes: str = "1"
    worker_connections: int = 256
    check_output: str = ""  # what `nginx -t` said of the rendered configuration
    _process: subprocess.Popen[bytes] | None = None

    # --- the configuration --------------------------------------------------------------------

    def render(self) -> str:
        """The shipped file with the run's values: each one must be there, as many times as
        the file is known to hold it, so a changed file fails here, not somewhere obscure."""
        text = CONF.read_text()
        live = "/etc/letsencrypt/live/receipts.example.org"
        replacements = [
            (f"{live}/fullchain.pem", str(self.certificate.cert), 1),
            (f"{live}/privkey.pem", str(self.certificate.key), 1),
            ("receipts.example.org", HOST, None),
            ("listen 80;", f"listen 127.0.0.1:{self.http_port};", 1),
            ("listen [::]:80;", "", 1),
            ("listen 443 ssl http2;", f"listen 127.0.0.1:{self.https_port} ssl http2;", 1),
            ("listen [::]:443 ssl http2;", "", 1),
            ("server 127.0.0.1:8000;", f"server {self.upstream};", 1),
            ("alias /srv/receiptsite/staticfiles/;", f"alias {self.static_root}/;", 1),
            ("/var/log/nginx/", f"{self.tmp}/logs/", 4),
            ("/var/cache/nginx-receiptsite ", f"{self.tmp}/cache ", 1),
            ("root /var/www/letsencrypt;", f"root {self.tmp}/acme;", 1),
            ("receiptsite.error.log crit;", f"receiptsite.error.log {self.error_level};", 2),
        ]
        for old, new, times in replacements:
            count = text.count(old)
            if count != times if times is not None else count == 0:
                raise RuntimeError(f"{CONF} holds {old!r} {count} times, not {times or 'some'}: "
                                   "it is rendered by replacing that value")  # fmt: skip
            text = text.replace(old, new)
        # Nothing of the host's may be left for our nginx to touch (comments aside).
        directives = re.sub(r"#[^\n]*", "", text)
        if re.search(r"(?<![\w/])/(etc|var|srv)/", directives):
            raise RuntimeError(f"the rendered {CONF.name} still names a path of the host:\n"
                               f"{directives}")  # fmt: skip
        return text

    def write(self) -> Path:
        (self.tmp / "logs").mkdir(parents=True, exist_ok=True)
        (self.tmp / "acme").mkdir(exist_ok=True)
        site_conf = self.tmp / "receiptsite.conf"
        site_conf.write_text(self.render())
        # Debian's stock http block, its paths made this folder's; workers as root when the
        # master is root (they read our private temporary folders).
        user = "user root;\n" if os.geteuid() == 0 else ""
        main = self.tmp / "nginx.conf"
        main.write_text(
            f"{user}worker_processes {self.worker_processes};\npid {self.tmp}/nginx.pid;\n"
            f"error_log {self.tmp}/logs/main.error.log info;\n"
            f"events {{ worker_connections {self.worker_connections}; }}\n"
            "http {\n"
            "    sendfile on;\n    tcp_nopush on;\n    types_hash_max_size 2048;\n"
            "    include /etc/nginx/mime.types;\n    default_type application/octet-stream;\n"
            "    ssl_protocols TLSv1 TLSv1.1 TLSv1.2 TLSv1.3;\n    ssl_prefer_server_ciphers on;\n"
            f"    access_log {self.tmp}/logs/main.access.log;\n"
            "    gzip on;\n"
            + "".join(f"    {kind}_temp_path {self.tmp}/{kind}_temp;\n"
                      for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
            + f"    include {site_conf};\n"
            "}\n"
        )  # fmt: skip
        return main

    def command(self, *extra: str) -> list[str]:
        return [NGINX, "-p", f"{self.tmp}/", "-c", str(self.tmp / "nginx.conf"),
                "-e", str(self.tmp / "logs" / "startup.error.log"), *extra]  # fmt: skip

    # --- life cycle ---------------------------------------------------------------------------

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The master, while it runs (its workers are its children)."""
        return self._process

    def start(self) -> None:
        self.write()
        checked = subprocess.run(self.command("-t"), capture_output=True, timeout=30)
        self.check_output = checked.stderr.decode(errors="replace")
        if checked.returncode != 0:
            raise RuntimeError(f"nginx -t refused the rendered configuration:\n{self.check_output}")
        self._out = open(self.tmp / "nginx.out", "wb")  # noqa: SIM115
        self._process = subprocess.Popen(
            self.command("-g", "daemon off;"),
            stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own group: the workers are stopped with it
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        for port in (self.https_port, self.http_port):
            while True:
                if self._process.poll() is not None:
                    raise RuntimeError(f"nginx exited with {self._process.returncode}:\n"
                                       f"{self.logs()}")  # fmt: skip
                with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", port), timeout=1
                ):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nginx did not listen on {port}:\n{self.logs()}")
                time.sleep(0.05)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGQUIT)  # graceful: the workers finish, then exit
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_TIMEOUT)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_TIMEOUT)
        self._out.close()

    def close(self) -> None:
        """Stopped, and its folder removed (logs and all)."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # --- what it wrote ------------------------------------------------------------------------

    def log_files(self) -> dict[str, str]:
        """Every log this nginx wrote (its own and the wrapper's), and its output."""
        files = [*sorted((self.tmp / "logs").glob("*")), self.tmp / "nginx.out"]
        return {path.name: path.read_text(errors="replace") for path in files if path.exists()}

    def logs(self) -> str:
        return "\n".join(f"--- {name} ---\n{text}" for name, text in self.log_files().items())


@contextlib.contextmanager
def running(front: Nginx) -> Iterator[Nginx]:
    """Started, then stopped and its folder removed."""
    try:
        front.start()
        yield front
    finally:
        front.close()


# --- clients: to 127.0.0.1, as if to HOST -----------------------------------------------------


class TLSConnection(HTTPConnection):
    """HTTPS to 127.0.0.1 as if to HOST: SNI and the certificate's check name HOST. From the
    loopback address `source` (Linux answers all of 127.0.0.0/8), or the kernel's choice."""

    default_port = 443

    def __init__(self, port: int, context: ssl.SSLContext, source: str = "",
                 timeout: float = 30) -> None:  # fmt: skip
        super().__init__("127.0.0.1", port, timeout=timeout,
                         source_address=(source, 0) if source else None)  # fmt: skip
        self.context = context

    def connect(self) -> None:
        super().connect()
        self.sock = self.context.wrap_socket(self.sock, server_hostname=HOST)


class HostHandler(urllib.request.HTTPSHandler):
    """urllib's https to `https://127.0.0.1:<front's port>` spoken as to HOST: the Host header
    `HOST:<port>`, SNI HOST, the front's certificate alone trusted (any other https URL as
    urllib's own handler speaks it). With urllib.request.install_opener(build_opener(...)),
    every urlopen() of the process."""

    def __init__(self, front: Nginx) -> None:
        super().__init__()
        self.front = front
        self.address = f"127.0.0.1:{front.https_port}"

    def https_request(self, request: urllib.request.Request) -> urllib.request.Request:
        if request.host == self.address:
            request.add_unredirected_header("Host", f"{HOST}:{self.front.https_port}")
        return super().https_request(request)

    def https_open(self, request: urllib.request.Request) -> HTTPResponse:
        if request.host != self.address:
            return super().https_open(request)
        front = self.front

        def connection(host: str, *, timeout: float = 30, **_: Any) -> TLSConnection:
            return TLSConnection(front.https_port, front.certificate.context, timeout=timeout)

        return self.do_open(connection, request)


def wrk_scripts(front: Nginx, scripts: Path, folder: Path) -> Path:
    """A folder of wrk scripts, one for each of `scripts` (*.lua), that set every request's
    Host to `HOST:<port>` and then run that script. wrk connects to the URL it is given
    (https://127.0.0.1:<port>) and sends that host as SNI; a request's Host is wrk.headers'
    unless the script names its own, so set here, before the script's init(), it is every
    request's."""
    folder.mkdir(parents=True, exist_ok=True)
    for script in sorted(scripts.glob("*.lua")):
        (folder / script.name).write_text(
            f"-- {script.name} through nginx: every request's Host the rendered server_name's.\n"
            f'wrk.headers["Host"] = "{HOST}:{front.https_port}"\n'
            f'dofile("{script.resolve()}")\n'
        )
    return folder
