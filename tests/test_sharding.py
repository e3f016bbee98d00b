"""Inputs sharded with jax.sharding work unchanged (2 virtual CPU devices).

Runs in a subprocess, because the number of host devices is fixed when JAX
initialises its backend.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from dpjax import data
    from dpjax.problem import glm, per_example, solve, spectral

    assert len(jax.devices()) == 2, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("data",))
    rows = NamedSharding(mesh, P("data", None))
    ds = data.synthetic(3, n=5002, d=17)
    w = jnp.asarray(np.random.default_rng(0).normal(size=17).astype(np.float32) * 0.3)
    xs = jax.device_put(ds.x, rows)
    ys = jax.device_put(ds.y, NamedSharding(mesh, P("data")))
    assert len(xs.sharding.device_set) == 2
    f = jax.jit(glm.logistic_grad_and_curvature, static_argnames="curvature")
    for curvature in glm.CURVATURES:
      ref = f(w, ds.x, ds.y, curvature=curvature)
      out = f(w, xs, ys, curvature=curvature)
      for a, b in zip(out, ref):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)
    ref = f(w, ds.x, ds.y, curvature="hessian")
    out = f(w, xs, ys, curvature="hessian")
    # One block keeps the row contraction local: partial sums + all-reduce, no gather.
    n = ds.x.shape[0]
    hlo = jax.jit(lambda w, x, y: glm.logistic_grad_and_curvature(w, x, y, chunk_size=n)).lower(
        w, xs, ys).compile().as_text()
    assert "all-reduce" in hlo and "all-gather" not in hlo
    lg = jax.jit(glm.logistic_loss_and_grad)(w, xs, ys)
    np.testing.assert_allclose(lg[1], glm.logistic_loss_and_grad(w, ds.x, ds.y)[1], rtol=2e-5, atol=1e-7)
    loss = lambda p, ex: jnp.logaddexp(0.0, -ex[1] * (ex[0] @ p))
    pe = per_example.mean_grad_and_hessian(loss, w, (xs, ys), chunk_size=512)
    np.testing.assert_allclose(pe.hessian, ref.matrix, rtol=1e-4, atol=1e-7)
    step = spectral.modified_solve(out.matrix, out.grad, 1e-3, "clip")
    np.testing.assert_allclose(step, spectral.modified_solve(ref.matrix, ref.grad, 1e-3, "clip"), rtol=1e-3, atol=1e-5)
    ex = jax.vmap(solve.excess_loss, in_axes=(0, None, None, None))(jnp.stack([w, 2 * w]), xs, ys, 0.0)
    assert ex.shape == (2,) and bool(jnp.all(jnp.isfinite(ex)))
    print("SHARDED-OK")
    """
)


def test_sharded_inputs_match_unsharded():
  env = dict(os.environ)
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
  env["JAX_PLATFORMS"] = "cpu"
  proc = subprocess.run(
      [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300
  )
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert "SHARDED-OK" in proc.stdout


# dpjax.fit with x, y sharded along n over an 8-device mesh: the compiled run
# must receive them with that sharding (the spy on compiled.compile_and_time
# reads the compiled program's input shardings and HLO) and must reproduce
# the unsharded fit with the same seed. Paths: fit's main path (fit and
# fit_levels), dpjax.training.drivers (dp-sgd) and dpjax.training.streaming (otb).
_FIT_SCRIPT = textwrap.dedent(
    """
    import jax, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import dpjax
    from dpjax import compiled, data, training

    assert len(jax.devices()) == 8, jax.devices()
    seen = []
    _compile_and_time = compiled.compile_and_time

    def spy(fn, args, timing_runs, key=None):
      # The program the run executed: the newest entry of the shared cache (a
      # hit or a miss alike moves it to the end); compiled afresh only for a
      # run that has no key.
      out = _compile_and_time(fn, args, timing_runs, key=key)
      full = compiled._lookup_key(key, args)
      program = compiled._PROGRAMS[full] if full is not None else fn.lower(*args).compile()
      seen.append((program.input_shardings[0], program.as_text()))
      return out

    compiled.compile_and_time = spy
    mesh = Mesh(np.array(jax.devices()), ("data",))
    rows, labels = NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P("data"))
    ds = data.synthetic(5, n=800, d=6)
    xs, ys = jax.device_put(ds.x, rows), jax.device_put(ds.y, labels)

    def check_inputs(x_at, y_at):
      (shardings, hlo), = seen
      seen.clear()
      x_in, y_in = shardings[x_at], shardings[y_at]
      assert x_in.is_equivalent_to(rows, 2) and y_in.is_equivalent_to(labels, 1), shardings
      assert len(x_in.device_set) == 8 and not x_in.is_fully_replicated
      assert shardings[0].is_fully_replicated and len(shardings[0].device_set) == 8  # keys
      # The row contraction runs on the shards: partial sums + all-reduce.
      assert "all-reduce" in hlo

    def check_same(out, ref, what):
      np.testing.assert_allclose(out.params, ref.params, rtol=1e-5, err_msg=what)
      np.testing.assert_allclose(out.excess_losses, ref.excess_losses, rtol=1e-5, err_msg=what)
      np.testing.assert_allclose(out.losses, ref.losses, rtol=1e-5, err_msg=what)
      np.testing.assert_allclose(out.rho_spent, ref.rho_spent, rtol=1e-6, err_msg=what)

    cases = [("dp-gd", dict(steps=4)), ("hess-clip", dict(steps=4)),
             ("precond-gd", dict(steps=4)), ("dp-sgd", dict(steps=4, batch_size=100)),
             ("otb", dict(batch_size=100))]
    refs = {}
    for algorithm, kwargs in cases:
      ref = refs[algorithm] = dpjax.fit(ds, algorithm, epsilon=2.0, repeats=2, seed=3, **kwargs)
      seen.clear()
      out = dpjax.fit((xs, ys), algorithm, epsilon=2.0, repeats=2, seed=3, **kwargs)
      check_inputs(1, 2)
      check_same(out, ref, algorithm)
      print("SHARDED-FIT-OK", algorithm)
    # A numpy y follows x's row split.
    check_same(dpjax.fit((xs, np.asarray(ds.y)), "dp-gd", epsilon=2.0, steps=4, repeats=2,
                         seed=3), refs["dp-gd"], "numpy y")
    check_inputs(1, 2)
    # fit_levels: (keys, budgets, x, y), one program for both levels.
    refs = training.fit_levels(ds, "qu-clip", epsilons=[1.0, 8.0], steps=3, repeats=2, seed=3)
    seen.clear()
    outs = training.fit_levels((xs, ys), "qu-clip", epsilons=[1.0, 8.0], steps=3, repeats=2,
                               seed=3)
    check_inputs(2, 3)
    for out, ref in zip(outs, refs):
      check_same(out, ref, "fit_levels")
    print("SHARDED-FIT-OK levels")
    """
)


def test_sharded_fit_matches_unsharded():
  env = dict(os.environ)
  flags = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
  env["XLA_FLAGS"] = flags.strip()
  env["JAX_PLATFORMS"] = "cpu"
  proc = subprocess.run(
      [sys.executable, "-c", _FIT_SCRIPT], env=env, capture_output=True, text=True, timeout=600
  )
  assert proc.returncode == 0, proc.stderr[-4000:]
  for algorithm in ("dp-gd", "hess-clip", "precond-gd", "dp-sgd", "otb", "levels"):
    assert f"SHARDED-FIT-OK {algorithm}" in proc.stdout, proc.stdout
