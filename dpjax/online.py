"""Online learners on a ball, as optax transforms (for Zhang, Tran & Cutkosky, NeurIPS 2022).

Each learner plays ``w_t``, then sees a linear loss ``l_t(w) = beta_t <u_t,
w>`` and moves: ``update(u_t, state, params=w_t, *, beta=1.0, ...)`` returns
``w_{t+1} - w_t``, so ``optax.apply_updates`` gives the next play. ``beta``
is the loss weight of the round (``beta_t = t^k`` inside the DP
online-to-batch conversion, where ``u_t`` is the normalized noisy sum
``ghat_t / beta_t``; 1 for plain online learning). Every quantity a learner
adapts to (step sizes, hints, wealth) is built from the ``u_t`` it is given and
nothing else, so fed with released (noisy) values it is post-processing
(privacy is lost if a learner ever reads a raw gradient).

The domain is the ball ``B(center, radius)`` (diameter ``D = 2 radius``);
``center`` is the first play ``w_1`` (the params at ``init``) unless given.
Every learner's play stays in the ball (the conversion's sensitivity bound
needs it). Parameters may be any pytree of float arrays.

Learners:

* :func:`ogd`: projected online gradient descent ``w_{t+1} = Pi(w_t - eta_t
  beta_t u_t)`` with the scale-free AdaGrad-norm step ``eta_t = D / sqrt(2
  sum_{s<=t} ||beta_s u_s||^2)`` (regret ``<= sqrt(2) D sqrt(sum_t ||beta_t
  u_t||^2)``), or the fixed scale ``eta_t = D / (G beta_t sqrt(t))``
  with a public bound ``G >= ||u_t||``, or a constant ``learning_rate``.
* :func:`optimistic_ogd`: optimistic OGD (Chiang et al. 2012; Rakhlin &
  Sridharan 2013; Zhang et al. 2022, Sec. 3) whose hint is the previous loss vector, ``h_t =
  beta_{t-1} u_{t-1}``; step ``D / sqrt(sum_s ||beta_s u_s - h_s||^2)``.
* :func:`strongly_convex_ogd`: OGD on the regularized losses ``<beta_t u_t, w>
  + a beta_t ||w - x_t||^2`` with ``a = mu / 8`` centred at the public
  averaged iterate ``x_t``, step ``eta_t = 1 / (2 a beta_{1:t})`` (our
  form of the strongly convex variant of Zhang et al. 2022, Sec. 4).
* :func:`kt_betting`: the parameter-free Krichevsky-Trofimov coin-betting
  learner (Orabona & Pal 2016), vector form, fed the coins ``c_t = clip_1(beta_t
  u_t / M)`` for a public scale ``M``, constrained to the ball with the
  Cutkosky-Orabona (2018) reduction (for the parameter-free variant of Zhang et al. 2022).

Examples:
  >>> import jax.numpy as jnp, optax
  >>> from dpjax import online
  >>> tx = online.ogd(radius=1.0)
  >>> w = jnp.zeros(2)
  >>> state = tx.init(w)
  >>> for _ in range(50):  # a fixed linear loss <(1, 0), w>: the best play is (-1, 0)
  ...   u, state = tx.update(jnp.array([1.0, 0.0]), state, w)
  ...   w = optax.apply_updates(w, u)
  >>> [round(float(v), 4) for v in w]
  [-1.0, 0.0]
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from dpjax import _common
from dpjax import _validate

__all__ = [
    "KTBettingState",
    "OGDState",
    "OptimisticOGDState",
    "StronglyConvexOGDState",
    "kt_betting",
    "ogd",
    "is_projected",
    "optimistic_ogd",
    "project_ball",
    "strongly_convex_ogd",
]


# ----------------------------------------------------------------------------
# Pytree arithmetic and the projection.
# ----------------------------------------------------------------------------


def _axpy(a: Any, x: Any, y: Any) -> Any:
  """``a x + y`` leaf by leaf (``a`` a scalar)."""
  return jax.tree.map(lambda xi, yi: (a * xi).astype(yi.dtype) + yi, x, y)


def _sub(x: Any, y: Any) -> Any:
  return jax.tree.map(lambda a, b: a - b, x, y)


def _sq_norm(x: Any) -> jax.Array:
  return sum(jnp.sum(jnp.square(leaf)) for leaf in jax.tree.leaves(x))


def _safe_rsqrt_ratio(num: jax.Array, sq: jax.Array) -> jax.Array:
  """``num / sqrt(sq)``, and 0 where ``sq == 0`` (no information yet: no move)."""
  pos = sq > 0
  return jnp.where(pos, num / jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def project_ball(params: Any, center: Any, radius: float | jax.Array) -> Any:
  """Euclidean projection onto ``B(center, radius)``: ``c + (w - c) min(1, R / ||w - c||)``.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax import online
    >>> online.project_ball(jnp.array([3.0, 4.0]), jnp.zeros(2), 1.0).tolist()
    [0.6000000238418579, 0.800000011920929]
  """
  diff = _sub(params, center)
  norm = jnp.sqrt(_sq_norm(diff))
  scale = jnp.where(norm > radius, radius / jnp.where(norm > 0, norm, 1.0), 1.0)
  return jax.tree.map(lambda c, d: c + (scale * d).astype(d.dtype), center, diff)


def is_projected(learner: Any) -> bool:
  """True for a learner built by this module: its plays stay in its ball, and it takes ``beta``/``x``.

  Examples:
    >>> import optax
    >>> from dpjax import online
    >>> online.is_projected(online.ogd(radius=1.0)), online.is_projected(optax.sgd(0.1))
    (True, False)
  """
  init = getattr(learner, "init", None)
  return getattr(init, "__module__", None) == __name__


def _check_radius(radius: Any) -> float:
  return _validate.positive_float(radius, "radius")


def _center(center: Any, params: Any) -> Any:
  if center is None:
    return params
  if jax.tree.structure(center) != jax.tree.structure(params) or any(
      jnp.shape(c) != jnp.shape(p)
      for c, p in zip(jax.tree.leaves(center), jax.tree.leaves(params))):
    raise ValueError("center must have the structure and shapes of the params; pass None to "
                     "centre the ball at the initial params.")
  return jax.tree.map(lambda c, p: jnp.asarray(c, p.dtype), center, params)


def _check_state(state: Any, cls: type) -> None:
  if not isinstance(state, cls):
    raise TypeError(f"state must be a {cls.__name__} from init(), got {type(state).__name__}.")


def _need_params(params: Any, name: str) -> None:
  if params is None:
    raise ValueError(f"{name}.update needs params (the current play w_t): call "
                     "update(u, state, params).")


def _beta(beta: Any) -> Any:
  if _validate.is_concrete(beta):
    return _validate.positive_float(beta, "beta")
  return beta


def _round_loss(updates: Any, state: Any, params: Any, beta: Any, cls: type, name: str) -> Any:
  """Checks one round's arguments; returns the loss vector ``beta * u_t``."""
  _check_state(state, cls)
  _need_params(params, name)
  beta = _beta(beta)
  return jax.tree.map(lambda u: beta * u, updates)


