"""One compiled program per static configuration of a run, shared by every call that needs it.

Every whole-run entry point (:func:`dpjax.fit`, :func:`dpjax.fit_levels`, the
drivers, the streaming runs, the baselines) builds its run as a fresh Python
closure and ``jax.jit`` s it. A fresh closure is a new function to JAX, so two
calls with identical settings would trace and compile twice (about a second
each on a CPU, most of a short run's time). :func:`compile_and_time` keeps the
compiled executable under a key made of

* the caller's description of everything the closure closes over (the
  algorithm, its options and budget as Python values; see :func:`freeze`), and
* the abstract signature of the arguments: the tree structure and, for each
  leaf, its shape, dtype, weak type and sharding, plus the JAX settings that
  change what a trace produces (``jax_enable_x64``, the default matmul
  precision, the dtype-promotion mode) and the library's own trace-time
  settings (:func:`add_trace_setting`: the audit's noise-scale injection),

so a second call with the same key runs the executable compiled by the first
and reports ``seconds_compile = 0``. Calls whose description holds an
unhashable value (a traced array, an object without a hash) are compiled
afresh, as before. At most :data:`MAX_PROGRAMS` executables are kept, least
recently used first out.

Code that changes what a trace would produce without changing the key (a test
that replaces a library function with ``monkeypatch``) must call
:func:`clear` first, as it would call ``jax.clear_caches()`` for JAX's own
caches (JAX has no hook to chain the two, so the library's callers of
``jax.clear_caches`` call both).

Examples:
  >>> import jax, jax.numpy as jnp
  >>> from dpjax import compiled
  >>> compiled.clear()
  >>> run = jax.jit(lambda a: a * 2.0)
  >>> out, first, _ = compiled.compile_and_time(run, (jnp.ones(3),), 1, key=("double",))
  >>> out, again, _ = compiled.compile_and_time(run, (jnp.zeros(3),), 1, key=("double",))
  >>> first > 0.0, again, out.tolist()
  (True, 0.0, [0.0, 0.0, 0.0])
"""

from __future__ import annotations

import collections
import math
import numbers
import time
from typing import Any, Callable, Hashable

import jax
import numpy as np

MAX_PROGRAMS = 64  # executables kept; each holds its compiled code only (data are arguments).

_PROGRAMS: collections.OrderedDict = collections.OrderedDict()
_ARRAY_BYTES = 1 << 16  # concrete array options up to this size enter a key by value.


class Unhashable(TypeError):
  """A value that cannot enter a key (the call then compiles afresh)."""


def freeze(value: Any) -> Hashable:
  """A hashable description of a Python value a run's closure closes over.

  Numbers keep their type (``1`` and ``1.0`` trace differently: weak int vs
  weak float), containers are frozen element by element, concrete NumPy/JAX
  arrays up to 64 KiB by dtype, shape and bytes, and any other hashable object
  (a string, a function, an enum) by itself; the key then holds a reference
  to it, so its identity cannot be reused while the entry lives.

  Raises:
    Unhashable: for a traced array, a large array or an unhashable object.
  """
  if value is None or isinstance(value, (bool, str, bytes)):
    return (type(value).__name__, value)
  if isinstance(value, np.generic):
    return ("np", value.dtype.str, value.item())
  if isinstance(value, numbers.Number) and not isinstance(value, (np.ndarray, jax.Array)):
    if isinstance(value, float) and math.isnan(value):
      return (type(value).__name__, "nan")
    return (type(value).__name__, value)
  if isinstance(value, (tuple, list)):
    return (type(value).__name__, tuple(freeze(v) for v in value))
  if isinstance(value, dict):
    return ("dict", tuple(sorted((str(k), freeze(v)) for k, v in value.items())))
  if isinstance(value, (np.ndarray, jax.Array)):
    if isinstance(value, jax.core.Tracer) or value.nbytes > _ARRAY_BYTES:
      raise Unhashable("a traced or large array")
    host = np.asarray(value)
    return ("array", type(value).__name__, host.dtype.str, host.shape, host.tobytes(),
            getattr(value, "weak_type", False))
  try:
    hash(value)
  except TypeError as e:
    raise Unhashable(str(e)) from None
  return ("object", value)


