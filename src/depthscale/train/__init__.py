"""Training: the trainer of a pack, its optimiser and schedule, live reporting, prefetching
and the memory estimate (SPEC §4). It never imports the store: runs are handed to it and results
handed back."""
