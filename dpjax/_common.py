"""Helpers shared by the dpjax transforms and mechanisms: budget arguments, keys, the step gate.

Every transform takes its privacy budget either as a total ``rho`` with a step
count ``steps`` or as ``rho_per_step``; refuses to run past ``steps``; and
stores a typed PRNG key in its state. These helpers implement those shared
conventions once.
"""

from __future__ import annotations

import numbers
import os
import secrets
from typing import Any, BinaryIO, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
import numpy as np

from dpjax import _validate
from dpjax import leaks


def positive_scalar(value: Any, name: str) -> Any:
  """A Python number > 0, or a scalar float jax array (possibly traced).

  Like :func:`budget_value`, for non-privacy scalars (a step size, a scale)
  that may be vmapped over: a traced array is checked for shape and dtype
  only, a concrete one also to be finite and > 0.
  """
  return budget_value(value, name)


def budget_value(value: Any, name: str) -> Any:
  """A zCDP amount: a Python number > 0, or a scalar float jax array.

  An array may be traced (e.g. ``jax.vmap`` over privacy levels); it is then
  checked for shape and dtype only, and every noise scale derived from it is
  computed in the graph, in its dtype. A concrete array is also checked to be
  finite and > 0. Python numbers are returned as floats, arrays unchanged.
  """
  if isinstance(value, jax.Array):
    if value.shape != () or not jnp.issubdtype(value.dtype, jnp.floating):
      raise TypeError(
          f"{name} must be a number or a scalar float array, got an array of shape "
          f"{value.shape} and dtype {value.dtype}; vmap over the values instead of "
          "passing a vector."
      )
    if _validate.is_concrete(value):
      _validate.positive_float(float(jax.device_get(value)), name)
    return value
  return _validate.positive_float(value, name)


def per_step_budget(rho: Any, steps: Any, rho_per_step: Any) -> tuple[Any, int | None]:
  """Resolves the two budget forms to ``(rho_per_step, steps or None)``.

  (a) ``rho=<total>, steps=<T>`` gives ``rho / T`` per step, at most T steps;
  (b) ``rho_per_step=<r>``, optionally with ``steps=T`` to enforce a limit.
  Amounts are Python numbers or scalar float arrays (:func:`budget_value`).
  """
  if rho is not None and rho_per_step is not None:
    raise ValueError(
        "pass exactly one budget: either rho=<total> with steps=<T>, or "
        "rho_per_step=<r> (optionally with steps); got both rho and rho_per_step."
    )
  if rho is None and rho_per_step is None:
    raise ValueError(
        "no privacy budget given: pass rho=<total> with steps=<T>, or "
        "rho_per_step=<r> (optionally with steps)."
    )
  steps = None if steps is None else _validate.positive_int(steps, "steps")
  if rho is not None:
    rho = budget_value(rho, "rho")
    if steps is None:
      raise ValueError(
          "rho is a total budget and needs steps=<T> to split it (rho / T per step); "
          "pass steps, or pass rho_per_step instead."
      )
    return rho / steps, steps
  return budget_value(rho_per_step, "rho_per_step"), steps


SEED_BITS = 64  # explicit seeds are integers in [0, 2**SEED_BITS); none is ever cut to 32 bits


_KEY_WORDS: dict[str, tuple[int, ...]] = {}  # default PRNG implementation -> its key data shape


def _key_words() -> tuple[int, ...]:
  """Shape of the default PRNG implementation's key data (``(2,)`` for threefry).

  Read once per implementation (the ``jax_default_prng_impl`` setting in force), not per
  key: making a key to read its shape costs two eager dispatches, as much as the key itself.
  """
  impl = getattr(jax.config, "jax_default_prng_impl", None)
  shape = _KEY_WORDS.get(impl) if impl is not None else None
  if shape is None:
    shape = tuple(jax.random.key_data(jax.random.key(0)).shape)
    if impl is not None:
      _KEY_WORDS[impl] = shape
  return shape


