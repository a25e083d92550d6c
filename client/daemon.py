"""``privadapt-site``: the site daemon.

The networked daemon (gRPC over mutual TLS, secure aggregation) is the next
step of the roadmap; until it lands this entry point explains that and exits.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="privadapt-site",
        description="Site daemon: answers a coordinator's private aggregate queries "
        "from local data under the site's own privacy policy and ledger.",
    )
    parser.add_argument("--config", help="site configuration file (TOML)")
    parser.parse_args(argv)
    print(
        "privadapt-site: the networked site daemon is not available yet. Sites can be run "
        "in-process today (privadapt.client.LocalFederation); see README.md.",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
