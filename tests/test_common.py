"""Tests for dpjax._common's run keys: full-width seeds, fresh OS entropy, one key per run."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.experimental import multihost_utils

from dpjax import _common


def _words(key) -> list[int]:
  return np.asarray(jax.random.key_data(key)).tolist()


@pytest.mark.parametrize("seed", [0, 5, 2**31, 2**32 - 1])
def test_seeds_below_2_32_are_jax_random_key(seed):
  assert _words(_common.key_from_seed(seed)) == _words(jax.random.key(seed))


def test_every_bit_of_a_seed_reaches_the_key():
  # jax.random.key keeps the low 32 bits only: key(2**40 + 5) == key(5).
  assert _words(jax.random.key(2**40 + 5)) == _words(jax.random.key(5))
  assert _words(_common.key_from_seed(2**40 + 5)) == [2**8, 5]
  assert _words(_common.key_from_seed(2**64 - 1)) == [2**32 - 1, 2**32 - 1]
  assert _common.key_from_seed(np.uint64(2**63)).dtype == jax.random.key(0).dtype


def test_fresh_keys_differ_and_fill_the_key():
  keys = [_words(_common.fresh_key()) for _ in range(4)]
  assert len({tuple(k) for k in keys}) == 4
  assert all(len(k) == 2 for k in keys)
  assert _words(_common.key_for(7)) == _words(jax.random.key(7))
  assert _words(_common.key_for(None)) != _words(_common.key_for(None))


@pytest.mark.parametrize("seed,error,match", [
    (-1, ValueError, r"seed must be in \[0, 2\*\*64\), got -1"),
    (2**64, ValueError, r"seed must be in \[0, 2\*\*64\)"),
    (True, TypeError, "seed must be None .* got bool"),
    (np.bool_(False), TypeError, "seed must be None .* got bool"),
    (1.0, TypeError, "seed must be None .* got float"),
    ("1", TypeError, "seed must be None .* got str"),
])
def test_bad_seeds_name_the_seed(seed, error, match):
  with pytest.raises(error, match=match):
    _common.check_seed(seed)
  with pytest.raises(error, match=match):
    _common.run_key(seed)


def test_run_key_is_process_0s_fresh_key_on_every_process(monkeypatch):
  assert _words(_common.run_key(9)) == _words(jax.random.key(9))  # one process: key_for
  sent = []

  def broadcast(words):  # what every process receives: process 0's words
    sent.append(np.asarray(words).copy())
    return np.array([123, 456], np.uint32)

  monkeypatch.setattr(jax, "process_count", lambda: 2)
  monkeypatch.setattr(multihost_utils, "broadcast_one_to_all", broadcast)
  assert _words(_common.run_key(None)) == [123, 456]
  assert len(sent) == 1 and sent[0].shape == (2,)
  assert _words(_common.run_key(9)) == _words(jax.random.key(9))  # a seed needs no broadcast
  assert len(sent) == 1