def key_from_seed(seed: int) -> jax.Array:
  """A typed key whose data words hold all bits of ``seed`` (most significant first).

  ``jax.random.key(seed)`` keeps only the low 32 bits of a Python int seed
  (``key(2**40 + 5) == key(5)``); this fills every word of the key data, so
  distinct seeds below ``2**SEED_BITS`` give distinct keys. For seeds below
  ``2**32`` it equals ``jax.random.key(seed)`` (threefry), so earlier results
  reproduce bit for bit.
  """
  seed = check_seed(seed, "seed")
  shape = _key_words()
  words = [(seed >> (32 * i)) & 0xFFFFFFFF for i in reversed(range(int(np.prod(shape))))]
  return jax.random.wrap_key_data(np.asarray(words, np.uint32).reshape(shape))


def fresh_key() -> jax.Array:
  """A typed key whose every data word comes from the OS's entropy source (``secrets``).

  This is the default of every whole-run entry point (``seed=None``): nobody,
  the caller included, can regenerate the noise, which the privacy guarantee
  requires. Nothing about the key is recorded in any result.
  """
  shape = _key_words()
  words = np.frombuffer(secrets.token_bytes(4 * int(np.prod(shape))), np.uint32)
  return jax.random.wrap_key_data(words.reshape(shape).copy())


def check_seed(seed: Any, name: str = "seed") -> int:
  """An explicit seed: an int in ``[0, 2**SEED_BITS)`` (bools and floats are refused)."""
  if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (numbers.Integral, np.integer)):
    raise TypeError(
        f"{name} must be None (fresh OS entropy, the private default) or an integer in "
        f"[0, 2**{SEED_BITS}), got {type(seed).__name__}."
    )
  if not 0 <= int(seed) < 2**SEED_BITS:
    raise ValueError(f"{name} must be in [0, 2**{SEED_BITS}), got {int(seed)}.")
  return int(seed)


def key_for(seed: Any) -> jax.Array:
  """``seed=None`` -> :func:`fresh_key`; an int -> :func:`key_from_seed`."""
  return fresh_key() if seed is None else key_from_seed(seed)


def run_key(seed: Any) -> jax.Array:
  """The key of a whole run: :func:`key_for`, the same on every process of a multi-process run.

  With ``seed=None`` each process would draw its own fresh key, and a run
  whose keys are replicated over a multi-host mesh would then get different
  keys on different hosts; process 0's key is sent to all
  (``multihost_utils.broadcast_one_to_all``, a collective every process
  reaches, as every process calls the same whole-run entry point). An int
  seed gives the same key everywhere by itself.
  """
  key = key_for(seed)
  if seed is None and jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    words = multihost_utils.broadcast_one_to_all(np.asarray(jax.random.key_data(key)))
    key = jax.random.wrap_key_data(np.asarray(words, np.uint32))
  return key


def canonical_key(key: Any) -> jax.Array:
  """An int seed or a typed key (possibly traced) -> a scalar typed key."""
  if key is None or isinstance(key, (bool, np.bool_)):
    raise TypeError(
        f"key must be an int seed or a typed PRNG key from jax.random.key(...), got {key!r}."
    )
  if isinstance(key, (numbers.Integral, np.integer)):
    if not 0 <= int(key) < 2**SEED_BITS:
      raise ValueError(f"key must be an int seed in [0, 2**{SEED_BITS}) or a typed PRNG key, got {int(key)}.")
    return key_from_seed(int(key))
  if isinstance(key, (jax.Array, np.ndarray)):
    dtype = key.dtype
    if jnp.issubdtype(dtype, jax.dtypes.prng_key):
      if key.shape != ():
        raise ValueError(
            f"key must be a single typed PRNG key (shape ()), got shape {key.shape}; "
            "to build one transform per key, construct it inside jax.vmap."
        )
      return key
    if jnp.issubdtype(dtype, jnp.integer) and np.shape(key) == ():
      return jax.random.key(key)
    raise TypeError(
        f"key must be an int seed or a typed PRNG key from jax.random.key(...), got an "
        f"array of dtype {dtype} and shape {np.shape(key)}; wrap a legacy uint32 key "
        "with jax.random.wrap_key_data(key)."
    )
  raise TypeError(
      "key must be an int seed or a typed PRNG key from jax.random.key(...), got "
      f"{type(key).__name__}."
  )


