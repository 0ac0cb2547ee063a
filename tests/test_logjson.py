"""Structured JSON logs: every line an object; event lines carry job, source, record, stage;
a library's warning inside a job's listing thread names the job too."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
from pathlib import Path

from aggregator.core.events import RecordRejected, log_event
from aggregator.core.logjson import JsonFormatter


def test_a_rejection_line_names_job_source_record_and_stage() -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("aggregator.events")
    handler = Keep(logging.DEBUG)
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        log_event(
            RecordRejected(
                source="portal", job_id=7, local_id="oai:x:1", step="shacl", rule="minCount",
                message="dct:title is missing",
            )
        )  # fmt: skip
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    [record] = records
    doc = json.loads(JsonFormatter().format(record))
    assert doc["job"] == 7 and doc["source"] == "portal"
    assert doc["record"] == "oai:x:1" and doc["stage"] == "shacl"
    assert doc["level"] == "DEBUG" and "dct:title is missing" in doc["message"]
    assert doc["time"].endswith("Z")


def test_harvest_logs_json_lines(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "aggregator.toml"
    config.write_text(
        '[store]\npath = "store"\n[http]\nallow_private = true\nretries = 1\nbackoff = 0.01\n'
        f'[sources.down]\ntype = "oai-pmh"\nurl = "http://127.0.0.1:{port}/oai"\n',
        encoding="utf-8",
    )
    out = subprocess.run(
        [sys.executable, "-m", "aggregator.cli", "-c", str(config), "--log-format", "json",
         "--log-level", "INFO", "harvest", "down"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1
    docs = [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]
    assert docs and all({"time", "level", "logger", "message"} <= d.keys() for d in docs)
    failed = [d for d in docs if d["message"].startswith("job 1 (down) failed")]
    assert failed and failed[0]["job"] == 1 and failed[0]["source"] == "down"
    retry = [d for d in docs if d["logger"].startswith("urllib3")]
    assert retry and all(d.get("job") == 1 and d.get("source") == "down" for d in retry)
    plain = [line for line in out.stderr.splitlines() if line and not line.startswith("{")]
    assert all(line.endswith("down: harvesting") for line in plain), plain
