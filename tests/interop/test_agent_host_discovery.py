"""The reference host's discovery and token-request rules (issue 23 items 1-3) against hostile variants
of the provider: a real local server (``tests/interop/hostile.py``) that redirects, names a plain-http
remote address, serves oversized, slow or wrong-issuer metadata. Each test breaks one rule and checks
the host stops — and that its secret went nowhere it should not."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator

import pytest

from examples.agent_host import (
    DISCOVERY_BUDGET_S,
    DISCOVERY_CACHE_S,
    MAX_DOCUMENT_BYTES,
    PRODUCT_AUDIENCE,
    AgentHost,
    Discovery,
    DiscoveryRefused,
    HostError,
    Session,
)
from tests.interop.hostile import REALM, HostileServer, Reply

SECRET = "hostile-test-client-secret"  # noqa: S105 - a test value, looked for in every request


@pytest.fixture
def hostile() -> Iterator[HostileServer]:
    server = HostileServer()
    yield server
    server.stop()


def host_for(server: HostileServer, **discovery: float) -> AgentHost:
    return AgentHost(
        server.mcp_url,
        server.issuer,
        "tjwater-agent-mcp",
        SECRET,
        discovery=Discovery(server.mcp_url, server.issuer, **discovery) if discovery else None,
    )


def discover(host: AgentHost) -> object:
    return asyncio.run(host.start())


def assert_no_credentials_on_discovery(server: HostileServer) -> None:
    """Guarantee 2: no bearer and no secret on any discovery request (everything but the token endpoint)."""
    for request in server.requests:
        if request.path.endswith("/token"):
            continue
        assert "authorization" not in request.headers, request.path
        assert SECRET.encode() not in request.body and SECRET not in request.path
        assert "cookie" not in request.headers


def test_the_rules_are_the_seeds() -> None:
    assert (MAX_DOCUMENT_BYTES, DISCOVERY_BUDGET_S, DISCOVERY_CACHE_S) == (64 * 1024, 10.0, 300.0)
    assert Discovery("http://127.0.0.1:1/mcp", "http://127.0.0.1:1/i", cache_s=3600).cache_s == 300.0


def test_discovery_order_challenge_first(hostile: HostileServer) -> None:
    """An unauthenticated request first, then the challenge's resource_metadata, then the issuer's
    metadata in the specification's order (RFC 8414 path-insert, OIDC path-insert, OIDC path-append)."""
    found = discover(host_for(hostile))
    assert hostile.paths() == [
        "/mcp",
        hostile.prm_path,
        f"/.well-known/oauth-authorization-server{REALM}",
        f"/.well-known/openid-configuration{REALM}",
        f"{REALM}/.well-known/openid-configuration",
    ]
    assert hostile.requests[0].method == "POST"
    assert found.token_endpoint == hostile.token_endpoint  # type: ignore[attr-defined]
    assert_no_credentials_on_discovery(hostile)


def test_discovery_falls_back_to_the_mcp_path_then_the_root(hostile: HostileServer) -> None:
    """No resource_metadata in the challenge: the well-known on the MCP path, then at the root."""
    hostile.routes["/mcp"] = Reply(401, {"error": "unauthorized"}, {"www-authenticate": "Bearer"})
    hostile.routes["/.well-known/oauth-protected-resource"] = hostile.routes.pop(hostile.prm_path)
    discover(host_for(hostile))
    assert hostile.paths()[:3] == ["/mcp", hostile.prm_path, "/.well-known/oauth-protected-resource"]


def test_a_resource_not_naming_the_configured_issuer_is_refused(hostile: HostileServer) -> None:
    """Item 1: the issuer is configured, not learnt — a resource naming only another issuer is refused and
    nothing is sent to that issuer."""
    other = f"{hostile.base}/realms/other"
    hostile.routes[hostile.prm_path] = Reply(200, hostile.resource_metadata(authorization_servers=[other]))
    with pytest.raises(DiscoveryRefused, match="does not name the configured issuer"):
        discover(host_for(hostile))
    assert not any("/realms/other" in path for path in hostile.paths())


