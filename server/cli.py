"""``privadapt``: operator and researcher commands.

Commands available now:

* ``privadapt ledger show --site-db PATH [--job JOB]``: print a site's privacy ledger.

Expected errors (missing file, bad database) print one line and exit 2, no traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from privadapt.common.errors import PrivadaptError


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="privadapt",
        description="privadapt: federated differentially private domain adaptation.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    ledger = commands.add_parser("ledger", help="inspect a site's privacy ledger")
    ledger_commands = ledger.add_subparsers(dest="ledger_command", metavar="SUBCOMMAND")
    show = ledger_commands.add_parser("show", help="print every charge and the epsilon spent")
    show.add_argument("--site-db", required=True, type=Path, help="the site's ledger database")
    show.add_argument("--job", help="only this job's charges")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "ledger" and args.ledger_command == "show":
            # The operator CLI reads a site's ledger file directly; it never runs a site.
            from privadapt.client.ledger_cli import show_ledger

            return show_ledger(args.site_db, job=args.job)
    except PrivadaptError as err:
        print(f"privadapt: {err}", file=sys.stderr)
        return 2
    parser.print_help()
    return 0 if args.command is None else 2


if __name__ == "__main__":
    sys.exit(main())
