"""Executes colab/01_quickstart.ipynb headlessly and checks the committed copy (helper: tests/_notebooks.py)."""

import _notebooks

NAME = "01_quickstart.ipynb"


def test_committed_notebook():
  _notebooks.check_committed(NAME)


def test_notebook_runs():
  _notebooks.execute(NAME)
