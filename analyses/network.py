"""The pinned model versions as WNTR networks, read once per process: a submission validates ids against
the shared copy (never changed), a run computes on a copy of its own (``fresh``).

A run's copy is unpickled from the shared network's pickle, made once per version and process: on Net6
``pickle.loads`` takes about half the CPU of ``copy.deepcopy`` of the network (0.18 s against 0.28 s at
best, 0.22 s against 0.42 s median; ``mcp_app/README.md`` "Measuring"). The pickle is this process's own
bytes, never read from outside it.
"""

from __future__ import annotations

import pickle
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wntr.network import WaterNetworkModel

    from queries.models import NetworkSource

#: Model versions kept parsed per process (Net6's parse is ~0.3 s; its network ~30 MB, its pickle 3 MB).
KEEP = 4
_LOCK = threading.Lock()
_MODELS: OrderedDict[tuple[int, str], tuple[WaterNetworkModel, bytes]] = OrderedDict()


def _entry(version: NetworkSource) -> tuple[WaterNetworkModel, bytes]:
    from queries.runs.model import read_model_version

    key = (version.pk, version.sha256)
    with _LOCK:
        found = _MODELS.get(key)
        if found is not None:
            _MODELS.move_to_end(key)
            return found
    wn = read_model_version(version)
    entry = (wn, pickle.dumps(wn, protocol=pickle.HIGHEST_PROTOCOL))
    with _LOCK:
        _MODELS[key] = entry
        while len(_MODELS) > KEEP:
            _MODELS.popitem(last=False)
    return entry


def shared(version: NetworkSource) -> WaterNetworkModel:
    """The network of ``version``, parsed on first use: read it, never change it."""
    return _entry(version)[0]


def fresh(version: NetworkSource) -> WaterNetworkModel:
    """A copy of ``version``'s network that a run may change (split pipes, emitters, demands)."""
    wn: WaterNetworkModel = pickle.loads(_entry(version)[1])  # noqa: S301 - this process's own pickle
    return wn
