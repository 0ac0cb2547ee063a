"""The configuration: ``aggregator.toml`` read once (``loading``) into typed settings
(``settings``), a source's validation chain (``validation_chain``), the typed options of plugins
(``plugin_options``), the edits of ``[sources.NAME]`` tables that keep the operator's
comments (``sources_file``) and the environment secrets (``secret``, below the settings). The
parts import the names below from here."""

from aggregator.config.loading import load_settings, parse_source, tile_origin
from aggregator.config.settings import (
    ENV_NAME,
    HEADER_NAME,
    SCHEDULES,
    SOURCE_NAME,
    HarvestSettings,
    HttpSettings,
    RetentionSettings,
    ScheduleSettings,
    Secret,
    ServeSettings,
    Settings,
    SourceConfig,
    ValidationSettings,
    ValidationStep,
    ViolationPolicy,
    violation_policy,
)

__all__ = [
    "ENV_NAME",
    "HEADER_NAME",
    "SCHEDULES",
    "SOURCE_NAME",
    "HarvestSettings",
    "HttpSettings",
    "RetentionSettings",
    "ScheduleSettings",
    "Secret",
    "ServeSettings",
    "Settings",
    "SourceConfig",
    "ValidationSettings",
    "ValidationStep",
    "ViolationPolicy",
    "load_settings",
    "parse_source",
    "tile_origin",
    "violation_policy",
]
