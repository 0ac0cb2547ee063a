"""The three plugin registries, typed for the parts that run plugins.

They are the process's one registry of each kind (:func:`aggregator.registry.registry_of`):
the configuration checks names against the same objects without importing the base classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aggregator.registry import HARVESTERS, MAPPERS, VALIDATORS, Registry, registry_of

if TYPE_CHECKING:
    from aggregator.harvest.base import Harvester
    from aggregator.mapping.base import Mapper
    from aggregator.validate.base import Validator

harvesters: Registry[Harvester] = registry_of(HARVESTERS)
mappers: Registry[Mapper] = registry_of(MAPPERS)
validators: Registry[Validator] = registry_of(VALIDATORS)
