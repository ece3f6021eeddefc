"""Regenerate the baseline images of tests/support/drawing_cases.py.

Run from the repository root, after a change to the pictures that you meant to make:

    make baselines                            # every case
    make baselines CASES="reduce ring_all_reduce"   # only the cases named

Then open every PNG you changed in tests/baseline_images/ and check it before committing it:
the image tests only prove that the pictures did not change, not that they are right.
"""

from __future__ import annotations

import sys

from support import drawing_cases


def main(names: list[str]) -> None:
    unknown = sorted(set(names) - set(drawing_cases.CASES))
    if unknown:
        sys.exit(f"unknown case(s): {', '.join(unknown)}; known: {', '.join(drawing_cases.CASES)}")
    drawing_cases.BASELINES.mkdir(exist_ok=True)
    for name in names or drawing_cases.CASES:
        path = drawing_cases.BASELINES / f"{name}.png"
        drawing_cases.save_case(name, path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
