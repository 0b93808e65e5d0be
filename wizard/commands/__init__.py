"""One module per ``dswiz`` subcommand: option parsing and output only; the decisions live in the core."""
