"""Executes colab/02_optax_training_loop.ipynb headlessly and checks the committed copy (helper: tests/_notebooks.py)."""

import _notebooks

NAME = "02_optax_training_loop.ipynb"


def test_committed_notebook():
  _notebooks.check_committed(NAME)


def test_notebook_runs():
  _notebooks.execute(NAME)
