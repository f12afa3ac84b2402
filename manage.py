#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "receiptsite.settings")
    if len(sys.argv) > 1 and sys.argv[1] == "quickstart":
        # quickstart prepares its own configuration (secrets in var/) before settings load.
        from receiptsite.quickstart import prepare_environment

        prepare_environment()
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
