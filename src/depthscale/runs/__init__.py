"""Sweeps and executors: plan a grid against the store and train its packs."""
