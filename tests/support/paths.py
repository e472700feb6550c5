"""Where the tests find the repository and the shared data (which tests that need it skip without)."""

from __future__ import annotations

import os
from pathlib import Path

#: the repository's root
REPO = Path(__file__).resolve().parents[2]
#: the real corpora beside the repository (``$PYRO_ATTENTION_DATA`` wins)
SHARED_DATA = Path(os.environ.get("PYRO_ATTENTION_DATA", REPO.parent / "shared" / "data"))
