"""``python -m dpjax``: the dpjax command line (see :mod:`dpjax.cli`)."""

from dpjax.cli import main

if __name__ == "__main__":
  raise SystemExit(main())
