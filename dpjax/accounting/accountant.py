"""The accountant pytree: what a run has spent, charged in-graph and read on the host.

:class:`AccountantState` holds the rho-zCDP total of the full-batch Gaussian
mechanisms, the RDP curve (on :data:`~dpjax.accounting.RDP_ORDERS`) of the
Poisson-subsampled ones, both summed in triple-word floats
(:mod:`dpjax.accounting.compensated`), and a total-variation slack ``T``,
summed with upward rounding.

* In-graph (``jit``/``vmap``/``lax.scan`` safe): :func:`init_accountant`,
  :func:`charge` (a rho, with an optional slack) and :func:`charge_rdp` (an
  RDP curve and a truncation slack).
* Host side (float64, concrete states only): :func:`spent_rho`,
  :func:`spent_rdp`, :func:`spent_truncation` and :func:`epsilon_spent`, the
  (epsilon, delta) guarantee of everything charged. Rho-zCDP is the RDP curve
  ``alpha * rho`` (Bun & Steinke 2016, arXiv 1605.02065), so both parts
  combine into one curve, converted with ``delta_rdp + (1 + e^eps) T <= delta``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax.accounting.compensated import _add3, _round_up_words, _split_words, _two_sum
from dpjax.accounting.conversions import METHODS, _zcdp_epsilon_with_slack
from dpjax.accounting.rdp import RDP_ORDERS, _rdp_epsilon

__all__ = [
    "AccountantState",
    "init_accountant",
    "charge",
    "charge_rdp",
    "spent_rho",
    "spent_rdp",
    "spent_truncation",
    "epsilon_spent",
]

_NUM_ORDERS = len(RDP_ORDERS)

_ACCOUNTANT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class AccountantState(NamedTuple):
  """Everything spent so far: a zCDP total, an RDP curve and a TV slack.

  * ``rho + rho_lo + rho_lo2``: the rho-zCDP total of the (non-subsampled)
    Gaussian mechanisms, as a triple-word float (each word is a compensation
    term for the one before). Two float32 words hold only 48 bits, and the
    rounding of a repeated charge is biased, so a double-float drifts by
    ~n * 2^-50 after n charges (1e-12 at n = 1e4); the third word makes the
    per-step error ~2^-72 instead.
  * ``rdp + rdp_lo + rdp_lo2``: the same triple-word sum, elementwise, of the
    Renyi-DP curves of the Poisson-subsampled mechanisms, at the orders
    :data:`RDP_ORDERS` (:func:`charge_rdp`).
  * ``truncation``: the summed probability that a capped Poisson batch
    overflowed its cap (:mod:`dpjax.mechanisms.sampling`), a total-variation slack that
    :func:`epsilon_spent` adds to delta. Summed with upward rounding, so it
    never understates the slack.

  Keep it inside a transform's NamedTuple state: ``optax.tree.get(state,
  "rho")`` then finds the leading word (a float32 reading, accurate to ~6e-8).
  Read the exact totals with :func:`spent_rho`, :func:`spent_rdp` and
  :func:`spent_truncation`, the guarantee with :func:`epsilon_spent`. Build it
  with :func:`init_accountant`, never by hand.
  """

  rho: jax.Array  # shape=() (or batch shape under vmap), float32/float64: leading word.
  rho_lo: jax.Array  # same shape/dtype: first compensation term, |rho_lo| <~ ulp(rho).
  rho_lo2: jax.Array  # same shape/dtype: second compensation term, |rho_lo2| <~ ulp(rho_lo).
  rdp: jax.Array  # shape=(len(RDP_ORDERS),) (batch shape + that under vmap), same dtype: leading words.
  rdp_lo: jax.Array  # same shape/dtype as rdp: first compensation terms.
  rdp_lo2: jax.Array  # same shape/dtype as rdp: second compensation terms.
  truncation: jax.Array  # same shape/dtype as rho: summed overflow probabilities (rounded up).


def init_accountant(dtype: Any = None) -> AccountantState:
  """Returns an accountant with nothing spent.

  Args:
    dtype: ``float32`` or ``float64``; ``None`` means JAX's canonical float
      (``float32`` unless x64 is enabled). ``float64`` needs x64 enabled.

  Returns:
    ``AccountantState`` whose rho and truncation fields are 0-d zeros of
    ``dtype`` and whose rdp fields are zeros of shape ``(len(RDP_ORDERS),)``.

  Examples:
    >>> from dpjax import accounting
    >>> state = accounting.init_accountant()
    >>> state.rho.dtype, accounting.spent_rho(state), state.rdp.shape
    (dtype('float32'), 0.0, (59,))
  """
  if dtype is None:
    dt = np.dtype(jax.dtypes.canonicalize_dtype(np.float64))
  else:
    try:
      dt = np.dtype(dtype)
    except TypeError as err:
      raise TypeError(
          f"dtype must be a numpy/jax float dtype such as jnp.float32, got {dtype!r}."
      ) from err
    if dt not in _ACCOUNTANT_DTYPES:
      raise ValueError(
          f"dtype must be float32 or float64, got {dt}; the accountant needs at "
          "least single precision."
      )
    if np.dtype(jax.dtypes.canonicalize_dtype(dt)) != dt:
      raise ValueError(
          f"dtype {dt} needs 64-bit JAX; enable it with "
          "jax.config.update('jax_enable_x64', True) or pass dtype=jnp.float32."
      )
  zero = jnp.zeros((), dt)
  zeros = jnp.zeros((_NUM_ORDERS,), dt)
  return AccountantState(rho=zero, rho_lo=zero, rho_lo2=zero, rdp=zeros, rdp_lo=zeros,
                         rdp_lo2=zeros, truncation=zero)


def _check_charge(
    x: Any, name: str, shapes: tuple[tuple[int, ...], ...], shape_hint: str
) -> Any:
  """Validates a charge (>= 0, finite, allowed shape); returns a jax or float64 numpy array."""
  if isinstance(x, jax.Array):
    if not jnp.issubdtype(x.dtype, jnp.floating):
      raise TypeError(
          f"{name} must be a floating array, got dtype {x.dtype}; cast it with "
          f"{name}.astype(jnp.float32)."
      )
    if x.shape not in shapes:
      raise ValueError(f"{name} must {shape_hint}, got shape {x.shape}.")
    if _validate.is_concrete(x):
      host = np.asarray(jax.device_get(x))
      _validate.check_finite(host, name)
      if np.any(host < 0):
        raise ValueError(f"{name} must be >= 0: a privacy charge cannot be negative.")
    return x
  if isinstance(x, (bool, np.bool_)) or not isinstance(
      x, (numbers.Real, np.ndarray, list, tuple)):
    raise TypeError(f"{name} must be a real number or float array, got {type(x).__name__}.")
  arr = np.asarray(x)
  if arr.dtype.kind not in "fiu":
    raise TypeError(f"{name} must be a real number or float array, got dtype {arr.dtype}.")
  arr = arr.astype(np.float64)
  if arr.shape not in shapes:
    raise ValueError(f"{name} must {shape_hint}, got shape {arr.shape}.")
  _validate.check_finite(arr, name)
  if np.any(arr < 0):
    raise ValueError(f"{name} must be >= 0: a privacy charge cannot be negative, got {x!r}.")
  return arr


def _check_state(state: Any) -> None:
  if not isinstance(state, AccountantState):
    raise TypeError(
        f"state must be an AccountantState (from init_accountant()), got "
        f"{type(state).__name__}."
    )


def charge(state: AccountantState, rho: Any, *, slack: Any = 0.0) -> AccountantState:
  """Composes a rho-zCDP mechanism: returns ``state`` with ``rho`` added.

  zCDP composes additively (Bun & Steinke 2016, Lemma 2.3). The sum is an
  error-free (TwoSum) triple-word addition: the only rounding is at the level
  of the third word, ~2^-72 of the total per charge for float32, so 1e5
  charges of a non-representable amount stay within ~1e-15 of the exact
  float64 total (plain float32 drifts by ~1e-4). The RDP curve is left
  unchanged.

  ``slack`` is the mechanism's total-variation distance from the exact
  Gaussian mechanism whose rho is charged: :func:`dpjax.mechanisms.noise.tv_slack` of
  the released value, for the floating-point-safe sampler. It is added to
  the state's TV slack (the ``truncation`` field) rounded towards +inf, and
  :func:`epsilon_spent` pays ``(1 + e^eps)`` times it from delta.

  Args:
    state: the accountant (possibly batched under ``vmap``).
    rho: the charge, ``>= 0``. A Python/numpy float (the usual case: charges are
      computed on the host) or an array wider than the accountant is split
      exactly into three words; a same-width jax array (e.g. a traced value)
      has zero lower words. Concrete charges are validated eagerly. Close over
      host-side amounts rather than passing them as ``jit`` arguments: a jit
      argument arrives as a float32 tracer, already rounded.
    slack: the TV slack of this charge, ``>= 0`` (default 0).

  Returns:
    The new ``AccountantState``.

  Raises:
    TypeError: ``state`` is not an ``AccountantState`` or ``rho`` is not real.
    ValueError: a concrete ``rho`` is negative, NaN or inf, or has a bad shape.

  Examples:
    >>> import jax
    >>> from dpjax import accounting
    >>> state = accounting.init_accountant()
    >>> step = jax.jit(lambda s: accounting.charge(s, 0.1))
    >>> naive = jax.numpy.float32(0.0)
    >>> for _ in range(10):
    ...   state, naive = step(state), naive + jax.numpy.float32(0.1)
    >>> float(naive), accounting.spent_rho(state)
    (1.0000001192092896, 1.0)
  """
  _check_state(state)
  dtype = np.dtype(state.rho.dtype)
  shape = tuple(state.rho.shape)
  checked = _check_charge(rho, "rho", ((), shape),
                          f"be a scalar or have the accountant's shape {shape}")
  r0, r1, r2 = _add3((state.rho, state.rho_lo, state.rho_lo2), _split_words(checked, dtype))
  state = state._replace(rho=r0, rho_lo=r1, rho_lo2=r2)
  if isinstance(slack, (int, float)) and not isinstance(slack, bool) and slack == 0:
    return state
  return _add_slack(state, _check_charge(slack, "slack", ((), shape),
                                         f"be a scalar or have the accountant's shape {shape}"))


def _add_slack(state: AccountantState, trunc: Any) -> AccountantState:
  """``state.truncation + trunc``, rounded towards +inf (a slack is never understated)."""
  if not isinstance(trunc, jax.Array) and np.any(trunc > 1.0):
    raise ValueError(f"a TV slack must be a probability in [0, 1], got {trunc!r}.")
  dtype = np.dtype(state.rho.dtype)
  b = _round_up_words(trunc, dtype)
  s, err = _two_sum(state.truncation, b)
  s = jnp.where(err > 0, jnp.nextafter(s, jnp.asarray(jnp.inf, dtype)), s)
  return state._replace(truncation=s)


def charge_rdp(state: AccountantState, rdp: Any, truncation: Any = 0.0) -> AccountantState:
  """Composes a mechanism given by its RDP curve on :data:`RDP_ORDERS`.

  RDP composes additively at every order (Mironov 2017, Prop. 1), so the
  curve is added elementwise to ``state.rdp`` with the same error-free
  triple-word sum as :func:`charge`. ``truncation`` is the total-variation
  slack of a capped batch (the ``overflow_prob`` of
  :func:`dpjax.mechanisms.sampling.poisson_sampler`); it is added rounded towards +inf,
  so the running total never understates it. See :func:`epsilon_spent`.

  In-graph safe (``jit``/``vmap``/``lax.scan``). Compute the curve once on
  the host with :func:`subsampled_gaussian_rdp` when the transform is built
  and close over it.

  Args:
    state: the accountant (possibly batched under ``vmap``).
    rdp: the curve, ``>= 0``, one value per order of :data:`RDP_ORDERS`:
      shape ``(len(RDP_ORDERS),)`` (broadcast over a batched state) or the
      state's ``rdp`` shape. A numpy/list float64 vector is split exactly into
      three words; a jax array wider than the accountant likewise; a
      same-width jax array (e.g. traced, for ``vmap`` over privacy levels) has
      zero lower words. Concrete values are validated eagerly.
    truncation: the TV slack of this step, ``>= 0``: a float or a scalar (or
      state-shaped) array.

  Returns:
    The new ``AccountantState``.

  Raises:
    TypeError: ``state`` is not an ``AccountantState``, or a non-real input.
    ValueError: a concrete charge is negative, NaN or inf, a truncation above
      1, or a bad shape.

  Examples:
    >>> import jax
    >>> from dpjax import accounting
    >>> step_rdp = accounting.subsampled_gaussian_rdp(0.01, 1.0)
    >>> run = jax.jit(lambda s: jax.lax.fori_loop(
    ...     0, 1000, lambda i, s: accounting.charge_rdp(s, step_rdp), s))
    >>> state = run(accounting.init_accountant())
    >>> bool(abs(accounting.spent_rdp(state) / (1000 * step_rdp) - 1).max() < 1e-12)
    True
    >>> round(accounting.epsilon_spent(state, 1e-5), 3)  # dp-accounting: 2.108 on this grid
    2.108
  """
  _check_state(state)
  dtype = np.dtype(state.rho.dtype)
  rdp_shape = tuple(state.rdp.shape)
  checked = _check_charge(
      rdp, "rdp", ((_NUM_ORDERS,), rdp_shape),
      f"have shape ({_NUM_ORDERS},) (one value per order of RDP_ORDERS) or the "
      f"accountant's rdp shape {rdp_shape}")
  shape = tuple(state.truncation.shape)
  trunc = _check_charge(truncation, "truncation", ((), shape),
                        f"be a scalar or have the accountant's shape {shape}")
  if not isinstance(trunc, jax.Array) and np.any(trunc > 1.0):
    raise ValueError(f"truncation must be a probability in [0, 1], got {truncation!r}.")
  r0, r1, r2 = _add3((state.rdp, state.rdp_lo, state.rdp_lo2), _split_words(checked, dtype))
  return _add_slack(state._replace(rdp=r0, rdp_lo=r1, rdp_lo2=r2), trunc)


def _concrete_words(state: AccountantState, fields: tuple[str, ...], fn: str) -> list[np.ndarray]:
  _check_state(state)
  words = [getattr(state, f) for f in fields]
  if not all(_validate.is_concrete(w) for w in words):
    raise TypeError(
        f"{fn} needs a concrete state, not a traced value; call it outside jit "
        "(e.g. on the state returned by the compiled step)."
    )
  return [np.asarray(jax.device_get(w), np.float64) for w in words]


def spent_rho(state: AccountantState) -> float | np.ndarray:
  """Host-side float64 total ``rho + rho_lo + rho_lo2`` of an accountant.

  Args:
    state: a concrete ``AccountantState`` (call this outside ``jit``).

  Returns:
    A Python float, or a float64 numpy array for a batched state.

  Raises:
    TypeError: ``state`` is not an ``AccountantState``, or is traced.

  Examples:
    >>> from dpjax import accounting
    >>> state = accounting.charge(accounting.init_accountant(), 1e-5 / 3)
    >>> float(state.rho) == 1e-5 / 3, accounting.spent_rho(state) == 1e-5 / 3
    (False, True)
  """
  w0, w1, w2 = _concrete_words(state, ("rho", "rho_lo", "rho_lo2"), "spent_rho")
  total = w0 + (w1 + w2)  # smallest first; float64 rounding only.
  return float(total) if total.ndim == 0 else total


def spent_rdp(state: AccountantState) -> np.ndarray:
  """Host-side float64 RDP curve ``rdp + rdp_lo + rdp_lo2`` charged by :func:`charge_rdp`.

  Args:
    state: a concrete ``AccountantState`` (call this outside ``jit``).

  Returns:
    float64 array of shape ``(len(RDP_ORDERS),)`` (batch shape first for a
    batched state). It excludes the zCDP part (``alpha * spent_rho``).

  Raises:
    TypeError: ``state`` is not an ``AccountantState``, or is traced.

  Examples:
    >>> from dpjax import accounting
    >>> state = accounting.charge_rdp(accounting.init_accountant(),
    ...                               accounting.subsampled_gaussian_rdp(1.0, 2.0))
    >>> float(accounting.spent_rdp(state)[accounting.RDP_ORDERS.index(8.0)])
    1.0
  """
  w0, w1, w2 = _concrete_words(state, ("rdp", "rdp_lo", "rdp_lo2"), "spent_rdp")
  return w0 + (w1 + w2)


def spent_truncation(state: AccountantState) -> float | np.ndarray:
  """Host-side total truncation (TV) slack charged by :func:`charge_rdp` (an upper bound).

  Examples:
    >>> from dpjax import accounting
    >>> state = accounting.charge_rdp(accounting.init_accountant(),
    ...                               [0.0] * len(accounting.RDP_ORDERS), truncation=1e-15)
    >>> accounting.spent_truncation(state) >= 1e-15
    True
  """
  (t,) = _concrete_words(state, ("truncation",), "spent_truncation")
  return float(t) if t.ndim == 0 else t


def epsilon_spent(
    state: AccountantState, delta: Any, method: str = "cks"
) -> float | np.ndarray:
  """The (epsilon, delta) guarantee of everything charged to ``state`` so far.

  Nothing charged by :func:`charge_rdp` (zero RDP curve):
  ``zcdp_to_epsilon(spent_rho(state), delta', method)`` with ``delta' = delta -
  (1 + e^eps) T``, the smallest such eps, for the TV slack ``T`` that the
  floating-point-safe noise charges (:func:`dpjax.mechanisms.noise.tv_slack`, about
  ``1e-28`` per noise coordinate): a mechanism within TV ``T`` of an (eps,
  delta')-DP one is (eps, delta' + (1 + e^eps) T)-DP. Any ``method`` applies,
  since the exact mechanisms are Gaussian (see :mod:`dpjax.mechanisms.noise`).

  Otherwise the zCDP total becomes the RDP curve ``alpha * rho`` (Bun &
  Steinke 2016, Prop. 1.4 read backwards: rho-zCDP is exactly RDP
  ``alpha * rho`` at every order), which is added to the subsampled curve,
  and :func:`rdp_to_epsilon` converts the sum on :data:`RDP_ORDERS` with the
  CKS bound (only ``method="cks"``; the Gaussian conversion is invalid for a
  subsampled mechanism) and the truncation slack ``T``:
  ``delta_rdp + (1 + e^eps) T <= delta``. Why: the capped mechanism ``M`` and
  the uncapped Poisson mechanism ``M'`` draw the same Bernoulli inclusions
  and differ only on the event that some step's batch overflowed its cap;
  that event depends only on the inclusions, has probability at most the
  sum ``T`` of the per-step overflow bounds (each computed for ``n + 1``
  records, so it holds for both neighbours), hence ``TV(M(D), M'(D)) <= T``
  for both ``D`` and its neighbour ``D'``. With ``M'`` (eps, delta_rdp)-DP,
  for any event ``S``: ``P[M(D) in S] <= P[M'(D) in S] + T <= e^eps P[M'(D')
  in S] + delta_rdp + T <= e^eps P[M(D') in S] + delta_rdp + (1 + e^eps) T``.

  Host side: call it outside ``jit``. Elementwise for a batched state.

  Args:
    state: a concrete ``AccountantState``.
    delta: in ``(0, 1)``.
    method: one of ``METHODS`` (see :func:`zcdp_to_epsilon`; ``"gaussian"`` only
      when every charge came from a non-subsampled Gaussian mechanism). Must
      be ``"cks"`` once anything was charged with :func:`charge_rdp`.

  Returns:
    epsilon as a Python float, or a float64 array for a batched state
    (``inf`` where the truncation slack alone exceeds what delta allows).

  Raises:
    ValueError: bad ``delta``/``method``, or a ``method`` other than
      ``"cks"`` for a state holding subsampled charges.

  Examples:
    >>> from dpjax import accounting
    >>> state = accounting.charge(accounting.init_accountant(), 0.1)
    >>> round(accounting.epsilon_spent(state, 1e-5, "bun_steinke"), 4)
    2.246
    >>> state = accounting.charge_rdp(state, accounting.subsampled_gaussian_rdp(0.01, 1.0))
    >>> round(accounting.epsilon_spent(state, 1e-5), 4)
    1.9485
  """
  delta = _validate.float_in_open_interval(delta, "delta", 0.0, 1.0)
  method = _validate.choice(method, "method", METHODS)
  rho = np.asarray(spent_rho(state), np.float64)
  rdp = spent_rdp(state)
  trunc = np.asarray(spent_truncation(state), np.float64)
  orders = np.asarray(RDP_ORDERS)
  out = np.empty(rho.shape, np.float64)
  for idx in np.ndindex(rho.shape):
    curve, slack = rdp[idx], float(trunc[idx])
    if not np.any(curve > 0):
      out[idx] = _zcdp_epsilon_with_slack(float(rho[idx]), delta, method, slack)
      continue
    if method != "cks":
      raise ValueError(
          f"method={method!r} cannot convert a state holding Poisson-subsampled (RDP) "
          "charges; use method='cks' (the RDP-to-(eps, delta) conversion of Canonne, "
          "Kamath & Steinke 2020)."
      )
    out[idx] = _rdp_epsilon(orders, orders * float(rho[idx]) + curve, math.log(delta), slack)
  return float(out) if out.ndim == 0 else out
