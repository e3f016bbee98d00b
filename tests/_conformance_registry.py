"""The registry of the conformance suite: every dpjax optax transform, small and fast.

Each entry builds one transform from a key (``make(key, **kw)``, where ``kw`` is
``disable_noise_for_testing=True`` for the noiseless twin) and says how its
``update`` is called (the ``updates`` argument and the extra keyword
arguments), how many steps its budget plans, how its accountant reads the
spent total, and how it refuses steps past the plan.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax.numpy as jnp

from conftest import unit_ball_batch
from dpjax import accounting, baselines, online
from dpjax.problem import glm
from dpjax.mechanisms import tree_aggregation as ta
from dpjax.transforms import (
    cubic_newton,
    dp_ftrl,
    dp_gd,
    dp_newton,
    dp_newton_minibatch,
    dp_precond_gd,
    dp_sgd,
    l2_logistic_constants,
    online_to_batch,
    precond_budget,
    single_pass_dp_sgd,
    tree_prefix_sum,
    tail_average,
)

D = 3
H = jnp.diag(jnp.array([0.2, 0.05, 0.01]))
RHO, STEPS = 0.5, 4
# A tree of 2 levels holds 2^2 - 1 = 3 steps: its plan is a full tree, so a
# step past the plan is a step past the tree's capacity.
TREE_STEPS = 3
EPS, N_RDP = 2.0, 20
DELTA = 1.0 / N_RDP**2
N_BATCH = 8  # the batch of the single-pass (batch=) transforms.

G = jnp.array([0.3, -0.1, 0.2])
W = jnp.zeros(D)
# Rows of norm <= 0.99: a row normalised to 1 in float32 can exceed the norm bound 1.
X, Y = unit_ball_batch(0, N_RDP, D)
X = 0.99 * X  # the data= / batch= transforms' dataset
BATCH = (X[:N_BATCH], Y[:N_BATCH])
N_MB = 200  # dp_newton_minibatch's dataset (see its entry)
DELTA_MB = 1.0 / N_MB**2
X_MB, Y_MB = unit_ball_batch(2, N_MB, D)
X_MB = 0.99 * X_MB
# dp_gd_oracle's line search reads the true loss: its gradient is the true one there.
X_ORACLE, Y_ORACLE = unit_ball_batch(1, 2000, D)
X_ORACLE = 0.99 * X_ORACLE
G_ORACLE = glm.logistic_loss_and_grad(W, X_ORACLE, Y_ORACLE)[1]
CUBIC = l2_logistic_constants(0.05, 2.0)._asdict()


def zcdp_spent(state) -> float:
  return float(accounting.spent_rho(_accountant(state)))


def rdp_epsilon(state, delta=DELTA) -> float:
  return float(accounting.epsilon_spent(_accountant(state), delta))


def _accountant(state):
  import optax  # pylint: disable=g-import-not-at-top
  return optax.tree.get(state, "accountant")


class Entry(NamedTuple):
  make: Callable[..., Any]  # make(key, **kw) -> the transform
  grad: Any  # the `updates` argument of update (None: it computes its own from data)
  extra: dict  # the extra keyword arguments of update
  steps: int = STEPS  # steps the budget plans
  planned: float = RHO  # the total the accountant holds after `steps` steps, ...
  spent: Callable[[Any], float] = zcdp_spent  # ... read by this from the state
  field: str = "rho"  # optax.tree.get(state, field): the accountant's running word
  first: float | None = RHO / STEPS  # zCDP charged by the first step (None: RDP-accounted)
  taken: str = "count"  # field counting the steps taken (refused ones excluded)
  # "zero": past the plan, zero updates and `budget_exhausted` (eagerly ValueError);
  # "tree": past the tree's capacity, NaN updates and the tree's `overflow` flag
  #   (eagerly ValueError), tree_aggregation.tree_step's documented signal.
  refusal: str = "zero"
  flag: str = "budget_exhausted"


_budget = precond_budget(RHO, steps=STEPS)
_refresh = precond_budget(RHO, steps=STEPS, refresh_every=2)
_TREE_LEVEL = RHO / ta.num_levels_for(TREE_STEPS)  # a full tree of L levels costs rho; one level rho / L.

_TREE = dict(steps=TREE_STEPS, first=_TREE_LEVEL, refusal="tree", flag="overflow")


REGISTRY: dict[str, Entry] = {
    "precond_gd": Entry(
        lambda key, **kw: dp_precond_gd(n=500, rho=RHO, steps=STEPS, key=key, **kw),
        G, {"curvature_matrix": H}, first=_budget.rho_release + _budget.rho_step),
    "precond_gd_refresh": Entry(
        lambda key, **kw: dp_precond_gd(n=500, rho=RHO, steps=STEPS, refresh_every=2, key=key,
                                        **kw),
        G, {"curvature_matrix": H}, first=_refresh.rho_release + _refresh.rho_step),
    "dp_gd": Entry(lambda key, **kw: dp_gd(n=500, rho=RHO, steps=STEPS, key=key, **kw), G, {}),
    "hess_clip_adaptive": Entry(
        lambda key, **kw: dp_newton(n=500, rho=RHO, steps=STEPS, key=key, **kw),
        G, {"curvature_matrix": H}),
    "qu_clip_fixed": Entry(
        lambda key, **kw: dp_newton(n=500, rho=RHO, steps=STEPS, curvature="qu",
                                    min_eigenvalue=0.01, key=key, **kw),
        G, {"curvature_matrix": H}),
    "qu_add_fixed": Entry(
        lambda key, **kw: dp_newton(n=500, rho=RHO, steps=STEPS, curvature="qu",
                                    modification="add", min_eigenvalue=1e-4, key=key, **kw),
        G, {"curvature_matrix": H}),
    "newton_minibatch": Entry(
        # n = 200: at n = 20 the gradient noise is as large as the gradient, and the
        # direction noise (std proportional to ||g~||) makes the output's deviation
        # partly quadratic in the noise (the audit's half-noise ratio 0.37).
        lambda key, **kw: dp_newton_minibatch(
            n=N_MB, batch_size=N_MB // 2, curvature_batch_size=N_MB // 2,
            min_eigenvalue=0.05, epsilon=EPS, delta=DELTA_MB, steps=STEPS, key=key, **kw),
        None, {"data": (X_MB, Y_MB)}, planned=EPS, spent=lambda s: rdp_epsilon(s, DELTA_MB), field="rdp", first=None),
    "dp_sgd": Entry(
        lambda key, **kw: dp_sgd(n=N_RDP, batch_size=N_RDP // 2, epsilon=EPS, delta=DELTA,
                                 steps=STEPS, key=key, **kw),
        None, {"data": (X, Y)}, planned=EPS, spent=rdp_epsilon, field="rdp", first=None),
    "online_to_batch_ogd": Entry(
        lambda key, **kw: online_to_batch(
            # A constant step: OGD's default (scale-free AdaGrad-norm) step divides the
            # noise out of the play, so the audit would see no noise scale at all.
            online.ogd(radius=1.0, learning_rate=0.1), batch_size=N_BATCH,
                                          steps=TREE_STEPS, rho=RHO, clip_norm=2.0,
                                          loss="logistic", key=key, **kw),
        None, {"batch": BATCH}, **dict(_TREE, taken="step")),
    "dp_ftrl": Entry(
        lambda key, **kw: dp_ftrl(learning_rate=0.5, batch_size=N_BATCH, clip_norm=1.0,
                                  steps=TREE_STEPS, rho=RHO, loss="logistic", key=key, **kw),
        None, {"batch": BATCH}, **dict(_TREE, taken="step")),
    "tree_prefix_sum": Entry(
        lambda key, **kw: tree_prefix_sum(steps=TREE_STEPS, rho=RHO, sensitivity=1.0,
                                             key=key, **kw),
        G, {}, **dict(_TREE, taken="step")),
    "single_pass_dp_sgd": Entry(
        lambda key, **kw: single_pass_dp_sgd(learning_rate=0.5, batch_size=N_BATCH,
                                             clip_norm=1.0, rho=RHO, steps=STEPS,
                                             loss="logistic", key=key, **kw),
        None, {"batch": BATCH}, first=RHO),  # one pass: rho, charged at the first step
    # n = 200 (N = 9300 inner steps): the solver's per-step noise is set by the constants
    # alone, and averaging its N iterates is what keeps the ball's projection rarely
    # active; at n = 20 (N = 93) the projection clips the noise and the audit's
    # half-noise ratio is 0.81 instead of 0.5.
    "cubic_newton": Entry(
        lambda key, **kw: cubic_newton(n=200, rho=RHO, steps=STEPS, radius=2.0, key=key,
                                       **CUBIC, **kw),
        G, {"curvature_matrix": H + 0.05 * jnp.eye(D)}),
    "tail_average_dp_gd": Entry(
        lambda key, **kw: tail_average(dp_gd(n=500, rho=RHO, steps=STEPS, key=key, **kw),
                                       steps=STEPS),
        G, {}),
    "damped_newton": Entry(
        lambda key, **kw: baselines.damped_newton(n=500, rho=RHO, steps=STEPS, key=key, **kw),
        G, {"curvature_matrix": H}),
    "damped_newton_private": Entry(
        lambda key, **kw: baselines.damped_newton_private(n=500, rho=RHO, steps=STEPS, key=key,
                                                          **kw),
        G, {"curvature_matrix": H}),
    "dp_gd_oracle": Entry(
        lambda key, **kw: baselines.dp_gd_oracle(n=2000, rho=RHO, steps=STEPS, key=key, **kw),
        G_ORACLE, {"x": X_ORACLE, "y": Y_ORACLE}),
}
NAMES = sorted(REGISTRY)
