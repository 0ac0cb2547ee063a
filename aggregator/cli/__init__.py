"""The ``aggregator`` command line: the click group (``app``), the commands per topic (``files``,
``records``, ``schedule``, ``sources``, ``store``, ``mdr``, ``handoff``), the context they share
(``context``) and the generator of docs/cli.md (``reference``). Thin: every command calls the
library."""

from aggregator.cli.app import main

__all__ = ["main"]
