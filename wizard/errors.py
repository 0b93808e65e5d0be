"""The one error type a user sees: what is wrong and how to fix it. The CLI prints it and exits non-zero."""

from __future__ import annotations


class DswizError(Exception):
    """A problem the user can fix. ``problem`` names it, ``fix`` says exactly what to do.

    Raised anywhere in dswiz for bad input (a file, a flag, a hostfile); the CLI turns it into a two-line
    message and exit code ``exit_code`` -- never a traceback.
    """

    def __init__(self, problem: str, fix: str | None = None, *, exit_code: int = 2) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.problem if not self.fix else f"{self.problem}\n  fix: {self.fix}"


def quoted(value: object, limit: int = 60) -> str:
    """A value as a problem quotes it: its repr, cut to ``limit`` characters (a 5,000-digit number or a whole
    list stays one readable line)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# The most of a file the user names that dswiz reads (a DeepSpeed JSON, a YAML, a hostfile, a profile, a model's
# config.json are a few KiB): a bigger file is not one of them, and a device or pipe that never ends (/dev/zero) is
# read no further than this.
MAX_USER_FILE_BYTES = 16 * 1024 * 1024


def read_user_text(path: object, kind: str, fix: str, *, limit: int = MAX_USER_FILE_BYTES) -> str:
    """The text of a file the user named (``kind``: what it should be, "a hardware profile"), or a DswizError that
    says why it cannot be read -- missing, a directory, larger than ``limit`` bytes (or endless: /dev/zero), not
    UTF-8 text (a binary file), unreadable -- with ``fix``."""
    from pathlib import Path

    p = Path(str(path))
    try:
        with p.open("rb") as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            problem = f"{p} is larger than {limit // (1024 * 1024)} MiB (or does not end), so not {kind}"
        else:
            # as text mode reads it: universal newlines
            return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except FileNotFoundError:
        problem = f"{p} does not exist"
    except IsADirectoryError:
        problem = f"{p} is a directory, not {kind}"
    except UnicodeDecodeError as e:
        problem = f"{p} is not a UTF-8 text file (byte {e.start:,} cannot be decoded), so not {kind}"
    except OSError as e:
        problem = f"cannot read {p}: {e.strerror or e}"
    raise DswizError(problem, fix)
