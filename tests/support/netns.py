"""Hosts on one machine: network namespaces joined by a bridge (tests/chaos/test_cluster_hosts.py).

`HostNetwork(["master", "worker-0", ...])`, a context manager, makes one network namespace per
name (`ip netns add`), each with a veth pair whose outer end is joined to one bridge in the
root namespace, and gives the namespaces and the bridge addresses in one /24 of `TEST_RANGE`
(10.213.0.0/16, private; the first /24 from `FIRST_SUBNET` on that nothing of this machine
routes yet). A namespace has its loopback and that one link, and no other route: whatever runs
in it reaches the other namespaces and the bridge's address (the root namespace, where the
test and the driver are), nothing else — not even the machine's loopback.

Names are unique to this process (`leasehold-<pid>-<name>`, interfaces `lh<pid>…`). Entering
deletes what a process that no longer lives left (a run killed before its clean-up: the
processes still in those namespaces, by pid, then the namespaces, veths and bridge); leaving,
also on failure, ends whatever of ours still runs inside, and deletes it all. Every command is
bounded (`COMMAND_TIMEOUT_S`).

`Host.argv(argv)` is `argv` run in a host's namespace (`ip netns exec`).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

TEST_RANGE = ipaddress.IPv4Network("10.213.0.0/16")
FIRST_SUBNET = 77
COMMAND_TIMEOUT_S = 30.0
KILL_TIMEOUT_S = 15.0
NETNS_PREFIX = "leasehold-"
LINK_PREFIX = "lh"
_OURS_NETNS = re.compile(rf"^{NETNS_PREFIX}(\d+)-")
_OURS_LINK = re.compile(rf"^{LINK_PREFIX}(\d+)(?:br|h\d+)$")


def ip(*args: str, check: bool = True) -> str:
    """One `ip` command, bounded; its output."""
    done = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _json(*args: str) -> list[dict[str, Any]]:
    out = ip("-j", *args).strip()
    return json.loads(out) if out else []


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Host:
    """One namespace: its name and its address on the bridge."""

    netns: str
    ip: str

    def argv(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]


def free_subnet() -> ipaddress.IPv4Network:
    """The first /24 of `TEST_RANGE` (from `FIRST_SUBNET`) no address or route here overlaps."""
    used: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for link in _json("addr"):
        for info in link.get("addr_info", []):
            if info.get("family") == "inet":
                used.append(ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", False))
    for route in _json("route"):
        if route.get("dst") not in (None, "default"):
            used.append(ipaddress.ip_network(str(route["dst"]), strict=False))
    subnets = list(TEST_RANGE.subnets(new_prefix=24))
    for subnet in subnets[FIRST_SUBNET:] + subnets[:FIRST_SUBNET]:
        if not any(subnet.overlaps(u) for u in used):
            return subnet
    raise RuntimeError(f"every /24 of {TEST_RANGE} is in use on this machine")


def netns_pids(netns: str) -> list[int]:
    return [int(p) for p in ip("netns", "pids", netns, check=False).split()]


def kill_pids(pids: Sequence[int]) -> list[int]:
    """SIGKILL each; wait (bounded) until they are gone; the ones still alive."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + KILL_TIMEOUT_S
    left = [p for p in pids if pid_alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if pid_alive(p)]
    return left


def remove_stale() -> list[str]:
    """Delete the namespaces and links of processes that no longer live; what was deleted."""
    removed = []
    for entry in _json("netns", "list"):
        name = str(entry["name"])
        match = _OURS_NETNS.match(name)
        if match and not pid_alive(int(match.group(1))):
            kill_pids(netns_pids(name))
            ip("netns", "del", name, check=False)
            removed.append(name)
    for link in _json("link"):
        name = str(link["ifname"]).split("@")[0]
        match = _OURS_LINK.match(name)
        if match and not pid_alive(int(match.group(1))):
            ip("link", "del", name, check=False)
            removed.append(name)
    return removed


@dataclass
class HostNetwork:
    """Namespaces `names` on one bridge, each addressed in one /24 of `TEST_RANGE`."""

    names: Sequence[str]
    tag: str = field(default_factory=lambda: str(os.getpid()))
    hosts: dict[str, Host] = field(default_factory=dict)
    subnet: ipaddress.IPv4Network | None = None
    _links: list[str] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"{LINK_PREFIX}{self.tag}br"

    @property
    def bridge_ip(self) -> str:
        assert self.subnet is not None, "not started"
        return str(self.subnet.network_address + 1)

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def __enter__(self) -> HostNetwork:
        removed = remove_stale()
        if removed:
            print(f"deleted what an earlier run left: {removed}")
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> HostNetwork:
        self.subnet = free_subnet()
        self._links.append(self.bridge)
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for i, name in enumerate(self.names):
            self._add_host(i, name)
        return self

    def _add_host(self, i: int, name: str) -> None:
        """Namespace `name`, its end of a veth pair (`eth0`, the i-th address from .10), the
        other end on the bridge."""
        assert self.subnet is not None
        host = Host(f"{NETNS_PREFIX}{self.tag}-{name}", str(self.subnet.network_address + 10 + i))
        self.hosts[name] = host
        outer, inner = f"{LINK_PREFIX}{self.tag}h{i}", "eth0"
        ip("netns", "add", host.netns)
        self._links.append(outer)
        ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", host.netns)
        ip("link", "set", outer, "master", self.bridge, "up")
        ip("-n", host.netns, "addr", "add", f"{host.ip}/24", "dev", inner)
        ip("-n", host.netns, "link", "set", inner, "up")
        ip("-n", host.netns, "link", "set", "lo", "up")

    def stop(self) -> None:
        """End whatever still runs in the namespaces, delete them, the veths and the bridge;
        fail naming what could not be."""
        failures = []
        for host in self.hosts.values():
            left = kill_pids(netns_pids(host.netns))
            if left:
                failures.append(f"{host.netns}: processes {left} outlived SIGKILL")
        for name in reversed(self._links):
            try:
                ip("link", "del", name)
            except RuntimeError as exc:
                if "Cannot find device" not in str(exc):  # a veth goes with its peer's netns
                    failures.append(str(exc))
        for host in self.hosts.values():
            try:
                ip("netns", "del", host.netns)
            except RuntimeError as exc:
                failures.append(str(exc))
        self.hosts.clear()
        self._links.clear()
        if failures:
            raise RuntimeError("network clean-up failed:\n" + "\n".join(failures))
