"""``python -m aggregator.cli``: the same as the ``aggregator`` command."""

from aggregator.cli.app import main

main()