def test_the_configured_issuer_among_several_is_used(hostile: HostileServer) -> None:
    other = f"{hostile.base}/realms/other"
    hostile.routes[hostile.prm_path] = Reply(
        200, hostile.resource_metadata(authorization_servers=[other, hostile.issuer])
    )
    discover(host_for(hostile))
    assert not any("/realms/other" in path for path in hostile.paths())


@pytest.mark.parametrize(
    "claimed",
    [
        "{issuer}/",  # a trailing slash
        "{base}/realms/HOSTILE",  # case
        "http://localhost:{port}/realms/hostile",  # the same server under another name
    ],
)
def test_issuer_is_compared_strictly(hostile: HostileServer, claimed: str) -> None:
    claimed = claimed.format(issuer=hostile.issuer, base=hostile.base, port=hostile.port)
    hostile.routes[f"{REALM}/.well-known/openid-configuration"] = Reply(200, hostile.issuer_metadata(issuer=claimed))
    with pytest.raises(DiscoveryRefused, match="names another issuer"):
        discover(host_for(hostile))


def test_a_resource_uri_that_differs_is_refused(hostile: HostileServer) -> None:
    hostile.routes[hostile.prm_path] = Reply(200, hostile.resource_metadata(resource=f"{hostile.mcp_url}/"))
    with pytest.raises(DiscoveryRefused, match="another resource"):
        discover(host_for(hostile))


@pytest.mark.parametrize("step", ["prm", "issuer"])
def test_redirects_are_refused(hostile: HostileServer, step: str) -> None:
    """A redirect is never followed (the target gets no request)."""
    target = f"{hostile.base}/elsewhere"
    hostile.routes["/elsewhere"] = Reply(200, hostile.resource_metadata())
    path = hostile.prm_path if step == "prm" else f"/.well-known/oauth-authorization-server{REALM}"
    hostile.routes[path] = Reply(302, b"", {"location": target})
    with pytest.raises(DiscoveryRefused, match="redirect"):
        discover(host_for(hostile))
    assert "/elsewhere" not in hostile.paths()


def test_an_oversized_document_is_refused(hostile: HostileServer) -> None:
    padded = hostile.issuer_metadata(padding="x" * MAX_DOCUMENT_BYTES)
    hostile.routes[f"{REALM}/.well-known/openid-configuration"] = Reply(200, padded)
    with pytest.raises(DiscoveryRefused, match="over 65536 bytes"):
        discover(host_for(hostile))


def test_an_oversized_document_without_a_length_is_refused(hostile: HostileServer) -> None:
    """The limit holds while reading, not only from Content-Length (which this reply omits: chunked)."""
    body = b'{"padding": "' + b"x" * (MAX_DOCUMENT_BYTES + 10) + b'"}'

    def chunked(_: object) -> Reply:
        chunks = b"".join(
            f"{len(body[i : i + 8192]):x}\r\n".encode() + body[i : i + 8192] + b"\r\n"
            for i in range(0, len(body), 8192)
        )
        return Reply(200, chunks + b"0\r\n\r\n", {"transfer-encoding": "chunked", "content-length": ""})

    hostile.routes[hostile.prm_path] = chunked
    with pytest.raises(DiscoveryRefused, match="over 65536 bytes"):
        discover(host_for(hostile))


def test_a_slow_server_exhausts_the_total_budget(hostile: HostileServer) -> None:
    """The budget is for the whole discovery: a server dripping its document (each byte well within any
    read timeout) is cut off when the budget is spent. (A 1 s budget here; the default is 10 s.)"""
    hostile.routes[f"{REALM}/.well-known/openid-configuration"] = Reply(200, hostile.issuer_metadata(), drip_s=0.05)
    started = time.monotonic()
    with pytest.raises(DiscoveryRefused, match="budget"):
        discover(host_for(hostile, budget_s=1.0))
    assert time.monotonic() - started < 2.5


