"""The command's progress: bars on a terminal, plain lines elsewhere.

A bar redraws itself with carriage returns and cursor escapes, which a redirected log keeps as
noise (one line of a log holding hundreds of redraws). When standard error is not a terminal,
a stage says a plain line when it starts, at each quarter of its work and when it ends.
"""

from __future__ import annotations

import sys
from typing import Never, TextIO

from tqdm import tqdm

QUARTERS = 4


def on_terminal(stream: TextIO | None = None) -> bool:
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


def _amount(value: int, unit: str) -> str:
    if unit != "bytes":
        return f"{value:,}"
    return size_text(value)


def size_text(value: int) -> str:
    """Bytes as the commands print them (binary units)."""
    size = float(value)
    for name in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or name == "GiB":
            return f"{size:.0f} {name}" if name == "B" else f"{size:.1f} {name}"
        size /= 1024
    return f"{value} B"  # pragma: no cover - the loop returns


class Bar:
    """One stage's progress: `show(done, total, message)` as work goes, `close()` at its end."""

    def __init__(self, desc: str, unit: str = "", *, quiet: bool = False, leave: bool = True) -> None:
        self.desc = desc
        self.unit = unit
        self.quiet = quiet
        self.terminal = on_terminal()
        self._bar: tqdm[Never] | None = None
        self._said = -1  # the last quarter said (plain lines)
        self._message = ""
        self._last = (0, 0)
        if self.terminal and not quiet:
            scaled = unit == "bytes"
            self._bar = tqdm(
                total=None,
                desc=desc,
                unit="B" if scaled else "it",
                unit_scale=scaled,
                unit_divisor=1024,
                leave=leave,
            )

    def show(self, done: int, total: int, message: str = "") -> None:
        self._last = (done, total)
        if self._bar is not None:
            if total and self._bar.total != total:
                self._bar.reset(total=total)
            self._bar.n = done
            self._bar.set_postfix_str(message[-70:], refresh=True)
            return
        if self.quiet:
            return
        quarter = done * QUARTERS // total if total else 0
        head = message.split(":", 1)[0]
        if quarter > self._said or head != self._message:
            self._said, self._message = quarter, head
            self._line(done, total, message)

    def _line(self, done: int, total: int, message: str) -> None:
        amount = _amount(done, self.unit) + (f" of {_amount(total, self.unit)}" if total else "")
        percent = f" ({100 * done // total}%)" if total else ""
        words = f": {message}" if message else ""
        print(f"{self.desc}{words} [{amount}{percent}]", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            return
        done, total = self._last
        if not self.quiet and total and done >= total and self._said < QUARTERS:
            self._said = QUARTERS
            self._line(done, total, self._message)


def write(line: str, stream: TextIO | None = None) -> None:
    """A line of output that does not break a bar drawn on the terminal."""
    tqdm.write(line, file=stream if stream is not None else sys.stdout)
