"""GIS attributes of network elements, and raw features of source GIS layers.

``ElementGisProperties`` is the utility's asset register as joined to the model (one row per model
element). ``GisLayer``/``GisFeature`` are the source layers as delivered by the GIS department: their
feature ids (``source_fid``) are the GIS system's own and differ from model element ids; a feature may
name the model element it was matched to (``element_type``/``element_id``, blank when unmatched).
"""

from __future__ import annotations

from django.contrib.gis.db import models as gis
from django.db import models


class ElementGisProperties(models.Model):
    """Asset attributes of one model element: material, install year, diameter class, district, road,
    plus anything else the register holds in ``properties``."""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    element_type = models.CharField(max_length=16)
    element_id = models.CharField(max_length=64)
    material = models.CharField(max_length=32, blank=True, default="")
    install_year = models.PositiveSmallIntegerField(null=True, blank=True)
    diameter_class = models.CharField(max_length=16, blank=True, default="")
    district = models.CharField(max_length=64, blank=True, default="")
    road = models.CharField(max_length=128, blank=True, default="")
    properties = models.JSONField(default=dict)

    class Meta:
        ordering = ["project_id", "element_type", "element_id"]
        verbose_name_plural = "element GIS properties"
        constraints = [
            models.UniqueConstraint(
                fields=["project", "element_type", "element_id"], name="elementgis_project_element_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.element_type} {self.element_id}"


#: What a source layer's key may be: the GIS tools' input schema (``queries.tools.gis``) and the importer
#: both use it, so an imported layer can always be read.
LAYER_KEY_PATTERN = r"^[A-Za-z0-9_.-]+$"


class GisLayer(models.Model):
    """A source GIS layer (e.g. ``pipes_2025``), as delivered: its key, geometry type and source CRS."""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    layer_key = models.CharField(max_length=64)
    name = models.CharField(max_length=200)
    geometry_type = models.CharField(max_length=32)
    source_crs = models.CharField(max_length=32, default="EPSG:4326")
    source_name = models.CharField(max_length=200, blank=True, default="")
    exported_at = models.DateTimeField(null=True, blank=True)
    #: ``valves``: a layer of isolation valves (``import_gis --as-valves``), one ``IsolationValve`` per
    #: valve naming its pipe and node; ``features`` for any other layer.
    kind = models.CharField(max_length=16, default="features")

    class Meta:
        ordering = ["project_id", "layer_key"]
        constraints = [models.UniqueConstraint(fields=["project", "layer_key"], name="gislayer_project_key_uniq")]

    def __str__(self) -> str:
        return self.layer_key


class GisFeature(models.Model):
    """One raw feature of a source layer: its GIS feature id, attributes and geometry (EPSG:4326)."""

    layer = models.ForeignKey(GisLayer, on_delete=models.CASCADE, related_name="features", db_index=False)
    source_fid = models.CharField(max_length=64)
    properties = models.JSONField(default=dict)
    geom = gis.GeometryField(srid=4326, null=True, blank=True)
    element_type = models.CharField(max_length=16, blank=True, default="")
    element_id = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["layer_id", "source_fid"]
        constraints = [models.UniqueConstraint(fields=["layer", "source_fid"], name="gisfeature_layer_fid_uniq")]

    def __str__(self) -> str:
        return self.source_fid


class IsolationValve(models.Model):
    """One isolation valve of a valve layer (issue 42 item 2): the link it sits on and the node it
    protects (the link's end next to it), as ``wntr.metrics.valve_segments`` takes them. Replaced with
    the layer; a valve naming no model element, or a node that is not an end of its link, is reported by
    fid at import and never stored."""

    layer = models.ForeignKey(GisLayer, on_delete=models.CASCADE, related_name="valves", db_index=False)
    source_fid = models.CharField(max_length=64)
    link_id = models.CharField(max_length=64)
    node_id = models.CharField(max_length=64)

    class Meta:
        ordering = ["layer_id", "source_fid"]
        constraints = [models.UniqueConstraint(fields=["layer", "source_fid"], name="isolationvalve_layer_fid_uniq")]

    def __str__(self) -> str:
        return f"valve {self.source_fid} on {self.link_id} at {self.node_id}"


class ValveSegments(models.Model):
    """The segments of one model version cut by one valve layer (``queries.runs.segments``), computed
    once: a re-import of either makes a new key (a new version, a new layer row)."""

    model_version = models.ForeignKey("queries.NetworkSource", on_delete=models.CASCADE, related_name="+")
    layer = models.ForeignKey(GisLayer, on_delete=models.CASCADE, related_name="+", db_index=False)
    node_segments = models.JSONField(default=dict)
    link_segments = models.JSONField(default=dict)
    computed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["layer", "model_version"], name="valvesegments_key_uniq")]
        verbose_name_plural = "valve segments"

    def __str__(self) -> str:
        return f"segments of v{self.model_version_id} by layer {self.layer_id}"