def _leaf_signature(leaf: Any) -> Hashable:
  if isinstance(leaf, jax.Array):
    return ("jax", leaf.shape, leaf.dtype, getattr(leaf, "weak_type", False), leaf.sharding)
  if isinstance(leaf, np.ndarray):
    return ("np", leaf.shape, leaf.dtype)
  return ("py", freeze(leaf))


_TRACE_SETTINGS: dict[str, Callable[[], Hashable]] = {}


def add_trace_setting(name: str, read: Callable[[], Hashable]) -> None:
  """Makes ``read()`` part of every key: a library setting read at trace time.

  For a module-level switch that changes what a trace produces (the audit's
  noise-scale injection, :func:`dpjax.mechanisms.noise.broken_noise_for_audit`): a
  program traced under one value is never served under another.
  """
  _TRACE_SETTINGS[name] = read


def signature(args: tuple) -> Hashable:
  """The abstract signature of ``args`` and the trace-time settings a compiled program depends on."""
  leaves, tree = jax.tree.flatten(args)
  return (tree, tuple(_leaf_signature(leaf) for leaf in leaves),
          bool(jax.config.jax_enable_x64), str(jax.config.jax_default_matmul_precision),
          str(jax.config.jax_numpy_dtype_promotion),
          tuple((name, read()) for name, read in sorted(_TRACE_SETTINGS.items())))


def _lookup_key(key: Any, args: tuple) -> Hashable | None:
  if key is None:
    return None
  try:
    full = (freeze(key), signature(args))
    hash(full)
  except (Unhashable, TypeError):
    return None
  return full


def compile_and_time(fn: Callable, args: tuple, timing_runs: int, *,
                     key: Any = None) -> tuple[Any, float, float]:
  """``(outputs, seconds_compile, seconds_run)`` of a jitted ``fn`` on ``args``.

  Lowering + compilation is timed apart from the runs; ``seconds_run`` is the
  fastest of ``timing_runs`` executions, each until its results are ready.
  With a ``key`` (a description of everything ``fn`` closes over, see the
  module docstring), the executable is taken from, or added to, the shared
  cache; a cache hit reports ``seconds_compile = 0.0``.
  """
  full = _lookup_key(key, args)
  compiled = _PROGRAMS.get(full) if full is not None else None
  if compiled is not None:
    _PROGRAMS.move_to_end(full)
    seconds_compile = 0.0
  else:
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    seconds_compile = time.perf_counter() - t0
    if full is not None:
      _PROGRAMS[full] = compiled
      while len(_PROGRAMS) > MAX_PROGRAMS:
        _PROGRAMS.popitem(last=False)
  seconds_run, out = math.inf, None
  for _ in range(timing_runs):
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(*args))
    seconds_run = min(seconds_run, time.perf_counter() - t0)
  return out, seconds_compile, seconds_run


def jitted(key: Any, build: Callable[[], Callable]) -> Callable:
  """``jax.jit(build())``, built once per ``key`` (a description of what ``build`` closes over).

  For a small reporting pass that several calls share: JAX then compiles it
  once per argument shape. An unhashable ``key`` builds a fresh function.
  """
  try:
    full = ("jitted", freeze(key), signature(()))
    hash(full)
  except (Unhashable, TypeError):
    return jax.jit(build())
  fn = _PROGRAMS.get(full)
  if fn is None:
    fn = _PROGRAMS[full] = jax.jit(build())
    while len(_PROGRAMS) > MAX_PROGRAMS:
      _PROGRAMS.popitem(last=False)
  else:
    _PROGRAMS.move_to_end(full)
  return fn


def clear() -> None:
  """Drops every kept executable (after replacing a library function, or to time compilation)."""
  _PROGRAMS.clear()


def size() -> int:
  """How many executables are kept."""
  return len(_PROGRAMS)
