"""Analysis: what is read off stored results — the results view, paired statistics,
fits of series, certificates, power, recipe selection, the claim engine and the figures' drawing
toolkit. It reads runs through a read-only door (paired.RunReader); it never builds a model or trains."""
