"""The `depthscale` command's subcommands, one module per group: runs (train, sweep, status,
collect), theory (fit, theory), outputs (plot, compare, reproduce, report, bench); common holds what
they share. Each module has the handlers (cmd_*) and an `add_parsers` that adds its subcommands'
parsers; cli.py assembles the parser and runs main."""
