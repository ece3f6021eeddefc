"""Regenerate the baseline images of tests/test_draw.py.

Run from the repository root, after a change to the pictures that you meant to make:

    make baselines                            # every case
    make baselines CASES="reduce ring_all_reduce"   # only the cases named

Then open every PNG you changed in tests/baseline_images/ and check it before committing it:
the image tests only prove that the pictures did not change, not that they are right.
"""

from __future__ import annotations

import sys

import test_draw


def main(names: list[str]) -> None:
    unknown = sorted(set(names) - set(test_draw.CASES))
    if unknown:
        sys.exit(f"unknown case(s): {', '.join(unknown)}; known: {', '.join(test_draw.CASES)}")
    test_draw.BASELINES.mkdir(exist_ok=True)
    for name in names or test_draw.CASES:
        path = test_draw.BASELINES / f"{name}.png"
        test_draw.save_case(name, path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
