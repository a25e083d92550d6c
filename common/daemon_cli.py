"""What both daemons' command lines share: ``--config``, ``--insecure``,
``--log-level`` and ``--version``, and starting their one-line-per-event log
on stderr."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from privadapt.common.secure.tls import insecure_warning
from privadapt.common.version import installed_version

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def daemon_arguments(parser: argparse.ArgumentParser, config_help: str,
                     argv: list[str] | None) -> argparse.Namespace:
    """Parse a daemon's arguments, start logging, and warn about --insecure."""
    parser.add_argument("--config", required=True, type=Path, help=config_help)
    parser.add_argument("--insecure", action="store_true",
                        help="plaintext gRPC, for local debugging only (prints a warning)")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--version", action="version",
                        version=f"{parser.prog} {installed_version()}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr, format=LOG_FORMAT)
    if args.insecure:
        print(insecure_warning(), file=sys.stderr)
    return args
