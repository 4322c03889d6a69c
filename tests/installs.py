"""Installed engines as tests fake them: a package folder and its distribution's metadata in a
site-packages folder, read by autotune's probes (find_spec, importlib.metadata) and never
imported."""

from __future__ import annotations

from pathlib import Path

__all__ = ["dist_info", "fake_engine_site"]


def dist_info(site: Path, dist: str, version: str) -> Path:
    """`dist`'s .dist-info folder under `site`, its METADATA naming `version`."""
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return info


def fake_engine_site(site: Path, package: str, dist: str, version: str) -> Path:
    """`site` holding `package` (whose import fails: probes must not import it) installed by
    `dist` `version`."""
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text("raise ImportError('never imported')\n")
    dist_info(site, dist, version)
    return site
