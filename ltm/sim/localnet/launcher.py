"""Local-process launcher: start LTM actors as separate OS processes on loopback, and stop them.

Used by ``ltm demo`` and by the networked tests.  Every process is an ``ltm`` subcommand run with
the current interpreter; servers and the analyst bind port 0 and report the port through a file,
and are considered up once their gRPC health service answers SERVING.  For fault injection,
:meth:`ProcessGroup.kill` sends SIGKILL and :meth:`ProcessGroup.restart` starts a process again
with its original arguments — a server on its previous port, so clients reconnect to it.

Actors run in their own sessions (a Ctrl-C in the terminal reaches the launcher only), so the
launcher must stop them itself; if it cannot (SIGKILL, the OOM killer), each dies with it
(:mod:`ltm.transport.lifeline`: a parent-death signal, so start processes from the main thread).  On a
normal stop: :func:`stop_on_termination` makes SIGTERM and SIGHUP (what
``timeout``, systemd, ``docker stop``, CI runners and a closed terminal send) take the Ctrl-C path,
a ``KeyboardInterrupt`` that unwinds through the ``finally`` blocks which stop every actor and
remove the scratch directory.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ltm.errors import LtmError
from ltm.transport.lifeline import child_env
from ltm.transport.tls import make_sync_channel

if TYPE_CHECKING:
    from ltm.sim.localnet.netns import NetnsLab


#: Signals that end a launcher run like Ctrl-C does.
TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """A run stopped by a terminating signal (``signum``); ``ltm`` exits with 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


