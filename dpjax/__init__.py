"""dpjax: JAX-accelerated differentially private convex optimizers."""

__version__ = "0.1.0.dev0"
