"""Valve segments (issue 42 item 2): the parts of the network that closing valves cuts apart, computed by
``wntr.metrics.valve_segments`` from the project's valve layer (``import_gis --as-valves``) on its current
model version, once per (model version, valve layer): stored in ``ValveSegments`` and read back after.
A project without a valve layer is refused with ``CAPABILITY_NOT_AVAILABLE`` naming what is missing;
valves are never invented."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import wntr
from django.db import IntegrityError, transaction

from contexts.errors import InvalidParameter
from contexts.models import Project
from queries.errors import CapabilityGap
from queries.models import GisLayer, IsolationValve, NetworkSource, ValveSegments, current_model_version
from queries.runs.model import read_model_version


@dataclass(frozen=True)
class Segments:
    """Segment number of every node and link of one model version, cut by one valve layer."""

    model_version: int
    layer_key: str
    node_segments: dict[str, int]
    link_segments: dict[str, int]
    #: Valves of the layer whose link or node is not in this model version (by fid): they cut nothing.
    stale_valves: list[str] = field(default_factory=list)


def valve_layer(project: Project, layer_key: str | None = None) -> GisLayer:
    """The project's valve layer: the one named, or the only one."""
    layers = list(GisLayer.objects.filter(project=project, kind="valves").order_by("layer_key"))
    if layer_key is not None:
        layers = [layer for layer in layers if layer.layer_key == layer_key]
    if not layers:
        named = f" {layer_key!r}" if layer_key is not None else ""
        raise CapabilityGap(
            f"Project {project.slug} has no valve layer{named}: valve isolation needs the isolation valves "
            f"(import_gis FILE --project {project.slug} --layer-key valves --as-valves --link-field LINK "
            "--node-field NODE); it does not invent valves.",
            details={"missing": "valve layer"},
        )
    if len(layers) > 1:
        raise InvalidParameter(
            f"Project {project.slug} has {len(layers)} valve layers ({', '.join(x.layer_key for x in layers)}): "
            "name one.",
            details={"valve_layers": [x.layer_key for x in layers]},
        )
    return layers[0]


def valve_segments(project: Project, layer_key: str | None = None) -> Segments:
    """The segments of the project's current model version cut by its valve layer (computed once)."""
    version = current_model_version(project.pk)
    if version is None:
        raise CapabilityGap(f"Project {project.slug} has no imported network: run import_network first.")
    layer = valve_layer(project, layer_key)
    valves = list(
        IsolationValve.objects.filter(layer=layer).order_by("pk").values_list("source_fid", "link_id", "node_id")
    )
    stored = ValveSegments.objects.filter(model_version=version, layer=layer).first()
    if stored is None:
        stored = _compute(version, layer, valves)
    nodes, links = stored.node_segments, stored.link_segments
    stale = [fid for fid, link, node in valves if link not in links or node not in nodes]
    return Segments(version.version, layer.layer_key, nodes, links, stale)


def _compute(version: NetworkSource, layer: GisLayer, valves: list[tuple[str, str, str]]) -> ValveSegments:
    wn = read_model_version(version)
    frame = pd.DataFrame([(link, node) for _, link, node in valves], columns=["link", "node"])
    node_segments, link_segments, _ = wntr.metrics.valve_segments(wn.to_graph(), frame)
    row = ValveSegments(
        model_version=version,
        layer=layer,
        node_segments={str(k): int(v) for k, v in node_segments.items()},
        link_segments={str(k): int(v) for k, v in link_segments.items()},
    )
    try:
        with transaction.atomic():
            row.save()
    except IntegrityError:  # computed by another process meanwhile: the same numbers, read theirs
        return ValveSegments.objects.get(model_version=version, layer=layer)
    return row