# ----------------------------------------------------------------------------
# Projected OGD.
# ----------------------------------------------------------------------------


class OGDState(NamedTuple):
  """State of :func:`ogd`."""

  count: jax.Array  # shape=(), int32: rounds played.
  sum_sq: jax.Array  # shape=(): sum_{s<=t} ||beta_s u_s||^2 (AdaGrad-norm).
  center: Any  # the ball's centre, like the params.


def ogd(
    *,
    radius: float,
    center: Any = None,
    learning_rate: float | None = None,
    gradient_bound: float | None = None,
) -> optax.GradientTransformationExtraArgs:
  """Projected OGD on ``B(center, radius)``.

  ``update(u_t, state, params=w_t, *, beta=1.0)`` returns ``Pi(w_t - eta_t
  beta u_t) - w_t``. The step, by priority: a constant ``learning_rate``; the
  fixed scale ``D / (G beta sqrt(t))`` with ``gradient_bound = G >= ||u_t||``
  (regret ``<= 1.5 D G`` per unit of ``beta_t sqrt(t)``); default, the
  scale-free AdaGrad-norm step ``D / sqrt(2 sum_{s<=t} ||beta_s u_s||^2)``
  (regret ``<= sqrt(2) D sqrt(sum_t ||beta_t u_t||^2)``, needing neither T nor
  G).

  Args:
    radius: the ball's radius R (> 0); ``D = 2R``.
    center: the ball's centre (default: the params at ``init``).
    learning_rate: a constant step (> 0) instead of the adaptive one.
    gradient_bound: G (> 0) for the fixed-scale step.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax import online
    >>> tx = online.ogd(radius=2.0)
    >>> state = tx.init(jnp.zeros(1))
    >>> u, state = tx.update(jnp.array([3.0]), state, jnp.zeros(1))
    >>> round(float(u[0]), 4)  # eta_1 = 4 / sqrt(2 * 9): a step of 2.83, projected to the ball
    -2.0
  """
  radius = _check_radius(radius)
  diameter = 2.0 * radius
  if learning_rate is not None and gradient_bound is not None:
    raise ValueError("pass at most one of learning_rate (constant step) or gradient_bound "
                     "(fixed-scale step D / (G beta sqrt(t))).")
  if learning_rate is not None:
    learning_rate = _validate.positive_float(learning_rate, "learning_rate")
  if gradient_bound is not None:
    gradient_bound = _validate.positive_float(gradient_bound, "gradient_bound")

  def init_fn(params):
    return OGDState(count=jnp.zeros((), jnp.int32),
                    sum_sq=jnp.zeros((), _common.float_dtype(params)),
                    center=_center(center, params))

  def update_fn(updates, state, params=None, *, beta=1.0, **extra):
    del extra
    loss = _round_loss(updates, state, params, beta, OGDState, "ogd")
    count = optax.safe_increment(state.count)
    sum_sq = state.sum_sq + _sq_norm(loss)
    if learning_rate is not None:
      eta = jnp.asarray(learning_rate)
    elif gradient_bound is not None:
      eta = diameter / (gradient_bound * beta * jnp.sqrt(count.astype(state.sum_sq.dtype)))
    else:
      eta = _safe_rsqrt_ratio(diameter, 2.0 * sum_sq)
    new = project_ball(_axpy(-eta, loss, params), state.center, radius)
    return _sub(new, params), OGDState(count=count, sum_sq=sum_sq, center=state.center)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


