"""Run the official MCP conformance suite against our server and read its per-check results (issue 6).

The suite (``@modelcontextprotocol/conformance``, pinned in devtools/package-lock.json) runs on the
Node 22 binary of the pinned ``node`` npm package. Its server mode cannot send a bearer token, so it
talks to ``devtools/conformance/bearer-proxy.mjs``, which adds one. The exit code alone is not trusted
(SDK_NOTES pitfall: a missing fixture answered with ``isError`` can count as a pass): every scenario's
``checks.json`` is read and judged against ``devtools/conformance/expected-failures.yml``.

CLI, against a server you started yourself (prints the conformance table)::

    .venv/bin/python -m tests.interop.conformance --server http://127.0.0.1:8000 --token "$TOKEN"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEVTOOLS = ROOT / "devtools"
NODE_BIN = DEVTOOLS / "node_modules" / ".bin"
CONFORMANCE_JS = DEVTOOLS / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
PROXY_SCRIPT = DEVTOOLS / "conformance" / "bearer-proxy.mjs"
BASELINE = DEVTOOLS / "conformance" / "expected-failures.yml"
REQUIREMENTS = "2026-07-28"

# Scenarios about the protocol itself, not about fixture tools/resources/prompts: every check of these
# must pass, except single checks the baseline names (those need a fixture tool or a capability the
# product must not have).
PROTOCOL_SCENARIOS = (
    "server-stateless",
    "tools-list",
    "resources-list",
    "sep-2164-resource-not-found",
    "caching",
    "http-header-validation",
    "dns-rebinding-protection",
    "server-sse-multiple-streams",
    "input-required-result-unsupported-methods",
)
# The suite scores a WARNING as a failure too (a SHOULD it did not see honoured).
FAILED = frozenset({"FAILURE", "WARNING"})
# Words of the suite (and of our server) that mean a check never reached what it is about.
VACUOUS_MARKERS = ("Unknown tool", "Not testable", "not exercised", "untestable")


@dataclass(frozen=True)
class Check:
    """One check of one scenario, as the suite wrote it to ``checks.json``."""

    scenario: str
    check_id: str
    status: str  # SUCCESS, FAILURE, WARNING, SKIPPED, INFO
    message: str
    details: str = ""

    @property
    def vacuous(self) -> bool:
        """Passed (or warned) only because a fixture was missing — the SDK_NOTES pitfall."""
        text = f"{self.message} {self.details}"
        return any(marker in text for marker in VACUOUS_MARKERS)


@dataclass(frozen=True)
class BaselineEntry:
    scenario: str
    check_id: str | None
    reason: str


@dataclass
class ScenarioVerdict:
    scenario: str
    verdict: str  # pass | known-bug | vacuous | skipped | fail | expected-failure
    why: str
    checks: list[Check] = field(default_factory=list)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status in FAILED]


@dataclass
class SuiteRun:
    returncode: int
    output_dir: Path
    output: str
    checks: list[Check]


def node_env() -> dict[str, str]:
    """PATH with the pinned Node 22 first: the suite's ``#!/usr/bin/env node`` picks it up."""
    return {**os.environ, "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def parse_baseline(path: Path = BASELINE) -> list[BaselineEntry]:
    """The ``server:`` entries of the expected-failures file with their one-line ``# reason``."""
    entries: list[BaselineEntry] = []
    section = None
    for line in path.read_text().splitlines():
        header = re.match(r"^(\w+):\s*(#.*)?$", line)
        if header:
            section = header.group(1)
            continue
        item = re.match(r"^\s+-\s+([^\s#]+)\s*(?:#\s*(.*))?$", line)
        if item and section == "server":
            scenario, _, check_id = item.group(1).partition(":")
            entries.append(BaselineEntry(scenario, check_id or None, (item.group(2) or "").strip()))
    return entries


def read_checks(output_dir: Path) -> list[Check]:
    """Every check of every scenario under ``output_dir`` (``server-<scenario>-<timestamp>/checks.json``)."""
    checks: list[Check] = []
    for checks_file in sorted(output_dir.glob("server-*/checks.json")):
        scenario = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", checks_file.parent.name)[len("server-") :]
        for entry in json.loads(checks_file.read_text()):
            checks.append(
                Check(
                    scenario=scenario,
                    check_id=str(entry.get("id")),
                    status=str(entry.get("status")),
                    message=str(entry.get("errorMessage") or "")[:300],
                    details=json.dumps(entry.get("details"))[:2000],
                )
            )
    return checks


def judge(checks: list[Check], baseline: list[BaselineEntry]) -> dict[str, ScenarioVerdict]:
    """Scenario → pass / fail / expected-failure, with the reason, from per-check results."""
    by_scenario: dict[str, list[Check]] = {}
    for check in checks:
        by_scenario.setdefault(check.scenario, []).append(check)
    whole = {e.scenario: e.reason for e in baseline if e.check_id is None}
    single = {(e.scenario, e.check_id): e.reason for e in baseline if e.check_id is not None}
    verdicts: dict[str, ScenarioVerdict] = {}
    for scenario, scenario_checks in by_scenario.items():
        failed = [c for c in scenario_checks if c.status in FAILED]
        excused = [c for c in failed if (scenario, c.check_id) in single]
        if not failed and any(c.vacuous for c in scenario_checks):
            names = ", ".join(c.check_id for c in scenario_checks if c.vacuous)
            verdict = ScenarioVerdict(
                scenario, "vacuous", f"no failure, but a fixture was missing ({names}): not evidence", scenario_checks
            )
        elif not failed and not any(c.status == "SUCCESS" for c in scenario_checks):
            verdict = ScenarioVerdict(scenario, "skipped", "no check ran", scenario_checks)
        elif not failed:
            verdict = ScenarioVerdict(scenario, "pass", "all checks pass", scenario_checks)
        elif scenario in whole:
            verdict = ScenarioVerdict(scenario, "expected-failure", whole[scenario], scenario_checks)
        elif len(excused) == len(failed):
            reasons = sorted({single[(scenario, c.check_id)] for c in excused})
            verdict = ScenarioVerdict(
                scenario,
                "known-bug" if any(r.startswith("BUG") for r in reasons) else "pass",
                f"{len(excused)} baselined check(s): {'; '.join(reasons)}",
                scenario_checks,
            )
        else:
            names = ", ".join(c.check_id for c in failed if (scenario, c.check_id) not in single)
            verdict = ScenarioVerdict(scenario, "fail", f"failed: {names}", scenario_checks)
        verdicts[scenario] = verdict
    return verdicts


def table(verdicts: Mapping[str, ScenarioVerdict]) -> str:
    """The conformance table (scenario → verdict and why) as Markdown."""
    lines = ["| scenario | checks passed/failed | verdict | why |", "|---|---|---|---|"]
    for name in sorted(verdicts):
        v = verdicts[name]
        passed = sum(1 for c in v.checks if c.status == "SUCCESS")
        lines.append(f"| {name} | {passed}/{len(v.failed)} | {v.verdict} | {v.why} |")
    return "\n".join(lines)


@contextmanager
def bearer_proxy(upstream: str, token: str, port: int = 0) -> Iterator[str]:
    """Run the bearer-adding proxy in front of ``upstream``; yields the proxy's base URL."""
    process = subprocess.Popen(
        [str(NODE_BIN / "node"), str(PROXY_SCRIPT), "--upstream", upstream, "--port", str(port)],
        env={**os.environ, "BEARER_TOKEN": token},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise RuntimeError("the bearer proxy did not start")
        yield f"http://127.0.0.1:{json.loads(line)['port']}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def run_suite(*, mcp_url: str, output_dir: Path, baseline: Path = BASELINE, timeout_s: float = 300) -> SuiteRun:
    """``conformance server --requirements 2026-07-28`` against ``mcp_url``; returns every check."""
    command = [
        str(NODE_BIN / "node"),
        str(CONFORMANCE_JS),
        "server",
        "--url",
        mcp_url,
        "--requirements",
        REQUIREMENTS,
        "-o",
        str(output_dir),
        "--expected-failures",
        str(baseline),
    ]
    completed = subprocess.run(
        command, cwd=DEVTOOLS, env=node_env(), capture_output=True, text=True, timeout=timeout_s, check=False
    )
    return SuiteRun(
        returncode=completed.returncode,
        output_dir=output_dir,
        output=completed.stdout + completed.stderr,
        checks=read_checks(output_dir),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="base URL of a running server (its /mcp is tested)")
    parser.add_argument("--token", default=os.environ.get("MCP_TOKEN"), help="bearer token (or $MCP_TOKEN)")
    parser.add_argument("--proxy-port", type=int, default=0, help="port of the bearer proxy (0 = free)")
    parser.add_argument("--out", type=Path, help="results directory (default: a temporary one)")
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("a bearer token is required (--token or $MCP_TOKEN)")
    output_dir = args.out or Path(tempfile.mkdtemp(prefix="conformance-"))
    with bearer_proxy(args.server, args.token, args.proxy_port) as proxy:
        run = run_suite(mcp_url=f"{proxy}/mcp", output_dir=output_dir)
    verdicts = judge(run.checks, parse_baseline())
    print(table(verdicts))
    print(f"\nsuite exit code {run.returncode}; results in {output_dir}")
    return 0 if run.returncode == 0 and all(v.verdict != "fail" for v in verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
