"""Files the commands write: complete or absent, never half-written."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from types import TracebackType
from typing import TextIO


class AtomicFile:
    """A text file written under a temporary name and renamed into place on success.

    Used as a context manager: the file appears at `path` (replacing any old one) only when the
    block ends without an exception and without `abandon()`; otherwise the temporary file is
    deleted and whatever was at `path` before is untouched. The temporary file lives in the same
    directory (a rename across file systems would not be atomic) and is flushed to disk before
    the rename, so a crash leaves the old file or the complete new one.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        self._file: TextIO | None = None
        self._abandoned = False

    def __enter__(self) -> TextIO:
        # O_EXCL: never write through a file or link someone else put there. Mode 0o666 lets
        # the umask decide the permissions, as for any file a command creates.
        descriptor = os.open(self._temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            self._file = open(descriptor, "w", encoding="utf-8", newline="")
        except BaseException:
            os.close(descriptor)
            self._temporary.unlink(missing_ok=True)
            raise
        return self._file

    def abandon(self) -> None:
        """Discard what was written: the block's end removes the temporary file."""
        self._abandoned = True

    def __exit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._file is not None
        try:
            if error_type is None and not self._abandoned:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()
                os.replace(self._temporary, self.path)
                return
        except BaseException:
            self._discard()
            raise
        self._discard()

    def _discard(self) -> None:
        assert self._file is not None
        with contextlib.suppress(OSError):
            self._file.close()
        self._temporary.unlink(missing_ok=True)
