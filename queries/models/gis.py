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
