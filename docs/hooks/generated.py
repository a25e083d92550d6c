"""MkDocs hook: the parts of the documentation that are read off the code.

A page asks for a generated part with a marker on a line of its own,
``<!-- generated: NAME [ARGUMENT] -->``; the hook replaces it before the page
is rendered. Nothing here is copied by hand, so the reference cannot drift
from the code:

* ``cli PROGRAM``: every command's ``--help``, from the argument parsers;
* ``config FILE``: the keys of a configuration file (its sections, types,
  required or default, from the loader's layout and the class's fields), each
  explained by the comment above it in the commented example in ``deploy/``;
* ``hyperparameters``: every job algorithm's hyperparameters, from the
  estimators' declarations (``server/jobs/catalog.py``);
* ``kernels``: the registered site kernels and the first line of each one's
  docstring;
* ``api``: the Python API reference, one mkdocstrings block per name that
  ``import privadapt`` exports;
* ``csv PATH``: a committed result table (an experiment's CSV) as a table;
* ``modules FOLDER``: the modules of a folder with their docstrings' first
  paragraph (the project layout);
* ``file PATH``: a file of the repository as a code block (the wire contract).

It also publishes the experiments' figures (``experiments/**/results/*.png``)
under ``figures/`` in the site, so a paper's page shows them without a copy
in ``docs/``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mkdocs.structure.files import Files

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- generated: (\S+)(?: (\S+))? -->$", re.MULTILINE)


PACKAGE_VIEW = ROOT / "build" / "docs-packages"


def lay_out_package_view() -> None:
    """Lay out the package as it installs (``api/`` is ``privadapt``,
    ``server/`` is ``privadapt.server``, ...) as a tree of symbolic links in
    ``build/docs-packages``, where mkdocstrings reads the source (mkdocs.yml
    ``paths``); the folders in the repository do not nest that way."""
    package = PACKAGE_VIEW / "privadapt"
    if package.exists():
        for link in package.iterdir():
            link.unlink()
    package.mkdir(parents=True, exist_ok=True)
    for entry in (ROOT / "api").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for role in ("common", "client", "server"):
        (package / role).symlink_to(ROOT / role)


def on_startup(command: str, dirty: bool) -> None:
    # Before any plugin's on_config: the python handler reads its search paths
    # there or earlier.
    lay_out_package_view()


def on_files(files: Files, config: Any) -> Files:
    from mkdocs.structure.files import File

    for png in sorted(ROOT.glob("experiments/**/results/*.png")):
        relative = png.relative_to(ROOT / "experiments")
        uri = "figures/" + "/".join(part for part in relative.parts if part != "results")
        files.append(File.generated(config, uri, abs_src_path=str(png)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    def replace(match: re.Match[str]) -> str:
        name, argument = match.group(1), match.group(2)
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_uri}: unknown generated part {name!r}")
        return GENERATORS[name](argument)

    return MARKER.sub(replace, markdown)


def on_page_content(html: str, page: Any, config: Any, files: Files) -> str:
    """Docstrings cross-reference in Sphinx's roles (``:class:`NoisyGD```),
    which mkdocstrings leaves as text before the code: keep the code."""
    return re.sub(r":(?:class|func|meth|mod|data|attr|exc):\s*(<code>)", r"\1", html)


# ---- command line ---------------------------------------------------------

def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _leaves(prefix: str, parser: argparse.ArgumentParser
            ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    children = list(_subcommands(parser))
    if not children:
        yield prefix, parser
    for name, child in children:
        yield from _leaves(f"{prefix} {name}", child)


def _help_block(title: str, text: str) -> str:
    return f"### `{title}`\n\n```text\n{text.rstrip()}\n```\n"


def _daemon_help(main: Callable[[list[str]], int]) -> str:
    """A daemon builds its parser inside ``main``: ask it for ``--help``."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(["--help"])
    return out.getvalue()


def _cli(program: str | None) -> str:
    # argparse wraps its help at the terminal's width: fix it, so a build
    # gives the same page wherever it runs.
    with _environment(COLUMNS="100"):
        return _cli_help(program)


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _cli_help(program: str | None) -> str:
    # The hook imports the package only when a page asks for it.
    if program == "privadapt":
        from privadapt.cli.main import _build_parser

        parser = _build_parser()
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        blocks = [_help_block(program, parser.format_help())]
        blocks += [_help_block(name, sub.format_help()) for name, sub in _leaves(program, parser)
                   if name != program]
        return "\n".join(blocks)
    if program == "privadapt-site":
        from privadapt.client.daemon.main import main
    elif program == "privadapt-coordinator":
        from privadapt.server.coordinator.main import main
    else:
        raise ValueError(f"no parser for program {program!r}")
    return _help_block(program, _daemon_help(main))


# ---- configuration files --------------------------------------------------

