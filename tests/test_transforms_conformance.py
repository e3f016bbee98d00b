"""One registry of dpjax transforms, one optax-conformance suite (as optax's own alias_test.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpjax import accounting
from dpjax.transforms import dp_gd, dp_newton, dp_precond_gd, precond_budget

D = 3
H = jnp.diag(jnp.array([0.2, 0.05, 0.01]))
RHO, STEPS = 0.5, 4

# name -> (factory(key) -> transform, extra keyword arguments of update).
REGISTRY = {
    "precond_gd": (
        lambda key: dp_precond_gd(n=500, rho=RHO, steps=STEPS, key=key),
        {"curvature_matrix": H},
    ),
    "precond_gd_refresh": (
        lambda key: dp_precond_gd(n=500, rho=RHO, steps=STEPS, refresh_every=2, key=key),
        {"curvature_matrix": H},
    ),
    "dp_gd": (lambda key: dp_gd(n=500, rho=RHO, steps=STEPS, key=key), {}),
    "hess_clip_adaptive": (
        lambda key: dp_newton(n=500, rho=RHO, steps=STEPS, key=key),
        {"curvature_matrix": H},
    ),
    "qu_clip_fixed": (
        lambda key: dp_newton(n=500, rho=RHO, steps=STEPS, curvature="qu",
                              min_eigenvalue=0.01, key=key),
        {"curvature_matrix": H},
    ),
    "qu_add_fixed": (
        lambda key: dp_newton(n=500, rho=RHO, steps=STEPS, curvature="qu", modification="add",
                              min_eigenvalue=1e-4, key=key),
        {"curvature_matrix": H},
    ),
}
NAMES = sorted(REGISTRY)
VMAP_NAMES = NAMES

# What the first update charges: rho / T, plus one curvature release for precond-gd.
_budget = precond_budget(RHO, steps=STEPS)
_refresh = precond_budget(RHO, steps=STEPS, refresh_every=2)
FIRST_STEP_RHO = dict(
    {name: RHO / STEPS for name in NAMES},
    precond_gd=_budget.rho_release + _budget.rho_step,
    precond_gd_refresh=_refresh.rho_release + _refresh.rho_step,
)

G = jnp.array([0.3, -0.1, 0.2])
W = jnp.zeros(D)


def _run(tx, extra, steps=STEPS, g=G):
  """``steps`` eager updates at a fixed gradient; returns (stacked outputs, final state)."""
  state = tx.init(W)
  outs = []
  for _ in range(steps):
    out, state = tx.update(g, state, W, **extra)
    outs.append(out)
  return jnp.stack(outs), state


@pytest.mark.parametrize("name", NAMES)
def test_chain_extra_args_jit_and_accounting(name):
  factory, extra = REGISTRY[name]
  plain, plain_state = _run(factory(11), extra)
  chained = optax.chain(factory(11), optax.identity())
  # optax.chain forwards every extra argument to every member; unknown ones
  # (here `value`, `unused`) must be accepted and ignored.
  step = jax.jit(lambda s: chained.update(G, s, W, value=1.0, unused=None, **extra))
  state = chained.init(W)
  outs = []
  for _ in range(STEPS):
    out, state = step(state)
    outs.append(out)
  np.testing.assert_allclose(jnp.stack(outs), plain, rtol=1e-5, atol=1e-7)
  assert abs(accounting.spent_rho(state[0].accountant) - RHO) <= 1e-9 * RHO
  assert abs(float(optax.tree.get(state, "rho")) - RHO) <= 1e-6 * RHO
  assert accounting.spent_rho(plain_state.accountant) == accounting.spent_rho(state[0].accountant)
  # Noise is fresh at every step and the state's key moves on.
  assert len({tuple(np.round(np.asarray(o), 7)) for o in plain}) == STEPS


@pytest.mark.parametrize("name", NAMES)
def test_scan_cond_state_types_and_exhaustion(name):
  factory, extra = REGISTRY[name]
  tx = factory(jax.random.key(2))
  state = tx.init(W)
  shapes = jax.eval_shape(lambda s: tx.update(G, s, W, **extra)[1], state)
  assert jax.tree.structure(shapes) == jax.tree.structure(state)
  for a, b in zip(jax.tree.leaves(shapes), jax.tree.leaves(state)):
    assert a.shape == b.shape and a.dtype == b.dtype
  cond = jax.jit(lambda p, s: jax.lax.cond(p, lambda s: tx.update(G, s, W, **extra)[1],
                                            lambda s: s, s))
  assert int(cond(True, state).count) == 1 and int(cond(False, state).count) == 0

  def body(s, _):
    out, s = tx.update(G, s, W, **extra)
    return s, out

  # Two steps past the budget: zeros, nothing charged, the flag set.
  final, outs = jax.jit(lambda s: jax.lax.scan(body, s, None, length=STEPS + 2))(state)
  plain, _ = _run(tx, extra)
  np.testing.assert_allclose(outs[:STEPS], plain, rtol=1e-5, atol=1e-7)
  assert np.all(np.asarray(outs[STEPS:]) == 0)
  assert bool(final.budget_exhausted) and int(final.count) == STEPS
  assert abs(accounting.spent_rho(final.accountant) - RHO) <= 1e-9 * RHO


@pytest.mark.parametrize("name", VMAP_NAMES)
def test_vmap_over_keys_builds_one_transform_per_key(name):
  factory, extra = REGISTRY[name]
  keys = jax.random.split(jax.random.key(9), 3)

  def run(key):
    tx = factory(key)  # constructed with a traced key
    out, state = tx.update(G, tx.init(W), W, **extra)
    return out, state

  outs, states = jax.jit(jax.vmap(run))(keys)
  for i in range(3):
    ref, _ = _run(factory(keys[i]), extra, steps=1)
    np.testing.assert_allclose(outs[i], ref[0], rtol=1e-5, atol=1e-7)
  assert not np.allclose(outs[0], outs[1])
  np.testing.assert_allclose(accounting.spent_rho(states.accountant), FIRST_STEP_RHO[name],
                             rtol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_bad_or_missing_key_is_a_clear_error(name):
  factory, _ = REGISTRY[name]
  with pytest.raises(TypeError, match="key must be an int seed or a typed PRNG key"):
    factory(None)
  with pytest.raises(TypeError, match="wrap a legacy uint32 key"):
    factory(jax.random.PRNGKey(0))
