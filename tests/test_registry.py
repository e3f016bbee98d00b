"""dpjax.training.registry: one table of every name dpjax.fit accepts."""

from __future__ import annotations

import pytest

import dpjax
from dpjax import baselines, cli, data
from dpjax.training import drivers, registry, streaming

_DS = data.synthetic(0, n=50, d=2)


def test_the_registry_lists_every_fit_name_once_in_order():
  assert registry.NAMES == (registry.ALGORITHMS + registry.STREAMING_ALGORITHMS
                            + registry.DRIVER_ALGORITHMS + (registry.AUTO,))
  assert len(set(registry.NAMES)) == len(registry.NAMES)
  assert all(registry.REGISTRY[n].name == n for n in registry.NAMES)


def test_entries_describe_the_runs():
  r = registry.REGISTRY
  assert {n for n, e in r.items() if e.runner == "loop"} == set(registry.ALGORITHMS) | {"auto"}
  assert {n for n, e in r.items() if e.data_pass == "stream"} == set(streaming.ALGORITHMS)
  assert {n for n, e in r.items() if e.data_pass == "poisson"} == set(drivers.POISSON_ALGORITHMS)
  assert {n for n, e in r.items() if e.accounting == "rdp"} == set(drivers.POISSON_ALGORITHMS)
  assert [n for n, e in r.items() if e.accounting == "approx-dp"] == ["aop"]
  assert {n for n, e in r.items() if not e.private} == set(drivers.NON_PRIVATE)
  assert all(baselines.PRIVATE[n] == r[n].private for n in baselines.BASELINES)
  assert r["precond-gd"].default_average == "last-half"
  assert r["single-pass-dp-sgd"].default_average == "last-half"
  assert r["dp-gd"].default_average == "none"


@pytest.mark.parametrize("name", [n for n in registry.NAMES if n != "auto"])
def test_listed_options_are_the_accepted_ones(name):
  e = registry.entry(name)
  assert e.options and len(set(e.options)) == len(e.options)
  with pytest.raises(TypeError, match=r"unknown option\(s\) \['no_such_option'\]"):
    kwargs = {"batch_size": 10} if e.data_pass in ("stream", "poisson") else {}
    kwargs.update(steps=2) if e.data_pass != "stream" and name != "aop" else None
    dpjax.fit(_DS, name, epsilon=1.0, no_such_option=1, seed=0, **kwargs)
  if e.runner == "loop":
    from dpjax import transforms  # pylint: disable=g-import-not-at-top
    factory = getattr(transforms, registry.SPECS[name][0])
    registry.check_options(name, factory, dict.fromkeys(e.options))  # every listed one passes
  elif e.runner == "streaming":
    streaming.check_options(name, dict.fromkeys(e.options))


def test_unknown_name_is_a_value_error_listing_the_choices():
  with pytest.raises(ValueError, match="algorithm") as err:
    registry.entry("dp-gdd")
  assert "dp-gd" in str(err.value) and "otb" in str(err.value)
  with pytest.raises(ValueError, match="algorithm"):
    dpjax.fit(_DS, "dp-gdd", epsilon=1.0, steps=2)


def test_the_command_line_offers_the_registry():
  parser = cli._build_parser()  # pylint: disable=protected-access
  fit = next(a for a in parser._subparsers._group_actions[0].choices["fit"]._actions  # pylint: disable=protected-access
             if a.dest == "algorithm")
  assert tuple(fit.choices) == registry.NAMES