def _example_comments(example: Path) -> dict[tuple[str, str], str]:
    """``{(section, key): the comment block above it}`` in a commented example
    (a commented-out ``# key = value`` line counts as the key; a comment at
    the end of the key's line is used when no block stands above it)."""
    comments: dict[tuple[str, str], str] = {}
    section, block, previous = "", [], ""
    for raw in example.read_text().splitlines():
        line = raw.strip()
        heading = re.fullmatch(r"\[+([^\]]+)\]+", line)
        key = re.fullmatch(r"#?\s*([a-z_]+)\s*=\s*([^#]*?)\s*(?:#\s*(.*))?", line)
        if heading:
            section, block, previous = heading.group(1), [], ""
        elif key and key.group(2):
            # Keys on consecutive lines share the block above the first.
            meaning = " ".join(block) or key.group(3) or previous
            comments.setdefault((section, key.group(1)), meaning)
            block, previous = [], meaning
        elif line.startswith("#"):
            block.append(line.lstrip("#").strip())
        else:
            block, previous = [], ""
    return comments


def _default_text(cls: type | None, field: str) -> str:
    if cls is None:
        return ""
    for item in dataclasses.fields(cls):
        if item.name == field:
            if item.default is not dataclasses.MISSING:
                value = getattr(item.default, "value", item.default)  # an Enum's TOML value
                if value is None:
                    return "none"
                return f"`{str(value).lower() if isinstance(value, bool) else value}`"
            return ""
    return ""


def _config_table(rows: list[tuple[str, str, str, str, str]]) -> str:
    lines = ["| key | type | required / default | meaning (from the example file) |",
             "|---|---|---|---|"]
    for section, key, kind, default, meaning in rows:
        lines.append(f"| `[{section}]` `{key}` | {kind} | {default} | {meaning} |")
    return "\n".join(lines) + "\n"


def _layout_rows(layout: dict, cls: type | None, example: str,
                 field_of: Callable[[str, str], str] = lambda section, key: key,
                 also: str | None = None) -> list[tuple[str, str, str, str, str]]:
    """``also``: a second example whose comment explains a key the first
    one leaves out (a federation file's coordinator keys are coordinator.toml's)."""
    from privadapt.common.config import type_text

    comments = _example_comments(ROOT / "deploy" / example)
    if also is not None:
        for where, comment in _example_comments(ROOT / "deploy" / also).items():
            if not comments.get(where):
                comments[where] = comment
    rows = []
    for section, keys in layout.items():
        for key, spec in keys.items():
            accepted, required = spec
            default = "required" if required else (_default_text(cls, field_of(section, key))
                                                   or "optional")
            meaning = _cell(comments.get((section, key), ""))
            rows.append((section, key, type_text(accepted), default, meaning))
    return rows


def _policy_rows() -> list[tuple[str, str, str, str, str]]:
    from privadapt.client.policy import _LAYOUT, SitePolicy

    rows = _layout_rows(_LAYOUT, SitePolicy, "policy.toml",
                        field_of=lambda _, key: "site_name" if key == "name" else key)
    simulation = "`false` in a file (`true` for a policy built in code)"
    return [(section, key, kind, simulation if key == "simulation" else default, meaning)
            for section, key, kind, default, meaning in rows]


def _config(name: str | None) -> str:
    if name == "policy":
        return _config_table(_policy_rows())
    if name == "site":
        from privadapt.client.daemon.config import _LAYOUT, SiteConfig

        return _config_table(_layout_rows(_LAYOUT, SiteConfig, "site.toml"))
    if name == "coordinator":
        from privadapt.server.coordinator.main import _LAYOUT, CoordinatorConfig

        return _config_table(_layout_rows(_LAYOUT, CoordinatorConfig, "coordinator.toml"))
    if name == "operator":
        from privadapt.cli.operator import _LAYOUT, OperatorConfig

        return _config_table(_layout_rows(_LAYOUT, OperatorConfig, "operator.toml"))
    if name == "job":
        from privadapt.server.jobs.spec import _JOB_LAYOUT

        return _config_table(_layout_rows(_JOB_LAYOUT, None, "job.toml"))
    if name == "federation":
        from privadapt.provisioning.provision import _COORDINATOR, _FEDERATION, _OPERATOR, _SITE

        layout = {**_FEDERATION, **_COORDINATOR, **_SITE, **_OPERATOR}
        return _config_table(_layout_rows(layout, None, "federation.toml",
                                          also="coordinator.toml"))
    raise ValueError(f"no configuration file {name!r}")


# ---- jobs and kernels ------------------------------------------------------

def _roles(text: str) -> str:
    """Sphinx roles (``:class:`Name```) as Markdown code."""
    return re.sub(r":(?:class|func|meth|data|mod|attr):`~?\.?([^`]+)`", r"`\1`", text)


