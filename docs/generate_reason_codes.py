"""Regenerate the catalogue part of docs/reason-codes.md from the reason catalogue.

Run from the repository root after adding or changing a reason code:

    python docs/generate_reason_codes.py

Only the lines between the two generated-catalogue markers change; the hand-written text
around them stays. tests/core/test_reason_catalogue.py fails while the page is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reason-codes.md"


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from pipeline.jobs.reasons import with_catalogue

    PAGE.write_text(with_catalogue(PAGE.read_text("utf-8")), "utf-8")


if __name__ == "__main__":
    main()
