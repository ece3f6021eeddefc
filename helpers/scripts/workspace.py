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


def cannot_write(work: Path, error: PermissionError) -> str:
    """What to do when ``work`` cannot be written: most often, in a container, the image's user
    is not the owner of the host folder mounted there."""
    return (f"Cannot write your workspace {work}/: {error.strerror} ({error.filename}).\n"
            f"{_owner(Path(error.filename or work))}you are uid {os.getuid()}.\n"
            "- In a container: build the image as yourself, docker build --build-arg "
            'UID="$(id -u)" --build-arg GID="$(id -g)" ...; with rootless podman, where the '
            "folder you mount belongs to root inside the container, start it with "
            "podman run --userns=keep-id ...\n"
            "- Or use a folder you own: make lab WORK=<folder>, or docker run -v "
            "<folder>:/home/jovyan/work ...")


def _owner(blocked: Path) -> str:
    """Whose is the nearest folder above ``blocked`` that can be looked at: "F belongs to uid
    N; " (nothing when none can)."""
    for folder in blocked.absolute().parents:
        try:
            return f"{folder} belongs to uid {folder.stat().st_uid}; "
        except OSError:
            continue
    return ""


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python helpers/scripts/workspace.py RELEASE WORK   (e.g. notebooks work)")
        return 2
    release, work = Path(argv[0]), Path(argv[1])
    try:
        copied = fill(release, work)
    except PermissionError as error:
        print(cannot_write(work, error))
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
