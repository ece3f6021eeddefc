"""Fill a student's workspace from the course's release: copy what the workspace lacks, never
overwrite what is there.

    python helpers/scripts/workspace.py notebooks work   # `make lab` runs this, then opens Lab

Students work in ``work/`` (ignored by git, never read by the tests), so pulling course fixes
into ``notebooks/`` never conflicts with their answers. A chapter added to the release later is
copied on the next start; a notebook the student deleted comes back fresh.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

# Jupyter's and Python's scratch files are not part of the release.
SKIPPED = {".ipynb_checkpoints", "__pycache__"}


def release_files(release: Path) -> list[Path]:
    """Every file of the release, relative to it, in a stable order."""
    files = []
    for folder, subfolders, names in os.walk(release):
        subfolders[:] = sorted(d for d in subfolders if d not in SKIPPED)
        files += [Path(folder, name).relative_to(release) for name in sorted(names)]
    return files


def fill(release: Path, work: Path) -> list[Path]:
    """Copy each file of ``release`` that ``work`` does not have; return the ones copied."""
    copied = []
    for relative in release_files(release):
        target = work / relative
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        # content only: a read-only release must not give the student a read-only notebook
        shutil.copyfile(release / relative, target)
        copied.append(relative)
    return copied


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python helpers/scripts/workspace.py RELEASE WORK   (e.g. notebooks work)")
        return 2
    release, work = Path(argv[0]), Path(argv[1])
    try:
        copied = fill(release, work)
    except PermissionError as error:
        print(f"Cannot write your workspace {work}/: {error.strerror} ({error.filename}).\n"
              f"It belongs to uid {work.stat().st_uid}; you are uid {os.getuid()}. In Docker, "
              "build the image with --build-arg UID=$(id -u) --build-arg GID=$(id -g), or "
              "mount a folder you own.")
        return 1
    chapters = sorted({p.parts[0] for p in copied if len(p.parts) > 1})
    if copied:
        print(f"{work}/: copied {len(copied)} files from {release}/ "
              f"({', '.join(chapters) or 'top level'}); your own files are never overwritten")
    else:
        print(f"{work}/: up to date with {release}/; your files were left as they are")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
