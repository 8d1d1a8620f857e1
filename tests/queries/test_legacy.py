"""The legacy CLI → tool table (``queries.legacy``): every command of seed 001's table has a decision,
every tool it names is a registered tool, and legacy features answer as an explicit capability gap."""

from __future__ import annotations

import pytest

from queries.errors import CapabilityGap
from queries.legacy import LEGACY_COMMANDS, LegacyCommand, refuse_unavailable, unavailable_feature
from queries.registry import tools_by_name


def test_every_named_tool_is_in_the_registry() -> None:
    registered = set(tools_by_name())
    named = {c.tool for c in LEGACY_COMMANDS if c.tool is not None}
    assert named - registered == set()
    # The seed table's read commands map onto 18 distinct tools of the catalog.
    assert len(named) == 18


def test_every_command_has_one_decision() -> None:
    assert len(LEGACY_COMMANDS) == 41  # seed 001: the old CLI's 41 business commands
    assert len({c.command for c in LEGACY_COMMANDS}) == 41
    assert all(isinstance(c, LegacyCommand) for c in LEGACY_COMMANDS)
    for c in LEGACY_COMMANDS:
        assert (c.tool is not None) == (c.decision == "tool"), c
        assert c.decision == "tool" or c.note, c  # a command not offered says why
    decisions = [c.decision for c in LEGACY_COMMANDS]
    # seed 001: 29 read commands map onto tools, 9 POST commands are execution candidates, and water age
    # and pipeline-health prediction are not offered (the remaining read rows are re-mapped to tools).
    assert (decisions.count("execution_candidate"), decisions.count("not_offered")) == (9, 2)
    assert {c.command for c in LEGACY_COMMANDS if c.decision == "not_offered"} == {
        "analysis age",
        "data pipeline-health",
    }
    assert all(c.legacy_route.startswith("POST ") for c in LEGACY_COMMANDS if c.decision == "execution_candidate")


@pytest.mark.parametrize(
    ("value", "feature"),
    [
        ("water_age", "water-age analysis"),
        ("Water-Age", "water-age analysis"),
        ("age", "water-age analysis"),
        ("pipeline_health", "pipeline-health prediction"),
        ("predict_pipeline_health", "pipeline-health prediction"),
    ],
)
def test_legacy_features_are_a_capability_gap(value: str, feature: str) -> None:
    with pytest.raises(CapabilityGap) as gap:
        refuse_unavailable(value)
    assert gap.value.code == "CAPABILITY_NOT_AVAILABLE"
    assert gap.value.details == {"feature": feature}
    assert gap.value.as_dict()["retryable"] is False


def test_ordinary_values_pass() -> None:
    for value in (None, "leak", "affected_nodes", "pressure", "quality"):
        refuse_unavailable(value)
    assert unavailable_feature("isolation_segment") is None
