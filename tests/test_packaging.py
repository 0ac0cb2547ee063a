"""The built wheel works outside the source tree: it carries mappings/ and shapes/ as data
files, and an installed copy maps and validates with them (no network: the wheel is built
without build isolation and installed with --no-index)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from aggregator.demo.peers.sample_data import generate_dataset

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build from a copy of the tree (a build writes build/ and egg-info next to its input)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("aggregator", "mappings", "shapes", "schemas"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    out = tmp_path_factory.mktemp("dist")
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    done = _run([*build, "--no-index", "-w", str(out), str(src)], cwd=src)
    assert done.returncode == 0, done.stdout + done.stderr
    (whl,) = out.glob("ld_aggregator-*.whl")
    return whl


def test_wheel_carries_the_mappings_and_shapes(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    data = [n.split("/data/", 1)[1] for n in names if ".data/data/" in n]
    for path in (ROOT / "mappings").glob("*.toml"):
        assert f"share/ld-aggregator/mappings/{path.name}" in data
    for path in (ROOT / "shapes").glob("*.ttl"):
        assert f"share/ld-aggregator/shapes/{path.name}" in data
    schemas = list((ROOT / "schemas").glob("*.sch"))
    assert schemas
    for path in schemas:
        assert f"share/ld-aggregator/schemas/{path.name}" in data
    assert "aggregator/core/resources.py" in names
    assert any(n.startswith("aggregator/demo/peers/data/") for n in names)


def test_installed_wheel_maps_and_validates_outside_the_tree(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    # the dependencies come from this environment; the package itself only from the wheel
    site = Path(
        _run(
            [str(python), "-c", "import site; print(site.getsitepackages()[0])"], tmp_path
        ).stdout.strip()
    )
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps"]
    done = _run([*pip, "--no-index", str(wheel)], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr

    where = _run(
        [
            str(python),
            "-c",
            "import aggregator, aggregator.validate.shacl as s; "
            "print(aggregator.__file__); print(s.shapes_dir())",
        ],
        cwd=tmp_path,
    )
    package, shapes = where.stdout.split()
    assert Path(package).is_relative_to(site), where.stdout + where.stderr
    assert Path(shapes) == env_dir.resolve() / "share" / "ld-aggregator" / "shapes"

    record = tmp_path / "dataset.rdf"
    record.write_bytes(generate_dataset(7))
    mapped = _run(
        [str(env_dir / "bin" / "aggregator"), "map", "--from", "dcat", str(record)], tmp_path
    )
    assert mapped.returncode == 0, mapped.stderr
    assert "dcat:Dataset" in mapped.stdout
    (tmp_path / "mapped.ttl").write_text(mapped.stdout)
    checked = _run([str(env_dir / "bin" / "aggregator"), "validate", "mapped.ttl"], tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    # the iso19139 mapper reads its tables from share/ld-aggregator/mappings too
    gemini = (
        ROOT / "aggregator" / "demo" / "peers" / "data" / "iso" / "gemini-service-flood-wms.xml"
    )
    iso = _run(
        [str(env_dir / "bin" / "aggregator"), "map", "--from", "iso19139", str(gemini)], tmp_path
    )
    assert iso.returncode == 0, iso.stderr
    assert "dcat:DataService" in iso.stdout
