"""Gateway benchmark, the processes: the simulated model server (the backend), nginx as a plain
reverse proxy, `gpuplex gateway` in each configuration, and the minimal client proxies
(bench/gateway_clients.py), all on loopback, in one temporary directory, stopped on exit.

As root, the gateway runs as nobody the way the end-to-end tests run it (tests/e2e/gateway/stack.py:
`gateway_command`, `hand_to_gateway_user`), since `gpuplex gateway` refuses to run as root.

For `--against REF`, a `Source` is a tree whose gateway is run: the working tree, or REF checked
out in a temporary `git worktree` (`checkout`), its src/ put first on the gateway's PYTHONPATH. Each
tree makes its own store and keys with its own code (`Processes.keys_for`); the backend is the working
tree's either way, so only the gateway differs.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from tests.e2e.gateway.stack import (
    NOBODY,
    ROOT,
    free_port,
    gateway_command,
    hand_to_gateway_user,
    start_sim_model,
    stop,
    wait_for_key,
    wait_healthy,
)

from bench.gateway_load import MODEL, find_tool
from gpuplex.core.spec.rate_limits import RateLimits
from gpuplex.settings import inherited_environment
from gpuplex.store.db import open_store
from gpuplex.store.keys import KeyRepository

#: High enough never to refuse a request in a 10 s run at any rate this machine reaches.
TENANT_LIMITS = (
    "{requests_per_min: 10000000, tokens_per_min: 10000000000, concurrent_requests: 100000}"
)
KEY_LIMITS = RateLimits(
    requests_per_min=10_000_000, tokens_per_min=10_000_000_000, concurrent_requests=100_000
)


@dataclass(frozen=True)
class GatewaySetup:
    """One configuration of `gpuplex gateway`."""

    label: str
    tenant: str  # "plain": no rate limits; "full": tenant and key limits set
    workers: int = 1
    limiter: str = "memory"
    server: str = "uvicorn"  # the gateway's default


@dataclass(frozen=True)
class Source:
    """A tree whose gateway is measured: `name` ("before", "after") keys its runs, `label` says what
    it is (a commit, the working tree), `root` is where its src/ is."""

    name: str
    label: str
    root: Path

    @property
    def src(self) -> Path:
        return self.root / "src"


@dataclass
class Running:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_problems(self, most: int = 20) -> list[str]:
        """The log's warnings, errors and tracebacks, timestamps dropped, repeats counted: "N x
        line", most frequent first."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return []
        counts: Counter[str] = Counter(
            _TIMESTAMP.sub("", line) for line in lines if _PROBLEM.search(line)
        )
        return [f"{n} x {line}" for line, n in counts.most_common(most)]


_PROBLEM = re.compile(r"WARNING|ERROR|CRITICAL|Traceback|Exception|\berror\b", re.IGNORECASE)
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[,.]\d+\s*")


def gateway_spec(setup: GatewaySetup, port: int, backend_port: int) -> str:
    limits = f"    rate_limits: {TENANT_LIMITS}\n" if setup.tenant == "full" else ""
    return (
        "fleet:\n"
        "  nodes: [{name: n1, gpus: [{model: H100-80GB, count: 1}]}]\n"
        "tenants:\n"
        f"  - name: {setup.tenant}\n"
        "    isolation: mps\n"
        "    requirement: moderate\n"
        f"{limits}"
        "    workloads:\n"
        "      - name: llm\n"
        "        gpu: {memory_gib: 40}\n"
        f"        serve: {{model: {MODEL}, port: {backend_port}}}\n"
        "gateway:\n"
        f"  port: {port}\n"
        f"  workers: {setup.workers}\n"
        f"  limiter: {setup.limiter}\n"
        "  max_in_flight_per_backend: 256\n"
        "  max_waiting_per_tenant: 4096\n"
    )


