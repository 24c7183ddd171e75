"""depthscale: inverse-depth scaling from nonlinearity in attention (arXiv 2610.11063).

The module map (what each module owns and may import) is in README.md, section "The house"."""

from depthscale.config import kind_registry as _kind_registry


def _builtin_kinds() -> None:
    import depthscale.kinds  # noqa: F401 (its modules register the built-in kinds; loads torch)


# the root may import every tier: it hands the registry (config, below the kinds) their loader,
# called on the registry's first question, so that importing config loads no torch
_kind_registry.use_builtins(_builtin_kinds)

from depthscale.config.run import ConfigError, RunConfig, make_config  # noqa: E402

from depthscale.base.provenance import __version__, versions


def __getattr__(name: str):
    # load_model is store.load_model, imported on first use (the store loads torch)
    if name == "load_model":
        from depthscale.store.store import load_model

        return load_model
    raise AttributeError(f"module 'depthscale' has no attribute {name!r}")


__all__ = ["ConfigError", "RunConfig", "make_config", "versions", "load_model", "__version__"]