# ----------------------------------------------------------------------------
# Optimistic OGD.
# ----------------------------------------------------------------------------


class OptimisticOGDState(NamedTuple):
  """State of :func:`optimistic_ogd`."""

  count: jax.Array  # shape=(), int32: rounds played.
  secondary: Any  # y_t, like the params: the iterate before the hint's step.
  hint: Any  # h_{t+1} = beta_t u_t, the last loss vector.
  sum_sq: jax.Array  # shape=(): sum_{s<=t} ||beta_s u_s - h_s||^2.
  max_sq: jax.Array  # shape=(): max_{s<=t} ||beta_s u_s - h_s||^2.
  center: Any  # the ball's centre.


def optimistic_ogd(*, radius: float, center: Any = None) -> optax.GradientTransformationExtraArgs:
  """Optimistic projected OGD with the previous loss vector as hint (Zhang et al. 2022, Sec. 3).

  Keeps a secondary iterate ``y``. On ``u_t`` (loss vector ``v_t = beta
  u_t``, hint ``h_t = v_{t-1}``, ``h_1 = 0``): ``y_{t+1} = Pi(y_t - eta_t
  v_t)`` with ``eta_t = D / sqrt(S_t)``, ``S_t = sum_{s<=t} ||v_s -
  h_s||^2``; then the next play ``w_{t+1} = Pi(y_{t+1} - eta'_{t+1} v_t)``
  with ``eta'_{t+1} = D / sqrt(S_t + max_{s<=t} ||v_s - h_s||^2)`` (the max
  stands in for the unseen next difference). Regret ``O(D sqrt(sum_t ||v_t -
  h_t||^2))``: when consecutive losses are close (the DP conversion's noisy
  sums move by one step's ``delta_t`` plus fresh node noise), it is far below
  plain OGD's.

  Args:
    radius: the ball's radius (> 0).
    center: the ball's centre (default: the params at ``init``).
  """
  radius = _check_radius(radius)
  diameter = 2.0 * radius

  def init_fn(params):
    zeros = jax.tree.map(jnp.zeros_like, params)
    dtype = _common.float_dtype(params)
    return OptimisticOGDState(
        count=jnp.zeros((), jnp.int32), secondary=params, hint=zeros,
        sum_sq=jnp.zeros((), dtype), max_sq=jnp.zeros((), dtype),
        center=_center(center, params))

  def update_fn(updates, state, params=None, *, beta=1.0, **extra):
    del extra
    loss = _round_loss(updates, state, params, beta, OptimisticOGDState, "optimistic_ogd")
    diff_sq = _sq_norm(_sub(loss, state.hint))
    sum_sq = state.sum_sq + diff_sq
    max_sq = jnp.maximum(state.max_sq, diff_sq)
    eta = _safe_rsqrt_ratio(diameter, sum_sq)
    secondary = project_ball(_axpy(-eta, loss, state.secondary), state.center, radius)
    eta_next = _safe_rsqrt_ratio(diameter, sum_sq + max_sq)
    new = project_ball(_axpy(-eta_next, loss, secondary), state.center, radius)
    return _sub(new, params), OptimisticOGDState(
        count=optax.safe_increment(state.count), secondary=secondary, hint=loss,
        sum_sq=sum_sq, max_sq=max_sq, center=state.center)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


