"""The deprecated module paths of dpjax: old names that alias the moved modules.

The modules of the problem and of the mechanisms moved into the packages
:mod:`dpjax.problem` and :mod:`dpjax.mechanisms`. Their old paths still work
and give the *same module object* as the new ones (so ``monkeypatch.setattr``
through either path patches the one module, and pickles that name a class or
function by its old module load), with a :class:`DeprecationWarning` that
names the new path:

* ``import dpjax.noise``, ``importlib.import_module("dpjax.noise")`` and
  loading a pickle that names ``dpjax.noise`` go through :class:`AliasFinder`,
  a :data:`sys.meta_path` finder whose loader returns the already-imported new
  module (``create_module``) and runs nothing (``exec_module``);
* ``dpjax.noise`` and ``from dpjax import noise`` go through the package's
  module-level ``__getattr__`` (:func:`package_getattr`), which imports the
  old path through the finder.

Each path warns at its first use in a process, pointing at the user's line;
afterwards the alias is an entry of :data:`sys.modules` and an attribute of
the package, which Python answers without asking again (as for any module
imported twice).

Deprecated *names* of a module (a name that moved to another module, or an
entry point with a replacement, such as ``dpjax.baselines.run_baseline``) go
through a module-level ``__getattr__`` built by :func:`deprecated_attributes`
(:func:`moved_attributes` for a name that moved), which warns at every read.

Layer 0 (plumbing): the table names modules by strings and imports them with
:func:`importlib.import_module` only when an old path is used.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
import warnings

# Old module path -> new module path.
OLD_MODULES: dict[str, str] = {
    "dpjax.glm": "dpjax.problem.glm",
    "dpjax.losses": "dpjax.problem.losses",
    "dpjax.per_example": "dpjax.problem.per_example",
    "dpjax.spectral": "dpjax.problem.spectral",
    "dpjax.solve": "dpjax.problem.solve",
    "dpjax.minibatch": "dpjax.problem.minibatch",
    "dpjax._neighbouring": "dpjax.problem._neighbouring",
    "dpjax.noise": "dpjax.mechanisms.noise",
    "dpjax.sampling": "dpjax.mechanisms.sampling",
    "dpjax.tree_aggregation": "dpjax.mechanisms.tree_aggregation",
    "dpjax.budget": "dpjax.mechanisms.budget",
    "dpjax.standardize": "dpjax.mechanisms.standardize",
    "dpjax.drivers": "dpjax.training.drivers",
    "dpjax.streaming": "dpjax.training.streaming",
    "dpjax.auto": "dpjax.training.auto",
}

_PACKAGE = "dpjax"
_IMPORTLIB_DIR = os.path.dirname(importlib.__file__)


def message(old: str) -> str:
  """The warning text for the old path ``old``."""
  return (f"{old} is deprecated and will be removed in a future release; "
          f"import {OLD_MODULES[old]}")


def _internal(frame: types.FrameType) -> bool:
  """A frame :func:`warnings.warn` itself skips (the frozen import machinery)."""
  filename = frame.f_code.co_filename
  return "importlib" in filename and "_bootstrap" in filename


def _ours(frame: types.FrameType) -> bool:
  """A frame of this module or of the import system, between the user and the warning."""
  filename = frame.f_code.co_filename
  return (filename == __file__ or _internal(frame)
          or os.path.dirname(filename) == _IMPORTLIB_DIR)


def _warn(text: str) -> None:
  """Issues the :class:`DeprecationWarning` ``text``, attributed to the user's line.

  The stack level counts the frames the way :func:`warnings.warn` walks them
  (skipping the frozen import machinery), up to the first frame that is
  neither this module nor :mod:`importlib`: the user's ``import`` statement,
  attribute access, ``importlib.import_module`` call or ``pickle.loads``.
  """
  frame = sys._getframe(0)  # pylint: disable=protected-access
  level = 1
  while frame is not None and _ours(frame):
    frame = frame.f_back
    while frame is not None and _internal(frame):
      frame = frame.f_back
    level += 1
  warnings.warn(text, DeprecationWarning, stacklevel=level)


class AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Finds the old module paths and loads each as its new module (the same object)."""

  def __init__(self):
    self._specs = {}  # old path -> the new module's own spec, while the alias is loading

  def find_spec(self, fullname, path=None, target=None):  # pylint: disable=unused-argument
    if fullname not in OLD_MODULES:
      return None
    return importlib.machinery.ModuleSpec(fullname, self)

  def create_module(self, spec):
    module = importlib.import_module(OLD_MODULES[spec.name])
    # The import system overwrites ``__spec__`` of what we return; exec_module puts it back.
    self._specs[spec.name] = module.__spec__
    _warn(message(spec.name))
    return module

  def exec_module(self, module):
    """Runs nothing: the module was executed under its new name."""
    alias = module.__spec__.name
    if alias in self._specs:
      module.__spec__ = self._specs.pop(alias)


def install() -> None:
  """Puts one :class:`AliasFinder` first on :data:`sys.meta_path` (idempotent)."""
  if not any(type(f).__name__ == "AliasFinder" and type(f).__module__ == __name__
             for f in sys.meta_path):
    sys.meta_path.insert(0, AliasFinder())


def package_getattr(name: str):
  """``dpjax.__getattr__``: ``dpjax.noise`` (and ``from dpjax import noise``) -> the new module."""
  old = f"{_PACKAGE}.{name}"
  if old in OLD_MODULES:
    # Through the finder (which warns once): the import then sets the alias as
    # an attribute of the package, so ``from dpjax import noise`` warns once.
    return importlib.import_module(old)
  raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}")


def deprecated_attributes(module: str, deprecated: dict[str, tuple[str, str]]):
  """A module ``__getattr__`` for deprecated attribute names (the optax pattern).

  ``deprecated`` maps each deprecated attribute of ``module`` to ``(source,
  instead)``: the module that defines the object, and the advice the warning
  ends with. Reading the attribute (also by ``from module import name``)
  warns (:class:`DeprecationWarning`, attributed to the reader's line) and
  returns the object; ``source`` is imported by name when the attribute is
  read, so an import that would point up the layers is never made at import
  time. The name is never cached on the module, so every read warns.
  """

  def __getattr__(name: str):  # pylint: disable=invalid-name
    if name in deprecated:
      source, instead = deprecated[name]
      _warn(f"{module}.{name} is deprecated and will be removed in a future release; {instead}")
      return getattr(importlib.import_module(source), name)
    raise AttributeError(f"module {module!r} has no attribute {name!r}")

  return __getattr__


def moved_attributes(module: str, moved: dict[str, str]):
  """A module ``__getattr__`` for names that moved to another module.

  ``moved`` maps each old attribute of ``module`` to the module that now
  defines it; reading the old attribute warns with ``use <new module>.<name>``
  and returns the new object (:func:`deprecated_attributes`).
  """
  return deprecated_attributes(
      module, {name: (new, f"use {new}.{name}") for name, new in moved.items()})
