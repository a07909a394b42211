"""A local multi-host set-up for the cluster benches and their test (issue 29 items 4 and 5).

    with Harness(hosts=2, appendonly=True, postgres=True) as h:
        h.start_pool(h.hosts[0], "bench.apps.cluster:app", processes=2, threads=4, env={...})
        ...

What it makes, all named ``ab<suffix>...`` (a random suffix per run, so concurrent runs and
the tests never collide, and only what this run made is ever deleted):

- a bridge in the root namespace with the address ``10.77.<n>.1/24`` (``<n>``: a /24 no
  other route on the machine covers);
- one network namespace per "host" (``ab<suffix>h0``, ...), each joined to the bridge by a
  veth pair, with the address ``10.77.<n>.<10+i>``;
- a 6-node Redis Cluster (3 masters + 3 replicas by default) of real ``redis-server``
  processes bound to the bridge address, so the hosts reach it and its MOVED replies name an
  address every namespace can route to;
- with ``postgres=True``, a private PostgreSQL (``initdb`` + ``pg_ctl`` as the ``postgres``
  user, in a temporary directory) listening on the bridge address, so a run can restart it;
- worker pools started inside a namespace (``ip netns exec``) with this interpreter.

Everything is torn down on exit, on an exception, on Ctrl-C and on SIGTERM (pools first, then
Redis and PostgreSQL, then the namespaces and the bridge); ``keep=True`` (the benches'
``--keep``) leaves it all up and prints how to remove it. Needs root and ``ip netns``;
``available()`` says why not.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster

from bench.lib.tree import code_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _run(*cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def available() -> str | None:
    """None when this machine can run the harness; else what is missing."""
    if os.geteuid() != 0:
        return "the cluster harness makes network namespaces: it needs root"
    for tool in ("ip", "redis-server", "redis-cli"):
        if not shutil.which(tool):
            return f"the cluster harness needs {tool} on PATH"
    name = "ab" + secrets.token_hex(3) + "x"
    try:
        _run("ip", "netns", "add", name)
    except (RuntimeError, OSError) as exc:
        return f"ip netns does not work here: {exc}"
    _run("ip", "netns", "del", name, check=False)
    return None


def pg_bin() -> str | None:
    """The newest ``/usr/lib/postgresql/<v>/bin`` holding initdb and pg_ctl."""
    base = "/usr/lib/postgresql"
    if not os.path.isdir(base):
        return None
    for v in sorted(os.listdir(base), key=lambda s: int(s) if s.isdigit() else 0, reverse=True):
        path = os.path.join(base, v, "bin")
        if os.path.exists(os.path.join(path, "initdb")):
            return path
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.77.<n>.0/24 that no route of the root namespace covers (another run's bridge)."""
    routes = _run("ip", "-4", "route", "show").stdout
    taken = set()
    for line in routes.splitlines():
        word = line.split()[0] if line.split() else ""
        try:
            taken.add(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue
    for n in secrets.SystemRandom().sample(range(1, 255), 254):
        net = ipaddress.ip_network(f"10.77.{n}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise RuntimeError("no free 10.77.x.0/24 left for a bridge")


def _free_port(host: str) -> int:
    import socket
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class Host:
    """One "host": a network namespace with a veth to the bridge."""
    name: str          # the namespace
    veth: str          # the root namespace's end (``ip link set <veth> down``: the host is cut)
    addr: str
    pools: list[subprocess.Popen[bytes]] = field(default_factory=list)


@dataclass
class Node:
    """One ``redis-server`` of the cluster."""
    port: int
    dir: str
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    host: str = ""

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def client(self, **kw: Any) -> redis.Redis:
        kw.setdefault("socket_timeout", 5)
        return redis.Redis(host=self.host, port=self.port, decode_responses=True, **kw)


class Harness:
    """The bridge, the hosts, the Redis Cluster and (optionally) PostgreSQL; a context manager."""

    def __init__(self, hosts: int = 2, masters: int = 3, replicas: int = 1, *,
                 appendonly: bool = False, postgres: bool = False, keep: bool = False,
                 node_timeout_ms: int = 2000, work_dir: str | None = None) -> None:
        self.n_hosts, self.n_masters, self.n_replicas = hosts, masters, replicas
        self.appendonly, self.want_pg, self.keep = appendonly, postgres, keep
        self.node_timeout_ms = node_timeout_ms
        self.id = "ab" + secrets.token_hex(3)
        self.work_dir = work_dir or tempfile.mkdtemp(prefix=f"{self.id}-")
        self.bridge = f"{self.id}br"
        self.hosts: list[Host] = []
        self.nodes: list[Node] = []
        self.pg_dir: str | None = None
        self.pg_port = 0
        self._made_bridge = False
        self._closed = False
        self._old_handlers: dict[int, Any] = {}

    # -- life cycle ---------------------------------------------------------------------------
    def __enter__(self) -> "Harness":
        atexit.register(self.close)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self._old_handlers[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread: the caller's finally still tears down
                pass
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _on_signal(self, signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    def start(self) -> None:
        self.subnet = _free_subnet()
        self.gateway = str(self.subnet.network_address + 1)
        log(f"harness {self.id}: bridge {self.bridge} {self.gateway}/24, {self.n_hosts} hosts, "
            f"work dir {self.work_dir}")
        self._make_net()
        self._start_cluster()
        if self.want_pg:
            self._start_pg()

    def close(self) -> None:
        """Pools, Redis, PostgreSQL, namespaces, bridge; each step whatever the others did."""
        if self._closed:
            return
        self._closed = True
        for sig, old in self._old_handlers.items():
            try:
                signal.signal(sig, old)
            except (ValueError, TypeError):
                pass
        if self.keep:
            log(f"--keep: left up. Remove with: for n in $(ip netns list | grep -o "
                f"'^{self.id}h[0-9]*'); do ip netns pids $n | xargs -r kill -9; ip netns del $n;"
                f" done; ip link del {self.bridge}; pkill -f {self.work_dir}")
            return
        for host in self.hosts:
            for pool in host.pools:
                _stop_group(pool)
        for host in self.hosts:  # anything else still running in the namespace
            pids = _run("ip", "netns", "pids", host.name, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.kill()
                node.proc.wait(10)
        if self.pg_dir:
            self._pg_ctl("stop", "-m", "immediate", check=False)
        for host in self.hosts:
            _run("ip", "link", "del", host.veth, check=False)
            _run("ip", "netns", "del", host.name, check=False)
        if self._made_bridge:
            _run("ip", "link", "del", self.bridge, check=False)
        shutil.rmtree(self.work_dir, ignore_errors=True)

    # -- network ------------------------------------------------------------------------------
    def _make_net(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self._made_bridge = True
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for i in range(self.n_hosts):
            ns, veth, peer = f"{self.id}h{i}", f"{self.id}v{i}", f"{self.id}p{i}"
            addr = str(self.subnet.network_address + 10 + i)
            _run("ip", "netns", "add", ns)
            host = Host(ns, veth, addr)
            self.hosts.append(host)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", peer)
            _run("ip", "link", "set", peer, "netns", ns)
            _run("ip", "link", "set", veth, "master", self.bridge)
            _run("ip", "link", "set", veth, "up")
            nsx = ("ip", "netns", "exec", ns)
            _run(*nsx, "ip", "addr", "add", f"{addr}/24", "dev", peer)
            _run(*nsx, "ip", "link", "set", peer, "up")
            _run(*nsx, "ip", "link", "set", "lo", "up")

    def link(self, host: Host, up: bool) -> None:
        """The host's cable: down, every packet to and from it is dropped (its TCP connections
        stall, as on a real partition); up, they carry on."""
        _run("ip", "link", "set", host.veth, "up" if up else "down")

    # -- Redis Cluster ------------------------------------------------------------------------
    def _start_cluster(self) -> None:
        server = shutil.which("redis-server") or "redis-server"
        for i in range(self.n_masters * (1 + self.n_replicas)):
            port = _free_port(self.gateway)
            d = os.path.join(self.work_dir, f"redis{i}")
            os.makedirs(d)
            args = [server, "--bind", self.gateway, "--port", str(port), "--dir", d,
                    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    "--cluster-port", str(_free_port(self.gateway)),
                    "--protected-mode", "no", "--save", "", "--daemonize", "no",
                    "--logfile", os.path.join(d, "redis.log"),
                    "--appendonly", "yes" if self.appendonly else "no",
                    "--maxmemory-policy", "noeviction"]
            node = Node(port, d, args, host=self.gateway)
            self.nodes.append(node)
            self.start_node(node)
        cli = shutil.which("redis-cli") or "redis-cli"
        _run(cli, "--cluster", "create", *[n.addr for n in self.nodes],
             "--cluster-replicas", str(self.n_replicas), "--cluster-yes", timeout=90)
        self.wait_cluster_ok()

    def start_node(self, node: Node) -> None:
        """Starts (or restarts, on its own data and nodes.conf) one node; waits for PING."""
        node.proc = subprocess.Popen(node.args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                if node.client(socket_timeout=1).ping():
                    return
            except redis.RedisError:
                pass
            if node.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server {node.addr} did not start; see "
                                   f"{node.dir}/redis.log")
            time.sleep(0.05)

    def wait_cluster_ok(self, timeout: float = 60) -> None:
        """Every running node says cluster_state:ok and every slot is served by a live master."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if all(n.client().cluster("info")["cluster_state"] == "ok"
                       for n in self.nodes if n.proc and n.proc.poll() is None) \
                        and len(self.masters()) == self.n_masters:
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Redis Cluster was not ok after {timeout}s")
            time.sleep(0.1)

    def wait_failover(self, dead: Node, timeout: float = 60) -> None:
        """Until the live nodes no longer count ``dead`` as a master and every slot is served
        again (its replica promoted by the cluster's own failover)."""
        deadline = time.monotonic() + timeout
        while dead in self.masters() or len(self.masters()) < self.n_masters:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no failover of {dead.addr} after {timeout}s")
            time.sleep(0.05)
        self.wait_cluster_ok(timeout=max(1.0, deadline - time.monotonic()))

    @property
    def cluster_url(self) -> str:
        return f"redis://{self.nodes[0].addr}/0"

    def client(self, **kw: Any) -> RedisCluster:
        kw.setdefault("decode_responses", True)
        kw.setdefault("socket_timeout", 5)
        return RedisCluster(startup_nodes=[ClusterNode(n.host, n.port) for n in self.nodes], **kw)

    def node_at(self, addr: str) -> Node:
        return next(n for n in self.nodes if n.addr == addr)

    def masters(self) -> list[Node]:
        """The live masters serving slots, as a live node's CLUSTER NODES sees them."""
        for n in self.nodes:
            if n.proc is None or n.proc.poll() is not None:
                continue
            try:
                table = n.client().execute_command("CLUSTER NODES")
            except redis.RedisError:
                continue
            if isinstance(table, dict):  # redis-py parses it: {addr: {...}}
                rows = [(a.split("@")[0], v["flags"], bool(v.get("slots")))
                        for a, v in table.items()]
            else:
                rows = [(ln.split()[1].split("@")[0], ln.split()[2], len(ln.split()) > 8)
                        for ln in str(table).splitlines() if ln.strip()]
            return [self.node_at(a) for a, flags, slots in rows
                    if "master" in flags and "fail" not in flags and slots]
        return []

    def master_of(self, key: str) -> Node:
        slot = self.nodes[0].client().cluster("keyslot", key)
        for n in self.masters():
            for start, end, *_ in _slot_ranges(n):
                if start <= int(slot) <= end:
                    return n
        raise RuntimeError(f"no master serves slot {slot}")

    def cpu_s(self, nodes: Sequence[Node] | None = None) -> dict[str, float]:
        """used_cpu_user + used_cpu_sys of each node (INFO cpu), by address."""
        out = {}
        for n in nodes if nodes is not None else self.nodes:
            try:
                info = n.client().info("cpu")
                out[n.addr] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
            except redis.RedisError:
                pass
        return out

    def kill9(self, node: Node) -> None:
        assert node.proc is not None
        node.proc.kill()
        node.proc.wait(10)

    # -- PostgreSQL ---------------------------------------------------------------------------
    def _start_pg(self) -> None:
        bindir = pg_bin()
        if bindir is None:
            raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
        self.pg_bindir = bindir
        self.pg_dir = os.path.join(self.work_dir, "pg")
        os.makedirs(self.pg_dir)
        os.chmod(self.work_dir, 0o755)
        shutil.chown(self.pg_dir, "postgres", "postgres")
        _run("runuser", "-u", "postgres", "--", os.path.join(bindir, "initdb"), "-D",
             self.pg_dir, "-A", "trust", "-U", "postgres", "--no-sync", timeout=120)
        with open(os.path.join(self.pg_dir, "pg_hba.conf"), "a") as f:
            f.write(f"host all all {self.subnet} trust\n")
        self.pg_port = _free_port(self.gateway)
        self._pg_ctl("start", "-w", "-t", "60", "-l", os.path.join(self.pg_dir, "log"), "-o",
                     f"-c listen_addresses={self.gateway} -p {self.pg_port} "
                     f"-k {self.pg_dir} -c max_connections=200")

    def _pg_ctl(self, *args: str, check: bool = True) -> None:
        assert self.pg_dir is not None
        _run("runuser", "-u", "postgres", "--", os.path.join(self.pg_bindir, "pg_ctl"), "-D",
             self.pg_dir, *args, check=check, timeout=120)

    @property
    def pg_url(self) -> str:
        return f"postgresql+psycopg://postgres@{self.gateway}:{self.pg_port}/postgres"

    def restart_pg(self) -> None:
        """``pg_ctl restart -m fast``: every connection is cut and refused until it is back."""
        assert self.pg_dir is not None  # (-l again: else the server writes to our pipe)
        self._pg_ctl("restart", "-m", "fast", "-w", "-t", "60", "-l",
                     os.path.join(self.pg_dir, "log"))

    # -- worker pools -------------------------------------------------------------------------
    def start_pool(self, host: Host, app_path: str, processes: int = 1, threads: int = 4,
                   env: dict[str, str] | None = None, log_path: str | None = None,
                   extra: Sequence[str] = ()) -> subprocess.Popen[bytes]:
        """``antre worker APP`` (as ``python -m antre_worker worker``) inside ``host``."""
        full = {**os.environ, **(env or {})}
        full["PYTHONPATH"] = code_path(ROOT)  # this tree's antre_worker, not the venv's
        cmd = ["ip", "netns", "exec", host.name, sys.executable, "-m", "antre_worker",
               "worker", app_path, "--processes", str(processes), "--threads", str(threads),
               *extra]
        out = open(log_path or os.devnull, "ab")  # noqa: SIM115 - the child holds it
        try:
            pool = subprocess.Popen(cmd, cwd=ROOT, env=full, stdout=out, stderr=out,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            out.close()
        host.pools.append(pool)
        return pool

    def stop_pools(self) -> None:
        for host in self.hosts:
            for pool in host.pools:
                _stop_group(pool)
            host.pools.clear()


def _slot_ranges(node: Node) -> list[tuple[int, int]]:
    out = []
    for row in node.client().cluster("slots"):
        start, end, master = row[0], row[1], row[2]
        if f"{master[0]}:{master[1]}" == node.addr:
            out.append((int(start), int(end)))
    return out


def _stop_group(proc: subprocess.Popen[bytes], grace_s: float = 15) -> None:
    """SIGTERM to the process group, SIGKILL after ``grace_s``."""
    try:  # the group, even when its leader is gone (its children may not be)
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(5)
