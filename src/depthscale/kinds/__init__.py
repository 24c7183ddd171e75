"""The model kinds (SPEC §3), one class per kind, each meeting the protocol of `kinds.base.ModelKind`
and registered once with `@kind_registry.register_kind` (its facts and estimates checked there).

Importing this package registers the built-in kinds (the imports at the end: one per kind's module);
the registry (`depthscale.config.kind_registry`) maps a RunConfig's `model` to its class and the
package root has it import this package on its first question. The model layer asks it through
`depthscale.kinds.lookup` (`model_class`, `build_pack`): code outside it asks the class, never the name.

    base.py             ModelKind (the protocol and its defaults), ModelOutput, rms_norm
    init.py             parameter draws of the controlled kinds (one model, from its own seed)
    ops.py              hand-written autograd functions of the attention forwards
    attention.py        AttentionStack: parameters and bookkeeping shared by the controlled kinds
    ensemble.py         Nonlinear (the paper's model, SPEC §3.1) and LayerValues (§3.3)
    linear.py           Linear (SPEC §3.2)
    single_stream.py    SingleStream (SPEC §3.3)
    context_updates.py  ContextUpdates (SPEC §3.3)
    transformer.py      TransformerKind: a standard pre-LN Transformer (beyond the paper)

A new kind is one file with one class that meets the protocol (base.py says which facts and methods
it must state and which it inherits), decorated with `@register_kind` (docs/usage.md, "Adding a
model kind"): a file named by DEPTHSCALE_KINDS, or a module here imported below.
"""

# each registers its kinds (@register_kind); tests/test_architecture.py checks that none is missing
from depthscale.kinds import context_updates, ensemble, linear, single_stream, transformer  # noqa: F401
