"""Checkpoint integrity: a SHA-256 of every file, written at save time and checked before a resume loads it.

A checkpoint folder is written under a temporary name and renamed into place, so a crash never leaves a half
folder under the real name; the checksums catch what the rename cannot: a file damaged or truncated later (a full
disk, a copy gone wrong, a bad sector). ``optimizer.pt`` may be missing — older checkpoints keep only their
weights (the loop prunes the optimizer state) — but a file that is present must match.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

CHECKSUMS = "checksums.json"
OPTIONAL = {"optimizer.pt"}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(folder: Path) -> None:
    """Record the SHA-256 of every file in ``folder`` (call before the folder is renamed into place)."""
    folder = Path(folder)
    sums = {
        p.relative_to(folder).as_posix(): _sha256(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != CHECKSUMS
    }
    (folder / CHECKSUMS).write_text(json.dumps(sums, indent=1))


def checkpoint_problem(folder: Path) -> str | None:
    """Why ``folder`` is not an intact checkpoint, in a few words, or None.

    A folder from before checksums were written is accepted when its ``config.json`` is there."""
    folder = Path(folder)
    if not folder.is_dir():
        return "folder missing"
    listing = folder / CHECKSUMS
    if not listing.is_file():
        return (
            None
            if (folder / "config.json").is_file() or (folder / "adapter_config.json").is_file()
            else "no model files"
        )
    try:
        sums = json.loads(listing.read_text())
        assert isinstance(sums, dict)
    except (ValueError, AssertionError, OSError):
        return f"{CHECKSUMS} unreadable"
    for name, expected in sums.items():
        path = folder / name
        if not path.is_file():
            if name in OPTIONAL:
                continue
            return f"{name} missing"
        if _sha256(path) != expected:
            return f"{name} does not match its checksum"
    return None


# what torch's and safetensors' writers raise when a write fails (a full disk, a file-size limit): not an OSError
_WRITER_FAILURES = ("inline_container", "PytorchStreamWriter", "file write failed", "Error while serializing")


def write_failure(path: Path, err: BaseException) -> OSError | None:
    """``err``, raised while writing the checkpoint ``path``, as the OSError it stands for (so the command line says
    it in one line, naming the path and the cause); None if it is no write failure. torch's ``RuntimeError``
    ("enforce fail at inline_container.cc") and safetensors' ``SafetensorError`` ("I/O error: ... (os error 28)")
    carry the system's error number at most in their text."""
    import errno
    import os
    import re
    import shutil

    if isinstance(err, OSError):
        return err
    if not isinstance(err, RuntimeError) and type(err).__name__ != "SafetensorError":
        return None
    text = (str(err).strip() or type(err).__name__).splitlines()[0]
    if not any(mark in text for mark in _WRITER_FAILURES):
        return None
    found = re.search(r"os error (\d+)", text)
    if found:
        code = int(found.group(1))
    else:
        try:
            code = errno.ENOSPC if shutil.disk_usage(path.parent).free < 2**20 else errno.EIO
        except OSError:
            code = errno.EIO
    return OSError(code, f"{os.strerror(code)} ({type(err).__name__}: {text[:160]})", str(path))
