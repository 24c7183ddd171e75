"""Analysis: what is read off stored results — the results view, paired re-evaluation,
fits of series, certificates, power, recipe selection, the claim engine and the figures' drawing
toolkit. It reads runs; it never trains."""
