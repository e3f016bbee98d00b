"""The suite's unrolled Threefry lowering (tests/_site/sitecustomize.py) gives JAX's default bits.

The suite uses it in its own processes (tests/conftest.py) and in the ones its tests start
(through PYTHONPATH); the reference here is a process without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import conftest
import pytest

# Bits, splits, folds and normals, eager, jitted, vmapped and inside a scan: a digest of them all.
_DRAWS = textwrap.dedent("""
    import hashlib, jax, jax.numpy as jnp, numpy as np
    key = jax.random.key(20261204)
    keys = jax.random.split(key, 3)
    def scan_draws(k):
      def body(k, _):
        k, sub = jax.random.split(k)
        return k, jax.random.bits(sub, (7,), jnp.uint32)
      return jax.lax.scan(body, k, None, length=4)[1]
    parts = [
        jax.random.bits(key, (5, 3), jnp.uint32),
        jax.random.key_data(jax.random.split(key, 4)),
        jax.random.key_data(jax.random.fold_in(key, 7)),
        jax.jit(lambda k: jax.random.normal(k, (9,)))(key),
        jax.vmap(lambda k: jax.random.bits(k, (11,), jnp.uint32))(keys),
        jax.jit(jax.vmap(scan_draws))(keys),
    ]
    print(hashlib.sha256(b"".join(np.asarray(p).tobytes() for p in parts)).hexdigest())
""")


# Prints which lowering this process compiles Threefry with: the rolled form is a while loop.
_LOWERING = textwrap.dedent("""
    text = jax.jit(lambda k: jax.random.bits(k, (3,), jnp.uint32)).lower(key).as_text()
    print("rolled" if "stablehlo.while" in text else "unrolled")
""")


def _digest(code: str) -> str:
  """What ``code`` prints, run in this process (under the suite's lowering)."""
  printed: list = []
  exec(code, {"print": printed.append})  # pylint: disable=exec-used
  return printed[0]


@pytest.mark.skipif(not conftest.UNROLLED_THREEFRY, reason="the suite runs JAX's default lowering")
def test_unrolled_threefry_gives_the_default_lowerings_bits():
  # A fresh interpreter without the suite's hook runs JAX's own (rolled) CPU lowering.
  env = dict(os.environ, DPJAX_TESTS_UNROLLED_THREEFRY="0")
  default = subprocess.run([sys.executable, "-c", _DRAWS + _LOWERING], check=True,
                           capture_output=True, text=True, env=env).stdout.split()
  assert len(default[0]) == 64 and default[1] == "rolled"
  assert _digest(_DRAWS) == default[0]


def test_subprocesses_of_the_suite_get_the_same_lowering():
  hooked = subprocess.run([sys.executable, "-c", _DRAWS + _LOWERING], check=True,
                          capture_output=True, text=True).stdout.split()
  assert hooked[1] == ("unrolled" if conftest.UNROLLED_THREEFRY else "rolled")
  assert hooked[0] == _digest(_DRAWS)
