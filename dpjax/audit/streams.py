"""Builders of the audits of tree aggregation, Poisson DP-SGD and online-to-batch.

The tree's prefix sums (with the ``"fresh-tree-noise"`` control), DP-SGD with
Poisson subsampling on the RDP accountant, and the DP online-to-batch
conversion (Zhang, Tran & Cutkosky 2022, NeurIPS) through the tree.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from dpjax import accounting
from dpjax.mechanisms import noise
from dpjax import online
from dpjax.mechanisms import tree_aggregation as ta
from dpjax import transforms
from dpjax.audit.core import AUDIT_DELTA, CONTRACT_DELTA, RHO, _Spec
from dpjax.audit.datasets import _MARGIN, _gd_public, _zero_out_pair


# ----------------------------------------------------------------------------
# Builders: tree aggregation, Poisson DP-SGD, online-to-batch.
# ----------------------------------------------------------------------------


# The tree (and online-to-batch through it) releases its nodes through dpjax.mechanisms.noise;
# audit() checks that the noise twin's injection reaches them.


def _redraw_released(tree: ta.TreeState, key: jax.Array) -> ta.TreeState:
  """The ``"fresh-tree-noise"`` bug: every stored node released again, with new noise.

  Each level's released value becomes ``add_gaussian(exact sum, std = its nominal
  std)`` under a fresh key, so the next prefix sum adds fresh noise on every node
  of ``I_t`` instead of reusing the released values (fresh noise per step is
  not private at the tree's scale). Levels never released (variance 0) stay
  exact zeros.
  """
  levels = tree.variance.shape[0]
  keys = jax.random.split(key, levels)

  def one(h):
    return jax.tree.map(
        lambda e: noise.add_gaussian(keys[h], e[h], sensitivity=1.0,
                                     noise_std=jnp.sqrt(tree.variance[h])), tree.exact)

  rows = [one(h) for h in range(levels)]
  released = jax.tree.map(lambda *r: jnp.stack(r), *rows)
  return tree._replace(released=released)


def _tree(*, steps: int, statistic: str, fresh_noise: bool = False,
          doubled: bool = False) -> _Spec:
  """Tree-aggregation prefix sums (``tree_prefix_sum``) of a 1-D stream, in one ``lax.scan``.

  Leaf 1 is the canary's input (1, the sensitivity; 2 for the 2x twin) on
  ``D'`` and 0 on ``D``; the other leaves are public zeros. Two statistics,
  both linear in the released prefix sums ``ghat_t``:

  * ``"nodes"``: ``sum_h ghat_{2^h}``. The prefix sums at ``t = 2^h`` are
    exactly the ``L`` nodes that contain leaf 1, each shifted by 1 with its
    own noise, and no other release carries information on the shift: the
    likelihood-ratio test of the correct tree, whose audit is tight;
  * ``"all-steps"``: ``sum_t ghat_t / |I_t|``: the likelihood-ratio test
    against fresh per-step noise (then the ``ghat_t`` are independent with
    variance ``|I_t| sigma^2``), for the ``"fresh-tree-noise"`` control.
  """
  if statistic == "nodes":
    weights = [1.0 if t & (t - 1) == 0 else 0.0 for t in range(1, steps + 1)]
  elif statistic == "all-steps":
    weights = [1.0 / len(ta.prefix_nodes(t)) for t in range(1, steps + 1)]
  else:
    raise ValueError(f"statistic must be 'nodes' or 'all-steps', got {statistic!r}.")
  weights = jnp.asarray(weights, jnp.float32)

  def run(key, leaf1):
    tx = transforms.tree_prefix_sum(steps=steps, rho=RHO, sensitivity=1.0, key=key)

    def body(carry, t):
      state, stat = carry
      if fresh_noise:  # The bug: new node noise at every step.
        state = state._replace(tree=_redraw_released(
            state.tree, jax.random.fold_in(jax.random.fold_in(key, 7), t)))
      leaf = jnp.where(t == 1, leaf1, 0.0) * jnp.ones((1,))
      ghat, state = tx.update(leaf, state)
      return (state, stat + weights[t - 1] * ghat[0]), None

    carry = (tx.init(jnp.zeros((1,), jnp.float32)), jnp.zeros((), jnp.float32))
    (state, stat), _ = jax.lax.scan(body, carry, jnp.arange(1, steps + 1))
    return stat, state.accountant

  value = 2.0 if doubled else 1.0
  text = ("sum of the prefix sums at t = 2^h (the nodes over leaf 1)" if statistic == "nodes"
          else "sum_t ghat_t / |I_t| (the test against fresh per-step noise)")
  bug = ", stored nodes re-released before every step" if fresh_noise else ""
  return _Spec(run, (jnp.float32(0.0), jnp.float32(value)), "gaussian", None, AUDIT_DELTA,
               False, f"tree_prefix_sum(steps={steps}{bug})",
               "prefix sums", "zero-out", "leaf 1 input 1 (the sensitivity) vs 0", text)


def _dp_sgd(*, steps: int, sampling_rate: float, doubled: bool = False) -> _Spec:
  """Poisson-subsampled DP-SGD (``dp_sgd``), calibrated by the RDP accountant.

  ``n = 64`` (the default batch cap's overflow slack, charged to delta, stays
  far below delta at ``q = 1/2``); ``epsilon`` is the Gaussian epsilon of
  ``rho = 0.5`` at ``delta = 1e-5``, the claim the RDP accountant's CKS
  conversion at the audit delta. Public rows along ``e_2``, the canary
  ``e_1`` at margin -20 (gradient norm 1 = ``clip_norm``); the 2x twin holds
  two canaries (each sampled independently: up to twice the clipped
  contribution). Statistic ``w_T[0] - w_0[0]``.
  """
  n, d = 64, 2
  epsilon = accounting.zcdp_to_epsilon(RHO, CONTRACT_DELTA, "gaussian")
  datasets = _zero_out_pair(n, _gd_public(n - 2), ((1.0, 0.0), 1.0), doubled=doubled, d=d)
  w0 = jnp.asarray([-_MARGIN, 0.0], jnp.float32)

  def run(key, data):
    tx = transforms.dp_sgd(n=n, sampling_rate=sampling_rate, epsilon=epsilon,
                           delta=CONTRACT_DELTA, steps=steps, clip_norm=1.0, learning_rate=1.0,
                           key=key)
    w, state = w0, tx.init(w0)
    for _ in range(steps):
      upd, state = tx.update(None, state, w, data=data)
      w = optax.apply_updates(w, upd)
    return w[0] - w0[0], optax.tree.get(state, "accountant")

  return _Spec(run, datasets, "cks", None, AUDIT_DELTA, False,
               f"dp_sgd(sampling_rate={sampling_rate}, steps={steps}, epsilon={epsilon:.4g}, "
               "delta=1e-5)", "gradient", "zero-out",
               "x = e_1, y = +1 at margin -20 vs the null row", "w_T[0] - w_0[0]")


def _online_to_batch(*, steps: int, doubled: bool = False) -> _Spec:
  """DP online-to-batch (``online_to_batch`` around OGD), two examples per step.

  The first batch holds the canary (``x = e_1``, ``y = +1``) and a null row
  on ``D'`` (two canaries for the 2x twin), two null rows on ``D``; the rest
  of the stream is null rows. The clip ``C_0 = 1/2`` equals the canary's
  gradient norm at the first play 0, so one canary moves the first leaf by
  the full sensitivity. Statistic: the output's first coordinate.
  """
  value = jnp.asarray([1.0, 1.0 if doubled else 0.0], jnp.float32)

  def run(key, first):
    learner = online.ogd(radius=1e3, learning_rate=1.0)
    tx = transforms.online_to_batch(learner, batch_size=2, steps=steps, rho=RHO, k=1.0,
                                    clip_norm=0.5, loss="logistic", key=key)
    w = jnp.zeros((2,), jnp.float32)
    state = tx.init(w)
    for t in range(steps):
      scale = first if t == 0 else jnp.zeros((2,), jnp.float32)
      batch = (scale[:, None] * jnp.asarray([[1.0, 0.0]]), jnp.ones((2,)))
      upd, state = tx.update(None, state, w, batch=batch)
      w = optax.apply_updates(w, upd)
    return w[0], state.accountant

  return _Spec(run, (jnp.zeros((2,), jnp.float32), value), "gaussian", None, AUDIT_DELTA,
               False, f"online_to_batch(ogd, batch_size=2, steps={steps})",
               "gradient (tree)", "zero-out", "x = e_1, y = +1 in the first batch vs a null row",
               "output[0]")