# ----------------------------------------------------------------------------
# The regularized learner for strongly convex losses.
# ----------------------------------------------------------------------------


class StronglyConvexOGDState(NamedTuple):
  """State of :func:`strongly_convex_ogd`."""

  count: jax.Array  # shape=(), int32: rounds played.
  beta_sum: jax.Array  # shape=(): beta_{1:t}, the running sum of the loss weights.
  center: Any  # the ball's centre.


def strongly_convex_ogd(
    *, mu: float, radius: float, center: Any = None, reg_weight: float | None = None,
) -> optax.GradientTransformationExtraArgs:
  """OGD on ``<beta_t u_t, w> + a beta_t ||w - x_t||^2`` (derived here; Zhang et al. 2022, Sec. 4).

  The regularizer is centred at the public averaged iterate ``x_t`` of the
  conversion, passed as the extra argument ``x``; ``a = reg_weight``
  (default ``mu / 8``). The round's loss is ``2 a beta_t``-strongly convex, so
  ``eta_t = 1 / (2 a beta_{1:t})`` (``= 4 / (mu beta_{1:t})`` at the default)
  gives logarithmic regret, and with ``mu``-strongly convex population loss
  the conversion's rate ``O~(1/(mu T) + d / (mu rho T^2))``.

  ``update(u_t, state, params=w_t, *, x, beta=1.0)`` returns ``Pi(w_t - eta_t
  (beta u_t + 2 a beta (w_t - x))) - w_t``.

  Args:
    mu: strong-convexity modulus of the population loss (> 0).
    radius: the ball's radius (> 0).
    center: the ball's centre (default: the params at ``init``).
    reg_weight: ``a`` (> 0), default ``mu / 8``.
  """
  mu = _validate.positive_float(mu, "mu")
  radius = _check_radius(radius)
  a = mu / 8.0 if reg_weight is None else _validate.positive_float(reg_weight, "reg_weight")

  def init_fn(params):
    return StronglyConvexOGDState(count=jnp.zeros((), jnp.int32),
                                  beta_sum=jnp.zeros((), _common.float_dtype(params)),
                                  center=_center(center, params))

  def update_fn(updates, state, params=None, *, x=None, beta=1.0, **extra):
    del extra
    _check_state(state, StronglyConvexOGDState)
    _need_params(params, "strongly_convex_ogd")
    if x is None:
      raise ValueError("strongly_convex_ogd.update needs x= (the public averaged iterate x_t "
                       "the regularizer is centred at).")
    beta = _beta(beta)
    beta_sum = state.beta_sum + beta
    eta = 1.0 / (2.0 * a * beta_sum)
    grad = jax.tree.map(lambda u, w, c: beta * u + 2.0 * a * beta * (w - c), updates, params, x)
    new = project_ball(_axpy(-eta, grad, params), state.center, radius)
    return _sub(new, params), StronglyConvexOGDState(
        count=optax.safe_increment(state.count), beta_sum=beta_sum, center=state.center)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


# ----------------------------------------------------------------------------
# KT coin betting on a ball.
# ----------------------------------------------------------------------------


