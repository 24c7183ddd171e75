"""What a run and an experiment are: the RunConfig and its presets (`run`), the registry of
model kinds, the experiment records and the paper's numbers (SPEC §1, §7, §8)."""