def _cell(text: str) -> str:
    """Text from a docstring or the code, safe in a Markdown table cell: no
    column break, no HTML tag (``<s, g>``), no emphasis, Sphinx roles read."""
    return (_roles(text).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            .replace("*", "\\*"))


def _hyperparameters(_: str | None) -> str:
    from privadapt.server.algorithms.base import describe
    from privadapt.server.jobs.catalog import ALGORITHMS, job_schema

    parts = []
    for algorithm, estimator in ALGORITHMS.items():
        schema = job_schema(estimator)
        summary = _roles(" ".join((estimator.__doc__ or "").strip().split("\n\n")[0].split()))
        lines = [f"### `{algorithm}`", "",
                 f"Estimator `{estimator.__module__}.{estimator.__name__}`. {summary}", "",
                 "| hyperparameter | required / default | accepted values |", "|---|---|---|"]
        constraints = estimator._parameter_constraints
        for name in (*schema.required, *schema.optional):
            default = ("required" if name in schema.required
                       else f"`{schema.defaults[name]!r}`")
            accepted = (describe(constraints[name]) if name in constraints
                        else "a whole number >= 1")
            lines.append(f"| `{name}` | {default} | {_cell(accepted)} |")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def _kernels(_: str | None) -> str:
    from privadapt.common.kernels import get_kernel, registered_kernels

    lines = ["| kernel | what it computes at the site |", "|---|---|"]
    for name in registered_kernels():
        kernel = get_kernel(name)
        doc = (type(kernel).__doc__ or kernel.__doc__ or "").strip().split("\n\n")[0]
        lines.append(f"| `{name}` | {_cell(' '.join(doc.split()))} |")
    return "\n".join(lines) + "\n"


def _api(_: str | None) -> str:
    """One mkdocstrings block per name ``import privadapt`` offers, from its
    own list of exports, grouped by the package that defines it."""
    import privadapt

    groups = {"privadapt.server": "Estimators", "privadapt.client": "Sites and policies",
              "privadapt.common": "Data, privacy reports and errors"}
    parts = []
    for package, title in groups.items():
        parts.append(f"## {title}\n")
        for name, module in privadapt._EXPORTS.items():
            if module.startswith(package):
                parts.append(f"::: {module}.{name}\n    options:\n      heading_level: 3\n")
    return "\n".join(parts)


# Module docstrings cite the papers' text files and the design notes by paths
# outside the repository; a reader of the site has neither (the papers' page
# names each paper by its title).
_OUTSIDE = re.compile(r"[;,]?\s*(?:\.\./shared/\S*?|DESIGN\.md(?: section \d+)?)(?=[\s,;)]|$)")


def _docstring_line(path: Path) -> str:
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = _OUTSIDE.sub("", " ".join(doc.split("\n\n")[0].split()))
    first = re.sub(r"\(\s*[,;]?\s*\)", "", re.sub(r"\(\s*[,;]\s*", "(", first))
    return _cell(first)


def _modules(folder: str | None) -> str:
    """The modules of ``folder`` and of each package in it, with the first
    paragraph of each one's docstring."""
    if folder is None:
        raise ValueError("modules needs a folder")
    root = ROOT / folder
    lines = ["| module | what it holds |", "|---|---|"]
    for path in sorted(root.rglob("*.py")):
        if path.name == "__init__.py" and path.parent == root:
            continue
        shown = path.relative_to(ROOT).as_posix()
        if path.name == "__init__.py":
            shown = f"**{path.parent.relative_to(ROOT).as_posix()}/**"
        lines.append(f"| {shown if shown.startswith('**') else f'`{shown}`'} | "
                     f"{_docstring_line(path)} |")
    return "\n".join(lines) + "\n"


def _file(path: str | None) -> str:
    if path is None:
        raise ValueError("file needs a path")
    language = {".proto": "protobuf", ".toml": "toml", ".py": "python"}.get(Path(path).suffix, "")
    return f"```{language}\n{(ROOT / path).read_text().rstrip()}\n```\n"


def _number(text: str) -> str:
    try:
        value = float(text)
    except ValueError:
        return text
    return text if text.lstrip("-").isdigit() else f"{value:.4g}"


def _csv(path: str | None) -> str:
    """A committed result table (CSV) as a Markdown table, numbers to four
    significant digits: the page shows the figures the experiment wrote."""
    import csv

    if path is None:
        raise ValueError("csv needs a path")
    with (ROOT / path).open(newline="") as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], rows[1:]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(_number(cell)) for cell in row) + " |" for row in body]
    return f"`{path}`:\n\n" + "\n".join(lines) + "\n"


GENERATORS: dict[str, Callable[[str | None], str]] = {
    "csv": _csv,
    "cli": _cli,
    "config": _config,
    "hyperparameters": _hyperparameters,
    "kernels": _kernels,
    "api": _api,
    "modules": _modules,
    "file": _file,
}
