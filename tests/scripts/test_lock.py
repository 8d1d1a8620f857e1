"""The lock files (issue 18 §6): ``requirements.lock`` and ``requirements-dev.lock`` pin every transitive
dependency with hashes, agree with the human-edited ``requirements*.txt`` (so an edit without
``scripts/lock.sh`` is caught), agree with each other, and are what this virtualenv has installed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [("requirements.txt", "requirements.lock"), ("requirements-dev.txt", "requirements-dev.lock")]


@dataclass(frozen=True)
class Locked:
    version: str
    marker: Marker | None
    hashes: frozenset[str]


def read_lock(name: str) -> dict[str, Locked]:
    text = (ROOT / name).read_text(encoding="utf-8")
    entries: dict[str, Locked] = {}
    for logical in re.sub(r"\\\n\s*", " ", text).splitlines():
        line = logical.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = line.split(" --")
        requirement = Requirement(spec)
        [pin] = requirement.specifier
        assert pin.operator == "==", line
        hashes = frozenset(o.removeprefix("hash=") for o in options if o.startswith("hash=sha256:"))
        entries[canonicalize_name(requirement.name)] = Locked(pin.version, requirement.marker, hashes)
    return entries


def read_pins(name: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in (ROOT / name).read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            [pin] = requirement.specifier
            pins[canonicalize_name(requirement.name)] = pin.version
    return pins


@pytest.mark.parametrize(("edited", "lock"), PAIRS)
def test_every_pin_of_the_edited_list_is_locked_at_its_version(edited: str, lock: str) -> None:
    locked = read_lock(lock)
    pins = read_pins(edited)
    assert pins  # the list was read
    assert {name: locked[name].version if name in locked else None for name in pins} == pins


@pytest.mark.parametrize("lock", [lock for _, lock in PAIRS])
def test_every_locked_package_has_hashes(lock: str) -> None:
    entries = read_lock(lock)
    assert len(entries) > 20
    assert [name for name, entry in entries.items() if not entry.hashes] == []


def test_the_two_locks_agree_on_what_both_hold() -> None:
    runtime, dev = read_lock("requirements.lock"), read_lock("requirements-dev.lock")
    shared = set(runtime) & set(dev)
    assert shared  # pydantic, packaging, … come with both
    assert {name: dev[name] for name in shared} == {name: runtime[name] for name in shared}


def test_this_virtualenv_is_the_lock() -> None:
    """Each locked package that applies to this interpreter is installed at its locked version."""
    wanted = {
        name: entry.version
        for lock in ("requirements.lock", "requirements-dev.lock")
        for name, entry in read_lock(lock).items()
        if entry.marker is None or entry.marker.evaluate()
    }
    installed = {name: _installed(name) for name in wanted}
    assert installed == wanted


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
