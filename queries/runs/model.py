"""A model version as WNTR reads it: the analyses and the baseline simulate the version's own .inp text."""

from __future__ import annotations

import tempfile
from pathlib import Path

import wntr
from wntr.network import WaterNetworkModel

from queries.models import NetworkSource


def read_model_version(version: NetworkSource) -> WaterNetworkModel:
    """The network of ``version``, read by WNTR from its .inp text (a file of a temporary directory)."""
    with tempfile.TemporaryDirectory(prefix="tjwater-inp-") as tmp:
        path = Path(tmp) / "network.inp"
        path.write_text(version.inp_text)
        return wntr.network.WaterNetworkModel(str(path))
