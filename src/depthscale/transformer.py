"""The pre-LN Transformer (beyond the paper; docs/decompose.md), under the module name of earlier
versions. The network and its model kind live in `depthscale.kinds.transformer`; a Transformer run
is a RunConfig with model = "transformer", trained by the trainer like every other kind (the
standalone `TransformerConfig` and `train_transformer` of earlier versions are gone: use
`make_config(preset, model="transformer", N=..., heads=..., ...)` and `training.train_pack`)."""

from depthscale.kinds.transformer import (Block, QueryReadout, TokenEmbedding, Transformer, TransformerPack, evaluate,
                                          label_scale)

__all__ = ["Transformer", "TransformerPack", "TokenEmbedding", "Block", "QueryReadout", "label_scale", "evaluate"]
