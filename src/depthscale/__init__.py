"""depthscale: inverse-depth scaling from nonlinearity in attention (arXiv 2610.11063).

The module map (what each module owns and may import) is in README.md, section "Module map"."""

from depthscale.config import ConfigError, RunConfig, make_config

__version__ = "0.1.0"


def versions(packages: tuple[str, ...] = ("torch", "numpy")) -> dict:
    """What a rerun needs to know: depthscale's version, then each of `packages` (read from the
    installed metadata, without importing them; None if not installed), Python and the platform."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out: dict = {"depthscale": __version__}
    for pkg in packages:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    out.update(python=platform.python_version(), platform=platform.platform())
    return out


def __getattr__(name: str):
    # load_model is store.load_model, imported on first use (the store loads torch)
    if name == "load_model":
        from depthscale.store import load_model

        return load_model
    raise AttributeError(f"module 'depthscale' has no attribute {name!r}")


__all__ = ["ConfigError", "RunConfig", "make_config", "versions", "load_model", "__version__"]
