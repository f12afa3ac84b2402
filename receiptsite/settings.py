"""Settings for receiptsite, read from the environment (see README, "Configuration").

One file for every environment. Defaults are safe for production: DEBUG is off, and with DEBUG
off the site refuses to start without a SECRET_KEY and a SIGNING_KEY_FILE.

Every variable is read and checked here, once, when a process starts: a value the site cannot
use raises receiptsite.config.ConfigurationError, and manage.py, wsgi.py and gunicorn.conf.py
stop with one line naming it. Nothing read here is read again later.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.utils.csp import CSP

from receiptsite import config, logconfig
from receiptsite.config import ConfigurationError, env, envbool, envint, envlist

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env("VAR_DIR") or BASE_DIR / "var")

DEBUG = envbool("DEBUG", False)

SITE_URL = env("SITE_URL", "http://127.0.0.1:8000").rstrip("/")
_site = urlsplit(SITE_URL)
if _site.scheme not in ("http", "https") or not _site.hostname:
    raise ConfigurationError("SITE_URL", f"must be an absolute http(s) URL, not {SITE_URL!r}")
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", [_site.hostname])
LOG_ORIGIN = env("LOG_ORIGIN") or f"{_site.netloc.rsplit('@', 1)[-1]}/receipts"
LOG_STATE_FILE = Path(env("LOG_STATE_FILE") or VAR_DIR / "log-state.json")

SECRET_KEY = env("SECRET_KEY")
SIGNING_KEY_FILE = env("SIGNING_KEY_FILE")
if not DEBUG:
    missing = [name for name in ("SECRET_KEY", "SIGNING_KEY_FILE") if not env(name)]
    if missing:
        raise ConfigurationError(
            " and ".join(missing),
            "must be set when DEBUG is off "
            "(for a local try-out, `python manage.py quickstart` sets them up)",
        )
elif not SECRET_KEY:
    SECRET_KEY = "insecure-development-only-key"  # DEBUG only; never reaches production
# Former secret keys, still honoured after a rotation (README, "Configuration"): among what is
# made with SECRET_KEY, the hashes a withdrawal keeps of its receipt's idempotency key.
SECRET_KEY_FALLBACKS = envlist("SECRET_KEY_FALLBACKS", [])
# The private key itself, loaded now: a missing, unreadable or wrong file stops the start.
# Each process reads it once, so a new key takes a restart (README, "Rotating the signing
# key"). Only with DEBUG on may it be absent: the site then cannot sign, so it stores no
# receipt and /healthz answers 503.
SIGNING_KEY = config.signing_key(SIGNING_KEY_FILE) if SIGNING_KEY_FILE else None
# During a rotation, the key SIGNING_KEY_FILE held before: it signs over to the new key in the
# keys' history (ledger/key_history.py; README, "Rotating the signing key"). Unset otherwise.
PREVIOUS_SIGNING_KEY_FILE = env("PREVIOUS_SIGNING_KEY_FILE")
PREVIOUS_SIGNING_KEY = (
    config.signing_key(PREVIOUS_SIGNING_KEY_FILE, "PREVIOUS_SIGNING_KEY_FILE")
    if PREVIOUS_SIGNING_KEY_FILE
    else None
)

DATABASE_TIMEOUT = envint("DATABASE_TIMEOUT", 5)
# DATABASE_PREPARED_STATEMENTS (PostgreSQL): parameters bound on the server, and a statement a
# connection runs more than five times prepared, so that the server plans it once per
# connection rather than on every run. The site's reads are a few small statements, and
# planning them was most of the server's work (the readiness query: 0.21 ms to plan, 0.07 ms
# to run). Through gunicorn, /healthz, verify and the page served 25 to 40 % more requests a
# second with it. `false` behind a pooler that hands a connection to another client between
# transactions and cannot keep prepared statements (PgBouncer's transaction mode before 1.21).
DATABASE_PREPARED_STATEMENTS = envbool("DATABASE_PREPARED_STATEMENTS", True)


def database(url: str) -> dict[str, object]:
    """DATABASE_URL as Django's DATABASES entry: SQLite or PostgreSQL, the two databases the
    append-only triggers are written for."""
    try:
        entry: dict[str, object] = dict(dj_database_url.parse(url))
    except ValueError:
        entry = {}
    if entry.get("ENGINE") == "django.db.backends.sqlite3":
        # One connection per thread, kept: opening one (the file, its WAL index, the PRAGMAs)
        # cost a quarter of a small request's time.
        # Django's backend, whose writers (a process's threads, and the processes) queue on
        # locks that wake the next one when a write ends, not on SQLite's sleeping busy
        # handler (receiptsite/lib/sqlite/base.py).
        entry.update(ENGINE="receiptsite.lib.sqlite", CONN_MAX_AGE=600, CONN_HEALTH_CHECKS=True)
        entry["OPTIONS"] = {
            # IMMEDIATE takes the write lock at BEGIN, so two writers queue on the busy
            # timeout instead of failing with "database is locked" on lock upgrade.
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
        }
        return entry
    if entry.get("ENGINE") == "django.db.backends.postgresql":
        options = entry.get("OPTIONS")
        entry.update(
            # Django's backend, its health check of a kept connection without a round trip
            # while the connection is sound (receiptsite/lib/postgresql/base.py).
            ENGINE="receiptsite.lib.postgresql",
            CONN_MAX_AGE=60,
            CONN_HEALTH_CHECKS=True,
            OPTIONS={
                **(options if isinstance(options, dict) else {}),
                "connect_timeout": DATABASE_TIMEOUT,
                # A server that stops answering on an open connection is noticed within
                # about DATABASE_TIMEOUT seconds too, so requests get their 503 in time.
                "keepalives": 1,
                "keepalives_idle": max(1, DATABASE_TIMEOUT // 2),
                "keepalives_interval": 1,
                "keepalives_count": 2,
                "tcp_user_timeout": DATABASE_TIMEOUT * 1000,
                **(
                    {"server_side_binding": True, "prepare_threshold": 5}
                    if DATABASE_PREPARED_STATEMENTS
                    else {}
                ),
            },
            TEST={"NAME": env("TEST_DATABASE_NAME") or None},
        )
        return entry
    scheme = url.partition(":")[0]
    raise ConfigurationError(
        "DATABASE_URL",
        f"must be sqlite:///<path> or postgres://user:password@host:port/name, not {scheme}:",
    )


if not env("DATABASE_URL"):
    VAR_DIR.mkdir(parents=True, exist_ok=True)
DATABASES = {
    "default": database(env("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'receiptsite.sqlite3'}")
}
# The role the site runs as on PostgreSQL when it is not the owner (README, "Database
# roles"): `migrate`, run as the owner, grants it what it needs. Unset: nothing is granted.
DATABASE_SITE_ROLE = env("DATABASE_SITE_ROLE")
if DATABASE_SITE_ROLE and not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", DATABASE_SITE_ROLE):
    raise ConfigurationError(
        "DATABASE_SITE_ROLE", f"must be a plain role name (a-z, 0-9, _), not {DATABASE_SITE_ROLE!r}"
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "axes",
    "receiptsite.receipts",
    "receiptsite.ledger",
    "receiptsite.review",
    "receiptsite.withdrawal",
    "receiptsite.pages",
    "receiptsite.audit",
]

MIDDLEWARE = [
    # First of all, so that it times every request and sees every answer (receiptsite/metrics);
    # it reads neither the Host nor the scheme.
    "receiptsite.middleware.MetricsMiddleware",
    # Then, before any middleware reads the Host or the scheme, these two set them.
    # ANY_HOST_PATHS answer whatever the Host (a load balancer, Prometheus, ask on the private
    # address); X-Forwarded-Proto is believed from TRUSTED_PROXIES only.
    "receiptsite.middleware.HealthCheckHostMiddleware",
    "receiptsite.middleware.ForwardedProtoMiddleware",
    "receiptsite.middleware.RequestIDMiddleware",
    # Outside SecurityMiddleware and CSRF: their redirects and 403s carry the path's headers too.
    "receiptsite.middleware.RouteHeadersMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "receiptsite.middleware.ResourcePolicyMiddleware",
    # Before WhiteNoise, so that static files carry the CSP too (every response does).
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # The session, the language, the signed-in user, its messages and htmx: Django's (and
    # django-htmx's) layers, which let an API route's requests straight through (the API
    # takes bearer keys, never cookies, and answers in English: receiptsite/middleware.py).
    "receiptsite.middleware.SessionMiddleware",
    "receiptsite.middleware.LocaleMiddleware",
    "receiptsite.middleware.QueryLanguageMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "receiptsite.middleware.AuthenticationMiddleware",
    # On PostgreSQL a staff user's admin requests read every tenant (receipts/rowsecurity.py).
    "receiptsite.receipts.rowsecurity.AuditorScopeMiddleware",
    "receiptsite.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "receiptsite.middleware.HtmxMiddleware",
    "receiptsite.middleware.DatabaseUnavailableMiddleware",
    # Last, as django-axes asks: it turns a locked-out sign-in into the lockout answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "receiptsite.urls"
WSGI_APPLICATION = "receiptsite.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.csp",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# The admin's sign-in is throttled by django-axes (README, "Deploying ..."): 5 wrong passwords
# for one account, or from one client address, lock that account, or that address, out for 15
# minutes. Attempts are counted in the database, so every worker and host sees the same count.
# AxesStandaloneBackend only counts and refuses; ModelBackend still checks the password.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # each on its own, not the pair
AXES_RESET_ON_SUCCESS = True
# The client address as the rate limits see it: X-Forwarded-For only from TRUSTED_PROXIES.
AXES_CLIENT_IP_CALLABLE = "receiptsite.api.ratelimit.client_address"
AXES_LOCKOUT_TEMPLATE = "lockout.html"
# Log lines name the account and the address (an operator needs both); the password is always
# masked by django-axes, and never stored either.
AXES_SENSITIVE_PARAMETERS: list[str] = []
AXES_VERBOSE = False  # log lines hold the lockout parameters only, and no line at start

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "receiptsite" / "locale"]
USE_I18N = True
TIME_ZONE = "UTC"
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env("STATIC_ROOT") or BASE_DIR / "staticfiles")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# Security headers. The CSP allows nothing from other origins and no inline script or style.
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF],
    "connect-src": [CSP.SELF],
    "font-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}
# TRUSTED_PROXIES: the proxies (addresses and CIDR ranges, IPv4 or IPv6) whose
# X-Forwarded-For (the client's address: rate limits, the admin's lock-out, failed
# authentications) and X-Forwarded-Proto (https or not) are believed; from any other peer both
# are ignored (api/ratelimit.py, middleware.ForwardedProtoMiddleware). Django's own
# SECURE_PROXY_SSL_HEADER is left unset: it would believe X-Forwarded-Proto from anyone.
TRUSTED_PROXIES = config.trusted_proxies(env("TRUSTED_PROXIES"))
SECURE_PROXY_SSL_HEADER = None
# A site whose SITE_URL is https is served over TLS only: browsers remember it for a year
# (HSTS), and a plain-http request is redirected to https. The redirect needs the proxy's
# X-Forwarded-Proto to tell the two apart, so it is on only with TRUSTED_PROXIES (without, a
# request over TLS would look plain and be redirected to itself; `check --deploy` says so).
# ANY_HOST_PATHS stay plain, for a health check or a scrape on the private port.
_https = _site.scheme == "https"
SECURE_HSTS_SECONDS = 31536000 if _https else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_PRELOAD = _https
SECURE_SSL_REDIRECT = _https and bool(TRUSTED_PROXIES)
# The paths infrastructure asks on each host's private address (a load balancer's health
# check, Prometheus' scrape): answered whatever the Host (middleware.HealthCheckHostMiddleware)
# and never redirected to https.
ANY_HOST_PATHS = ("/healthz", "/metrics")
SECURE_REDIRECT_EXEMPT = [f"^{re.escape(path.lstrip('/'))}$" for path in ANY_HOST_PATHS]
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _https
SESSION_COOKIE_HTTPONLY = True
# Only the admin's signed-in auditors get messages, and they have a session: kept there, not
# in a signed cookie first (Django's default, FallbackStorage, builds a cookie signer and two
# stores for every request, about 4 % of a /healthz).
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"
CSRF_TRUSTED_ORIGINS = [f"{_site.scheme}://{_site.netloc}"]

# Ingest limits (bytes, code points). A batch body may be larger than one receipt, so Django's
# own limit is the batch limit and the single-receipt route checks its own.
RECEIPT_MAX_BYTES = envint("RECEIPT_MAX_BYTES", 256 * 1024)
BATCH_MAX_BYTES = envint("BATCH_MAX_BYTES", 5 * 1024 * 1024)
BATCH_MAX_ITEMS = 500
TEXT_LIMIT = envint("TEXT_LIMIT", 4000)
DATA_UPLOAD_MAX_MEMORY_SIZE = BATCH_MAX_BYTES

# RATE_LIMITS: "off", "on" (the defaults), or "SCOPE=BURST/PER_SECOND,..." for the scopes
# ingest, read and auth (config.DEFAULT_RATE_LIMITS); parsed here into {scope: (burst, per
# second)}, or None for off.
RATE_LIMITS = config.rate_limits(env("RATE_LIMITS", "on"))

# REDIS_URL: optional. The rate limits' buckets (api/ratelimit.py), shared by every worker
# and host, live in the database; with REDIS_URL, in Redis, and so does Django's cache.
REDIS_URL = config.redis_url(env("REDIS_URL"))
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    if REDIS_URL
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
}

# WITNESS_POLICY_FILE: optional, the witnesses that cosign the log's checkpoints (a
# c2sp.org/tlog-policy file, read and checked here, once); WITNESS_INTERVAL: the least number
# of seconds between two submissions to one witness (`manage.py witness`).
WITNESS_POLICY_FILE = env("WITNESS_POLICY_FILE")
WITNESS_POLICY = config.witness_policy(WITNESS_POLICY_FILE)
WITNESS_INTERVAL = envint("WITNESS_INTERVAL", 10)

# AUDIT_LOG_DAYS: how long API audit-log entries are kept; `manage.py pruneauditlog` removes
# older ones (the one path the database lets delete them).
AUDIT_LOG_DAYS = config.audit_log_days(env("AUDIT_LOG_DAYS"))

# METRICS_ALLOWED_FROM: the peers (addresses and CIDR ranges, IPv4 or IPv6) that may read
# /metrics, asking directly, never through a proxy (receiptsite/metrics/exposition.py); unset:
# the loopback; `none`: nobody. Parsed here, once, like TRUSTED_PROXIES.
METRICS_ALLOWED_FROM = config.metrics_allowed_from(env("METRICS_ALLOWED_FROM"))

# WEB_CONCURRENCY: gunicorn's worker processes (gunicorn.conf.py); checked here too, so that
# `manage.py check` refuses the environment a gunicorn could not start with. None: 2 × cores
# + 1, at most 12 (gunicorn.conf.py says why).
WEB_CONCURRENCY = config.web_concurrency(env("WEB_CONCURRENCY"))

# One configuration for Django and gunicorn (gunicorn.conf.py uses these two names too).
LOG_LEVEL = config.log_level(env("LOG_LEVEL", "info"))
LOGGING = logconfig.logging_config(LOG_LEVEL)
