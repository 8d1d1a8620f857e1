#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tjwater.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018 - loads the settings: a configuration error is reported here
    except ImproperlyConfigured as exc:
        # One line, not a traceback: what is missing, and the documented way to run locally.
        sys.stderr.write(
            f"manage.py: {exc} (for local use run it through scripts/dev, which sets the demo configuration: "
            f"scripts/dev manage.py {' '.join(sys.argv[1:2]) or 'help'} …)\n"
        )
        sys.exit(1)
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
