"""The tool registry (issue 18 §1): apps register families from ``AppConfig.ready()``, a declaration carries
what every edge needs (its REST route or why it has none, its examples), and a new family is seen by every
edge without another file naming it — here the test settings' app ``tests.support.extra_family``, whose one
file holds its schema, service and declaration."""

from __future__ import annotations

from dataclasses import replace
from io import StringIO
from typing import Any

import httpx2
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import override_settings

from contexts import dev_issuer
from contexts.grants import tool_catalog
from queries.api import example_request, routes
from queries.models import Tank
from queries.registry import all_tools, tool_spec, tools_by_name
from tests.mcp_app.test_executor import SAMPLES
from tests.queries.test_api import api_token, rest_examples
from tests.support.demo import CLIENT, DEMO
from tests.support.extra_family.tools import NAME
from tests.support.mcp_http import parse_rpc_response, rpc_body, rpc_headers
from tests.support.servers import ServerProcess
from tjwater.registry import ToolRegistry

pytestmark = pytest.mark.django_db


def test_a_declaration_without_examples_or_without_a_rest_decision_is_refused() -> None:
    spec = tool_spec("get_element_properties")
    with pytest.raises(ImproperlyConfigured, match="at least one example"):
        replace(spec, examples=())
    with pytest.raises(ImproperlyConfigured, match="REST route or why"):
        replace(spec, rest=None)
    with pytest.raises(ImproperlyConfigured, match="REST route or why"):
        replace(spec, not_on_rest="both at once")


def test_the_registry_refuses_a_name_declared_twice_and_hides_test_only_families() -> None:
    registry = ToolRegistry()
    one, two = tool_spec("list_elements"), tool_spec("get_network_options")
    registry.register(app="a", family="f", tools=[one])
    registry.register(app="a", family="f", tools=[one])  # ready() running twice adds nothing
    with pytest.raises(ImproperlyConfigured, match="declared twice"):
        registry.register(app="b", family="g", tools=[replace(two, name=one.name)])
    registry.register(app="b", family="tests", tools=[two], test_only=True)
    with override_settings(TJWATER_MCP_TEST_TOOLS=False):
        assert [t.name for t in registry.tools()] == [one.name]
    with override_settings(TJWATER_MCP_TEST_TOOLS=True):
        assert [t.name for t in registry.tools()] == sorted([one.name, two.name])
    assert [t.name for t in registry.product_tools()] == [one.name]
    assert registry.permission_catalog() == {
        one.name: frozenset(one.permissions),
        two.name: frozenset(two.permissions),
    }


def test_a_family_registered_by_an_app_reaches_binding_rest_the_catalog_check_and_both_parity_tests() -> None:
    assert NAME in tools_by_name()
    catalog, _ = tool_catalog()
    assert catalog[NAME] == frozenset(tool_spec(NAME).permissions)  # bindable
    assert NAME in {route.tool for route in routes()}  # routed on REST
    assert (NAME, 0) in rest_examples() and (NAME, 1) in rest_examples()  # REST ≡ MCP parity
    assert SAMPLES[NAME] == [dict(a) for a in tool_spec(NAME).examples]  # both plan drivers
    out = StringIO()
    call_command("mcp_catalog_check", stdout=out)
    assert out.getvalue().startswith(f"catalog ok: {len(all_tools())} tools")
    assert NAME in {line.split()[0] for line in out.getvalue().splitlines()[2:]}


def test_a_family_registered_by_an_app_is_served_over_mcp_and_rest(demo_server: ServerProcess, demo_call: Any) -> None:
    bearer = dev_issuer.mint_token(subject="alice", client_id=CLIENT, scopes=["mcp.catalog.read"], ttl_s=600)
    listed = parse_rpc_response(
        httpx2.post(
            f"{demo_server.url}/mcp", json=rpc_body("tools/list"), headers=rpc_headers("tools/list", bearer), timeout=30
        )
    )
    assert NAME in {tool["name"] for tool in listed["result"]["tools"]}
    over_mcp = demo_call(NAME, {"element_type": "tank"})["result"]["structuredContent"]
    path, query = example_request(tool_spec(NAME), {"element_type": "tank"})
    assert path == "test-extra/tanks/count"
    over_rest = httpx2.get(
        f"{demo_server.url}/api/v1/projects/{DEMO}/{path}",
        params=query,
        headers={"Authorization": f"Bearer {api_token()}"},
        timeout=30,
    )
    assert over_rest.status_code == 200, over_rest.text
    tanks = Tank.objects.filter(project__slug=DEMO).count()
    assert tanks > 0
    assert over_rest.json()["data"] == over_mcp["data"] == {"element_type": "tank", "count": tanks}