@pytest.mark.parametrize("where", ["challenge", "token_endpoint"])
def test_a_remote_plain_http_address_is_refused(hostile: HostileServer, where: str) -> None:
    """A remote http:// address (192.0.2.1, TEST-NET: never reachable) is refused before connecting —
    whether the challenge points discovery at it or the metadata names it as the token endpoint."""
    remote = "http://192.0.2.1"
    if where == "challenge":
        hostile.routes["/mcp"] = Reply(
            401,
            {},
            {"www-authenticate": f'Bearer resource_metadata="{remote}/.well-known/oauth-protected-resource/mcp"'},
        )
    else:
        hostile.routes[f"{REALM}/.well-known/openid-configuration"] = Reply(
            200, hostile.issuer_metadata(token_endpoint=f"{remote}/token")
        )
    started = time.monotonic()
    with pytest.raises(DiscoveryRefused, match="remote plain-http"):
        discover(host_for(hostile))
    assert time.monotonic() - started < 2


def test_a_remote_plain_http_issuer_or_resource_is_refused_at_configuration() -> None:
    with pytest.raises(DiscoveryRefused):
        AgentHost("http://mcp.example.org/mcp", "https://sso.example.org/realms/x", "c", SECRET)
    with pytest.raises(DiscoveryRefused):
        AgentHost("https://mcp.example.org/mcp", "http://sso.example.org/realms/x", "c", SECRET)
    AgentHost("https://mcp.example.org/mcp", "https://sso.example.org/realms/x", "c", SECRET)  # https: fine


def test_discovery_is_cached_and_dropped_after_an_mcp_401(hostile: HostileServer) -> None:
    async def scenario() -> tuple[int, int, int]:
        host = host_for(hostile)
        await host.start()
        await host.start()
        cached = host.discovery.runs
        session = Session(principal="p", credential="c")
        host.hold(session, "rejected-token")
        await host.renew_after_401(session, "mcp.query mcp.context.bind", failed="rejected-token")
        after_401 = host.discovery.runs
        host.discovery._cached = (time.monotonic() - DISCOVERY_CACHE_S - 1, host.discovery._cached[1])  # type: ignore[index]
        await host.start()
        return cached, after_401, host.discovery.runs

    assert asyncio.run(scenario()) == (1, 2, 3)


@pytest.mark.parametrize(
    ("methods", "expected"),
    [
        (["client_secret_post"], "post"),
        (["client_secret_basic"], "basic"),
        (None, "basic"),  # RFC 8414 §2: absent means client_secret_basic
    ],
)
def test_client_authentication_follows_the_metadata(
    hostile: HostileServer, methods: list[str] | None, expected: str
) -> None:
    metadata = hostile.issuer_metadata(token_endpoint_auth_methods_supported=methods)
    if methods is None:
        del metadata["token_endpoint_auth_methods_supported"]
    hostile.routes[f"{REALM}/.well-known/openid-configuration"] = Reply(200, metadata)
    asyncio.run(host_for(hostile).catalog_token())
    (token_request,) = [r for r in hostile.requests if r.path.endswith("/token")]
    basic = "Basic " + base64.b64encode(f"tjwater-agent-mcp:{SECRET}".encode()).decode()
    if expected == "post":
        assert token_request.form["client_secret"] == SECRET and "authorization" not in token_request.headers
    else:
        assert token_request.headers["authorization"] == basic and "client_secret" not in token_request.form
    assert_no_credentials_on_discovery(hostile)


def test_a_metadata_without_a_secret_method_is_refused(hostile: HostileServer) -> None:
    metadata = hostile.issuer_metadata(token_endpoint_auth_methods_supported=["private_key_jwt"])
    hostile.routes[f"{REALM}/.well-known/openid-configuration"] = Reply(200, metadata)
    with pytest.raises(DiscoveryRefused, match="neither"):
        discover(host_for(hostile))


