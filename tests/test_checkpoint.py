"""dpjax.checkpoint: bitwise round trips, errors, atomic writes, determinism and resume."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import dpjax
from conftest import maybe_jit
from dpjax import checkpoint, data, online
from dpjax.problem import glm
from dpjax import transforms as T

N, DIM = 200, 5
STEPS, STOP = 4, 2  # every run takes STEPS steps; the interrupted one stops after STOP.
BATCH = 25  # the streaming transforms' batch: STEPS * BATCH <= N, each example used once.
MU, RADIUS = 0.05, 2.0  # cubic Newton's L2-regularised logistic loss on B(0, RADIUS).

X, Y = (jnp.asarray(a) for a in data.synthetic(0, n=N, d=DIM))
W0 = jnp.zeros(DIM)


class Case(NamedTuple):
  build: Callable[[], optax.GradientTransformation]
  # (tx, w, state, xb, yb) -> (w, state); xb, yb is the step's batch (the full data for
  # full-batch transforms).
  step: Callable[..., tuple[Any, Any]]
  streaming: bool = False


def _grad(w):
  return glm.logistic_loss_and_grad(w, X, Y)[1]


def _apply(tx, w, s, updates, *args, **kwargs):
  u, s = tx.update(updates, s, *args, **kwargs)
  return optax.apply_updates(w, u), s


def _full_gd(tx, w, s, xb, yb):
  return _apply(tx, w, s, _grad(w))


def _newton(tx, w, s, xb, yb):
  _, g, h = glm.logistic_grad_and_curvature(w, X, Y, "hessian")
  return _apply(tx, w, s, g, w, curvature_matrix=h)


def _precond(tx, w, s, xb, yb):
  _, g, h = glm.logistic_grad_and_curvature(w, X, Y, "qu")
  return _apply(tx, w, s, g, w, curvature_matrix=h)


def _cubic(tx, w, s, xb, yb):
  _, g, h = glm.logistic_grad_and_curvature(w, X, Y, "hessian")
  return _apply(tx, w, s, g + MU * w, w, curvature_matrix=h + MU * jnp.eye(DIM))


def _sgd(tx, w, s, xb, yb):
  return _apply(tx, w, s, None, w, data=(X, Y))


def _stream(tx, w, s, xb, yb):
  return _apply(tx, w, s, None, w, batch=(xb, yb))


def _otb(key=5):
  return T.online_to_batch(
      online.ogd(radius=RADIUS), batch_size=BATCH, steps=STEPS, rho=1.0,
      clip_norm=T.difference_clip_bound(1.0, 1.0, 0.25, 2 * RADIUS), loss="logistic", key=key)


CASES = {
    "dp_gd": Case(lambda: T.dp_gd(n=N, rho=1.0, steps=STEPS, key=1), _full_gd),
    "dp_newton_hess_clip_adaptive": Case(
        lambda: T.dp_newton(n=N, rho=1.0, steps=STEPS, curvature="hessian", modification="clip",
                            min_eigenvalue="adaptive", key=2), _newton),
    "dp_sgd_poisson": Case(
        lambda: T.dp_sgd(n=N, batch_size=40, noise_multiplier=1.0, steps=STEPS, key=3), _sgd),
    "dp_precond_gd": Case(
        lambda: T.dp_precond_gd(n=N, rho=1.0, steps=STEPS, refresh_every=2, key=4), _precond),
    "online_to_batch": Case(_otb, _stream, streaming=True),
    "cubic_newton": Case(
        lambda: T.cubic_newton(n=N, rho=0.5, steps=STEPS, radius=RADIUS, max_inner_steps=20, key=6,
                               **T.l2_logistic_constants(MU, RADIUS)._asdict()), _cubic),
    "dp_ftrl": Case(
        lambda: T.dp_ftrl(learning_rate=0.5, batch_size=BATCH, clip_norm=1.0, steps=STEPS, rho=1.0,
                          loss="logistic", key=7), _stream, streaming=True),
    "chain_dp_gd_momentum_schedule": Case(
        lambda: optax.chain(T.dp_gd(n=N, rho=1.0, steps=STEPS, learning_rate=1.0, key=8),
                            optax.trace(decay=0.9),
                            optax.scale_by_schedule(optax.linear_schedule(1.0, 0.5, STEPS))),
        _full_gd),
}
# (name, jit): every resume case compiled; the cheapest also eagerly (op by op).
RESUME = [(name, True) for name in ("dp_gd", "dp_newton_hess_clip_adaptive", "dp_sgd_poisson",
                                    "online_to_batch", "dp_ftrl")] + [("dp_gd", False)]


def _batch(case, t):
  if not case.streaming:
    return X, Y
  return X[BATCH * t:BATCH * (t + 1)], Y[BATCH * t:BATCH * (t + 1)]


def _run(case, step, w, state, start, stop):
  for t in range(start, stop):
    w, state = step(w, state, *_batch(case, t))
  return w, state


def _stepper(case, tx, jit):
  return maybe_jit(lambda w, s, xb, yb: case.step(tx, w, s, xb, yb), jit)


def _assert_trees_bitwise(a, b):
  la, ta = jax.tree.flatten(a)
  lb, tb = jax.tree.flatten(b)
  assert ta == tb
  for x, y in zip(la, lb):
    assert x.dtype == y.dtype and x.shape == y.shape
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      assert str(jax.random.key_impl(x)) == str(jax.random.key_impl(y))
      x, y = jax.random.key_data(x), jax.random.key_data(y)
    # Bitwise: compare the bytes (assert_array_equal treats -0.0 == 0.0 and NaN == NaN).
    x, y = np.asarray(x), np.asarray(y)
    np.testing.assert_array_equal(x, y)
    assert x.tobytes() == y.tobytes()


def _differs(a, b):
  """Whether some leaf of ``a`` and ``b`` differs (keys by their data)."""
  def host(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      x = jax.random.key_data(x)
    return np.asarray(x).tobytes()
  return any(host(x) != host(y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.fixture(scope="module")
def trained():
  """name -> (tx, jitted step, (w, state) after STOP steps): one compile per case, shared."""
  out = {}
  for name, case in CASES.items():
    tx = case.build()
    step = _stepper(case, tx, True)
    out[name] = tx, step, _run(case, step, W0, tx.init(W0), 0, STOP)
  return out


# ----------------------------------------------------------------------------
# Round trips.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_state_round_trip_is_bitwise(name, trained, tmp_path):
  tx, _, saved = trained[name]
  template = (W0, tx.init(W0))
  assert _differs(saved, template)  # real steps were taken: count, key, accountant moved
  path = tmp_path / "ckpt.npz"
  checkpoint.save(path, saved)
  loaded = checkpoint.load(path, template)
  _assert_trees_bitwise(loaded, saved)
  assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(loaded))
  assert optax.tree.get(loaded[1], "rho") == optax.tree.get(saved[1], "rho")
  # A template from jax.eval_shape (no init run) works the same.
  _assert_trees_bitwise(checkpoint.load(path, jax.eval_shape(lambda: template)), saved)


def test_every_dtype_and_shape_round_trips(tmp_path):
  keys = jax.random.split(jax.random.key(3), 3)
  tree = {
      "bool": jnp.array([True, False, True]),
      "bool0": jnp.asarray(True),
      "int32": jnp.arange(-3, 3, dtype=jnp.int32).reshape(2, 3),
      "uint32": jnp.asarray(np.uint32(2**32 - 1)),
      "float32": jnp.asarray([-0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4e38], jnp.float32),
      "bfloat16": jnp.asarray([1.5, -2.25], jnp.bfloat16),
      "empty": jnp.zeros((0, 4), jnp.float32),
      "scalar": 7,  # a Python number: stored as JAX makes it (int32), returned as a jax array
      "keys": keys,  # a [3] array of typed keys
      "rbg": jax.random.key(11, impl="rbg"),
      "numpy64": np.array([np.pi, -1e-300], np.float64),  # numpy leaves stay numpy (no x64 needed)
      "nested": [None, (jnp.float32(2.5),)],
  }
  path = os.fspath(tmp_path / "all.npz")
  checkpoint.save(path, tree)
  is_key = lambda leaf: jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)  # noqa: E731
  like = dict(tree, **{  # the template's values are never used: all differ from the saved ones
      name: jnp.zeros_like(leaf) for name, leaf in tree.items()
      if isinstance(leaf, jax.Array) and not is_key(leaf)})
  like.update(scalar=0, keys=jax.random.split(jax.random.key(0), 3),
              rbg=jax.random.key(0, impl="rbg"), numpy64=np.zeros(2),
              nested=[None, (jnp.float32(0),)])
  out = checkpoint.load(path, like)
  assert isinstance(out["numpy64"], np.ndarray) and out["numpy64"].dtype == np.float64
  assert isinstance(out["scalar"], jax.Array) and out["scalar"].dtype == jnp.int32
  assert out["nested"][0] is None
  tree["scalar"] = jnp.asarray(7)
  _assert_trees_bitwise(out, tree)
  desc = checkpoint.describe(path)
  assert desc["version"] == checkpoint.FORMAT_VERSION
  by_path = {leaf["path"]: leaf for leaf in desc["leaves"]}
  assert by_path["['keys']"]["key_impl"] == "threefry2x32"
  assert by_path["['keys']"]["shape"] == [3] and by_path["['keys']"]["data_shape"] == [3, 2]
  assert by_path["['rbg']"]["key_impl"] == "rbg"
  assert by_path["['bfloat16']"]["dtype"] == "bfloat16"
  assert desc["treedef"] == str(jax.tree.structure(tree))


def test_float64_state_round_trips_under_x64(x64, tmp_path):
  w0 = jnp.zeros(DIM, jnp.float64)
  x, y = X.astype(jnp.float64), Y.astype(jnp.float64)
  tx = T.dp_gd(n=N, rho=1.0, steps=4, key=0)
  step = jax.jit(lambda w, s: _apply(tx, w, s, glm.logistic_loss_and_grad(w, x, y)[1]))
  w, state = w0, tx.init(w0)
  for _ in range(2):
    w, state = step(w, state)
  assert w.dtype == jnp.float64 and state.accountant.rho.dtype == jnp.float64
  path = tmp_path / "x64.npz"
  checkpoint.save(path, (w, state))
  _assert_trees_bitwise(checkpoint.load(path, (w0, tx.init(w0))), (w, state))


def test_save_replaces_an_existing_checkpoint(tmp_path):
  path = tmp_path / "c.npz"
  checkpoint.save(path, {"a": jnp.zeros(3)})
  checkpoint.save(path, {"a": jnp.ones(3)})
  np.testing.assert_array_equal(checkpoint.load(path, {"a": jnp.zeros(3)})["a"], np.ones(3))
  assert sorted(os.listdir(tmp_path)) == ["c.npz"]


# ----------------------------------------------------------------------------
# Errors.
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gd_checkpoint(tmp_path_factory, trained):
  tx, _, saved = trained["dp_gd"]
  path = tmp_path_factory.mktemp("gd") / "gd.npz"
  checkpoint.save(path, saved)
  return path, tx


def test_mismatched_structure_is_refused(gd_checkpoint, trained):
  path, _ = gd_checkpoint
  sgd_tx = trained["dp_sgd_poisson"][0]
  with pytest.raises(ValueError, match="different tree structure"):
    checkpoint.load(path, (W0, sgd_tx.init(W0)))  # same leaf count, other NamedTuple
  with pytest.raises(ValueError, match=r"only in like: \['\[2\]'\]"):
    checkpoint.load(path, (W0, T.dp_gd(n=N, rho=1.0, steps=STEPS, key=1).init(W0), W0))


def test_mismatched_leaf_is_refused(gd_checkpoint, x64):
  path, tx = gd_checkpoint
  w5 = jnp.zeros(DIM + 1)
  with pytest.raises(ValueError, match=r"leaf \[0\]: saved shape \(5,\), like has \(6,\)"):
    checkpoint.load(path, (w5, tx.init(w5)))
  w64 = jnp.zeros(DIM, jnp.float64)
  with pytest.raises(ValueError, match=r"leaf \[0\]: saved dtype float32, like has float64"):
    checkpoint.load(path, (w64, tx.init(w64)))
  state = tx.init(W0)
  raw = state._replace(key=jax.random.key_data(state.key))
  with pytest.raises(ValueError, match=r"leaf \[1\]\.key: saved a typed PRNG key"):
    checkpoint.load(path, (W0, raw))
  rbg = state._replace(key=jax.random.key(0, impl="rbg"))
  with pytest.raises(ValueError, match="saved a threefry2x32 key, like has a rbg key"):
    checkpoint.load(path, (W0, rbg))


def test_x64_checkpoint_into_32_bit_template_says_why(tmp_path):
  path = tmp_path / "w.npz"
  with jax.enable_x64(True):
    checkpoint.save(path, jnp.zeros(3, jnp.float64))
  with pytest.raises(ValueError, match="enable jax_enable_x64"):
    checkpoint.load(path, jnp.zeros(3))


def test_missing_and_corrupt_files(gd_checkpoint, tmp_path):
  path, tx = gd_checkpoint
  like = (W0, tx.init(W0))
  missing = tmp_path / "nope.npz"
  with pytest.raises(FileNotFoundError, match="nope.npz"):
    checkpoint.load(missing, like)
  raw = path.read_bytes()
  at = raw.index(b"leaf_0.npy") + len(b"leaf_0.npy") + 128  # the params' values (npy header: 128)
  bad = tmp_path / "bad.npz"
  corruptions = {
      "truncated": raw[:len(raw) // 2],
      "empty": b"",
      "garbage": b"not a checkpoint at all" * 10,
      # Flip bytes of the first stored array: the zip's CRC check catches it.
      "flipped": raw[:at] + bytes(b ^ 0xFF for b in raw[at:at + 8]) + raw[at + 8:],
  }
  for what, content in corruptions.items():
    bad.write_bytes(content)
    with pytest.raises(ValueError, match="bad.npz"):
      checkpoint.load(bad, like)
    with pytest.raises(ValueError, match="bad.npz"):
      checkpoint.describe(bad)
  np.savez(bad, a=np.zeros(3))  # a plain npz, no description
  with pytest.raises(ValueError, match="not written by dpjax.checkpoint.save"):
    checkpoint.load(bad, like)
  npy = tmp_path / "a.npy"
  np.save(npy, np.zeros(3))
  with pytest.raises(ValueError, match="single .npy array"):
    checkpoint.load(npy, like)


def _rewrite(src, dst, edit):
  """Copies checkpoint ``src`` to ``dst`` with its description edited by ``edit(dict)``."""
  with np.load(src, allow_pickle=False) as z:
    arrays = {k: z[k] for k in z.files}
  desc = json.loads(str(arrays["__dpjax_checkpoint__"][()]))
  edit(desc)
  arrays["__dpjax_checkpoint__"] = np.array(json.dumps(desc))
  np.savez(dst, **arrays)


def test_inconsistent_description_is_refused(gd_checkpoint, tmp_path):
  path, tx = gd_checkpoint
  like = (W0, tx.init(W0))
  bad = tmp_path / "bad.npz"
  _rewrite(path, bad, lambda d: d.update(version=checkpoint.FORMAT_VERSION + 1))
  with pytest.raises(ValueError, match="newer than this dpjax reads"):
    checkpoint.load(bad, like)
  _rewrite(path, bad, lambda d: d["leaves"][0].update(data_shape=[4]))
  with pytest.raises(ValueError, match=r"corrupt: leaf \[0\] is stored as float32\[5\]"):
    checkpoint.load(bad, like)
  _rewrite(path, bad, lambda d: d["leaves"].pop())
  with pytest.raises(ValueError, match="corrupt: it stores"):
    checkpoint.load(bad, like)
  _rewrite(path, bad, lambda d: d.pop("treedef"))
  with pytest.raises(ValueError, match="lacks the treedef"):
    checkpoint.describe(bad)


def test_bad_paths_and_leaves(tmp_path):
  with pytest.raises(ValueError, match=r"must end with '\.npz'.*'.*ckpt\.npz'"):
    checkpoint.save(tmp_path / "ckpt", {"a": jnp.zeros(2)})
  with pytest.raises(FileNotFoundError, match="does not exist"):
    checkpoint.save(tmp_path / "no" / "such" / "c.npz", {"a": jnp.zeros(2)})
  with pytest.raises(TypeError, match=r"leaf \['name'\] is a str"):
    checkpoint.save(tmp_path / "c.npz", {"name": "dp-gd", "a": jnp.zeros(2)})
  with pytest.raises(TypeError, match="dtype object"):
    checkpoint.save(tmp_path / "c.npz", np.array([object()]))
  with pytest.raises(TypeError, match="path must be a str"):
    checkpoint.save(3, jnp.zeros(2))
  assert os.listdir(tmp_path) == []


def test_failed_save_leaves_no_partial_file(tmp_path, monkeypatch):
  path = tmp_path / "c.npz"
  checkpoint.save(path, {"a": jnp.zeros(3)})
  before = path.read_bytes()

  def failing_savez(f, **arrays):  # writes part of the archive, then the disk is "full"
    f.write(b"PK\x03\x04 partial")
    raise OSError(28, "No space left on device")

  with monkeypatch.context() as m:
    m.setattr(np, "savez", failing_savez)
    for target in (path, tmp_path / "new.npz"):
      with pytest.raises(OSError, match="No space left"):
        checkpoint.save(target, {"a": jnp.ones(3)})
  assert sorted(os.listdir(tmp_path)) == ["c.npz"]  # no temporary file left behind
  assert path.read_bytes() == before  # the previous checkpoint is intact
  # A real failure at the final rename: the destination is a folder.
  (tmp_path / "dir.npz").mkdir()
  with pytest.raises(OSError):
    checkpoint.save(tmp_path / "dir.npz", {"a": jnp.ones(3)})
  assert sorted(os.listdir(tmp_path)) == ["c.npz", "dir.npz"]
  assert os.listdir(tmp_path / "dir.npz") == []


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes into read-only folders")
def test_unwritable_folder_leaves_nothing(tmp_path):
  folder = tmp_path / "ro"
  folder.mkdir()
  folder.chmod(0o500)
  try:
    with pytest.raises(PermissionError):
      checkpoint.save(folder / "c.npz", {"a": jnp.zeros(3)})
    assert os.listdir(folder) == []
  finally:
    folder.chmod(0o700)


# ----------------------------------------------------------------------------
# Determinism.
# ----------------------------------------------------------------------------


# Each fit compiles its whole run (seconds): two algorithms, and one of them at a second seed.
@pytest.mark.parametrize("algorithm, options, other_seed", [
    ("dp-gd", dict(rho=1.0, steps=3), 5),
    ("dp-sgd", dict(epsilon=1.0, steps=3, batch_size=40), None),  # Poisson sampling from the key
])
def test_fit_is_deterministic_in_the_seed(algorithm, options, other_seed):
  ds = data.synthetic(0, n=N, d=DIM)
  first = dpjax.fit(ds, algorithm, seed=4, **options)
  again = dpjax.fit(ds, algorithm, seed=4, **options)
  _assert_trees_bitwise((first.params, first.opt_state), (again.params, again.opt_state))
  if other_seed is not None:
    other = dpjax.fit(ds, algorithm, seed=other_seed, **options)
    assert not np.array_equal(first.params, other.params)


def test_transform_loop_is_deterministic_in_the_key(trained):
  case = CASES["online_to_batch"]

  def run():  # a fresh transform (key=5) and a fresh (re-traced, re-compiled) step
    tx = _otb(key=5)
    return _run(case, _stepper(case, tx, True), W0, tx.init(W0), 0, STEPS)

  first = run()
  _assert_trees_bitwise(first, run())
  _, step, stopped = trained["online_to_batch"]  # built the same way with key=5: same run
  _assert_trees_bitwise(first, _run(case, step, *stopped, STOP, STEPS))
  tx = _otb(key=6)  # another key (the key only enters through init's state)
  other = _run(case, step, W0, tx.init(W0), 0, STEPS)
  assert not np.array_equal(first[0], other[0])


# ----------------------------------------------------------------------------
# Resume.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("name, jit", RESUME)
def test_resume_from_checkpoint_is_bitwise(name, jit, trained, tmp_path):
  case = CASES[name]
  if jit:  # the compiled step that took the first STOP steps serves both runs
    tx, step, stopped = trained[name]
  else:
    tx = case.build()
    step = _stepper(case, tx, False)
    stopped = _run(case, step, W0, tx.init(W0), 0, STOP)
  path = tmp_path / "stop.npz"
  checkpoint.save(path, stopped)
  # The uninterrupted run: the same STOP steps, continued in memory.
  uninterrupted = _run(case, step, *stopped, STOP, STEPS)
  template = (W0, tx.init(W0))
  loaded = checkpoint.load(path, template)
  assert _differs(loaded, template)
  resumed = _run(case, step, *loaded, STOP, STEPS)
  _assert_trees_bitwise(resumed, uninterrupted)
  # Restarting from the template instead of the checkpoint would not match.
  assert _differs(_run(case, step, *template, STOP, STEPS), uninterrupted)


# The script runs in a subprocess (STOP steps, then save) and, exec'd here, in the test.
_CROSS_PROCESS = textwrap.dedent("""
    import jax, jax.numpy as jnp, optax
    from dpjax import checkpoint, data
    from dpjax.transforms import dp_sgd

    x, y = (jnp.asarray(a) for a in data.synthetic(0, n=200, d=5))
    w0 = jnp.zeros(5)
    tx = dp_sgd(n=200, batch_size=40, noise_multiplier=1.0, steps=6, key=42)

    @jax.jit
    def step(w, state):
      u, state = tx.update(None, state, w, data=(x, y))
      return optax.apply_updates(w, u), state

    def run(w, state, steps):
      for _ in range(steps):
        w, state = step(w, state)
      return w, state
""")


def test_resume_in_another_process_is_bitwise(tmp_path):
  path = tmp_path / "proc.npz"
  script = _CROSS_PROCESS + f"checkpoint.save({os.fspath(path)!r}, run(w0, tx.init(w0), 3))\n"
  root = pathlib.Path(__file__).resolve().parents[1]
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [str(root)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
  subprocess.run([sys.executable, "-c", script], cwd=root, env=env, check=True, timeout=300,
                 capture_output=True, text=True)
  ns: dict = {}
  exec(_CROSS_PROCESS, ns)  # pylint: disable=exec-used
  tx, w0, run = ns["tx"], ns["w0"], ns["run"]
  uninterrupted = run(w0, tx.init(w0), 6)
  resumed = run(*checkpoint.load(path, (w0, tx.init(w0))), 3)
  _assert_trees_bitwise(resumed, uninterrupted)
  assert int(resumed[1].count) == 6
