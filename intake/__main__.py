"""python -m intake: settings -> SMTP listener -> serve until SIGTERM or SIGINT."""

import sys

from airlock.errors import EX_CONFIG, ConfigError
from airlock.extras import require_extra
from airlock.service import main

if __name__ == "__main__":
    try:  # the SMTP server is an extra: say which pip command, not an ImportError traceback
        require_extra("python -m intake", ("aiosmtpd", "dkim", "authres"), "smtp")
    except ConfigError as exc:
        print(f"intake: {exc}", file=sys.stderr)
        sys.exit(EX_CONFIG)
    from intake.app import serve

    sys.exit(main("intake", serve, needs_task=False))
