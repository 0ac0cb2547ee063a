"""Vendor Leaflet from the npm registry into the dashboard's static files (run by `make`).

Fetches the pinned release with `npm pack` (the npm client, no other download), checks the
tarball against the registry's sha512 integrity pinned here, and extracts the distribution
files (leaflet.js, leaflet.css, images, the licence) into
aggregator/serve/dashboard/static/vendor/leaflet/, which git ignores. Nothing of Leaflet is
kept in the repository; the wheel built afterwards carries the vendored copy.

    python tools/vendor_leaflet.py            # fetch when missing or of another version
    python tools/vendor_leaflet.py --force    # fetch again
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "1.9.4"
INTEGRITY = "sha512-nxS1ynzJOmOlHp+iL3FyWqK89GtNL8U8rvlMOsQdTTssxZwCXh8N2NB3GDQOL+YR3XnWyZAxwQixURb+FA74PA=="  # noqa: E501
ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "aggregator" / "serve" / "dashboard" / "static" / "vendor" / "leaflet"
WANTED = ("package/dist/leaflet.js", "package/dist/leaflet.css", "package/LICENSE")


def vendored() -> bool:
    stamp = TARGET / "VERSION"
    return (
        stamp.is_file()
        and stamp.read_text().strip() == VERSION
        and (TARGET / "leaflet.js").is_file()
    )


def main(argv: list[str]) -> int:
    if vendored() and "--force" not in argv:
        return 0
    npm = shutil.which("npm")
    if npm is None:
        print(
            "vendor_leaflet: npm is needed to fetch Leaflet (apt-get install npm)", file=sys.stderr
        )
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(  # noqa: S603 - the npm client with fixed arguments
            [npm, "pack", f"leaflet@{VERSION}", "--silent", "--pack-destination", tmp],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        tgz = Path(tmp) / f"leaflet-{VERSION}.tgz"
        digest = base64.b64encode(hashlib.sha512(tgz.read_bytes()).digest()).decode()
        if f"sha512-{digest}" != INTEGRITY:
            print(
                f"vendor_leaflet: {tgz.name} does not match the pinned integrity", file=sys.stderr
            )
            return 1
        staging = Path(tmp) / "out"
        (staging / "images").mkdir(parents=True)
        with tarfile.open(tgz) as tar:
            for member in tar.getmembers():
                name = member.name
                if not member.isfile():
                    continue
                if name in WANTED:
                    dest = staging / Path(name).name
                elif name.startswith("package/dist/images/") and name.endswith(".png"):
                    dest = staging / "images" / Path(name).name
                else:
                    continue
                source = tar.extractfile(member)
                assert source is not None
                dest.write_bytes(source.read())
        (staging / "VERSION").write_text(VERSION + "\n")
        if TARGET.exists():
            shutil.rmtree(TARGET)
        TARGET.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging, TARGET)
    print(f"vendored Leaflet {VERSION} into {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
