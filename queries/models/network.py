"""The hydraulic network model: the six EPANET element types, their patterns and curves.

One table per element type (not one table with a type column): each type has its own EPANET
properties, so typed, NOT NULL-able columns beat a sparse wide table or a JSON bag; every tool names an
``element_type`` anyway, so a lookup never has to search across types; and each table gets its own
smaller GiST index for nearby queries (SPEC R-GEO).

Element ids are the network's own ids (EPANET names), unique per project and type. Units are SI as
WNTR reports them (m, m³/s, m/s, s); the network schema rows (``options.NETWORK_SCHEMAS``) state them.

Geometry is EPSG:4326: nodes are Points, links LineStrings through the .inp vertices (``geom``). For
WGS84 spheroid distance with an index (SDK_NOTES "Data"), every element also has ``geog``: the same
shape as a PostGIS *geography*, a stored generated column (``geom::geography``) so the two can never
disagree, with its own GiST index. ``geog__dwithin=(point, D(m=200))`` uses that index.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from django.contrib.gis.db import models as gis
from django.contrib.postgres.indexes import GistIndex
from django.db import models
from django.db.models.functions import Cast

ELEMENT_TYPES = ("junction", "reservoir", "tank", "pipe", "pump", "valve")
NODE_TYPES = ("junction", "reservoir", "tank")
LINK_TYPES = ("pipe", "pump", "valve")


class LinkStatus(models.TextChoices):
    OPEN = "OPEN"
    CLOSED = "CLOSED"
    ACTIVE = "ACTIVE"
    CV = "CV"


class NetworkElement(models.Model):
    """Fields every element shares: its project, its network id, an optional tag, and geometry."""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    element_id = models.CharField(max_length=64)
    tag = models.CharField(max_length=64, blank=True, default="")

    element_type: str = ""
    # Declared for the type checker: every concrete element model has Django's default manager.
    objects: ClassVar[models.Manager[Self]]

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.element_type} {self.element_id}"


def _geography(geometry_class: type[gis.GeometryField[Any, Any]]) -> models.GeneratedField:
    return models.GeneratedField(
        expression=Cast("geom", geometry_class(geography=True, srid=4326)),
        output_field=geometry_class(geography=True, srid=4326, spatial_index=False),
        db_persist=True,
    )


class Node(NetworkElement):
    """A node (junction, reservoir or tank): a point."""

    geom = gis.PointField(srid=4326)
    geog = _geography(gis.PointField)
    initial_quality = models.FloatField(default=0.0)

    class Meta:
        abstract = True


class Link(NetworkElement):
    """A link (pipe, pump or valve) between two nodes (by their network ids); the geometry runs from
    the start node through the .inp vertices to the end node."""

    start_node_id = models.CharField(max_length=64)
    end_node_id = models.CharField(max_length=64)
    initial_status = models.CharField(max_length=8, choices=LinkStatus.choices, default=LinkStatus.OPEN)
    geom = gis.LineStringField(srid=4326)
    geog = _geography(gis.LineStringField)

    class Meta:
        abstract = True


class Junction(Node):
    """An EPANET junction: elevation (m), base demand (m³/s) with its demand pattern, emitter."""

    element_type = "junction"
    elevation = models.FloatField()
    base_demand = models.FloatField(default=0.0)
    demand_pattern = models.CharField(max_length=64, blank=True, default="")
    demand_category = models.CharField(max_length=64, blank=True, default="")
    emitter_coefficient = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["project_id", "element_id"]
        constraints = [models.UniqueConstraint(fields=["project", "element_id"], name="junction_project_id_uniq")]
        indexes = [GistIndex(fields=["geog"], name="junction_geog_gist")]


class Reservoir(Node):
    """An EPANET reservoir: a fixed total head (m), optionally varied by a head pattern."""

    element_type = "reservoir"
    base_head = models.FloatField()
    head_pattern = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["project_id", "element_id"]
        constraints = [models.UniqueConstraint(fields=["project", "element_id"], name="reservoir_project_id_uniq")]
        indexes = [GistIndex(fields=["geog"], name="reservoir_geog_gist")]


class Tank(Node):
    """An EPANET storage tank: bottom elevation, initial/min/max water level (m), diameter (m),
    minimum volume (m³), optional volume curve, overflow flag and mixing model."""

    element_type = "tank"
    elevation = models.FloatField()
    init_level = models.FloatField()
    min_level = models.FloatField()
    max_level = models.FloatField()
    diameter = models.FloatField()
    min_volume = models.FloatField(default=0.0)
    volume_curve = models.CharField(max_length=64, blank=True, default="")
    overflow = models.BooleanField(default=False)
    mixing_model = models.CharField(max_length=16, blank=True, default="MIXED")

    class Meta:
        ordering = ["project_id", "element_id"]
        constraints = [models.UniqueConstraint(fields=["project", "element_id"], name="tank_project_id_uniq")]
        indexes = [GistIndex(fields=["geog"], name="tank_geog_gist")]


def _node_indexes(prefix: str) -> list[models.Index]:
    """Btrees on a link table's end nodes: the topology tools (``queries.services.topology``) walk the
    network node → its links by probing these, never by scanning the table."""
    return [
        models.Index(fields=["project", "start_node_id"], name=f"{prefix}_start_node"),
        models.Index(fields=["project", "end_node_id"], name=f"{prefix}_end_node"),
    ]


class Pipe(Link):
    """An EPANET pipe: length (m), diameter (m), roughness (coefficient of the network's headloss
    formula), minor loss coefficient, initial status and check valve."""

    element_type = "pipe"
    length = models.FloatField()
    diameter = models.FloatField()
    roughness = models.FloatField()
    minor_loss = models.FloatField(default=0.0)
    check_valve = models.BooleanField(default=False)
    bulk_coeff = models.FloatField(null=True, blank=True)
    wall_coeff = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["project_id", "element_id"]
        constraints = [models.UniqueConstraint(fields=["project", "element_id"], name="pipe_project_id_uniq")]
        indexes = [GistIndex(fields=["geog"], name="pipe_geog_gist"), *_node_indexes("pipe")]


class Pump(Link):
    """An EPANET pump: either a head curve (``pump_type=HEAD``) or constant power in kW
    (``POWER``), relative speed and speed pattern, efficiency curve, energy price and pattern."""

    class PumpType(models.TextChoices):
        HEAD = "HEAD"
        POWER = "POWER"

    element_type = "pump"
    pump_type = models.CharField(max_length=8, choices=PumpType.choices)
    pump_curve = models.CharField(max_length=64, blank=True, default="")
    power = models.FloatField(null=True, blank=True)
    speed = models.FloatField(default=1.0)
    speed_pattern = models.CharField(max_length=64, blank=True, default="")
    efficiency_curve = models.CharField(max_length=64, blank=True, default="")
    energy_price = models.FloatField(null=True, blank=True)
    energy_pattern = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["project_id", "element_id"]
        constraints = [models.UniqueConstraint(fields=["project", "element_id"], name="pump_project_id_uniq")]
        indexes = [GistIndex(fields=["geog"], name="pump_geog_gist"), *_node_indexes("pump")]


class Valve(Link):
    """An EPANET valve: type (PRV, PSV, PBV, FCV, TCV, GPV), diameter (m), setting (pressure in m,
    flow in m³/s, loss coefficient, or a headloss curve name for GPV) and minor loss."""

    class ValveType(models.TextChoices):
        PRV = "PRV"
        PSV = "PSV"
        PBV = "PBV"
        FCV = "FCV"
        TCV = "TCV"
        GPV = "GPV"

    element_type = "valve"
    valve_type = models.CharField(max_length=4, choices=ValveType.choices)
    diameter = models.FloatField()
    setting = models.FloatField(null=True, blank=True)
    headloss_curve = models.CharField(max_length=64, blank=True, default="")
    minor_loss = models.FloatField(default=0.0)

    class Meta:
        ordering = ["project_id", "element_id"]
        constraints = [models.UniqueConstraint(fields=["project", "element_id"], name="valve_project_id_uniq")]
        indexes = [GistIndex(fields=["geog"], name="valve_geog_gist"), *_node_indexes("valve")]


class Pattern(models.Model):
    """A time pattern of multipliers (demand, head, speed, energy price), stepping every
    ``pattern_timestep`` seconds of the time options."""

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    pattern_id = models.CharField(max_length=64)
    multipliers = models.JSONField(default=list)

    class Meta:
        ordering = ["project_id", "pattern_id"]
        constraints = [models.UniqueConstraint(fields=["project", "pattern_id"], name="pattern_project_id_uniq")]

    def __str__(self) -> str:
        return self.pattern_id


class Curve(models.Model):
    """A curve of (x, y) points in SI units: pump head (m³/s → m), efficiency (m³/s → %), tank volume
    (m → m³) or valve headloss (m³/s → m)."""

    class CurveType(models.TextChoices):
        HEAD = "HEAD"
        EFFICIENCY = "EFFICIENCY"
        VOLUME = "VOLUME"
        HEADLOSS = "HEADLOSS"
        UNKNOWN = "UNKNOWN"

    project = models.ForeignKey("contexts.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    curve_id = models.CharField(max_length=64)
    curve_type = models.CharField(max_length=16, choices=CurveType.choices)
    points = models.JSONField(default=list)

    class Meta:
        ordering = ["project_id", "curve_id"]
        constraints = [models.UniqueConstraint(fields=["project", "curve_id"], name="curve_project_id_uniq")]

    def __str__(self) -> str:
        return self.curve_id


ELEMENT_MODELS: dict[str, type[NetworkElement]] = {
    "junction": Junction,
    "reservoir": Reservoir,
    "tank": Tank,
    "pipe": Pipe,
    "pump": Pump,
    "valve": Valve,
}
