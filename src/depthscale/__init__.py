"""depthscale: inverse-depth scaling from nonlinearity in attention (arXiv 2610.11063)."""

from depthscale.config import ConfigError, RunConfig, make_config

__version__ = "0.1.0"
__all__ = ["ConfigError", "RunConfig", "make_config", "__version__"]
