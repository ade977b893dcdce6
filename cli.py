"""The ``bide`` command line: a thin layer over the library."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="bide")
def main() -> None:
    """bide: durable agent runs in a directory."""


from .bench.command import bench  # noqa: E402 - registered last, after every command above

main.add_command(bench)


if __name__ == "__main__":
    main()
