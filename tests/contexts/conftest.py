"""The isolation world of the contexts tests: alice and bob in two projects, carol in none, and a
leased investigation run in each project."""

from __future__ import annotations

import pytest

from tests.contexts import factories
from tests.contexts.factories import World


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
