"""The pinned model versions as WNTR networks, read once per process: a submission validates ids against
the shared copy (never changed), a run computes on a deep copy of it (``fresh``)."""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wntr.network import WaterNetworkModel

    from queries.models import NetworkSource

#: Model versions kept parsed per process (Net6's parse is ~0.3 s; its network ~30 MB).
KEEP = 4
_LOCK = threading.Lock()
_MODELS: OrderedDict[tuple[int, str], WaterNetworkModel] = OrderedDict()


def shared(version: NetworkSource) -> WaterNetworkModel:
    """The network of ``version``, parsed on first use: read it, never change it."""
    from queries.runs.model import read_model_version

    key = (version.pk, version.sha256)
    with _LOCK:
        wn = _MODELS.get(key)
        if wn is not None:
            _MODELS.move_to_end(key)
            return wn
    wn = read_model_version(version)
    with _LOCK:
        _MODELS[key] = wn
        while len(_MODELS) > KEEP:
            _MODELS.popitem(last=False)
    return wn


def fresh(version: NetworkSource) -> WaterNetworkModel:
    """A copy of ``version``'s network that a run may change (split pipes, emitters, demands)."""
    return copy.deepcopy(shared(version))
