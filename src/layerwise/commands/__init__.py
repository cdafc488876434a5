"""CLI subcommands: each module has add_parser(subparsers) that sets func=handler."""
