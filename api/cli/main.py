"""``privadapt``: operator and researcher commands.

* ``privadapt ledger init --site-db PATH --policy POLICY.toml``: create a site's ledger
  (once: a site daemon never creates one).
* ``privadapt ledger show --site-db PATH [--job JOB] [--json]``: verify a site's privacy
  ledger and print it.
* ``privadapt ledger report --site-db PATH --out REPORT.html``: verify a site's
  ledger and write it as a self-contained HTML page for an auditor.
* ``privadapt ledger clear-latch --site-db PATH --kernel NAME``: enable again a kernel the
  site latched off after its floating-point certificate failed (one more bit released).
* ``privadapt certs init --dir DIR``: create the federation CA.
* ``privadapt certs issue --dir DIR --role ROLE --name NAME [--days N] [--host H ...]``:
  issue a party's certificate and key from that CA.
* ``privadapt launch JOB.toml [--follow]``, ``status [JOB] [--follow]``,
  ``result JOB --out DIR``, ``cancel JOB``, ``sites``, ``logs JOB``: the operator API
  (api/cli/operator.py).
* ``privadapt provision FEDERATION.toml [--out DIR] [--force]``: a startup kit per
  participant (certificate, key, CA certificate, configuration, policy template,
  systemd unit; api/provisioning/provision.py).
* ``privadapt --version``: the installed version.
* ``privadapt simulate [--sites N] [--workdir DIR | --keep] [--job JOB.toml ...] [--split NAME]
  [--set KEY=VALUE ...]``:
  a coordinator and N sites as processes on this machine (api/simulation/simulate.py);
  with ``--public PUBLIC.csv --data A.csv B.csv ... --schema schema.toml``, on those files.
* ``privadapt schema infer PUBLIC.csv --label COLUMN [--drop C ...] [--categorical C ...]
  [--widen F] [--max-categories N]``: a draft schema from the public file, as TOML on
  stdout (api/cli/schema_infer.py).
* ``privadapt evaluate --model MODEL.npz --data TEST.csv --schema schema.toml [--json]``:
  a result model's figures on a labelled file (api/cli/evaluate.py).

Expected errors (missing file, bad database) print one line and exit 2, no traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from privadapt.cli.operator import add_operator_commands, run_operator_command
from privadapt.common.errors import ConfigError, PrivadaptError
from privadapt.common.secure import certs
from privadapt.common.version import installed_version
from privadapt.server.jobs.spec import SET_HELP

OPERATOR_COMMANDS = ("launch", "status", "result", "cancel", "sites", "logs")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="privadapt",
        description="privadapt: federated differentially private domain adaptation.",
    )
    parser.add_argument("--version", action="version", version=f"privadapt {installed_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    ledger = commands.add_parser("ledger", help="create or inspect a site's privacy ledger")
    ledger_commands = ledger.add_subparsers(dest="ledger_command", metavar="SUBCOMMAND")
    init = ledger_commands.add_parser("init", help="create a site's ledger and its head file")
    init.add_argument("--site-db", required=True, type=Path, help="the ledger database to create")
    init.add_argument("--policy", required=True, type=Path, help="the site's policy (TOML)")
    show = ledger_commands.add_parser("show", help="print every charge and the epsilon spent")
    show.add_argument("--site-db", required=True, type=Path, help="the site's ledger database")
    show.add_argument("--job", help="only this job's charges")
    show.add_argument("--json", action="store_true",
                      help="print one JSON document instead of the table, for scripts")
    show.add_argument("--summary", action="store_true",
                      help="the cap and the totals per job and overall only, no charge")
    report = ledger_commands.add_parser(
        "report", help="write a self-contained HTML privacy report of a site's ledger")
    report.add_argument("--site-db", required=True, type=Path, help="the site's ledger database")
    report.add_argument("--out", required=True, type=Path, help="the HTML file to write")
    clear = ledger_commands.add_parser(
        "clear-latch",
        help="enable again a kernel the site latched off after its floating-point certificate "
             "failed; an operator decision that re-opens one more bit",
        description="Clear a kernel's latch in a site's ledger. A site latches a kernel off "
                    "when its floating-point error certificate fails on a query; whether it "
                    "fails can depend on the private data, so that refusal released one bit, "
                    "and clearing the latch lets a coordinator learn one more bit (whether it "
                    "fails again). Investigate the numerical libraries first. The latch stays "
                    "listed as cleared in `ledger show` and `ledger report`.")
    clear.add_argument("--site-db", required=True, type=Path, help="the site's ledger database")
    clear.add_argument("--kernel", required=True, help="the latched kernel to enable again")
    _add_certs_parser(commands)
    provision = commands.add_parser(
        "provision", help="write a startup kit per participant from one federation file")
    provision.add_argument("federation_file", type=Path,
                           help="the federation TOML naming the coordinator, sites and operators")
    provision.add_argument("--out", type=Path,
                           help="where the kits go (default: kits/ beside the federation file)")
    provision.add_argument("--force", action="store_true",
                           help="replace existing kits (their certificates are issued again)")
    add_operator_commands(commands)
    _add_simulate_parser(commands)
    _add_data_parsers(commands)
    return parser


def _add_simulate_parser(commands: argparse._SubParsersAction) -> None:
    simulate = commands.add_parser(
        "simulate", help="run a coordinator and N site daemons on this machine, over mutual "
        "TLS, on the bundled UCI Adult split or on your own files (--public, --data, --schema)")
    simulate.add_argument("--sites", type=int, help="number of sites of the Adult demo "
                          "(default 3; with --data, one site per file)")
    simulate.add_argument("--workdir", type=Path, help="where everything goes, kept at the "
                          "end (default: a new temporary directory, removed at the end)")
    simulate.add_argument("--keep", action="store_true", help="keep the temporary work "
                          "directory (certificates, configs, data, ledgers, logs)")
    simulate.add_argument("--job", type=Path, action="append", default=[], dest="jobs",
                          help="a job TOML to run (repeatable; default: the demo jobs, on "
                          "your own files the private selection at epsilon 1)")
    simulate.add_argument("--split", help="the UCI Adult split (default: the demo's; "
                          "names in privadapt.common.data.datasets.adult.SPLITS, e.g. sex)")
    simulate.add_argument("--set", dest="overrides", action="append", default=[],
                          metavar="KEY=VALUE", help=f"{SET_HELP}, in every job it runs")
    simulate.add_argument("--public", type=Path, metavar="PUBLIC.csv",
                          help="the coordinator's public source file (CSV or Parquet), "
                          "instead of the Adult demo's; needs --data, --schema and --workdir "
                          "(or --keep); results in WORKDIR/results/")
    simulate.add_argument("--data", type=Path, nargs="+", default=[], metavar="SITE.csv",
                          help="one private file per site (CSV or Parquet); the sites are "
                          "named site-1, site-2, ... in this order")
    simulate.add_argument("--schema", type=Path, metavar="schema.toml",
                          help="the schema every file is read with (privadapt schema infer)")


def _add_data_parsers(commands: argparse._SubParsersAction) -> None:
    schema = commands.add_parser("schema", help="draft a schema from the public file")
    schema_commands = schema.add_subparsers(dest="schema_command", metavar="SUBCOMMAND")
    infer = schema_commands.add_parser(
        "infer", help="print a draft schema (TOML) drawn from the coordinator's PUBLIC file",
        description="Draw a schema from the coordinator's PUBLIC file only, never from a "
                    "site's private one: its ranges, categories and label coding are shown "
                    "to every party. Numeric columns: the public [min, max]; other columns: "
                    "the categories seen; the label: its classes coded -1/+1 or 0..C-1, or a "
                    "number. Rules: privadapt.common.data.schema_inference.")
    infer.add_argument("public_file", type=Path, metavar="PUBLIC.csv",
                       help="the coordinator's public source file (CSV or Parquet)")
    infer.add_argument("--label", required=True, help="the label column")
    infer.add_argument("--drop", action="append", default=[], metavar="COLUMN",
                       help="leave a column out (an identifier, free text; repeatable)")
    infer.add_argument("--categorical", action="append", default=[], metavar="COLUMN",
                       help="one-hot a numeric column (codes such as a region number; "
                       "repeatable)")
    infer.add_argument("--widen", type=float, default=0.0, metavar="F",
                       help="move each numeric range out by F x (max - min) on each side "
                       "(default 0: the public file's [min, max])")
    infer.add_argument("--max-categories", type=int, default=50, metavar="N",
                       help="refuse a text column with more categories (default 50)")
    evaluate = commands.add_parser(
        "evaluate", help="score a result model (model.npz) on a labelled file: accuracy, "
        "balanced accuracy, ROC AUC, or MSE/MAE/R^2 for a regression")
    evaluate.add_argument("--model", required=True, type=Path, metavar="MODEL.npz",
                          help="a job's model.npz (privadapt result or simulate)")
    evaluate.add_argument("--data", required=True, type=Path, metavar="TEST.csv",
                          help="labelled records (CSV, Parquet or .npz)")
    evaluate.add_argument("--schema", required=True, type=Path, metavar="schema.toml",
                          help="the schema the job's sites used")
    evaluate.add_argument("--json", action="store_true",
                          help="print one JSON document instead of lines, for scripts")


def _add_certs_parser(commands: argparse._SubParsersAction) -> None:
    group = commands.add_parser("certs", help="create the federation CA and issue certificates")
    certs_commands = group.add_subparsers(dest="certs_command", metavar="SUBCOMMAND")
    init = certs_commands.add_parser("init", help="create a federation CA (ca.key, ca.crt) in DIR")
    init.add_argument("--dir", required=True, type=Path, help="directory for the CA files")
    init.add_argument("--name", default=None,
                      help="the CA's common name (default: privadapt-ca- and 8 random hex "
                      "digits, unique to this federation)")
    init.add_argument("--days", type=int, default=3650, help="validity in days (default 3650)")
    issue = certs_commands.add_parser(
        "issue", help="issue NAME.key and NAME.crt from the CA in DIR"
    )
    issue.add_argument("--dir", required=True, type=Path, help="directory holding the CA")
    issue.add_argument("--role", required=True, choices=certs.ROLES)
    issue.add_argument("--name", required=True, help="the party's id (certificate common name)")
    issue.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    issue.add_argument(
        "--host", action="append", dest="hosts", metavar="HOST",
        help="coordinator only: a DNS name or IP address clients dial (repeatable; "
        "default localhost and 127.0.0.1)",
    )


def _run_certs(args: argparse.Namespace) -> int:
    if args.certs_command == "init":
        ca = certs.init_ca(args.dir, name=args.name, valid_days=args.days)
        paths = [ca.key, ca.cert]
    else:
        if args.hosts and args.role != "coordinator":
            # Only the coordinator is dialled by host name; silently dropping
            # --host would hide a mistake in the deployment.
            raise ConfigError("--host applies only to --role coordinator (the gRPC server)")
        hosts = args.hosts or ("localhost", "127.0.0.1")
        issued = certs.issue_certificate(
            args.dir, args.role, args.name, valid_days=args.days, hosts=hosts
        )
        paths = [issued.key, issued.cert]
    for path in paths:
        print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "ledger" and args.ledger_command == "show":
            # The operator CLI reads a site's ledger file directly; it never runs a site.
            from privadapt.client.ledger.cli import show_ledger

            return show_ledger(args.site_db, job=args.job, as_json=args.json,
                               summary=args.summary)
        if args.command == "ledger" and args.ledger_command == "report":
            from privadapt.client.ledger.report import write_report

            return write_report(args.site_db, args.out)
        if args.command == "ledger" and args.ledger_command == "clear-latch":
            from privadapt.client.ledger.cli import clear_latch

            return clear_latch(args.site_db, args.kernel)
        if args.command == "ledger" and args.ledger_command == "init":
            from privadapt.client.ledger.cli import init_ledger

            return init_ledger(args.site_db, args.policy)
        if args.command == "certs" and args.certs_command is not None:
            return _run_certs(args)
        if args.command == "provision":
            from privadapt.provisioning.provision import provision

            for kit in provision(args.federation_file, args.out, force=args.force):
                print(f"wrote the {kit.role} kit of {kit.name!r} in {kit.directory}")
            return 0
        if args.command in OPERATOR_COMMANDS:
            return run_operator_command(args)
        if args.command == "simulate":
            from privadapt.simulation.own_files import OwnFiles
            from privadapt.simulation.simulate import simulate

            own = OwnFiles.given(args.public, args.data, args.schema, args.sites, args.split)
            return simulate(3 if args.sites is None else args.sites, args.workdir, args.jobs,
                            args.split, keep=args.keep, overrides=args.overrides,
                            own_files=own)
        if args.command == "schema" and args.schema_command == "infer":
            from privadapt.cli.schema_infer import infer_schema_toml

            print(infer_schema_toml(args.public_file, args.label, args.drop, args.categorical,
                                    args.widen, args.max_categories), end="")
            return 0
        if args.command == "evaluate":
            from privadapt.cli.evaluate import evaluate

            return evaluate(args.model, args.data, args.schema, args.json)
    except PrivadaptError as err:
        print(f"privadapt: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `privadapt ledger show ... | head`: the reader left; not an error.
        # Point stdout at /dev/null so the interpreter's final flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    parser.print_help()
    return 0 if args.command is None else 2


if __name__ == "__main__":
    sys.exit(main())
