"""Where the repository's own files are, for tests that read them (deploy/
examples, the README, experiments/, proto/): one root, so a test file can move
between folders without counting parents."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEPLOY_DIR = REPO_ROOT / "deploy"
