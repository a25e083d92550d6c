"""Make the repository root importable, so ``experiments`` (not an installed
package) imports as ``experiments.baselines`` / ``experiments.seed000``."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
