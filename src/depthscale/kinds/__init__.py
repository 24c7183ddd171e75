"""The model kinds (SPEC §3), one class per kind, each meeting the protocol of `kinds.base.ModelKind`.

The registry that maps a RunConfig's `model` to its class is `depthscale.models` (`MODEL_KINDS`,
`model_class`, `build_pack`): code outside the model layer asks the class, never the name.

    base.py             ModelKind (the protocol and its defaults), ModelOutput, rms_norm
    init.py             parameter draws of the controlled kinds (one model, from its own seed)
    ops.py              hand-written autograd functions of the attention forwards
    attention.py        AttentionStack: parameters and bookkeeping shared by the controlled kinds
    ensemble.py         Nonlinear (the paper's model, SPEC §3.1) and LayerValues (§3.3)
    linear.py           Linear (SPEC §3.2)
    single_stream.py    SingleStream (SPEC §3.3)
    context_updates.py  ContextUpdates (SPEC §3.3)
    transformer.py      TransformerKind: a standard pre-LN Transformer (beyond the paper)

A new kind: a class in its own module with the protocol's class facts and methods (base.py says
which ones it must write and which it inherits), added to `models.MODEL_KINDS`.
"""
