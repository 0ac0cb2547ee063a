"""The three plugin registries, in one place."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aggregator.registry import Registry

if TYPE_CHECKING:
    from aggregator.harvest.base import Harvester
    from aggregator.mapping.base import Mapper
    from aggregator.validate.base import Validator

harvesters: Registry[Harvester] = Registry("aggregator.harvesters", "harvester")
mappers: Registry[Mapper] = Registry("aggregator.mappers", "mapper")
validators: Registry[Validator] = Registry("aggregator.validators", "validator")
