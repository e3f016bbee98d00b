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
    from dpjax import data, glm, per_example, solve, spectral

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