class KTBettingState(NamedTuple):
  """State of :func:`kt_betting`."""

  count: jax.Array  # shape=(), int32: rounds played, t.
  wealth: jax.Array  # shape=(): W_t = eps_0 - sum_{s<=t} <c~_s, what_s - center>.
  theta: Any  # -sum_{s<=t} c~_s, like the params.
  unconstrained: Any  # what_{t+1}: the bettor's next (unprojected) play.
  center: Any  # x_1: the betting origin and the ball's centre.


def kt_betting(
    *, radius: float, scale: float | jax.Array, center: Any = None, initial_wealth: float = 1.0,
) -> optax.GradientTransformationExtraArgs:
  """Parameter-free KT coin betting on ``B(center, radius)`` (Orabona & Pal 2016).

  The coin of a round is ``c_t = clip_1(beta u_t / scale)`` (``scale = M``, a
  public bound; clipping a released vector is post-processing). The bettor
  plays ``what_t = x_1 + (theta_t / t) W_{t-1}`` with ``theta_t = -sum_{s<t}
  c~_s`` and wealth ``W_t = W_{t-1} - <c~_t, what_t - x_1>``, ``W_0 =
  initial_wealth`` (Orabona & Pal 2016). The constraint uses the
  Cutkosky-Orabona (2018) reduction: the play is ``w_t = Pi(what_t)`` and the
  bettor is fed ``c~_t = (c_t + ||c_t|| s_t) / 2``, with ``s_t`` the unit
  vector from ``Pi(what_t)`` to ``what_t`` (0 inside), which at most doubles
  the regret ``O~(W_0 + ||u - x_1|| sqrt(T log(1 + ||u - x_1|| T / W_0)))`` in
  units of ``scale``. No step size and no knowledge of ``||u - x_1||``.

  Args:
    radius: the ball's radius (> 0).
    scale: ``M`` (> 0; a scalar array may be traced), the public scale of the loss
      vectors.
    center: ``x_1``, the betting origin and the ball's centre (default: the
      params at ``init``).
    initial_wealth: ``W_0 = eps_0`` (> 0), in units of ``scale``.
  """
  radius = _check_radius(radius)
  scale = _common.positive_scalar(scale, "scale")
  initial_wealth = _validate.positive_float(initial_wealth, "initial_wealth")

  def init_fn(params):
    c = _center(center, params)
    return KTBettingState(count=jnp.zeros((), jnp.int32),
                          wealth=jnp.asarray(initial_wealth, _common.float_dtype(params)),
                          theta=jax.tree.map(jnp.zeros_like, params), unconstrained=c, center=c)

  def update_fn(updates, state, params=None, *, beta=1.0, **extra):
    del extra
    coin = jax.tree.map(lambda v: v / scale,
                        _round_loss(updates, state, params, beta, KTBettingState, "kt_betting"))
    norm = jnp.sqrt(_sq_norm(coin))
    coin = jax.tree.map(lambda v: v * jnp.where(norm > 1.0, 1.0 / jnp.where(norm > 0, norm, 1.0),
                                                1.0), coin)
    norm = jnp.minimum(norm, 1.0)
    what = state.unconstrained
    played = project_ball(what, state.center, radius)
    out = _sub(what, played)
    dist = jnp.sqrt(_sq_norm(out))
    unit = jax.tree.map(lambda v: jnp.where(dist > 0, v / jnp.where(dist > 0, dist, 1.0), 0.0),
                        out)
    surrogate = jax.tree.map(lambda c, s: 0.5 * (c + norm * s), coin, unit)
    dots = sum(jnp.sum(c * (w - x0)) for c, w, x0 in zip(
        jax.tree.leaves(surrogate), jax.tree.leaves(what), jax.tree.leaves(state.center)))
    wealth = state.wealth - dots
    theta = _sub(state.theta, surrogate)
    count = optax.safe_increment(state.count)
    t_next = (count + 1).astype(state.wealth.dtype)
    what_next = jax.tree.map(lambda x0, th: x0 + th * (wealth / t_next), state.center, theta)
    new = project_ball(what_next, state.center, radius)
    return _sub(new, params), KTBettingState(
        count=count, wealth=wealth, theta=theta, unconstrained=what_next, center=state.center)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
