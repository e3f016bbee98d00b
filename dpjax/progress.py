"""A dependency-free progress bar for long command-line runs and benchmarks.

``desc [#####.......] k/total  elapsed  label`` on stderr. On a terminal the
line is redrawn in place; otherwise (logs, CI, notebooks' captured stderr)
one line is written per item, so a log shows how far a run got.

The command line (``python -m dpjax demo``, ``python -m dpjax fit``) and every
script under ``benchmarks/`` use it. It costs nothing inside compiled code: it
is only ever updated on the host, between compiled calls.

Examples:
  >>> import io
  >>> from dpjax import progress
  >>> out = io.StringIO()
  >>> [x * x for x in progress.progress([1, 2, 3], desc="squares", stream=out)]
  [1, 4, 9]
  >>> print(out.getvalue().splitlines()[-1][:47])
  squares [############################] 3/3    ...
"""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable, Iterator, TextIO

__all__ = ["ProgressBar", "progress"]


class ProgressBar:
  """``desc [#####.....] k/total elapsed label`` on ``stream`` (default stderr).

  ``update(label)`` announces the next item and counts the previous one as
  done; ``close()`` draws the finished bar.

  Args:
    total: the number of items (at least 1 is assumed).
    desc: text before the bar.
    stream: a text stream; default ``sys.stderr``.
    only_tty: draw nothing unless ``stream`` is a terminal (for a command
      whose non-interactive output, e.g. a one-line error, must stay clean).

  Examples:
    >>> import io
    >>> out = io.StringIO()
    >>> bar = ProgressBar(2, "fit", stream=out)
    >>> bar.update("compile"); bar.update("run"); bar.close()
    >>> [line.split("]")[1].split()[0] for line in out.getvalue().splitlines()]
    ['0/2', '1/2', '2/2']
  """

  width = 28

  def __init__(self, total: int, desc: str = "", stream: TextIO | None = None,
               only_tty: bool = False):
    self.total, self.desc, self.k = max(int(total), 1), desc, 0
    self.stream = stream or sys.stderr
    isatty = getattr(self.stream, "isatty", None)
    self.tty = bool(isatty and isatty())
    self.enabled = self.tty or not only_tty
    self.t0 = time.perf_counter()

  def _draw(self, label: str) -> None:
    if not self.enabled:
      return
    filled = int(self.width * min(self.k, self.total) / self.total)
    line = (f"{self.desc} [{'#' * filled}{'.' * (self.width - filled)}] {self.k}/{self.total} "
            f"{time.perf_counter() - self.t0:6.1f}s {label}")
    self.stream.write(("\r" + line[:150].ljust(150)) if self.tty else line + "\n")
    self.stream.flush()

  def update(self, label: str = "") -> None:
    """Announces the next item (``label``) and counts the previous one as done."""
    self._draw(str(label)[:60])
    self.k += 1

  def close(self) -> None:
    """Counts the last item as done and draws the finished bar."""
    self.k = max(self.k, self.total)
    self._draw("done")
    self.end_line()

  def end_line(self) -> None:
    """Ends a bar redrawn in place, so that what is written next starts a line."""
    if self.enabled and self.tty:
      self.stream.write("\n")
      self.stream.flush()


def progress(items: Iterable[Any], total: int | None = None, desc: str = "",
             stream: TextIO | None = None) -> Iterator[Any]:
  """Yields ``items`` while drawing a :class:`ProgressBar` labelled with each item.

  Args:
    items: what to iterate over; materialised with ``list`` unless ``total``
      is given.
    total: the number of items, for an iterator of known length.
    desc: text before the bar.
    stream: a text stream; default ``sys.stderr``.
  """
  items = list(items) if total is None else items
  bar = ProgressBar(len(items) if total is None else total, desc, stream)
  for item in items:
    bar.update(str(item))
    yield item
  bar.close()
