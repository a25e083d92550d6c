"""Make the repository root importable, so ``experiments`` (not an installed
package) imports as ``experiments.baselines`` / ``experiments.seed000``."""

import sys

from tests.paths import REPO_ROOT

ROOT = str(REPO_ROOT)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
