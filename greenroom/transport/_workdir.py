"""Validating a session's working directory (runs in a worker thread: it touches the disk)."""

from __future__ import annotations

import os
from pathlib import Path

from greenroom.errors import GreenroomError, InvalidWorkingDir


def validate_working_dir(value: str, root: str | None) -> str:
    """The directory to store for ``value``, or InvalidWorkingDir saying why not.

    No ``..`` anywhere; made absolute; with a configured root, symlinks of both are resolved
    and the path must be the root or inside it (by components, not string prefix); it must
    exist and be a directory.
    """
    text = value.strip()
    if ".." in text:
        raise InvalidWorkingDir(
            f"invalid working directory {value!r}: '..' is not allowed", path="$.working_dir"
        )
    if "\x00" in text:
        raise InvalidWorkingDir(
            f"invalid working directory {value!r}: NUL character", path="$.working_dir"
        )
    try:
        return _checked(value, text, root)
    except OSError as exc:  # a name too long, a component that is a file, no permission, ...
        raise InvalidWorkingDir(
            f"invalid working directory {value!r}: {exc.strerror or exc}", path="$.working_dir"
        ) from None


def _checked(value: str, text: str, root: str | None) -> str:
    path = Path(os.path.abspath(text))
    if root is not None:
        if not root.strip():
            raise GreenroomError("the configured working-directory root is blank")
        resolved_root = Path(root.strip()).resolve()
        path = path.resolve()
        if path != resolved_root and resolved_root not in path.parents:
            raise InvalidWorkingDir(
                f"invalid working directory {value!r}: outside {resolved_root}",
                path="$.working_dir",
            )
    if not path.is_dir():
        raise InvalidWorkingDir(
            f"invalid working directory {value!r}: not an existing directory", path="$.working_dir"
        )
    return str(path)
