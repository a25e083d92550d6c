"""``privadapt-coordinator``: the coordinator daemon.

The networked coordinator (gRPC over mutual TLS, job store, resumable jobs) is
the next step of the roadmap; until it lands this entry point explains that
and exits.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="privadapt-coordinator",
        description="Coordinator daemon: holds the public source data and the model, "
        "runs algorithms through the sites' private aggregate queries.",
    )
    parser.add_argument("--config", help="coordinator configuration file (TOML)")
    parser.parse_args(argv)
    print(
        "privadapt-coordinator: the networked coordinator is not available yet. Algorithms "
        "run in-process today against privadapt.client.LocalFederation; see README.md.",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