def check_flag(value: Any, name: str) -> bool:
  if not isinstance(value, (bool, np.bool_)):
    raise TypeError(f"{name} must be True or False, got {type(value).__name__}.")
  return bool(value)


def exact_noise(unsafe_float_noise: Any, name: str) -> bool:
  """Validates a transform's ``unsafe_float_noise`` flag; True means the exact sampler.

  The opt-out (``unsafe_float_noise=True``) draws ``jax.random.normal`` noise in
  floating point, which is not private (:mod:`dpjax.mechanisms.noise`), so it issues
  :class:`dpjax.PrivacyLeakWarning` when the transform is built.
  """
  unsafe = check_flag(unsafe_float_noise, "unsafe_float_noise")
  if unsafe:
    leaks.warn(
        f"{name}: unsafe_float_noise=True draws floating-point Gaussian noise, whose "
        "rounding leaks the private value (Mironov 2012); the output is NOT private. "
        "Use it only to measure the cost of the exact sampler.", stacklevel=3)
  return not unsafe


def check_vector(v: Any, name: str, d: int | None = None) -> jax.Array:
  """Static checks of a (d,) float array (value checks only when concrete)."""
  _validate.as_float_array(v, name, ndim=1)
  if d is not None and np.shape(v)[0] != d:
    raise ValueError(f"{name} has shape {np.shape(v)} but must have shape ({d},).")
  return jnp.asarray(v)


def check_params(params: Any) -> jax.Array:
  if params is None:
    raise TypeError("init(params) needs the parameters: a 1-D float array of shape (d,).")
  return check_vector(params, "params")


def gate(count: jax.Array, steps: int | None, name: str) -> jax.Array:
  """True when this step may run. Raises eagerly past the budget.

  A concrete ``count >= steps`` raises ``ValueError``; a traced one yields a
  traced bool that the caller uses to zero the update and skip the charge.
  """
  if steps is None:
    return jnp.asarray(True)
  if _validate.is_concrete(count) and int(count) >= steps:
    raise ValueError(
        f"privacy budget exhausted: {name} was built for steps={steps} and has already "
        f"taken {int(count)} steps; build a new transform with a fresh budget to go on."
    )
  return count < steps


def select(ok: jax.Array, new: Any, old: Any) -> Any:
  """``new`` where ``ok`` else ``old``, leaf by leaf (exact: a select, no arithmetic)."""
  return jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, old)


def gated(ok: jax.Array, state: Any, accountant: Any) -> dict:
  """The gate's bookkeeping fields of a transform state after one (possibly refused) step.

  ``count`` advances and ``accountant`` (the charged one) is kept only where
  ``ok``; ``budget_exhausted`` records a refused step. Splat into the state:
  ``State(**_common.gated(ok, state, charged), key=..., ...)``.
  """
  return dict(
      count=jnp.where(ok, optax.safe_increment(state.count), state.count),
      accountant=select(ok, accountant, state.accountant),
      budget_exhausted=jnp.logical_or(state.budget_exhausted, jnp.logical_not(ok)),
  )


def float_dtype(params: Any) -> Any:
  """The float dtype of a transform's scalar state (sums, wealth, weights): the params'."""
  return jnp.result_type(*[jnp.asarray(leaf).dtype for leaf in jax.tree.leaves(params)])


class Placement(NamedTuple):
  """Where :func:`dpjax.fit` puts the data of a sharded run (see :func:`data_placement`)."""

  x: jax.sharding.Sharding  # the caller's sharding of x (several devices).
  y: jax.sharding.Sharding | None  # y's: its own, or x's row split; None: left to jit.
  replicated: jax.sharding.Sharding | None  # keys: replicated over x's mesh; None: left to jit.


