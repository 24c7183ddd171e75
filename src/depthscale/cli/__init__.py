"""The `depthscale` command: argument parsing, the subcommands and their outputs."""