def test_the_exchange_names_resource_and_product_audience(hostile: HostileServer) -> None:
    """Item 3: RFC 8693 exchange with ``resource`` (RFC 8707) and the product ``audience``; the catalog
    grant with ``resource`` too; both only at the configured issuer's token endpoint."""

    async def scenario() -> None:
        host = host_for(hostile)
        await host.catalog_token()
        await host.mcp_token(Session(principal="p", credential="the-users-token"))

    asyncio.run(scenario())
    catalog, exchange = [r.form for r in hostile.requests if r.path.endswith("/token")]
    assert catalog == {"grant_type": "client_credentials", "scope": "mcp.catalog.read", "resource": hostile.mcp_url}
    assert exchange == {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "subject_token": "the-users-token",
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "audience": PRODUCT_AUDIENCE,
        "scope": "mcp.query mcp.context.bind",
        "resource": hostile.mcp_url,
    }


def test_an_exchange_refused_for_the_credential_asks_for_a_refresh(hostile: HostileServer) -> None:
    """Item 5: ``invalid_grant`` on the exchange is credential_refresh_required: the session's refresher
    gives an updated credential (a new version), the host exchanges again and goes on."""
    answers = iter(
        [Reply(400, {"error": "invalid_grant"}), Reply(200, {"access_token": "fresh", "token_type": "Bearer"})]
    )
    hostile.routes[f"{REALM}/protocol/openid-connect/token"] = lambda _: next(answers)
    refreshed: list[str] = []

    async def refresh() -> str:
        refreshed.append("updateToken")
        return "updated-product-token"

    async def scenario() -> tuple[str, int]:
        host = host_for(hostile)
        session = Session(principal="p", credential="expired-product-token", refresh=refresh)
        token = await host.mcp_token(session)
        return token, session.version

    assert asyncio.run(scenario()) == ("fresh", 2)
    assert refreshed == ["updateToken"]
    subjects = [r.form["subject_token"] for r in hostile.requests if r.path.endswith("/token")]
    assert subjects == ["expired-product-token", "updated-product-token"]


def test_without_a_refresher_the_refresh_requirement_surfaces(hostile: HostileServer) -> None:
    hostile.routes[f"{REALM}/protocol/openid-connect/token"] = Reply(400, {"error": "invalid_grant"})
    with pytest.raises(HostError, match="credential_refresh_required"):
        asyncio.run(host_for(hostile).mcp_token(Session(principal="p", credential="expired")))


def test_concurrent_renewals_merge_and_tokens_are_cached_apart(hostile: HostileServer) -> None:
    """Item 5: renewals of one principal and credential version are one exchange; a new credential
    version, another principal or another scope is another cache entry (and exchange)."""
    counter = iter(range(100))

    def token(_: object) -> Reply:
        time.sleep(0.2)  # long enough for the concurrent callers to find the renewal in flight
        return Reply(200, {"access_token": f"t{next(counter)}", "token_type": "Bearer"})

    hostile.routes[f"{REALM}/protocol/openid-connect/token"] = token

    async def scenario() -> tuple[list[str], int, list[str]]:
        host = host_for(hostile)
        alice = Session(principal="alice", credential="a1")
        merged = await asyncio.gather(*(host.mcp_token(alice) for _ in range(5)))
        merged_exchanges = host.exchanges
        alice.update("a2")  # a new product credential: a new version, never the old version's token
        others = [
            await host.mcp_token(alice),
            await host.mcp_token(Session(principal="bob", credential="b1")),
            await host.mcp_token(alice, "mcp.query"),
        ]
        return merged, merged_exchanges, others

    merged, merged_exchanges, others = asyncio.run(scenario())
    assert merged == ["t0"] * 5 and merged_exchanges == 1
    assert others == ["t1", "t2", "t3"]
