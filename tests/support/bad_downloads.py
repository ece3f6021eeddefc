"""An LMS download with a member of each kind that must not stop a class being read or graded
(grader.intake.downloads): the test of the intake and the test of a whole grading run share it."""

from __future__ import annotations

import zipfile
from pathlib import Path

import nbformat

from grader.intake import downloads

NOTEBOOK = nbformat.writes(nbformat.v4.new_notebook())


def bad_members_zip(path: Path, honest: dict[str, str]) -> Path:
    """A Canvas download with ``honest`` files and a member of each kind that must not stop the
    class being read: a name clash, a link, a path out of the folder, an oversize file, a member
    whose data is damaged."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in honest.items():
            archive.writestr(name, content)
        archive.writestr("clash_6001_9100_x", "a file where a folder is needed")
        archive.writestr("clash_6001_9100_x/01_broadcast.ipynb", NOTEBOOK)
        link = zipfile.ZipInfo("linker_6002_9101_01_broadcast.ipynb")
        link.external_attr = (0o120777 << 16)  # a symbolic link, as zip -y stores one
        archive.writestr(link, "/etc/shadow")
        archive.writestr("../traversal_6003_9102_01_broadcast.ipynb", NOTEBOOK)
        big = zipfile.ZipInfo("hoarder_6004_9103_01_broadcast.ipynb")
        archive.writestr(big, b" " * (downloads.MAX_FILE_BYTES + 1),
                         compress_type=zipfile.ZIP_DEFLATED)
        archive.writestr("damaged_6005_9104_01_broadcast.ipynb", NOTEBOOK)
    data = bytearray(path.read_bytes())
    # the damaged member's data: its stored bytes flipped after the local header
    start = data.index(b"damaged_6005_9104_01_broadcast.ipynb") + 36
    data[start:start + 20] = bytes(b ^ 0xFF for b in data[start:start + 20])
    path.write_bytes(bytes(data))
    return path


BAD_MEMBERS = {
    "clash_6001_9100_x/01_broadcast.ipynb": "its folder clash_6001_9100_x is also a file",
    "linker_6002_9101_01_broadcast.ipynb": "a link, not a file",
    "../traversal_6003_9102_01_broadcast.ipynb": "would escape the folder",
    "hoarder_6004_9103_01_broadcast.ipynb": "larger than the 50 MB a notebook may be",
    "damaged_6005_9104_01_broadcast.ipynb": "damaged in the zip",
}
