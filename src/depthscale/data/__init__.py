"""Data: contexts and tasks drawn from the counter-based stream (SPEC §2), measurements on
evaluation contexts and the exact decomposition (SPEC §5), and the fused C++ kernels (csrc/)."""
