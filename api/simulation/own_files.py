"""``privadapt simulate --public PUBLIC.csv --data A.csv B.csv ... --schema schema.toml``:
the demo's networked federation on the user's own files.

The coordinator gets ``PUBLIC.csv`` as its public source (with the schema, so
a model's weights are named), site k the k-th ``--data`` file, each read by
the site daemon's own loader under the same schema. Every file is read here
first, so a bad one (a missing column, an undeclared category, a number that
is not one) is refused naming file, row and column before anything is
started; the count of values clipped to the schema's ranges is each site's
to log, so this check does not log it.

Without ``--job`` the federation runs one job, the demo's private selection
(``selected_adaptation``: noisy GD and PNCnvxAdap against the free
source-only and public-constant models, chosen by one private release of
validation errors) at epsilon 1; it classifies, so it needs a label coded
-1/+1 (a two-class label, as ``privadapt schema infer`` codes it). Every job's
result files (``model.npz``, ``privacy_report.json``, ``report.html``, as
``privadapt result`` writes them) go to ``WORKDIR/results/<job file name>/``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from privadapt.common.data.dataset import load_dataset
from privadapt.common.data.dataset import logger as loader_log
from privadapt.common.data.schema import Schema
from privadapt.common.errors import ConfigError

RESULTS_DIR = "results"


@dataclass(frozen=True)
class OwnFiles:
    """The files a simulation runs on: the public source, one file per
    site (site-1, site-2, ... in order) and the schema they share."""

    public: Path
    sites: tuple[Path, ...]
    schema: Path

    @classmethod
    def given(cls, public: Path | None, data: Sequence[Path], schema: Path | None,
              sites: int | None = None, split: str | None = None) -> OwnFiles | None:
        """The files of the command line, or None when none is given (the
        Adult demo); ``ConfigError`` for an incomplete set, or one given
        with the demo's ``--sites`` or ``--split``."""
        if public is None and not data and schema is None:
            return None
        missing = [flag for flag, value in (("--public", public), ("--data", data),
                                            ("--schema", schema)) if not value]
        if missing:
            raise ConfigError(f"simulating on your own files needs --public, --data and "
                              f"--schema; missing {', '.join(missing)}")
        mixed = [flag for flag, value in (("--sites", sites), ("--split", split))
                 if value is not None]
        if mixed:
            raise ConfigError(f"{' and '.join(mixed)} belong to the Adult demo; with --data "
                              f"there is one site per file")
        assert public is not None and schema is not None
        return cls(public.resolve(), tuple(p.resolve() for p in data), schema.resolve())

    def check(self) -> list[str]:
        """Read the schema and every file as its party will; returns the
        summary lines to print. ``PrivadaptError`` naming the file for a
        bad one."""
        schema = Schema.from_toml(self.schema)
        with _clip_counts_unlogged():
            public = load_dataset(self.public, schema)
            counts = [load_dataset(path, schema).num_records for path in self.sites]
        sites = ", ".join(f"site-{k}={path.name} ({n})"
                          for k, (path, n) in enumerate(zip(self.sites, counts, strict=True),
                                                        start=1))
        return [f"Your files, schema {self.schema.name}: public source {self.public.name} "
                f"{public.num_records} records; private data over {len(self.sites)} sites: "
                f"{sites}; d={public.dim}"]

    def check_default_job(self) -> None:
        """The default job classifies: refuse a schema whose label is not
        coded -1/+1, saying to pass a job file."""
        label_map = Schema.from_toml(self.schema).label_map
        if label_map is None or sorted(set(label_map.values())) != [-1.0, 1.0]:
            coded = ("a number (regression)" if label_map is None
                     else f"{len(set(label_map.values()))} classes")
            raise ConfigError(f"{self.schema}: the label is {coded}; the default job is a "
                              f"private selection among classifiers of a label coded -1/+1. "
                              f"Pass --job JOB.toml naming an algorithm and loss for this "
                              f"label (deploy/job.toml is an example)")


def results_dir(workdir: Path, job_file: Path) -> Path:
    """Where a job's result files go: ``WORKDIR/results/<job file name>``."""
    return workdir / RESULTS_DIR / job_file.name.removesuffix(".toml")


@contextmanager
def _clip_counts_unlogged() -> Iterator[None]:
    """Reading the sites' files here only checks them; the count of values
    clipped is each site's own to log (the loader's WARNING), not this
    driver's."""
    previous = loader_log.disabled
    loader_log.disabled = True
    try:
        yield
    finally:
        loader_log.disabled = previous
