"""The package's version and what a rerun needs to know about the software that made a result.

A leaf module: the store, the trainer and the report record `versions()` with every result, and
importing it loads nothing else of the package."""

from __future__ import annotations

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


__all__ = ["__version__", "versions"]