@contextlib.contextmanager
def stop_on_termination() -> Iterator[None]:
    """Within the block, the first SIGTERM or SIGHUP raises :class:`Terminated` (a
    ``KeyboardInterrupt``) in the main thread, or, if it is starting a process, once that process is
    in its group (the Ctrl-C path: every ``finally`` runs, :meth:`ProcessGroup.stop_all` included); later ones
    are ignored so they cannot cut that cleanup short (it is bounded: stop_all SIGKILLs what has
    not exited after 10 s).  Outside the main thread (no signal handlers there) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = []
    _held.clear()

    def interrupt(signum: int, frame) -> None:  # noqa: ARG001 - the signal module's signature
        if not fired:
            fired.append(signum)
            if _starting:  # raised by _recording once the process being started is in the group
                _held.append(signum)
                return
            raise Terminated(signum)

    previous = {sig: signal.signal(sig, interrupt) for sig in TERMINATING_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: the main thread is starting a process and has not yet recorded it (see _recording)
_starting = False
#: a terminating signal that arrived meanwhile
_held: list[int] = []


@contextlib.contextmanager
def _recording() -> Iterator[None]:
    """Around starting a process and recording it in its group: a terminating signal that arrives
    meanwhile is raised at the end.  Raised inside ``Popen`` (which waits for the child's exec), it
    would leave a running child that no :meth:`ProcessGroup.stop_all` knows of."""
    global _starting
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _starting = True
    try:
        yield
    finally:
        _starting = False
        if _held:
            raise Terminated(_held.pop())


class LaunchError(LtmError, RuntimeError):
    """A process that did not start (its log tail is in the message)."""


@dataclass
class ActorProcess:
    role: str
    actor: str
    proc: subprocess.Popen
    log_path: Path
    port: int | None = None
    #: the ``ltm`` arguments it was started with (without --listen/--port-file/--certs)
    argv: list[str] = field(default_factory=list)
    #: pids of earlier incarnations (see :meth:`ProcessGroup.restart`)
    previous_pids: list[int] = field(default_factory=list)
    #: the address it listens on (its own namespace's address with a :class:`~ltm.sim.localnet.netns.NetnsLab`)
    host: str = "127.0.0.1"
    #: the lab actor whose namespace it runs in (default: its own name)
    site: str = ""

    @property
    def restarts(self) -> int:
        return len(self.previous_pids)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process (``/proc/PID/stat`` utime + stime), None if it is
    gone or there is no Linux /proc.  The command name (field 2) may hold spaces and ')', so the
    fields are counted after its last ')'."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class ProcessGroup:
    """The processes of one local deployment; ``stop_all`` ends every one of them."""

    workdir: Path
    certs: Path | None
    insecure: bool = False
    processes: list[ActorProcess] = field(default_factory=list)
    #: with a lab, each actor it names runs in its own network namespace on its own address
    netns: "NetnsLab | None" = None

    def host_of(self, actor: str) -> str:
        return self.netns.address(actor) if self.netns is not None and actor in self.netns.actors else "127.0.0.1"

    def _popen(self, actor: str, argv: list[str], site: str = "") -> tuple[subprocess.Popen, Path]:
        log_path = self.workdir / "logs" / f"{actor}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # -P: the working directory never goes on sys.path, so a stray ltm.cli.py there cannot stand in for ltm
        cmd = [sys.executable, "-P", "-m", "ltm.cli", *argv]
        if self.insecure:
            cmd.append("--insecure")
        elif self.certs is not None:
            cmd += ["--certs", str(self.certs)]
        site = site or actor
        if self.netns is not None and site in self.netns.actors:
            cmd = self.netns.command(site, cmd)
        # One local deployment is one host: its parties keep their per-host state (the privacy ledger,
        # $XDG_STATE_HOME/ltm/ledger, party/ledger.py) in the workdir, not in the user's own.
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_STATE_HOME": str(self.workdir / "state")}
        env = child_env(env)  # it dies with this process, even a SIGKILLed one (ltm/transport/lifeline.py)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        return proc, log_path

    def _spawn(self, role: str, actor: str, argv: list[str], extra: list[str] = (), site: str = "") -> ActorProcess:
        with _recording():
            proc, log_path = self._popen(actor, [*argv, *extra], site)
            ap = ActorProcess(role, actor, proc, log_path, argv=list(argv), host=self.host_of(site or actor),
                              site=site or actor)
            self.processes.append(ap)
        return ap

    def _port_file(self, actor: str) -> Path:
        port_file = self.workdir / "ports" / f"{actor}.port"
        port_file.parent.mkdir(parents=True, exist_ok=True)
        port_file.unlink(missing_ok=True)
        return port_file

    def _await_port(self, ap: ActorProcess, port_file: Path, end: float) -> None:
        while not port_file.exists() or not port_file.read_text().strip():
            if ap.proc.poll() is not None or time.monotonic() > end:
                raise LaunchError(f"{ap.actor} did not start:\n{ap.log_tail()}")
            time.sleep(0.02)
        ap.port = int(port_file.read_text())
        self.wait_healthy(ap, end - time.monotonic())

    def start_service(self, role: str, actor: str, argv: list[str], timeout: float = 30.0) -> ActorProcess:
        """Start a server or the analyst on port 0 and wait until it is healthy."""
        port_file = self._port_file(actor)
        ap = self._spawn(role, actor, argv, ["--listen", f"{self.host_of(actor)}:0", "--port-file", str(port_file)])
        self._await_port(ap, port_file, time.monotonic() + timeout)
        return ap

    def kill(self, ap: ActorProcess, sig: int = signal.SIGKILL) -> int | None:
        """Send ``sig`` (default SIGKILL: no cleanup, no graceful shutdown) and reap the process."""
        if ap.proc.poll() is None:
            ap.proc.send_signal(sig)
            ap.proc.wait()
        return ap.proc.returncode

    def restart(self, ap: ActorProcess, timeout: float = 30.0) -> ActorProcess:
        """Start ``ap`` again with the arguments it was started with (SIGKILLing it first if it still
        runs).  A server or the analyst comes back on its previous port — so clients that hold its
        endpoint (in the job spec, on their command line) reconnect to it — and is waited for until
        healthy; a task (a party) is simply started again.  ``ap`` is updated in place."""
        if ap.proc.poll() is None:
            self.kill(ap)
        ap.previous_pids.append(ap.pid)
        if ap.port is None:
            with _recording():
                ap.proc, ap.log_path = self._popen(ap.actor, ap.argv, ap.site)
            return ap
        port_file = self._port_file(ap.actor)
        end = time.monotonic() + timeout
        while True:
            with _recording():
                ap.proc, ap.log_path = self._popen(ap.actor, [*ap.argv, "--listen", f"{ap.host}:{ap.port}",
                                                              "--port-file", str(port_file)], ap.site)
            try:
                self._await_port(ap, port_file, end)
                return ap
            except LaunchError:
                # The old port may be briefly unavailable (another process took it): retry until timeout.
                self.kill(ap)
                if time.monotonic() > end:
                    raise
                time.sleep(0.2)

    def wait_healthy(self, ap: ActorProcess, timeout: float) -> None:
        channel = make_sync_channel(ap.endpoint, self.certs, "operator", insecure=self.insecure,
                                    options=None if self.insecure else [("grpc.ssl_target_name_override", ap.actor)])
        try:
            stub = health_pb2_grpc.HealthStub(channel)
            end = time.monotonic() + max(timeout, 1.0)
            while True:
                try:
                    if stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2.0).status == \
                            health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                if ap.proc.poll() is not None or time.monotonic() > end:
                    raise LaunchError(f"{ap.actor} never became healthy:\n{ap.log_tail()}")
                time.sleep(0.05)
        finally:
            channel.close()

    def start_servers(self, k: int, extra: list[str] | tuple[str, ...] = ()) -> list[ActorProcess]:
        """Start ``server-0 … server-(k−1)``, each storing under ``<workdir>/server-<i>``, and wait
        until all are healthy."""
        return [self.start_service("server", f"server-{i}", ["server", "--id", f"server-{i}", "--data-dir",
                                                             str(self.workdir / f"server-{i}"), *extra])
                for i in range(k)]

    def start_task(self, role: str, actor: str, argv: list[str], site: str = "") -> ActorProcess:
        """Start a process that runs to completion (a party).  ``site``: the lab actor whose network
        namespace it runs in (default: ``actor``'s own, if the lab has one)."""
        return self._spawn(role, actor, argv, site=site)

    def stop(self, ap: ActorProcess, timeout: float = 10.0, sig: int = signal.SIGTERM) -> int | None:
        if ap.proc.poll() is None:
            try:
                ap.proc.send_signal(sig)
                ap.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                ap.proc.kill()
                ap.proc.wait()
        return ap.proc.returncode

    def stop_all(self) -> None:
        """SIGTERM everything still running (graceful), then SIGKILL what does not exit; an interrupt
        (Ctrl-C, or SIGTERM under :func:`stop_on_termination`) while waiting SIGKILLs the rest first."""
        try:
            for ap in self.processes:
                if ap.proc.poll() is None:
                    ap.proc.send_signal(signal.SIGTERM)
            end = time.monotonic() + 10.0
            for ap in self.processes:
                try:
                    ap.proc.wait(timeout=max(end - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    ap.proc.kill()
                    ap.proc.wait()
        except KeyboardInterrupt:
            for ap in self.processes:
                if ap.proc.poll() is None:
                    ap.proc.kill()
                    ap.proc.wait()
            raise

    def __enter__(self) -> "ProcessGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()
