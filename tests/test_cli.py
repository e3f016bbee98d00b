"""Tests for the dpjax command line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dpjax import accounting, cli


def test_demo_runs_with_no_arguments():
  proc = subprocess.run(
      [sys.executable, "-m", "dpjax", "demo"], capture_output=True, text=True, timeout=300
  )
  assert proc.returncode == 0, proc.stderr
  out = proc.stdout
  assert "n=10000, d=100" in out
  assert "| eps |" in out and "gaussian" in out
  # The printed budget is the accountant's value, not a constant.
  assert f"{accounting.epsilon_to_zcdp(1.0, 1e-8, 'gaussian'):.4e}" in out
  assert "done" in proc.stderr  # progress indicator


def test_demo_small_in_process(capsys):
  assert cli.main(["demo", "--n", "300", "--d", "5", "--seed", "2"]) == 0
  out = capsys.readouterr().out
  assert "synthetic(seed=2, n=300, d=5)" in out
  assert f"{accounting.epsilon_to_zcdp(10.0, 1 / 300**2, 'cks'):.4e}" in out


@pytest.mark.parametrize(
    "argv,match",
    [
        (["demo", "--n", "0"], "--n must be >= 1"),
        (["demo", "--d", "-3"], "--d must be >= 1"),
        (["demo", "--n", "many"], "invalid int value"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, match, capsys):
  with pytest.raises(SystemExit) as exc:
    cli.main(argv)
  assert exc.value.code == 2
  err = capsys.readouterr().err
  assert match in err
  assert len(err.strip().splitlines()) == 1
  assert "Traceback" not in err
