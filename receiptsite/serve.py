"""`python -m receiptsite.serve [gunicorn's options]`: gunicorn serving the site with the
repository's gunicorn.conf.py, the settings checked first.

The same as `gunicorn receiptsite.wsgi -c gunicorn.conf.py`, but for one thing: gunicorn reads
`WEB_CONCURRENCY` itself when it is imported, before its configuration file runs, so a value
it cannot read (`many`, `2.5`, `-1`) stops plain gunicorn with a traceback or words of its own.
Here the site's settings are read before gunicorn is imported: any variable the site cannot use,
that one included, stops the start with one line naming it (receiptsite/config.py).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from receiptsite.config import stop_line

CONFIGURATION = Path(__file__).resolve().parent.parent / "gunicorn.conf.py"


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "receiptsite.settings")
    try:
        importlib.import_module(os.environ["DJANGO_SETTINGS_MODULE"])
    except ImproperlyConfigured as error:
        raise SystemExit(stop_line(error)) from None
    from gunicorn.app.wsgiapp import run  # WEB_CONCURRENCY is known to be sound from here on

    sys.argv = ["gunicorn", "-c", str(CONFIGURATION), *(sys.argv[1:] if argv is None else argv),
                "receiptsite.wsgi"]  # fmt: skip
    run()


if __name__ == "__main__":
    main()
