"""Theory: closed forms and fits that need no model and no run configuration — the
linear-attention depth theory (`linear`), the softmax-ensemble floor, the linear model's floor and the
power-law fits (SPEC §3.4, §6)."""
