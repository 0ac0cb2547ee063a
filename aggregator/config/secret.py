"""A secret named in ``aggregator.toml`` by its environment variable, and the rule for such names.

Its own module, below the settings, so that the parts that read secrets of their own sections
(``[notify.smtp]``'s ``password_env``) need not import :mod:`aggregator.config.settings`, which
names the ``[notify]`` section's type.
"""

from __future__ import annotations

import re

from aggregator.core.errors import ConfigError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Secret:
    """A secret value read from the environment at load time; never printed.

    An unset variable does not stop the configuration from loading (one source's missing
    secret must not block every other source): the secret is then *missing*, and
    :meth:`aggregator.config.SourceConfig.require_secrets` fails that source's job, naming
    the variable.
    """

    __slots__ = ("_value", "env_name")

    def __init__(self, env_name: str, value: str | None) -> None:
        self.env_name = env_name
        self._value = value

    @property
    def missing(self) -> bool:
        return self._value is None

    def reveal(self) -> str:
        if self._value is None:
            raise ConfigError(f"environment variable {self.env_name!r} is not set")
        return self._value

    def __repr__(self) -> str:
        return f"Secret(env={self.env_name!r}, value='***')"

    __str__ = __repr__
