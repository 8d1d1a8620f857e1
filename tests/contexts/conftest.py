"""The isolation world of the contexts tests: alice and bob in two projects, carol in none, and a
leased investigation run in each project."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from contexts.models import Membership, Principal, Project
from tests.contexts import factories

# A catalog shaped like the registry's (tool → required permissions), plus tools of the classes a
# task_reader must never get (R-CTX-4). None of the latter exist in the product; they are here to prove
# the rule holds if one is ever registered.
CATALOG: dict[str, frozenset[str]] = {
    "get_element_properties": frozenset({"webgis.view"}),
    "list_scada_devices": frozenset({"scada.view"}),
    "query_model_baseline_field": frozenset({"simulation.view"}),
    "query_element_history": frozenset({"scada.view", "simulation.view"}),
    "list_sensor_placement_runs": frozenset({"optimization.run"}),
    "get_task_context": frozenset(),
    "get_task_evidence": frozenset(),
    "publish_report": frozenset({"report.publish"}),
    "approve_plan": frozenset({"approval.grant"}),
    "control_device_valve": frozenset({"device.control"}),
    "run_shell": frozenset(),
    "delegate_subtask": frozenset({"webgis.view"}),
}
TASK_SCOPED = frozenset({"get_task_context", "get_task_evidence"})
FORBIDDEN_FOR_READERS = frozenset(
    {"publish_report", "approve_plan", "control_device_valve", "run_shell", "delegate_subtask"}
)


@dataclass
class World:
    alpha: Project
    beta: Project
    alice: Principal
    bob: Principal
    carol: Principal
    alice_alpha: Membership
    alice_beta: Membership
    bob_beta: Membership
    run_alpha: factories.LeasedRun
    run_beta: factories.LeasedRun


@pytest.fixture
def world(db: None) -> World:
    alpha = factories.project("ctx-alpha")
    beta = factories.project("ctx-beta")
    alice = factories.principal("ctx-alice")
    bob = factories.principal("ctx-bob")
    carol = factories.principal("ctx-carol")
    return World(
        alpha=alpha,
        beta=beta,
        alice=alice,
        bob=bob,
        carol=carol,
        alice_alpha=factories.membership(alice, alpha),
        alice_beta=factories.membership(alice, beta, ["webgis.view"]),
        bob_beta=factories.membership(bob, beta),
        run_alpha=factories.leased_run(alpha, owner=alice, session_id="ctx-alice-exec-session"),
        run_beta=factories.leased_run(beta, owner=bob, session_id="ctx-bob-exec-session"),
    )
