"""The rsiframe command line and its live progress; `doctor`. Nothing imports the CLI."""
