"""Settings for the test suite: the site's own settings with test-only secrets.

DATABASE_URL chooses the database, as in production (.ci/run runs the suite on both).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

_dir = Path(tempfile.mkdtemp(prefix="receiptsite-test-"))
_key = _dir / "signing-key.pem"
if not os.environ.get("SIGNING_KEY_FILE"):
    from receiptsite.integrity.keys import generate_private_key_pem

    _key.write_bytes(generate_private_key_pem())
    os.environ["SIGNING_KEY_FILE"] = str(_key)
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production")
os.environ.setdefault("RATE_LIMITS", "off")
os.environ.setdefault("SITE_URL", "https://receipts.example.org")
os.environ.setdefault("ALLOWED_HOSTS", "receipts.example.org,testserver,127.0.0.1,localhost")
os.environ.setdefault("LOG_STATE_FILE", str(_dir / "log-state.json"))

from receiptsite.settings import *  # noqa: E402,F403

STORAGES["staticfiles"] = {  # noqa: F405
    "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
}
# A static root of the suite's own, so that a collectstatic elsewhere (quickstart, the browser
# tests' live site) never changes the folder WhiteNoise is reading.
STATIC_ROOT = _dir / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
WHITENOISE_USE_FINDERS = True  # serve static files from their sources, no collectstatic
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# pytest-django gives each xdist worker a database of its own by suffixing its test NAME,
# and leaves an unnamed SQLite test database in memory only for the ENGINE named
# "django.db.backends.sqlite3"; the site's SQLite backend (receiptsite.lib.sqlite) is that
# backend, so its test database is named to be in memory too.
_default: dict[str, Any] = DATABASES["default"]  # noqa: F405
if _default["ENGINE"] == "receiptsite.lib.sqlite":
    _default["TEST"] = {**_default.get("TEST", {}), "NAME": ":memory:"}
