"""Render the CLI reference (docs/cli.md) from the commands' own help.

    python -m aggregator.cli.reference > docs/cli.md

tests/test_docs.py fails when docs/cli.md is not what this renders, so the reference cannot
drift from the code.
"""

from __future__ import annotations

import click

from aggregator.cli.app import main


def _walk(cmd: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    out = [(path, cmd)]
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.commands):
            out += _walk(cmd.commands[name], [*path, name])
    return out


def render() -> str:
    lines = [
        "# CLI reference",
        "",
        "Generated from the commands' help by `python -m aggregator.cli.reference > docs/cli.md`;",
        "a test keeps it in step with the code.",
        "",
    ]
    for path, cmd in _walk(main, ["aggregator"]):
        ctx = click.Context(
            cmd, info_name=" ".join(path), terminal_width=100, max_content_width=100
        )
        lines += [f"## `{' '.join(path)}`", "", "```text", cmd.get_help(ctx).rstrip(), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
