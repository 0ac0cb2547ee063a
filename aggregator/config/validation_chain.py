"""The validation part of ``aggregator.toml``: a source's ``validation`` chain (validator
names, step tables or a profile name) and the ``[validation.NAME]`` defaults, each step's
options checked against its validator's ``Options`` at load time (docs/validation.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aggregator.config.settings import SOURCE_NAME, ValidationSettings, ValidationStep
from aggregator.core.errors import ConfigError
from aggregator.core.registry import VALIDATORS, registry_of


def parse_chain(
    value: Any, where: str, root: Path | None, defaults: ValidationSettings | None
) -> tuple[ValidationStep, ...]:
    """A source's ``validation``: validator names (``["xsd", "shacl"]``) or step tables
    (``{ validator = "xsd", schema = "iso.xsd" }``), in order; each step's options are checked
    against the validator's ``Options`` and merged over the ``[validation.NAME]`` defaults."""
    from aggregator.config.plugin_options import complete_options, convert_options
    from aggregator.config.profiles import PROFILES, profile_steps

    validators = registry_of(VALIDATORS)

    if isinstance(value, str):  # a profile name: its payload steps, then shacl
        if value not in PROFILES:
            raise ConfigError(
                f"[{where}]: validation {value!r} is not a profile ({', '.join(PROFILES)});"
                " give a list of validators or step tables"
            )
        value = [value, "shacl"]
    if not isinstance(value, list | tuple):
        raise ConfigError(f"[{where}]: validation must be a list of validators or step tables")
    defaults = defaults or ValidationSettings()
    steps: list[ValidationStep] = []
    for i, item in enumerate(value, 1):
        at = f"{where}.validation[{i}]"
        if isinstance(item, str) and item in PROFILES:
            steps.extend(profile_steps(item, defaults))
            continue
        table = {"validator": item} if isinstance(item, str) else item
        if not isinstance(table, Mapping) or not isinstance(table.get("validator"), str):
            raise ConfigError(f"[{at}]: a step is a validator name or a table with 'validator'")
        opts = dict(table)
        validator = opts.pop("validator")
        label = opts.pop("name", "")
        if not isinstance(label, str) or (label and not SOURCE_NAME.match(label)):
            raise ConfigError(f"[{at}]: name must match {SOURCE_NAME.pattern}")
        if validator not in validators:
            known = ", ".join(validators)
            raise ConfigError(f"[{at}]: unknown validator {validator!r} (known: {known})")
        cls = validators.get(validator)
        if cls.Options is None:
            if opts:
                raise ConfigError(f"[{at}]: the {validator} validator takes no options")
            step = defaults.step(validator, name=label)
        else:
            step = defaults.step(validator, convert_options(cls.Options, opts, at, root), label)
            complete_options(cls.Options, dict(step.options), at)
        steps.append(step)
    labels = [s.label for s in steps]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ConfigError(
            f"[{where}]: validation step(s) {', '.join(twice)} appear twice; give each a"
            " distinct 'name' (it labels the step's findings)"
        )
    return tuple(steps)


def validation_settings(table: Mapping[str, Any], root: Path) -> ValidationSettings:
    """Check each validator's default options against its ``Options`` at load time."""
    from aggregator.config.plugin_options import convert_options

    validators = registry_of(VALIDATORS)

    options: dict[str, dict[str, Any]] = {}
    for name, opts in dict(table).items():
        if name not in validators:
            raise ConfigError(f"[validation.{name}]: unknown validator {name!r}")
        if not isinstance(opts, Mapping):
            raise ConfigError(f"[validation.{name}] must be a table")
        cls = validators.get(name).Options
        if cls is None:
            if opts:
                raise ConfigError(f"[validation.{name}]: the {name} validator takes no options")
            continue
        options[name] = convert_options(cls, opts, f"validation.{name}", root)
    return ValidationSettings(options=options)
