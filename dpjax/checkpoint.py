"""Checkpoints: any pytree of arrays (optimizer states, params) saved to one ``.npz``, bitwise.

A dpjax optimizer state is a pytree of arrays: the step count, the typed PRNG
key, the accountant (:class:`dpjax.accounting.AccountantState`), buffers such
as a tree-noise state. :func:`save` writes such a tree (any transform's state,
an ``optax.chain`` of them, the params, or a tuple of both) to a single
``.npz`` file, and :func:`load` restores it against a template of the same
structure, e.g. ``tx.init(params)`` of the same transform built with the same
arguments. Every leaf comes back bitwise identical, with its dtype and shape,
so a run stopped after ``k`` steps and continued from the checkpoint ends
exactly where the uninterrupted run ends: the key, the counters and the
privacy spent are all part of the state (and the transform's configuration,
from which its noise scales are derived, is rebuilt from the same arguments).

File format (version :data:`FORMAT_VERSION`), numpy only and read with
``allow_pickle=False``:

* ``leaf_<i>``: the ``i``-th leaf in ``jax.tree.leaves`` order. A typed PRNG
  key is stored as ``jax.random.key_data(key)`` (its raw ``uint32`` words)
  with the name of its implementation; a dtype numpy cannot store natively
  (``bfloat16`` and the other ``ml_dtypes``) as its bits, an unsigned integer
  array of the same item size.
* ``__dpjax_checkpoint__``: a JSON string (:func:`describe`) with the format
  name and version, ``str(treedef)``, and each leaf's path, dtype, shape and
  key implementation.

:func:`save` writes a temporary file in the destination folder and renames it
over ``path`` (``os.replace``), so ``path`` holds either the previous
checkpoint or the complete new one, never a partial file.

Examples:
  >>> import os, tempfile
  >>> import jax, optax
  >>> from dpjax import checkpoint, data
  >>> from dpjax.problem import glm
  >>> from dpjax.transforms import dp_gd
  >>> x, y = data.synthetic(0, n=200, d=5)
  >>> tx = dp_gd(n=200, rho=0.5, steps=10, key=0)
  >>> step = jax.jit(lambda w, s: tx.update(glm.logistic_loss_and_grad(w, x, y)[1], s))
  >>> w = jax.numpy.zeros(5)
  >>> state = tx.init(w)
  >>> for _ in range(4):
  ...   u, state = step(w, state)
  ...   w = optax.apply_updates(w, u)
  >>> folder = tempfile.TemporaryDirectory()
  >>> path = os.path.join(folder.name, "run.npz")
  >>> checkpoint.save(path, (w, state))
  >>> w0 = jax.numpy.zeros(5)
  >>> w2, state2 = checkpoint.load(path, like=(w0, tx.init(w0)))
  >>> int(state2.count), bool((w2 == w).all()), bool(state2.accountant.rho == state.accountant.rho)
  (4, True, True)
  >>> checkpoint.describe(path)["leaves"][2]["dtype"]  # (w, (count, key, ...)): the key
  'key<fry>'
  >>> folder.cleanup()
"""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _common

__all__ = ["FORMAT_VERSION", "describe", "load", "save"]

FORMAT_VERSION = 1  # The version :func:`save` writes; :func:`load` reads versions <= this one.

_FORMAT = "dpjax.checkpoint"
_META = "__dpjax_checkpoint__"  # The npz entry holding the JSON description.
_MAX_REPORTED = 5  # Leaf mismatches listed in one error message.


class _LeafSpec(NamedTuple):
  path: str  # jax.tree_util.keystr of the leaf's key path.
  dtype: str  # str(dtype): "float32", "bool", "bfloat16", "key<fry>", ...
  shape: tuple[int, ...]
  key_impl: str | None  # A typed key's implementation name ("threefry2x32"); None otherwise.


def _is_key(dtype: Any) -> bool:
  return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _leaf_spec(leaf: Any, path: str) -> _LeafSpec:
  """What a leaf (of a tree to save, or of a template) must look like in the file."""
  if isinstance(leaf, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct)):
    dtype, shape = leaf.dtype, tuple(int(s) for s in leaf.shape)
  elif isinstance(leaf, (bool, int, float, complex)):
    dtype, shape = jnp.asarray(leaf).dtype, ()  # What JAX makes of a Python scalar.
  else:
    raise TypeError(
        f"leaf {path or '(root)'} is a {type(leaf).__name__}; a checkpoint holds arrays, typed "
        "PRNG keys and Python numbers only (keep other objects out of the tree).")
  if _is_key(dtype):
    key_impl = None if isinstance(leaf, jax.ShapeDtypeStruct) else str(jax.random.key_impl(leaf))
    return _LeafSpec(path, str(dtype), shape, key_impl)
  if np.dtype(dtype).kind == "O":
    raise TypeError(f"leaf {path or '(root)'} has dtype object, which cannot be stored without "
                    "pickling; convert it to a numeric array.")
  return _LeafSpec(path, str(np.dtype(dtype)), shape, None)


