"""DP-SGD with Poisson subsampling as an optax transform (Abadi et al., CCS 2016).

One step at ``w_t`` (Abadi et al. 2016; ``sgd_priv`` of the reference code of Ganesh et al.
NeurIPS 2023, tensorflow/privacy ``research/dp_newton``):

1. Poisson sample: each of the ``n`` examples is included independently with
   probability ``q`` (:func:`dpjax.mechanisms.sampling.sample`; the realised batch has a
   random size, held in a fixed-size buffer of ``cap`` slots, padded slots
   masked out);
2. clip every sampled example's gradient to norm ``C`` and sum
   (:func:`dpjax.problem.minibatch.clipped_sum` with the sample's mask);
3. ``w_{t+1} = w_t - eta (sum + N(0, (z C)^2 I)) / (q n)``.

The sum is divided by the EXPECTED batch size ``B = q n`` (a public constant),
never by the realised count, exactly as the reference code (``(|S|/B) mean_S``).

Sensitivity argument: neighbouring datasets differ by adding or removing one
example (the relation under which Poisson subsampling amplifies privacy).
Every sampled example enters the sum through ``clip(., C)``, so one example
moves the sum by at most ``C`` in L2, and ``N(0, (z C)^2 I)`` is a Gaussian
mechanism of noise multiplier ``z`` on a sensitivity-1 query after scaling.
With Poisson sampling at rate ``q`` one step is the subsampled Gaussian
mechanism, whose RDP curve ``accounting.subsampled_gaussian_rdp(q, z)``
(Mironov, Talwar & Zhang 2019) is charged to the accountant at every step
(RDP composes additively over steps). The buffer cap truncates a batch with
probability ``P(Binomial(n + 1, q) > cap) = sampler.overflow_prob`` (``n + 1``:
the neighbour with one more example); that total-variation slack is charged
to the accountant's ``truncation`` with every step and paid from delta in
:func:`dpjax.accounting.epsilon_spent`. Dividing by the public ``q n`` and
multiplying by ``eta`` is post-processing.

The GLM path (``loss="logistic"`` or ``"least_squares"``, ``data = (x, y)``)
uses the fused clipped sum ``(e * scale) @ x`` and never builds a
``[batch, d]`` gradient tensor; ``loss_fn=f(params, example)`` takes any
params pytree and any data pytree with leading axis ``n``.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _common
from dpjax import _validate
from dpjax import accounting
from dpjax.mechanisms import noise
from dpjax.problem import minibatch
from dpjax.mechanisms import sampling

__all__ = ["DPSGDState", "dp_sgd", "dp_sgd_noise_multiplier", "dp_sgd_step"]

# 1 / L1 for the logistic loss with ||x|| <= 1 (L1 = 1/4): the reference code's hard-coded step.
_LOGISTIC_LEARNING_RATE = 4.0


class DPSGDState(NamedTuple):
  """State of :func:`dp_sgd`.

  ``optax.tree.get(state, "rho")`` returns ``accountant.rho`` (the zCDP word,
  0 here: DP-SGD charges the accountant's RDP curve ``accountant.rdp``); read
  the guarantee with :func:`dpjax.accounting.epsilon_spent`.
  """

  count: jax.Array  # shape=(), int32: private steps taken (refused steps excluded).
  key: jax.Array  # shape=(), typed PRNG key, split on every update.
  accountant: accounting.AccountantState  # subsampled-Gaussian RDP and truncation slack spent.
  noise_std: jax.Array  # shape=(), params dtype: z C / (q n), noise std on the averaged gradient.
  budget_exhausted: jax.Array  # shape=(), bool: a step past `steps` was refused.


def _resolve_learning_rate(learning_rate: Any, loss: str | None) -> Any:
  if learning_rate is None:
    if loss == "logistic":
      return _LOGISTIC_LEARNING_RATE
    what = f"loss={loss!r}" if loss is not None else "a loss_fn"
    raise TypeError(
        f"learning_rate is required with {what}: the default 4.0 = 1/L1 holds only for "
        "loss='logistic' with ||x|| <= 1; pass learning_rate=<eta > 0>."
    )
  return _common.positive_scalar(learning_rate, "learning_rate")


def _check_sampler(sampler: Any) -> sampling.PoissonSampler:
  if not isinstance(sampler, sampling.PoissonSampler):
    raise TypeError("sampler must be a PoissonSampler from dpjax.mechanisms.sampling."
                    f"poisson_sampler, got {type(sampler).__name__}.")
  return sampler


def dp_sgd_noise_multiplier(
    *,
    epsilon: float,
    steps: int,
    sampler: sampling.PoissonSampler,
    delta: float | None = None,
) -> float:
  """The noise multiplier ``z`` that :func:`dp_sgd` calibrates from ``epsilon``.

  Each DP-SGD step releases a clipped sum of L2 sensitivity ``C`` plus
  ``N(0, (z C)^2 I)`` on the Poisson sample of rate ``q`` (Abadi et al., CCS
  2016): the subsampled Gaussian mechanism, whose RDP curve
  ``accounting.subsampled_gaussian_rdp(q, z)`` (Mironov, Talwar & Zhang 2019)
  composes additively over the steps (Mironov, CSF 2017). This returns the
  smallest ``z`` whose ``steps``-fold composition is ``(epsilon, delta)``-DP
  by the RDP accountant, the sampler's cap slack
  ``(1 + e^epsilon) steps overflow_prob`` paid from ``delta`` first
  (:func:`dpjax.accounting.calibrate_noise_multiplier`; host float64,
  memoised). :func:`dp_sgd` with ``epsilon=`` calls this function on its own
  sampler, ``sampling.poisson_sampler(n, batch_size=..., sampling_rate=...,
  cap=..., overflow_prob=...)`` of its arguments, and adds noise of std
  ``z C`` to the clipped sum (``state.noise_std = z C / (q n)``); it is public
  so that a caller can read ``z`` without building the transform.

  Args:
    epsilon: the target epsilon > 0, the total over ``steps`` steps.
    steps: number of steps T, an int >= 1.
    sampler: the Poisson sampler of every step
      (:func:`dpjax.mechanisms.sampling.poisson_sampler`): its rate ``q``, its
      ``n`` and its per-step ``overflow_prob``.
    delta: the target delta in ``(0, 1)``; default ``1 / n^2``, as in
      :func:`dp_sgd` (Ganesh et al., NeurIPS 2023, Sec. 6).

  Returns:
    ``z`` as a Python float.

  Raises:
    TypeError: a ``sampler`` that is not a ``PoissonSampler``, a non-numeric
      ``epsilon`` or ``delta``, a non-integer ``steps``.
    ValueError: ``epsilon <= 0``, ``steps`` missing (``None``) or ``< 1``,
      ``delta`` outside ``(0, 1)``, or a target that the cap's slack or the
      calibrated range of multipliers cannot meet.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.mechanisms import sampling
    >>> from dpjax.transforms import dp_sgd, dp_sgd_noise_multiplier
    >>> sampler = sampling.poisson_sampler(2000, batch_size=200)
    >>> z = dp_sgd_noise_multiplier(epsilon=1.0, delta=1e-6, steps=50, sampler=sampler)
    >>> round(z, 3)
    3.55
    >>> tx = dp_sgd(n=2000, batch_size=200, epsilon=1.0, delta=1e-6, steps=50, key=0)
    >>> bool(tx.init(jnp.zeros(5)).noise_std == jnp.float32(z * 1.0 / 200))  # z C / (q n)
    True
  """
  sampler = _check_sampler(sampler)
  epsilon = _validate.positive_float(epsilon, "epsilon")
  if steps is None:
    raise ValueError(
        "epsilon is a total budget and needs steps=<T> to calibrate the noise multiplier "
        "over T steps; pass steps, or pass noise_multiplier=<z> instead."
    )
  steps = _validate.positive_int(steps, "steps")
  delta = 1.0 / float(sampler.n) ** 2 if delta is None else delta
  delta = _validate.float_in_open_interval(delta, "delta", 0.0, 1.0)
  # The cap's total-variation slack, steps * overflow_prob, is paid from delta
  # (accounting.epsilon_spent: delta_rdp + (1 + e^eps) * truncation <= delta).
  return float(accounting.calibrate_noise_multiplier(
      epsilon, delta, steps=steps, sampling_rates=sampler.sampling_rate,
      overflow_prob=sampler.overflow_prob))


def _resolve_noise_multiplier(
    noise_multiplier: Any, epsilon: Any, delta: Any, steps: int | None,
    sampler: sampling.PoissonSampler,
) -> float:
  """``z``: given, or :func:`dp_sgd_noise_multiplier` of ``(epsilon, delta)`` over ``steps``."""
  if (noise_multiplier is None) == (epsilon is None):
    raise ValueError(
        "pass exactly one privacy parameter: noise_multiplier=<z> (optionally with steps to "
        "enforce a horizon) or epsilon=<eps> with steps=<T> (and delta, default 1/n^2); got "
        + ("neither." if epsilon is None else "both.")
    )
  if noise_multiplier is not None:
    if delta is not None:
      raise ValueError(
          "delta is only used with epsilon (to calibrate the noise multiplier); with "
          "noise_multiplier=<z> pass delta to accounting.epsilon_spent(state.accountant, delta) "
          "instead."
      )
    return _validate.positive_float(noise_multiplier, "noise_multiplier")
  return dp_sgd_noise_multiplier(epsilon=epsilon, steps=steps, sampler=sampler, delta=delta)


def _check_data(data: Any, *, glm: bool, loss: str | None, n: int) -> Any:
  """Static checks of the full dataset (values too when concrete); returns it."""
  if data is None:
    raise TypeError(
        "dp_sgd.update needs the full dataset: tx.update(None, state, params, data=(x, y)) "
        "on the GLM path, or data=<pytree with leading axis n> with loss_fn."
    )
  if glm:
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
      raise TypeError(f"with loss={loss!r}, data must be a pair (x [n, d], y [n]), got "
                      f"{type(data).__name__}.")
    x, y = data
    _validate.as_float_array(x, "data[0] (x)", ndim=2)
    _validate.as_float_array(y, "data[1] (y)", ndim=1)
    if np.shape(x)[0] != n or np.shape(y)[0] != n:
      raise ValueError(f"data has x of shape {np.shape(x)} and y of shape {np.shape(y)}, but "
                       f"dp_sgd was built for n={n} examples; pass all n rows.")
    if loss == "logistic":
      _validate.check_labels(y, "data[1] (y)")
    return jnp.asarray(x), jnp.asarray(y)
  leaves = jax.tree.leaves(data)
  if not leaves:
    raise ValueError("data is an empty pytree; pass the n examples (leading axis n).")
  for leaf in leaves:
    shape = np.shape(leaf)
    if not shape or shape[0] != n:
      raise ValueError(f"every leaf of data needs leading axis n={n} (one row per example), "
                       f"got a leaf of shape {shape}.")
  return data


def dp_sgd_step(
    params: Any,
    key: jax.Array,
    data: Any,
    learning_rate: jax.typing.ArrayLike,
    noise_std: jax.typing.ArrayLike,
    *,
    sampler: sampling.PoissonSampler,
    clip_norm: float = 1.0,
    loss: str | None = "logistic",
    loss_fn: Callable[[Any, Any], jax.Array] | None = None,
    exact: bool = True,
) -> tuple[Any, jax.Array]:
  """One DP-SGD step at ``params``, with a traceable learning rate and noise std.

  The body of :func:`dp_sgd`'s ``update`` (which calls it, so the two are the
  same computation bit for bit): split ``key`` as
  ``new_key, sample_key, noise_key = jax.random.split(key, 3)``, draw the
  Poisson sample of ``sampler`` from ``sample_key``, clip every sampled
  example's gradient to ``clip_norm`` ``C`` and sum
  (:func:`dpjax.problem.minibatch.clipped_sum` with the sample's mask),
  release the sum with :func:`dpjax.mechanisms.noise.add_gaussian`
  (sensitivity ``C``, std ``noise_std``) from ``noise_key``, and return the
  update ``-learning_rate (sum + noise) / (q n)``, ``q n`` the sampler's
  public expected size (Abadi et al., CCS 2016).

  ``learning_rate`` and ``noise_std`` may be Python numbers or scalar arrays,
  traced ones included, so that one compiled program can run a grid of them
  (``jax.vmap``) or a traced number of steps (``jax.lax.fori_loop``); the
  options after ``*`` are static. With concrete ``noise_std = z C`` the noise
  is planned on the host, with a traced one in the graph
  (:func:`dpjax.mechanisms.noise.add_gaussian`).

  Privacy: neighbouring datasets differ by adding or removing one example;
  each sampled example enters the sum through ``clip(., C)``, so the sum has
  L2 sensitivity ``C`` and the release is the Poisson-subsampled Gaussian
  mechanism with rate ``q`` and multiplier ``z = noise_std / C``, of RDP curve
  ``accounting.subsampled_gaussian_rdp(q, z)`` (Mironov, Talwar & Zhang 2019),
  plus the cap's truncation slack ``sampler.overflow_prob`` and the exact
  sampler's ``noise.tv_slack(params)``. THIS FUNCTION CHARGES NOTHING: the
  caller must account every step, as :func:`dp_sgd` does with
  :func:`dpjax.accounting.charge_rdp` (or charge ``T`` steps at once, RDP
  composing additively). Multiplying by ``learning_rate`` and dividing by the
  public ``q n`` are post-processing.

  Args:
    params: ``w_t``: a 1-D float array on the GLM path, any pytree of float
      arrays with ``loss_fn``.
    key: a typed PRNG key, used once (pass on the returned one).
    data: all ``n`` examples: ``(x [n, d], y [n])`` on the GLM path, any
      pytree with leading axis ``n`` with ``loss_fn``.
    learning_rate: ``eta``, in units of the averaged gradient (may be traced).
    noise_std: ``z C``, the std of the noise on the clipped sum (may be
      traced); ``0`` adds none (NOT private).
    sampler: the Poisson sampler (:func:`dpjax.mechanisms.sampling.poisson_sampler`)
      over the ``n`` examples.
    clip_norm: ``C > 0``, the per-example gradient clip norm.
    loss: ``"logistic"`` or ``"least_squares"``, or ``None`` with ``loss_fn``.
    loss_fn: a per-example loss ``f(params, example) -> scalar`` (with
      ``loss=None``).
    exact: ``False`` draws floating-point normals: NOT private (Mironov 2012).

  Returns:
    ``(updates, new_key)``: the update, shaped like ``params`` (add it to
    ``params``), and the key for the next step.

  Raises:
    TypeError, ValueError: a bad ``sampler``, ``clip_norm``, ``loss``/``loss_fn``
      or ``exact``, or ``data`` whose leading axis is not the sampler's ``n``;
      a concrete ``noise_std`` that :func:`dpjax.mechanisms.noise.add_gaussian`
      rejects.

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> from dpjax import data
    >>> from dpjax.mechanisms import sampling
    >>> from dpjax.transforms import dp_sgd_step
    >>> x, y = data.synthetic(0, n=1000, d=5)
    >>> sampler = sampling.poisson_sampler(1000, batch_size=100)
    >>> run = jax.jit(jax.vmap(lambda lr: dp_sgd_step(
    ...     jnp.zeros(5), jax.random.key(0), (x, y), lr, 1.5, sampler=sampler)[0]))
    >>> run(jnp.array([1.0, 4.0])).shape
    (2, 5)
  """
  _check_sampler(sampler)
  _validate.positive_float(clip_norm, "clip_norm")
  loss, loss_fn = minibatch.check_loss(loss, loss_fn)
  _common.check_flag(exact, "exact")
  for leaf in jax.tree.leaves(data):
    if not np.shape(leaf) or np.shape(leaf)[0] != sampler.n:
      raise ValueError(f"every leaf of data needs leading axis n={sampler.n} (the sampler's), "
                       f"got a leaf of shape {np.shape(leaf)}.")
  new_key, sample_key, noise_key = jax.random.split(key, 3)
  idx, mask = sampling.sample(sampler, sample_key)
  batch = jax.tree.map(lambda leaf: jnp.take(leaf, idx, axis=0), data)
  total = minibatch.clipped_sum(params, batch, bound=clip_norm, loss=loss, loss_fn=loss_fn,
                                mask=mask)
  noisy = noise.add_gaussian(noise_key, total, sensitivity=clip_norm, noise_std=noise_std,
                             exact=exact)  # Where the noise is drawn: the caller charges it.
  expected_size = sampler.expected_size  # q n: the public normaliser.
  return jax.tree.map(lambda g: (-learning_rate / expected_size) * g, noisy), new_key


def dp_sgd(
    *,
    n: int,
    batch_size: int | None = None,
    sampling_rate: float | None = None,
    noise_multiplier: float | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    steps: int | None = None,
    clip_norm: float = 1.0,
    learning_rate: float | jax.Array | None = None,
    loss: str | None = "logistic",
    loss_fn: Callable[[Any, Any], jax.Array] | None = None,
    cap: int | None = None,
    overflow_prob: float = 1e-15,
    key: int | jax.Array,
    disable_noise_for_testing: bool = False,
    unsafe_float_noise: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """DP-SGD with Poisson subsampling and an RDP accountant (Abadi et al. 2016; Mironov 2017).

  ``update(None, state, params, *, data)`` draws this step's Poisson sample
  of the ``n`` examples in ``data``, clips each sampled example's gradient to
  ``clip_norm`` ``C``, adds ``N(0, (z C)^2 I)`` to the sum and returns
  ``-learning_rate * (sum + noise) / (q n)`` (add it to ``params``); the
  first argument is ignored. The keys of the sample and the noise are split
  off the state key, fresh at every step
  (``new_key, sample_key, noise_key = jax.random.split(state.key, 3)``);
  the step itself is :func:`dp_sgd_step`, which a caller that accounts for
  itself can run with a traced learning rate and noise std.
  Every step charges the accountant the subsampled Gaussian RDP curve
  ``accounting.subsampled_gaussian_rdp(q, z)`` (computed once, on the host)
  and the cap's truncation slack ``sampler.overflow_prob``: see the module
  docstring for the sensitivity argument (add/remove neighbours, clipped sum
  of sensitivity ``C``).

  Sampling: exactly one of ``batch_size`` (the expected size ``B = q n``,
  ``1 <= B <= n``) or ``sampling_rate`` ``q`` in ``(0, 1]``
  (:func:`dpjax.mechanisms.sampling.poisson_sampler`, with ``cap`` and ``overflow_prob``).

  Budget: exactly one of ``noise_multiplier`` ``z`` (``steps`` optional, a
  horizon), or ``epsilon`` with ``steps`` (``delta`` defaults to ``n^-2``,
  as in Ganesh et al. 2023, Sec. 6): then ``z`` is the smallest multiplier whose ``steps``-fold RDP
  composition is ``(epsilon, delta)``-DP
  (:func:`dp_sgd_noise_multiplier`, public), with the cap's slack
  ``(1 + e^epsilon) steps overflow_prob`` taken off delta first. With
  ``steps`` the transform refuses step ``steps + 1``: eagerly it raises
  ``ValueError``; under ``jit``/``vmap``/``scan`` it returns zeros, charges
  nothing and sets ``state.budget_exhausted``. The budget is a Python number
  (the RDP curve is host float64); the ``key`` may be traced (build one
  transform per key inside ``jax.vmap``), and so may ``learning_rate``.

  Args:
    n: number of examples (public).
    batch_size: expected batch size ``B = q n`` (instead of ``sampling_rate``).
    sampling_rate: Poisson inclusion probability ``q`` in ``(0, 1]``.
    noise_multiplier: ``z > 0``: noise std ``z C`` on the clipped sum.
    epsilon: target epsilon (instead of ``noise_multiplier``); needs ``steps``.
    delta: the target's delta in ``(0, 1)``; default ``1 / n^2``.
    steps: number of steps T.
    clip_norm: ``C > 0``, the per-example gradient clip norm.
    learning_rate: ``eta > 0``, in units of the averaged gradient; default
      4 = 1/L1 for ``loss="logistic"``, required otherwise.
    loss: ``"logistic"``, ``"least_squares"`` (``data = (x [n, d], y [n])``,
      params a vector) or ``None`` with ``loss_fn``.
    loss_fn: a per-example loss ``f(params, example) -> scalar``; params any
      pytree, ``data`` any pytree with leading axis ``n``.
    cap: the sample buffer size (default: the smallest cap whose overflow
      probability is ``<= overflow_prob``).
    overflow_prob: the per-step truncation slack for the default cap.
    key: int seed or typed PRNG key (``jax.random.key``); required.
    disable_noise_for_testing: if True, adds no noise and the output is NOT
      private (the sampling is unchanged and the accountant is still
      charged). For tests only.
    unsafe_float_noise: if True, draws the noise as ``jax.random.normal`` in
      floating point instead of :mod:`dpjax.mechanisms.noise`'s exact sampler: NOT
      private (Mironov 2012); for measuring what exactness costs. Issues
      :class:`dpjax.PrivacyLeakWarning`.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` whose state is a
    :class:`DPSGDState`.

  Raises:
    ValueError, TypeError: eagerly, at construction, for a bad ``n``,
      sampling parameter, budget, clip norm, learning rate, loss, key or
      flag; at ``update`` for missing or misshaped ``data`` or ``params``.

  Examples:
    >>> import jax, optax
    >>> from dpjax import accounting, data
    >>> from dpjax.problem import glm
    >>> from dpjax.transforms import dp_sgd
    >>> x, y = data.synthetic(0, n=2000, d=5)
    >>> tx = dp_sgd(n=2000, batch_size=200, epsilon=1.0, delta=1e-6, steps=50, key=0)
    >>> w = jax.numpy.zeros(5)
    >>> state = tx.init(w)
    >>> step = jax.jit(lambda w, s: tx.update(None, s, w, data=(x, y)))
    >>> for _ in range(50):
    ...   u, state = step(w, state)
    ...   w = optax.apply_updates(w, u)
    >>> round(accounting.epsilon_spent(state.accountant, 1e-6), 2), int(state.count)
    (1.0, 50)
    >>> bool(glm.logistic_loss(w, x, y) < glm.logistic_loss(0 * w, x, y))
    True
  """
  n = _validate.positive_int(n, "n")
  loss_fn_given = loss_fn is not None
  if loss_fn_given and loss is not None:
    raise ValueError(
        f"pass loss=None together with loss_fn (loss defaults to 'logistic'); got loss={loss!r} "
        "and a loss_fn."
    )
  loss, loss_fn = minibatch.check_loss(loss, loss_fn)
  glm = loss is not None
  if steps is not None:
    steps = _validate.positive_int(steps, "steps")
  clip_norm = _validate.positive_float(clip_norm, "clip_norm")
  learning_rate = _resolve_learning_rate(learning_rate, loss)
  no_noise = _common.check_flag(disable_noise_for_testing, "disable_noise_for_testing")
  exact = _common.exact_noise(unsafe_float_noise, "dp_sgd")
  slack = exact and not no_noise
  sampler = sampling.poisson_sampler(
      n, sampling_rate=sampling_rate, batch_size=batch_size, cap=cap, overflow_prob=overflow_prob)
  z = _resolve_noise_multiplier(noise_multiplier, epsilon, delta, steps, sampler)
  key = _common.canonical_key(key)  # After every host check: making a key runs JAX.

  # The one place the DP-SGD noise and its charge are derived.
  rdp_step = accounting.subsampled_gaussian_rdp(sampler.sampling_rate, z)
  sum_std = 0.0 if no_noise else z * clip_norm  # on the clipped sum (sensitivity C).
  expected_size = sampler.expected_size  # q n: the public normaliser.

  def init_fn(params: Any) -> DPSGDState:
    if params is None:
      raise TypeError("init(params) needs the parameters" + (
          ": a 1-D float array of shape (d,)." if glm else " (a pytree of float arrays)."))
    if glm:
      params = _common.check_params(params)
    return DPSGDState(
        count=jnp.zeros((), jnp.int32),
        key=key,
        accountant=accounting.init_accountant(),
        noise_std=jnp.asarray(sum_std / expected_size, _common.float_dtype(params)),
        budget_exhausted=jnp.zeros((), bool),
    )

  def update_fn(updates, state, params=None, *, data=None, **extra_args):
    del updates, extra_args  # DP-SGD computes its own clipped gradients from data.
    if not isinstance(state, DPSGDState):
      raise TypeError(f"state must be a DPSGDState from init(), got {type(state).__name__}.")
    if params is None:
      raise TypeError("dp_sgd.update needs params (w_t): tx.update(None, state, params, "
                      "data=...).")
    data = _check_data(data, glm=glm, loss=loss, n=n)
    if glm:
      params = _common.check_vector(params, "params", np.shape(data[0])[1])
    ok = _common.gate(state.count, steps, "dp_sgd")
    step, new_key = dp_sgd_step(  # Draws the noise: charged below.
        params, state.key, data, learning_rate, sum_std, sampler=sampler, clip_norm=clip_norm,
        loss=loss, loss_fn=loss_fn, exact=exact)
    out = jax.tree.map(lambda u: jnp.where(ok, u, jnp.zeros_like(u)), step)
    charged = accounting.charge_rdp(  # + the exact sampler's TV slack.
        state.accountant, rdp_step,
        truncation=sampler.overflow_prob + (noise.tv_slack(out) if slack else 0.0))
    new_state = DPSGDState(
        **_common.gated(ok, state, charged),
        key=new_key,
        noise_std=state.noise_std,
    )
    return out, new_state

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
