"""What a built distribution of omnidistill carries: the license its metadata names (Apache-2.0 asks
that a copy go with every distribution), from a build backend that reads that metadata."""

from __future__ import annotations

import importlib.metadata as md
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def test_the_installed_distribution_names_the_license_file_it_ships():
    """The metadata of the installed omnidistill (an editable install reads it from the tree's
    ``omnidistill.egg-info``, a wheel from ``licenses/``) names ``LICENSE``, which is Apache-2.0's text."""
    meta = md.metadata("omnidistill")
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"], "metadata from before license-files: reinstall (pip install -e .)"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert " ".join(text.split()[:4]) == "Apache License Version 2.0,"
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text


def test_the_build_backend_floor_reads_an_spdx_license():
    """``project.license`` as an SPDX string and ``license-files`` are PEP 639, which setuptools reads
    from 77 on; setuptools 76 stops the build (``project.license must be valid exactly by one
    definition``), as pip's ``--no-build-isolation`` or an offline mirror with an older one would meet."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert isinstance(pyproject["project"]["license"], str)
    (setuptools,) = [Requirement(r) for r in pyproject["build-system"]["requires"] if Requirement(r).name == "setuptools"]
    assert not setuptools.specifier.contains("76.1.0") and setuptools.specifier.contains("77.0.0")
