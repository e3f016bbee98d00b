"""The one compiled runner behind every whole run of dpjax.

Every run of the library (:func:`dpjax.fit` and :func:`dpjax.fit_levels` for
every algorithm, the baselines among them, and the scikit-learn
estimators) is the same program:

* :func:`scan_steps`, one repeat: a ``lax.scan`` over the steps of
  ``w_{t+1} = guard(w_t + tx.update(g_t, state_t, w_t, **extra_t))``, where
  ``(g_t, extra_t)`` come from one fused data pass at ``w_t`` (the caller's
  ``inputs``), ``guard`` is the public divergence guard (reset to ``w_0`` when
  ``||w|| > guard_radius`` or not finite), and the output is ``w_T`` or the
  tail mean of the guarded iterates (:mod:`dpjax.transforms.averaging`). A
  method that releases its curvature every ``release_every`` steps (DP
  preconditioned GD) runs release blocks: the curvature pass only on steps
  ``0, r, 2r, ...``. The guard and the average are post-processing of
  released values, so they cost no privacy.
* :func:`program`, the repeats: one ``jax.jit`` of a ``jax.vmap`` of that
  repeat over keys (and, for several privacy levels, over a traced budget),
  with a computation shared by every repeat (a first curvature matrix at a
  common start) done once outside the ``vmap``.
* :func:`run`, the timing: :func:`dpjax.compiled.compile_and_time`, which
  compiles once per static configuration and reports the compile time apart
  from the run time.

Examples:
  >>> import jax, jax.numpy as jnp, optax
  >>> from dpjax import runner
  >>> def one_repeat(key, x, y):
  ...   inputs = lambda w, t: (x.T @ (x @ w - y) / x.shape[0], {}, None)
  ...   return runner.scan_steps(optax.sgd(0.5), jnp.zeros(2), 20, inputs).output
  >>> x = jnp.eye(2)
  >>> y = jnp.array([1.0, -1.0])
  >>> run = runner.program(one_repeat)
  >>> w, _, _ = runner.run(run, (jax.random.split(jax.random.key(0), 3), x, y), 1)
  >>> w.shape, bool(jnp.allclose(w, y, atol=1e-2))
  ((3, 2), True)
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from dpjax import _common
from dpjax import compiled
from dpjax.transforms import averaging

__all__ = ["Scanned", "program", "repeat_keys", "run", "scan_steps", "step_fn"]

# inputs(w, t) -> (updates_in, extra_args, value): what tx.update gets at w_t, and a per-step
# value to record (a loss at w_t for reporting, or None).
Inputs = Callable[[jax.Array, jax.Array], tuple[Any, dict, Any]]


class Scanned(NamedTuple):
  """What :func:`scan_steps` returns for one repeat."""

  output: Any  # w_T, or the tail mean of the guarded iterates for an `average`.
  params: Any  # w_T, the final (guarded) iterate.
  state: Any  # the transform's final state (its accountant inside).
  resets: jax.Array  # int32: how many steps the divergence guard reset to w_0.
  records: Any  # the per-step records [steps, ...] (`record`'s output; None when nothing).


def step_fn(tx: optax.GradientTransformation, w0: Any, inputs: Inputs,
            guard_radius: float | None = None) -> Callable:
  """One iteration: ``step(w, state, t) -> (w_next, state, value, diverged)``.

  ``(g, extra, value) = inputs(w, t)``; ``updates, state = tx.update(g, state,
  w, **extra)``; ``w_next = optax.apply_updates(w, updates)``, reset to ``w0``
  when ``guard_radius`` is given and ``||w_next|| > guard_radius`` or it is not
  finite (``diverged`` is then True; always False without a guard).
  """

  def step(w, state, t):
    g, extra, value = inputs(w, t)
    updates, state = tx.update(g, state, w, **extra)
    w = optax.apply_updates(w, updates)
    if guard_radius is None:
      return w, state, value, jnp.zeros((), bool)
    # Public guard: `not (norm <= R)` is also True for NaN.
    diverged = jnp.logical_not(jnp.linalg.norm(w) <= guard_radius)
    return jnp.where(diverged, w0, w), state, value, diverged

  return step


def scan_steps(tx: optax.GradientTransformation, w0: Any, steps: int, inputs: Inputs, *,
               guard_radius: float | None = None, average: str = "none",
               record: Callable[[Any, Any, Any], Any] | None = None,
               release_every: int | None = None, release_inputs: Inputs | None = None,
               first_inputs: Inputs | None = None) -> Scanned:
  """One repeat of a run: ``steps`` updates of ``tx`` from ``w0`` in ``lax.scan``.

  Update rule, for ``t = 0 .. steps - 1``::

    g_t, extra_t, v_t = inputs(w_t, t)
    u_t, state_{t+1} = tx.update(g_t, state_t, w_t, **extra_t)
    w_{t+1} = w_t + u_t, reset to w_0 if ||w_t + u_t|| > guard_radius or not finite

  Args:
    tx: the (private) transform.
    w0: the start ``w_0`` (public).
    steps: the number of updates ``T`` (a Python int).
    inputs: ``inputs(w, t) -> (g, extra, value)``: the data pass at ``w_t``.
    guard_radius: the public divergence guard; None: no guard.
    average: ``"none"`` (output ``w_T``) or a tail average of
      :data:`dpjax.transforms.averaging.AVERAGES`, folded in the scan.
    record: ``record(value, w_next, state) -> pytree`` recorded each step;
      default the ``value``.
    release_every: with ``release_inputs``, the steps between the curvature
      releases: steps ``0, r, 2r, ...`` use ``release_inputs`` (step 0
      ``first_inputs`` when given), the others ``inputs``.
    release_inputs: the data pass of a release step.
    first_inputs: the data pass of step 0 (e.g. with a curvature matrix
      computed once for all repeats at a shared start).

  Returns:
    A :class:`Scanned`.
  """
  averaged = average != "none"
  window = averaging.window_size(steps, average)
  if record is None:
    record = lambda value, w, state: value  # noqa: E731

  def advance(inputs_fn):
    one_step = step_fn(tx, w0, inputs_fn, guard_radius)

    def body(carry, _):
      w, state, resets, t, avg, avg_lo = carry
      w, state, value, diverged = one_step(w, state, t)
      t = t + 1
      if averaged:
        avg, avg_lo = averaging.fold_iterate(avg, avg_lo, w, t, steps=steps, window=window)
      return (w, state, resets + diverged.astype(jnp.int32), t, avg, avg_lo), record(
          value, w, state)

    return body

  zero = jnp.zeros((), jnp.int32)
  carry = (w0, tx.init(w0), zero, zero, w0, jax.tree.map(jnp.zeros_like, w0))
  if release_every is None:
    carry, records = jax.lax.scan(advance(inputs), carry, None, length=steps)
  else:
    release = advance(release_inputs)
    first_release = release if first_inputs is None else advance(first_inputs)
    plain = advance(inputs)
    concat = lambda *parts: jax.tree.map(lambda *a: jnp.concatenate(a), *parts)  # noqa: E731

    def block(carry, length, release_step):
      carry, first = release_step(carry, None)
      first = jax.tree.map(lambda a: a[None], first)
      if length == 1:
        return carry, first
      carry, rest = jax.lax.scan(plain, carry, None, length=length - 1)
      return carry, concat(first, rest)

    first_len = min(release_every, steps)
    carry, records = block(carry, first_len, first_release)
    full, rest = divmod(steps - first_len, release_every)
    if full:
      carry, more = jax.lax.scan(lambda c, _: block(c, release_every, release), carry, None,
                                 length=full)
      records = concat(records, jax.tree.map(lambda a: a.reshape((-1,) + a.shape[2:]), more))
    if rest:
      carry, tail = block(carry, rest, release)
      records = concat(records, tail)
  w, state, resets, _, avg, _ = carry
  return Scanned(avg if averaged else w, w, state, resets, records)


def program(one_repeat: Callable, *, shared: Callable | None = None,
            batched: int = 1) -> Callable:
  """``jax.jit`` of the repeats: ``run(*batched_args, x, y)``.

  ``one_repeat(*per_repeat, x, y[, shared_value])`` is vmapped over the
  leading axis of its first ``batched`` arguments (the keys, and for several
  privacy levels the traced budget), with ``x`` and ``y`` shared. ``shared(x,
  y)``, when given, is computed once outside the ``vmap`` and passed to every
  repeat as its last argument.
  """
  axes = (0,) * batched + (None, None)
  if shared is None:
    return jax.jit(jax.vmap(one_repeat, in_axes=axes))
  per_repeat = jax.vmap(one_repeat, in_axes=axes + (None,))

  def run_fn(*args):
    return per_repeat(*args, shared(*args[batched:]))

  return jax.jit(run_fn)


def repeat_keys(key: jax.Array, repeats: int, placement: Any = None) -> jax.Array:
  """``jax.random.split(key, repeats)``, replicated as ``placement`` (or on one device)."""
  return _common.place_replicated(jax.random.split(key, repeats), placement)


def run(fn: Callable, args: tuple, timing_runs: int, *, program_key: Any = None
        ) -> tuple[Any, float, float]:
  """Runs ``fn(*args)`` once compiled: ``(out on the host, seconds_compile, seconds_run)``.

  The arguments are made ready first, so the timings hold only the program;
  ``program_key`` describes everything ``fn`` closes over
  (:func:`dpjax.compiled.compile_and_time`): a later call with the same
  description and argument shapes reuses the compiled program.
  """
  jax.block_until_ready(args)
  out, seconds_compile, seconds_run = compiled.compile_and_time(fn, args, timing_runs,
                                                                key=program_key)
  return jax.device_get(out), seconds_compile, seconds_run
