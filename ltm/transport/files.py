"""Durable, private file operations shared by the actors (server store, party journal and ledger,
analyst state).

Everything an actor keeps on disk can hold shares, seeds or a privacy ledger, so it is private by
file mode: directories 0700, files 0600, whatever the process umask is. Use these helpers instead
of ``Path.mkdir``/``Path.write_text`` for actor state:

- :func:`private_dir` creates (or tightens) a directory to 0700;
- :func:`write_private` atomically replaces a file with 0600 content (temp file + fsync + rename
  + directory fsync), so a crash leaves either the old or the new content;
- :func:`create_private` creates a new 0600 file exclusively (refuses to overwrite), durably;
- :func:`touch_private` creates an empty 0600 file (e.g. before SQLite opens it: SQLite gives its
  ``-wal``/``-shm`` files the database file's mode);
- :func:`mode_problems` lists files/directories under a tree that are readable by others (for
  offline checks and tests).
"""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def fsync_dir(path: Path) -> None:
    """fsync a directory, so a file created or renamed in it survives a crash (POSIX)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def shared_dir_problem(path: str | os.PathLike[str]) -> str | None:
    """Why an EXISTING directory (or the one a symlink points to) is not this user's own to make
    private: another owner, or group- or world-writable (``/tmp``: mode 1777).  Tightening
    such a directory to 0700 would break everyone else who uses it; None when it is this user's own
    (or does not exist yet)."""
    p = Path(path)
    try:
        st = p.stat()  # follows a symlink: the directory it points to is what would be changed
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    mode = stat.S_IMODE(st.st_mode)
    shown = f"{str(p)!r}" + (f" (a link to {str(p.resolve())!r})" if p.is_symlink() else "")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{shown} belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})"
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{shown} is a shared directory (mode {mode:04o})"
    return None


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and missing parents, which are created 0700 too) as a 0700 directory, or
    tighten an existing one to 0700. Returns the path. Raises ``OSError`` as ``mkdir`` does
    (e.g. ``NotADirectoryError`` when a file is in the way)."""
    p = Path(path)
    missing = []
    q = p
    while not q.exists():
        missing.append(q)
        if q.parent == q:
            break
        q = q.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            pass
        os.chmod(d, PRIVATE_DIR_MODE)  # mkdir's mode is masked by the umask
        fsync_dir(d.parent)
    if not p.is_dir():
        raise NotADirectoryError(f"{str(p)!r} exists and is not a directory")
    if stat.S_IMODE(p.stat().st_mode) != PRIVATE_DIR_MODE:
        os.chmod(p, PRIVATE_DIR_MODE)
    return p


def _write_tmp(directory: Path, name: str, data: bytes) -> Path:
    tmp = directory / f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)  # O_CREAT's mode is masked by the umask too
        with os.fdopen(fd, "wb", closefd=True) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_private(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Atomically and durably replace ``path`` with ``data`` (str is UTF-8 encoded), mode 0600.

    A crash at any point leaves either the previous content or the new one, never a mix. The
    parent directory must exist (create it with :func:`private_dir`)."""
    p = Path(path)
    payload = data.encode() if isinstance(data, str) else bytes(data)
    tmp = _write_tmp(p.parent, p.name, payload)
    try:
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(p.parent)
    return p


def create_private(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Durably create a NEW file ``path`` holding ``data``, mode 0600; ``FileExistsError`` if it
    exists (the content is complete before the name appears: temp file + ``link``)."""
    p = Path(path)
    payload = data.encode() if isinstance(data, str) else bytes(data)
    tmp = _write_tmp(p.parent, p.name, payload)
    try:
        os.link(tmp, p)  # atomic and exclusive: fails if p exists
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(p.parent)
    return p


def touch_private(path: str | os.PathLike[str]) -> Path:
    """Make sure ``path`` exists as a 0600 file (created empty if missing; an existing file keeps
    its content and is tightened to 0600)."""
    p = Path(path)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)
    return p


def mode_problems(root: str | os.PathLike[str]) -> list[str]:
    """Paths under ``root`` (itself included) that group or others may access: directories not
    0700, regular files with any group/other bit. Symlinks are reported too (state never needs
    them). Empty list = private."""
    out: list[str] = []
    r = Path(root)
    for p in [r, *sorted(r.rglob("*"))]:
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            out.append(f"{p}: symbolic link")
        elif stat.S_IMODE(st.st_mode) & 0o077:
            out.append(f"{p}: mode {stat.S_IMODE(st.st_mode):04o}")
    return out
