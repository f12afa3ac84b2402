#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "receiptsite.settings")
    # The embedded default's secrets, before settings load: quickstart makes them in var/,
    # every other command finds them there (receiptsite/quickstart.py).
    from receiptsite.quickstart import prepare_environment, use_embedded_default

    if len(sys.argv) > 1 and sys.argv[1] == "quickstart":
        prepare_environment()
    else:
        use_embedded_default()
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    from receiptsite.config import stop_line

    # Read and check the whole configuration before any command runs: a value the site
    # cannot use stops every command with one line that names it, never a traceback.
    try:
        settings.INSTALLED_APPS  # noqa: B018 (loads the settings module)
    except ImproperlyConfigured as error:
        sys.exit(stop_line(error))
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
