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
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
