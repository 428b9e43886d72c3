"""CLI subcommands. Each module exposes ``COMMANDS: list[click.Command]``."""
