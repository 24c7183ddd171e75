"""Leaves: errors, atomic files, formatting, provenance, plug-in loading, timing, user paths and the
random streams' seeds. They import nothing of depthscale outside this package."""