def _host_data(leaf: Any) -> np.ndarray:
  """The numpy array stored for a leaf: its values, a key's raw words, or an ml_dtype's bits."""
  if isinstance(leaf, jax.ShapeDtypeStruct):
    raise TypeError("a ShapeDtypeStruct has no values to save; it can only be a load template.")
  if isinstance(leaf, jax.Array):
    if _is_key(leaf.dtype):
      leaf = jax.random.key_data(leaf)
    data = np.asarray(jax.device_get(leaf))
  elif isinstance(leaf, (np.ndarray, np.generic)):
    data = np.asarray(leaf)
  else:
    data = np.asarray(jnp.asarray(leaf))
  if np.dtype(data.dtype.str) != data.dtype:  # bfloat16 & co. have no portable npy dtype.
    data = data.view(np.dtype(f"u{data.dtype.itemsize}"))
  return data


def _check_path(path: Any) -> str:
  if not isinstance(path, (str, os.PathLike)):
    raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}.")
  path = os.fspath(path)
  if not isinstance(path, str):
    path = os.fsdecode(path)
  return path


def save(path: str | os.PathLike, tree: Any) -> None:
  """Writes ``tree`` (a pytree of arrays) to ``path``, a ``.npz`` file, atomically.

  Leaves may be jax or numpy arrays of any shape (0-d included) and dtype
  (bool, integers, floats, ``bfloat16``), typed PRNG keys, or Python numbers
  (stored as JAX would make them: ``jnp.asarray(x)``). The file is written
  under a temporary name in the same folder and renamed over ``path``: an
  existing checkpoint there is replaced only by a complete new one, and a
  failed save leaves no file behind.

  Args:
    path: the file to write; must end with ``.npz`` (``numpy.savez`` would
      otherwise append it and the file would not be where you asked).
    tree: e.g. ``(params, opt_state)``.

  Raises:
    ValueError: ``path`` does not end with ``.npz``.
    FileNotFoundError: the folder of ``path`` does not exist.
    TypeError: a leaf is not an array, key or number (or a ``ShapeDtypeStruct``).
    OSError: the file could not be written (nothing is left behind).
  """
  path = _check_path(path)
  if not path.endswith(".npz"):
    raise ValueError(f"checkpoint path {path!r} must end with '.npz' (numpy would append it); "
                     f"pass {path + '.npz'!r}.")
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    raise FileNotFoundError(f"cannot save checkpoint {path!r}: folder {folder!r} does not exist.")
  flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
  arrays, leaves = {}, []
  for i, (key_path, leaf) in enumerate(flat):
    spec = _leaf_spec(leaf, jax.tree_util.keystr(key_path))
    data = _host_data(leaf)
    arrays[f"leaf_{i}"] = data
    leaves.append(dict(path=spec.path, dtype=spec.dtype, shape=list(spec.shape),
                       key_impl=spec.key_impl, data_dtype=str(data.dtype),
                       data_shape=list(data.shape)))
  description = dict(format=_FORMAT, version=FORMAT_VERSION, treedef=str(treedef), leaves=leaves)
  arrays[_META] = np.array(json.dumps(description))
  _common.write_atomic(path, lambda f: np.savez(f, **arrays))


_LEAF_FIELDS = {"path": str, "dtype": str, "shape": list, "key_impl": (str, type(None)),
                "data_dtype": str, "data_shape": list}


def _parse_description(path: str, meta: np.ndarray) -> dict:
  """The JSON description of a checkpoint, checked field by field."""
  def corrupt(why):
    return ValueError(f"checkpoint {path!r} is corrupt: {why}.")
  if meta.shape != () or meta.dtype.kind != "U":
    raise corrupt("its description is not a string")
  try:
    description = json.loads(str(meta[()]))
  except json.JSONDecodeError as err:
    raise corrupt(f"its description is not valid JSON ({err})") from err
  if not isinstance(description, dict) or description.get("format") != _FORMAT:
    raise corrupt(f"its description is not a {_FORMAT!r} description")
  version = description.get("version")
  if not isinstance(version, int) or version < 1:
    raise corrupt(f"bad format version {version!r}")
  if version > FORMAT_VERSION:
    raise ValueError(f"checkpoint {path!r} has format version {version}, newer than this dpjax "
                     f"reads ({FORMAT_VERSION}); upgrade dpjax.")
  leaves = description.get("leaves")
  if not isinstance(description.get("treedef"), str) or not isinstance(leaves, list) or not all(
      isinstance(leaf, dict) and all(isinstance(leaf.get(k), t) for k, t in _LEAF_FIELDS.items())
      for leaf in leaves):
    raise corrupt("its description lacks the treedef or a leaf's path, dtype or shape")
  return description