def nginx_conf(directory: Path, port: int, backend_port: int) -> str:
    user = ""
    if os.geteuid() == 0:  # workers as nobody, who owns the directory (hand_to_gateway_user)
        user = f"user {pwd.getpwuid(NOBODY).pw_name} {grp.getgrgid(NOBODY).gr_name};\n"
    temp = "\n".join(
        f"  {kind}_temp_path {directory / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""daemon off;
master_process on;
worker_processes 2;
{user}pid {directory / "nginx.pid"};
error_log {directory / "error.log"} warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
{temp}
  upstream backend {{ server 127.0.0.1:{backend_port}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
"""


class Processes:
    """The benchmark's temporary directory and every process started in it; `close` (and leaving
    the `with` block, on an exception or Ctrl-C too) stops them all and removes the directory."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="gpuplex-bench-gateway-"))
        self.tmp.chmod(0o755)
        self.store_url = f"sqlite:///{self.tmp / 'gpuplex.db'}"
        self.running: list[Running] = []

    def __enter__(self) -> Processes:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        while self.running:
            self.stop(self.running[-1])
        shutil.rmtree(self.tmp, ignore_errors=True)

    def stop(self, running: Running) -> None:
        stop(running.process, signal.SIGTERM)  # to its process group; SIGKILL after 10 s
        if running in self.running:
            self.running.remove(running)

    def keys(self) -> dict[str, str]:
        """An API key per tenant: "plain" without limits, "full" with high limits of its own."""
        repository = KeyRepository(open_store(self.store_url))
        made = {}
        for tenant, limits in (("plain", RateLimits()), ("full", KEY_LIMITS)):
            secret, _ = repository.create(
                tenant=tenant,
                name="bench",
                models=[],
                expires_at=None,
                limits=limits,
                now=datetime.now(UTC),
                actor="bench",
            )
            made[tenant] = secret
        return made

    def backend(self) -> Running:
        port = free_port()
        log_path = self.tmp / "backend.log"
        process = start_sim_model(log_path, port, [MODEL])
        return self._add(Running(f"http://127.0.0.1:{port}", process, log_path))

    def nginx(self, backend_port: int) -> Running:
        directory = self.tmp / "nginx"
        directory.mkdir()
        port = free_port()
        conf = directory / "nginx.conf"
        conf.write_text(nginx_conf(directory, port, backend_port))
        hand_to_gateway_user(self.tmp)
        log_path = directory / "output.log"
        command = [find_tool("nginx") or "nginx", "-p", str(directory), "-e", str(directory / "error.log"), "-c", str(conf)]  # fmt: skip
        return self._start("nginx", command, None, port, log_path)

    def gateway(
        self,
        setup: GatewaySetup,
        backend_port: int,
        key: str,
        redis_url: str,
        source: Source | None = None,
    ) -> Running:
        """`setup` in front of the backend; with `source`, that tree's gateway on its own store."""
        port = free_port()
        home = self.tmp / f"gateway-{port}"
        (home / "spool").mkdir(parents=True)
        spec = home / "gpuplex.yaml"
        spec.write_text(gateway_spec(setup, port, backend_port))
        store_url = self.store_url if source is None else self.source_store(source)
        args = ["--config", str(spec), "--store", store_url, "--spool-dir", str(home / "spool")]  # fmt: skip
        args += ["--server", setup.server]
        if setup.limiter == "redis":
            args += ["--redis-url", redis_url]
        command, environment = gateway_command(args)
        label, cwd = setup.label, ROOT
        if source is not None:
            label, cwd = f"{setup.label} [{source.name}: {source.label}]", source.root
            environment = on_source(environment, source)
        hand_to_gateway_user(self.tmp)
        running = self._start(label, command, environment, port, home / "gateway.log", cwd)
        try:
            wait_for_key(running.url, key)
        except AssertionError as error:
            raise RuntimeError(f"{label}: {error}\n{running.log_path.read_text()}") from None
        return running

    def source_store(self, source: Source) -> str:
        return f"sqlite:///{self.tmp / f'store-{source.name}.db'}"

    def keys_for(self, source: Source) -> dict[str, str]:
        """`keys()` for `source`'s gateway: its own store, made and filled by its own code (a
        store's schema and key format may differ between commits). Raises RuntimeError."""
        _, environment = gateway_command([])
        environment = on_source(environment, source)
        command = [sys.executable, "-c", _KEYS_SCRIPT, self.source_store(source)]
        command.append(json.dumps(KEY_LIMITS.model_dump()))
        done = subprocess.run(  # noqa: S603 - our own script, arguments built here
            command, capture_output=True, text=True, env=environment, cwd=source.root, check=False
        )
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            raise RuntimeError(
                f"{source.name} ({source.label}): could not make its store and API keys with its "
                f"own code (gpuplex.store):\n{tail_lines(done.stdout + done.stderr)}"
            )
        made: dict[str, str] = json.loads(lines[-1])
        return made

    def publish_identity(self, source: Source, backend_port: int) -> bool:
        """Publish, in `source`'s store and with its own code, who the backend runs as (this
        process's user), as the host runtime does for its replicas: a tree whose gateway checks
        who answers on a replica's port then checks each new connection to the backend. False
        for a tree from before that check (nothing to publish). Raises RuntimeError."""
        _, environment = gateway_command([])
        environment = on_source(environment, source)
        command = [sys.executable, "-c", _IDENTITY_SCRIPT, self.source_store(source)]
        command += [str(backend_port), str(os.geteuid())]
        done = subprocess.run(  # noqa: S603 - our own script, arguments built here
            command, capture_output=True, text=True, env=environment, cwd=source.root, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{source.name} ({source.label}): could not publish the backend's identity:\n"
                f"{tail_lines(done.stdout + done.stderr)}"
            )
        return done.stdout.strip().endswith("published")

    def client_proxy(self, client: str, backend_url: str) -> Running:
        port = free_port()
        command = [sys.executable, "-m", "bench.gateway_clients", client, "--port", str(port)]
        command += ["--backend", backend_url]
        log_path = self.tmp / f"proxy-{client}.log"
        return self._start(f"proxy, {client}", command, None, port, log_path)

    def _start(
        self,
        label: str,
        command: list[str],
        environment: dict[str, str] | None,
        port: int,
        log_path: Path,
        cwd: Path = ROOT,
    ) -> Running:
        with log_path.open("ab") as log:
            process = subprocess.Popen(  # noqa: S603 - our own processes, arguments built here
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=environment,
                cwd=cwd,
            )
        running = self._add(Running(f"http://127.0.0.1:{port}", process, log_path))
        try:
            wait_healthy(running.url, process)
        except AssertionError as error:
            raise RuntimeError(
                f"{label}: {error}\n{log_path.read_text(errors='replace')}"
            ) from None
        return running

    def _add(self, running: Running) -> Running:
        self.running.append(running)
        return running


def redis_reachable(url: str) -> str | None:
    """None when Redis answers at `url`, else why not."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=2)
        client.ping()
        client.close()
    except redis.RedisError as error:
        return str(error)
    return None


#: Run by `Processes.keys_for` under a tree's own src/: argv[1] the store URL, argv[2] the "full"
#: key's limits as a JSON object of `RateLimits` fields; prints {tenant: key} as JSON. (Trees from
#: before `RateLimits` had `store.keys.KeyLimits`, with the same fields.)
_KEYS_SCRIPT = """\
import json, sys
from datetime import UTC, datetime
from gpuplex.store.db import open_store
from gpuplex.store.keys import KeyRepository
try:
    from gpuplex.core.spec.rate_limits import RateLimits as Limits
except ImportError:
    from gpuplex.store.keys import KeyLimits as Limits
repository = KeyRepository(open_store(sys.argv[1]))
made = {}
for tenant, limits in (("plain", Limits()), ("full", Limits(**json.loads(sys.argv[2])))):
    secret, _ = repository.create(tenant=tenant, name="bench", models=[], expires_at=None,
                                  limits=limits, now=datetime.now(UTC), actor="bench")
    made[tenant] = secret
print(json.dumps(made))
"""


#: Run by `Processes.publish_identity` under a tree's own src/: argv[1] the store URL, argv[2] the
#: backend's port, argv[3] the uid it runs as; prints "published", or nothing for a tree without
#: published identities (from before the gateway checked them).
_IDENTITY_SCRIPT = """\
import sys
from datetime import UTC, datetime
try:
    from gpuplex.store.replica_identities import ReplicaIdentities, ReplicaIdentity
except ImportError:
    sys.exit(0)
from gpuplex.store.db import open_store
port, uid = int(sys.argv[2]), int(sys.argv[3])
backend = ReplicaIdentity("bench", "plain", "backend", 0, port, uid)
ReplicaIdentities(open_store(sys.argv[1])).publish("bench", [backend], now=datetime.now(UTC))
print("published")
"""


def group_cpu_s(group: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of process group `group`:
    a gateway and its workers and usage mover, or a vLLM server's three processes (started in a session of their own)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[2]) == group:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def tail_lines(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def on_source(environment: dict[str, str], source: Source) -> dict[str, str]:
    """The gateway's environment with `source`'s src/ first on PYTHONPATH, in place of the working
    tree's (which `gateway_command` puts there as root; the virtualenv's editable install puts it
    after PYTHONPATH otherwise)."""
    own = str(ROOT / "src")
    rest = [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p and p != own]
    return environment | {"PYTHONPATH": os.pathsep.join([str(source.src), *rest])}


def check_source(source: Source) -> None:
    """That the gateway's user, with the gateway's interpreter and path, imports gpuplex from
    `source`'s src/ (and can read it). Raises RuntimeError."""
    command, environment = gateway_command([])
    interpreter = command[: command.index("-m")]
    probe = "import gpuplex, pathlib; print(pathlib.Path(gpuplex.__file__).resolve())"
    done = subprocess.run(  # noqa: S603 - the gateway's interpreter, arguments built here
        [*interpreter, "-c", probe],
        capture_output=True,
        text=True,
        env=on_source(environment, source),
        cwd=source.root,
        check=False,
    )
    found = Path(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None
    if done.returncode != 0 or found is None or not found.is_relative_to(source.src.resolve()):
        raise RuntimeError(
            f"{source.name} ({source.label}): the gateway's user imports gpuplex from {found}, "
            f"not from {source.src}:\n{tail_lines(done.stdout + done.stderr)}"
        )


def _git(*args: str) -> str:
    done = subprocess.run(  # noqa: S603 - git, arguments built here
        ["git", "-C", str(ROOT), *args],  # noqa: S607 - git from PATH, as a developer runs it
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {(done.stderr or done.stdout).strip()}")
    return done.stdout.strip()


def describe_ref(ref: str) -> str:
    """ "HEAD~1 = 91693ab sync: apply and diff share…"; RuntimeError when `ref` is no commit."""
    try:
        _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except RuntimeError:
        raise RuntimeError(f"{ref!r} is not a commit of the repository at {ROOT}") from None
    subject = _git("log", "-1", "--format=%h %s", ref)
    return f"{ref} = {subject[:80]}{'…' if len(subject) > 80 else ''}"


def describe_working_tree(ref: str) -> str:
    """ "working tree (HEAD 2bab96d + uncommitted changes); src/ against REF: N files changed, …"."""
    head = _git("log", "-1", "--format=%h")
    dirty = _git("status", "--porcelain", "--", "src")
    changes = f" + {len(dirty.splitlines())} uncommitted paths under src/" if dirty else ""
    differs = _git("diff", "--shortstat", ref, "--", "src") or "no change"
    return f"working tree (HEAD {head}{changes}); src/ against {ref}: {differs}"


def script_json_with_src(tree: Path, script: Path, options: list[str]) -> object:
    """This tree's bench `script --json` with `tree`'s gpuplex (its src/ first on the path; the
    script puts this tree's root first for bench/), in a process of its own: its JSON."""
    environment = inherited_environment() | {"PYTHONPATH": str(tree / "src")}
    done = subprocess.run(  # noqa: S603 - our own benchmark script
        [sys.executable, str(script), "--json", *options],
        cwd=tree,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: {script.name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


@contextlib.contextmanager
def checkout(ref: str) -> Iterator[Path]:
    """`ref` checked out in a temporary `git worktree` (detached) that the gateway's user can read;
    removed on leaving, on an exception or Ctrl-C too. Raises RuntimeError when git cannot."""
    parent = Path(tempfile.mkdtemp(prefix="gpuplex-bench-against-"))
    parent.chmod(0o755)
    tree = parent / "tree"
    try:
        _git("worktree", "add", "--detach", str(tree), ref)
        for directory, _, files in os.walk(tree):  # o+rX, as `chmod -R o+rX`
            os.chmod(directory, os.stat(directory).st_mode | 0o005)
            for name in files:
                path = os.path.join(directory, name)
                if not os.path.islink(path):
                    os.chmod(path, os.stat(path).st_mode | 0o004)
        yield tree
    finally:
        if tree.exists():
            with contextlib.suppress(RuntimeError):
                _git("worktree", "remove", "--force", str(tree))
        shutil.rmtree(parent, ignore_errors=True)