def data_placement(data: Any) -> Placement | None:
  """The caller's sharding of a dataset ``(x, y)`` whose ``x`` spans several devices.

  ``None`` (the data goes to the default device) unless ``x`` is a concrete
  ``jax.Array`` sharded over more than one device. Then the compiled run gets
  ``x`` with that same sharding, and ``y`` with its own sharding when it is a
  ``jax.Array`` on the same devices, else split like the rows of ``x`` (for a
  ``NamedSharding``: the same mesh, the first axis of ``x``'s spec). The keys
  are replicated over the mesh. Anything that is not a 2-tuple is left for
  the data validation to reject.
  """
  if not isinstance(data, tuple) or len(data) != 2:
    return None
  x, y = data
  if not isinstance(x, jax.Array) or not _validate.is_concrete(x) or np.ndim(x) != 2:
    return None
  xs = x.sharding
  if len(xs.device_set) < 2:
    return None
  named = isinstance(xs, jax.sharding.NamedSharding)
  if (isinstance(y, jax.Array) and _validate.is_concrete(y)
      and y.sharding.device_set == xs.device_set):
    ys = y.sharding
  elif named:
    spec = tuple(xs.spec)
    ys = jax.sharding.NamedSharding(xs.mesh, jax.sharding.PartitionSpec(spec[0] if spec else None))
  else:
    ys = None
  replicated = (jax.sharding.NamedSharding(xs.mesh, jax.sharding.PartitionSpec()) if named
                else None)
  return Placement(xs, ys, replicated)


def gather_data(data: Any) -> Any:
  """``data`` with every array that spans other processes gathered to this host (numpy).

  A multi-host ``jax.Array`` (not fully addressable) is copied whole to every
  process with ``jax.experimental.multihost_utils.process_allgather``: the
  validation, the float64 optimum and the reporting read the whole dataset
  on the host. Anything else is returned unchanged.
  """
  if not isinstance(data, tuple) or len(data) != 2:
    return data

  def gather(a):
    if isinstance(a, jax.Array) and _validate.is_concrete(a) and not a.is_fully_addressable:
      from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
      return np.asarray(multihost_utils.process_allgather(a, tiled=True))
    return a

  x, y = data
  gx, gy = gather(x), gather(y)
  if gx is x and gy is y:
    return data
  return type(data)(gx, gy) if hasattr(data, "_fields") else (gx, gy)


def place_data(x: np.ndarray, y: np.ndarray, placement: Placement | None
               ) -> tuple[jax.Array, jax.Array]:
  """The host copies ``x``, ``y`` on the device(s) of the compiled run (:func:`data_placement`)."""
  if placement is None:
    return jax.device_put(x), jax.device_put(y)
  ys = placement.y
  return jax.device_put(x, placement.x), (jax.device_put(y) if ys is None
                                          else jax.device_put(y, ys))


def place_replicated(value: Any, placement: Placement | None) -> Any:
  """``value`` (keys, levels) replicated over the mesh of a sharded run; unchanged otherwise."""
  if placement is None or placement.replicated is None:
    return value
  return jax.device_put(value, placement.replicated)


def write_atomic(path: Any, write: Callable[[BinaryIO], Any]) -> None:
  """Calls ``write(binary_file)`` and puts what it wrote at ``path`` all at once, or not at all.

  The bytes go to a new temporary file in ``path``'s folder (a unique name
  opened with ``O_EXCL``, mode 0o666 filtered by the umask, as ``open(path,
  "w")`` would create it), are flushed to disk, and the file then replaces
  ``path`` (``os.replace``, atomic on one file system). On any error the
  temporary file is removed and ``path`` is left as it was: never a partial
  file. Used by the command line's ``--json`` / ``--plot``,
  :func:`dpjax.checkpoint.save` and the benchmark writers.
  """
  path = os.fspath(path)
  folder = os.path.dirname(os.path.abspath(path))
  tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
  fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
  try:
    with os.fdopen(fd, "wb") as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    try:
      os.remove(tmp)
    except OSError:
      pass
    raise


def check_host_float(x: np.ndarray, name: str = "x") -> None:
  """``x`` is float32, or float64 with JAX's 64-bit mode on (never silently rounded)."""
  if x.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
    raise TypeError(f"{name} must be float32 or float64, got {x.dtype}; use "
                    f"{name}.astype(numpy.float32).")
  if np.dtype(jax.dtypes.canonicalize_dtype(x.dtype)) != x.dtype:
    raise TypeError(
        f"{name} is {x.dtype} but JAX 64-bit mode is off, so it would be rounded to float32 (and "
        "rounding can push a row norm above 1). Pass dpjax.data.clip_rows(x.astype(numpy.float32)), "
        "or enable float64 with jax.config.update('jax_enable_x64', True)."
    )