def _read(path: Any) -> tuple[dict, list[np.ndarray]]:
  """(description, stored arrays) of a checkpoint file, checked for consistency."""
  path = _check_path(path)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"no checkpoint file at {path!r}.")
  try:
    npz = np.load(path, allow_pickle=False)
    if not isinstance(npz, np.lib.npyio.NpzFile):
      raise ValueError("it is a single .npy array, not an .npz archive")
    with npz:
      if _META not in npz.files:
        raise ValueError(f"it has no {_META!r} entry (not written by dpjax.checkpoint.save)")
      meta = npz[_META]
      stored = {name: npz[name] for name in npz.files if name != _META}
  except PermissionError:
    raise
  except (zipfile.BadZipFile, zlib.error, ValueError, EOFError, OSError, KeyError) as err:
    raise ValueError(
        f"cannot read checkpoint {path!r}: {err} (truncated or corrupt file?)") from err
  description = _parse_description(path, meta)
  leaves = description["leaves"]
  if sorted(stored) != sorted(f"leaf_{i}" for i in range(len(leaves))):
    raise ValueError(f"checkpoint {path!r} is corrupt: it stores {len(stored)} arrays for "
                     f"{len(leaves)} described leaves.")
  data = [stored[f"leaf_{i}"] for i in range(len(leaves))]
  for leaf, arr in zip(leaves, data):
    if str(arr.dtype) != leaf["data_dtype"] or list(arr.shape) != leaf["data_shape"]:
      raise ValueError(f"checkpoint {path!r} is corrupt: leaf {leaf['path']} is stored as "
                       f"{arr.dtype}{list(arr.shape)}, described as "
                       f"{leaf['data_dtype']}{leaf['data_shape']}.")
  return description, data


def describe(path: str | os.PathLike) -> dict:
  """The description stored in a checkpoint, for inspection without a template.

  Returns:
    A dict with ``format`` (``"dpjax.checkpoint"``), ``version``,
    ``treedef`` (``str`` of the saved tree's treedef) and ``leaves``: one
    dict per leaf with ``path`` (``jax.tree_util.keystr``), ``dtype``
    (``"float32"``, ``"key<fry>"``, ...), ``shape``, ``key_impl`` (a key's
    implementation name, else ``None``), and ``data_dtype`` / ``data_shape``
    of the array actually stored (a key's raw words, an ml_dtype's bits).

  Raises:
    FileNotFoundError: no file at ``path``.
    ValueError: the file is not a readable dpjax checkpoint.
  """
  return _read(path)[0]


def _first_difference(a: str, b: str, width: int = 60) -> str:
  i = next((j for j, (p, q) in enumerate(zip(a, b)) if p != q), min(len(a), len(b)))
  lo = max(0, i - width)
  return f"saved ...{a[lo:i + width]}... vs like ...{b[lo:i + width]}..."


def _x64_hint(saved: str, wanted: str) -> str:
  if saved in ("float64", "int64", "uint64", "complex128") and wanted != saved:
    return " (saved with 64-bit JAX: enable jax_enable_x64 before building the template)"
  return ""


