"""Several machines on this one: Linux network namespaces on a private bridge (issue 25 "Several hosts").

``Topology(["db", "host1", "host2"])`` creates, as root, one bridge in the root namespace holding the first
address of a free ``10.231.N.0/24``, and per host a network namespace whose ``eth0`` (a veth whose other
end is on the bridge) has an address of its own on that /24 (and ``lo`` up). Every host reaches every
other over the bridge, and the root namespace — where the test and its load balancer run — reaches them
all, with no routing, no forwarding and no change to the machine's own network. Only these addresses are
ever a target.

Names carry the creating process's pid (``tjw-<pid>-<n>-<host>`` for namespaces, ``tjw<pid>x<n>…`` for
links, at most 15 characters), so parallel runs never clash; ``close()`` (also on an exception or a
KeyboardInterrupt, and at interpreter exit) SIGKILLs whatever still runs in the namespaces and deletes
them with their links; and every new topology first sweeps what a run that died without cleaning up
(SIGKILL, a lost session) left behind: names whose pid no longer lives.
"""

from __future__ import annotations

import atexit
import fcntl
import ipaddress
import itertools
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType

#: The /16 the topologies take their /24 from (one per live topology, the first free one).
SUPERNET = ipaddress.ip_network("10.231.0.0/16")
LOCK_PATH = Path("/tmp/tjwater-netns.lock")
NAMESPACE = re.compile(r"^tjw-(\d+)-\d+-")
LINK = re.compile(r"^tjw(\d+)x\d+")
_serial = itertools.count(1)


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def unavailable() -> str | None:
    """Why namespaces cannot be made here (not root, no ``ip``, or ``ip netns add`` refused), else None."""
    name = f"tjw-{os.getpid()}-0-probe"
    try:
        made = ip("netns", "add", name, check=False)
    except FileNotFoundError:
        return "the `ip` command (iproute2) is not installed"
    if made.returncode != 0:
        return f"`ip netns add` is not permitted here: {made.stderr.strip()}"
    ip("netns", "del", name, check=False)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_inside(namespace: str) -> None:
    """SIGKILL every process still running in ``namespace`` (a namespace outlives its deletion while a
    process is in it) and wait until they are gone."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = [int(p) for p in ip("netns", "pids", namespace, check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def _remove(namespaces: Iterable[str], links: Iterable[str]) -> None:
    for namespace in namespaces:
        _kill_inside(namespace)
        ip("netns", "del", namespace, check=False)  # takes its eth0, and so the veth's bridge end, along
    for link in links:
        ip("link", "del", link, check=False)


def sweep_stale() -> list[str]:
    """Remove the namespaces and links of topologies whose process no longer lives; their names."""
    namespaces = [line.split()[0] for line in ip("netns", "list", check=False).stdout.splitlines() if line.strip()]
    links = [entry["ifname"] for entry in json.loads(ip("-j", "link", "show", check=False).stdout or "[]")]
    stale_ns = [n for n in namespaces if (m := NAMESPACE.match(n)) and not _alive(int(m.group(1)))]
    stale_links = [n for n in links if (m := LINK.match(n)) and not _alive(int(m.group(1)))]
    _remove(stale_ns, stale_links)
    return stale_ns + stale_links


def _free_subnet() -> ipaddress.IPv4Network:
    """The first /24 of ``SUPERNET`` that no interface of the root namespace has an address in."""
    used = set()
    for entry in json.loads(ip("-j", "addr", "show").stdout or "[]"):
        for info in entry.get("addr_info", []):
            if info.get("family") == "inet":
                used.add(ipaddress.ip_interface(f"{info['local']}/{info['prefixlen']}").network)
    for subnet in SUPERNET.subnets(new_prefix=24):
        if not any(subnet.overlaps(other) for other in used):
            return subnet
    raise RuntimeError(f"no free /24 left in {SUPERNET}")


class Topology:
    """Hosts (network namespaces) on one bridge; a context manager that always cleans up."""

    def __init__(self, hosts: Sequence[str]) -> None:
        self.tag = f"{os.getpid()}x{next(_serial)}"
        self.bridge = f"tjw{self.tag}b"
        self.names = list(hosts)
        self.namespaces = {host: f"tjw-{self.tag.replace('x', '-')}-{host}" for host in hosts}
        self.addresses: dict[str, str] = {}
        self.gateway = ""  # the bridge's address: the root namespace as the hosts see it
        self._links: list[str] = []
        self._closed = False

    def __enter__(self) -> Topology:
        try:
            self.create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def create(self) -> None:
        atexit.register(self.close)
        with LOCK_PATH.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one subnet choice at a time across parallel runs
            sweep_stale()
            subnet = _free_subnet()
            hosts = iter(subnet.hosts())
            self.gateway = str(next(hosts))
            self._links.append(self.bridge)
            ip("link", "add", self.bridge, "type", "bridge")
            ip("addr", "add", f"{self.gateway}/{subnet.prefixlen}", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
            for n, host in enumerate(self.names):
                namespace, veth, address = self.namespaces[host], f"tjw{self.tag}v{n}", str(next(hosts))
                ip("netns", "add", namespace)
                self._links.append(veth)
                ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
                ip("link", "set", veth, "master", self.bridge, "up")
                ip("-n", namespace, "addr", "add", f"{address}/{subnet.prefixlen}", "dev", "eth0")
                ip("-n", namespace, "link", "set", "eth0", "up")
                ip("-n", namespace, "link", "set", "lo", "up")
                self.addresses[host] = address

    def exec_prefix(self, host: str) -> tuple[str, ...]:
        """The argv prefix that runs a command inside ``host``'s namespace (``ip netns exec`` execs the
        command itself: the process started is the command, so its pid is the command's)."""
        return ("ip", "netns", "exec", self.namespaces[host])

    def run(self, host: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.exec_prefix(host), *argv], capture_output=True, text=True, timeout=timeout, check=True
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        _remove(self.namespaces.values(), reversed(self._links))
