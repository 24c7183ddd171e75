"""The built-in model kinds as the registry has them, for the tests written once per kind (a new
built-in kind gets them without an edit here): every one, or those built on one base class."""

from __future__ import annotations

from depthscale.config.kind_registry import kind_names, plugin_code
from depthscale.kinds.lookup import model_class


def built_in_kinds(base: type | None = None) -> list[str]:
    """The registered kinds of the package (no plug-in's), sorted; with `base`, its subclasses only."""
    return [k for k in kind_names() if plugin_code(k) is None and (base is None or issubclass(model_class(k), base))]
