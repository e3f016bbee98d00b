"""The one public warning for every path whose result is not covered by the guarantee.

:class:`PrivacyLeakWarning` (diffprivlib's name, also a ``RuntimeWarning``) is
issued whenever dpjax is asked to do something that reads the private data
without paying for it, or to release values without the promised noise: the
paper's column standardization, a norm bound or a label set read off the data,
a noise-free test path, a non-exact noise opt-out. Results produced on such a
path report ``private=False`` wherever a result carries that flag.

Examples:
  >>> import warnings
  >>> from dpjax import leaks
  >>> with warnings.catch_warnings(record=True) as caught:
  ...   warnings.simplefilter("always")
  ...   leaks.warn("the label set was read from y")
  >>> caught[0].category.__name__, str(caught[0].message)
  ('PrivacyLeakWarning', 'the label set was read from y')
"""

from __future__ import annotations

import warnings

__all__ = ["PrivacyLeakWarning", "warn"]


class PrivacyLeakWarning(RuntimeWarning):
  """A value was read from the private data, or released, without the stated protection.

  The run still completes, but its privacy guarantee does not cover what the
  message names; results made this way say ``private=False``.
  """


def warn(message: str, *, stacklevel: int = 2) -> None:
  """Issues :class:`PrivacyLeakWarning` with ``message`` (``stacklevel`` as in ``warnings.warn``)."""
  warnings.warn(message, PrivacyLeakWarning, stacklevel=stacklevel + 1)