def _compare(path: str, description: dict, treedef: Any, specs: list[_LeafSpec]) -> None:
  """Raises ValueError saying how the template differs from the saved tree."""
  saved = description["leaves"]
  fix = ("pass as `like` a tree built exactly like the saved one, e.g. (params, tx.init(params)) "
         "of the same transform with the same arguments")
  if len(saved) != len(specs) or description["treedef"] != str(treedef):
    paths = [s["path"] for s in saved]
    wanted = [s.path for s in specs]
    if paths != wanted:
      extra = [p for p in paths if p not in wanted][:_MAX_REPORTED]
      missing = [p for p in wanted if p not in paths][:_MAX_REPORTED]
      detail = (f"the checkpoint has {len(paths)} leaves and `like` {len(wanted)}; only saved: "
                f"{extra}, only in like: {missing}")
    else:
      detail = _first_difference(description["treedef"], str(treedef))
    raise ValueError(f"checkpoint {path!r} holds a different tree structure than `like` "
                     f"({detail}); {fix}.")
  problems = []
  for s, spec in zip(saved, specs):
    was_key, is_key = s["key_impl"] is not None or s["dtype"].startswith("key<"), _is_key_spec(spec)
    where = f"leaf {spec.path or '(root)'}"
    if was_key != is_key:
      kind = lambda k, d: f"a typed PRNG key ({d})" if k else f"a {d} array"  # noqa: E731
      problems.append(f"{where}: saved {kind(was_key, s['dtype'])}, like has "
                      f"{kind(is_key, spec.dtype)}")
    elif is_key and spec.key_impl is not None and s["key_impl"] != spec.key_impl:
      problems.append(f"{where}: saved a {s['key_impl']} key, like has a {spec.key_impl} key")
    elif s["dtype"] != spec.dtype:
      problems.append(f"{where}: saved dtype {s['dtype']}, like has {spec.dtype}"
                      + _x64_hint(s["dtype"], spec.dtype))
    if tuple(s["shape"]) != spec.shape:
      problems.append(f"{where}: saved shape {tuple(s['shape'])}, like has {spec.shape}")
  if problems:
    more = f" (and {len(problems) - _MAX_REPORTED} more)" if len(problems) > _MAX_REPORTED else ""
    raise ValueError(f"checkpoint {path!r} does not match `like`: "
                     + "; ".join(problems[:_MAX_REPORTED]) + f"{more}; {fix}.")


def _is_key_spec(spec: _LeafSpec) -> bool:
  return spec.key_impl is not None or spec.dtype.startswith("key<")


def _restore(leaf: dict, data: np.ndarray, like: Any) -> Any:
  """The saved leaf as a numpy array (numpy template leaf) or a jax array placed like ``like``."""
  if leaf["key_impl"] is not None:
    try:
      value = jax.random.wrap_key_data(data, impl=leaf["key_impl"])
    except (TypeError, ValueError) as err:
      raise ValueError(f"leaf {leaf['path']}: cannot rebuild a {leaf['key_impl']} key from "
                       f"{data.dtype}{list(data.shape)} ({err}).") from err
  else:
    dtype = jnp.dtype(leaf["dtype"])
    value = data.view(dtype) if data.dtype != dtype else data
    if isinstance(like, (np.ndarray, np.generic)):
      return value[()] if isinstance(like, np.generic) else value
    if np.dtype(jax.dtypes.canonicalize_dtype(dtype)) != dtype:
      raise ValueError(f"leaf {leaf['path']} is {dtype} but JAX 64-bit mode is off, so it would "
                       "be rounded; enable jax_enable_x64 or use a numpy template leaf.")
  # A leaf sharded over several devices is laid out like the template's; any other goes to the
  # default device uncommitted, as a fresh array would (a committed array would make a jitted
  # step compile again for it).
  sharding = getattr(like, "sharding", None) if isinstance(like, jax.Array) else None
  if sharding is not None and len(sharding.device_set) > 1:
    return jax.device_put(value, sharding)
  return jax.device_put(value)


def load(path: str | os.PathLike, like: Any) -> Any:
  """Restores the tree saved at ``path``, with the structure of the template ``like``.

  ``like`` is a tree built exactly like the saved one, e.g. ``(params0,
  tx.init(params0))`` of the same transform built with the same arguments
  (its values are not used: ``jax.eval_shape(tx.init, params0)`` works too).
  Its treedef must print as the saved one's, and every leaf must agree in
  shape, dtype and kind (a typed key of the same implementation, or an array).

  Returns:
    The saved tree, bitwise: jax arrays (typed keys for key leaves) on the
    default device, uncommitted (a leaf whose template is sharded over
    several devices gets the template's sharding), or numpy arrays where the
    template's leaf is a numpy array.

  Raises:
    FileNotFoundError: no file at ``path``.
    ValueError: the file is truncated, corrupt or not a dpjax checkpoint; or
      it does not match ``like`` (the message says which leaves differ and how).
  """
  path = _check_path(path)
  description, data = _read(path)
  flat, treedef = jax.tree_util.tree_flatten_with_path(like)
  leaves = [leaf for _, leaf in flat]
  specs = [_leaf_spec(leaf, jax.tree_util.keystr(key_path)) for key_path, leaf in flat]
  _compare(path, description, treedef, specs)
  try:
    out = [_restore(s, d, leaf) for s, d, leaf in zip(description["leaves"], data, leaves)]
  except ValueError as err:
    raise ValueError(f"checkpoint {path!r}: {err}") from err
  return jax.tree.unflatten(treedef, out)
