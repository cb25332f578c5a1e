"""The supervisor of ``cfgcheck serve``: uvicorn's process supervisor plus a hard limit per
request, enforced by killing the worker process, as gunicorn's ``--timeout`` does.

The cooperative CPU budget (:mod:`cfgcheck.budget`) stops a request only where Python code
checks it; a request inside one long C call (a parser, the tokenizers library, a regex) runs
on, and while that call holds the GIL nothing else of its worker runs either: neither the
event loop (so not even the 504 is sent) nor a watchdog thread. Only another process can end
it. So the supervisor (the ``cfgcheck serve`` process, which binds the socket and starts the
workers, :class:`uvicorn.supervisors.Multiprocess`) gives each worker a table of shared
memory (:mod:`cfgcheck.service.slots`: per validation thread, the instant its request
started, 0 when idle, and its client), one offenders table for all workers, and every half
second:

* kills (SIGKILL) a worker whose oldest request has run longer than the hard limit
  (``ServiceSettings.hard_timeout_s``, default ``--timeout`` + 5 s) and starts a new one in
  its place, while the other workers go on serving; the clients of that worker's requests
  past their deadline (``--timeout``) are refused by every worker for
  :data:`REFUSE_OFFENDER_S` seconds (429), so none can kill one worker after another (at
  once, or at a second strike when a call holding the GIL froze the whole worker:
  :meth:`Supervisor.refuse_stuck`);
* pings each worker over uvicorn's pipe without waiting for the answer (uvicorn's own check
  blocks the supervisor up to 60 s on a worker whose GIL is held, delaying every other
  check): a worker silent for ``timeout_worker_healthcheck`` seconds is killed and replaced;
* replaces a worker that exited, and logs when each new worker is ready.

A request killed this way gets no HTTP answer: its connection closes (``curl``: "Empty reply
from server"). So do the other requests in flight on that worker; they are few, because a
worker whose request is stuck halfway from its deadline to the hard limit drains (as on
SIGTERM: it stops accepting connections, closes idle ones and admits no new validation;
:class:`cfgcheck.service.admission.Admission`), and a worker whose GIL is held accepts no new
connection (the kernel hands them to the other workers); requests already on its
connections wait for the kill.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import time
from socket import socket
from typing import Any

from uvicorn._subprocess import spawn
from uvicorn.config import STARTUP_FAILURE, Config
from uvicorn.supervisors.multiprocess import Multiprocess, Process

log = logging.getLogger("uvicorn.error")


# Seconds the client of a request that got its worker killed is refused, by every worker.
REFUSE_OFFENDER_S = 300.0
# A worker that has not answered the supervisor's ping (sent every half second) for this long
# is frozen: a call holds its GIL.
FROZEN_S = 2.0


class WatchedProcess(Process):
    """A worker process with its in-flight table in shared memory and a non-blocking ping."""

    def __init__(self, config: Config, sockets: list[socket], slots: int, offenders: Any) -> None:
        # Shared memory handed to the spawned child with the pickled process object.
        self.table: Any = spawn.RawArray("d", 2 * slots)
        self.offenders = offenders
        now = time.monotonic()
        self.last_answer = now
        self.ping_sent = False
        self.ready = False
        super().__init__(config, sockets)

    def target(self, sockets: list[socket] | None = None) -> None:  # pragma: no cover
        from cfgcheck.service import slots

        # Before the app is built: its Slots and Admission use these tables.
        slots.attach(self.table, self.offenders, self.drain)
        super().target(sockets)

    def drain(self) -> None:  # pragma: no cover - runs in the worker
        """uvicorn's graceful exit (as on SIGTERM): stop accepting, close idle connections,
        answer those in flight, exit."""
        self.server.should_exit = True

    def overdue(self, limit_s: float) -> float | None:
        """Seconds the oldest request has run when past ``limit_s``, else ``None``."""
        from cfgcheck.service.slots import oldest

        age = oldest(self.table)[0]
        return None if age is None or age <= limit_s else age

    def stuck_clients(self, deadline_s: float) -> set[float]:
        """The keys of the clients whose requests have run past their deadline (a request
        the cooperative budget can stop ends within milliseconds of it)."""
        from cfgcheck.service.slots import running

        return {key for age, key in running(self.table) if age > deadline_s}

    def answers(self, now: float, patience_s: float) -> bool:
        """Ping without waiting; ``False`` once no answer came for ``patience_s`` seconds."""
        try:
            if self.ping_sent and self.parent_conn.poll():
                started = self.parent_conn.recv()
                self.ping_sent = False
                self.last_answer = now
                if started and not self.ready:
                    self.ready = True
                    log.info("Worker [%s] ready", self.pid)
            if not self.ping_sent:
                self.parent_conn.send(b"ping")
                self.ping_sent = True
        except (OSError, EOFError, pickle.UnpicklingError):
            return False
        return now - self.last_answer <= patience_s


class Supervisor(Multiprocess):
    """uvicorn's supervisor with the hard limit and the non-blocking ping (module docstring)."""

    def __init__(
        self,
        config: Config,
        sockets: list[socket],
        slots: int,
        hard_limit_s: float,
        deadline_s: float,
    ) -> None:
        super().__init__(config, sockets)
        self.slots = slots
        self.hard_limit_s = hard_limit_s
        self.deadline_s = deadline_s
        self.processes: list[Process] = []
        from cfgcheck.service.slots import OFFENDER_FIELDS, OFFENDER_SLOTS

        # one for all workers
        self.offenders: Any = spawn.RawArray("d", OFFENDER_FIELDS * OFFENDER_SLOTS)

    def start_worker(self) -> WatchedProcess:
        process = WatchedProcess(self.config, self.sockets, self.slots, self.offenders)
        process.start()
        return process

    def init_processes(self) -> None:
        for _ in range(self.processes_num):
            self.processes.append(self.start_worker())

    def why_replace(self, process: Process, now: float) -> str | None:
        """Why ``process`` must be replaced now (a log line), or ``None``."""
        if not process.process.is_alive():
            return f"Worker [{process.pid}] died (exit code {process.exitcode})"
        if not isinstance(process, WatchedProcess):  # pragma: no cover - all are watched
            return None
        age = process.overdue(self.hard_limit_s)
        if age is not None:
            return (
                f"Worker [{process.pid}] killed: a request has run {age:.1f} s, past the hard "
                f"limit of {self.hard_limit_s:g} s (stuck in one call; "
                f"{self.refuse_stuck(process, now)})"
            )
        patience = self.config.timeout_worker_healthcheck
        if not process.answers(now, patience):
            return f"Worker [{process.pid}] killed: no answer to the supervisor for {patience:g} s"
        return None

    def refuse_stuck(self, process: WatchedProcess, now: float) -> str:
        """Refuse the clients of ``process``'s requests past their deadline; what was done.

        While the worker answers the supervisor's pings, only the stuck requests are past
        their deadline (the others end at their next check): their clients are refused at
        once. A worker that answers nothing is frozen by a call holding the GIL, and every
        request it holds is past its deadline, the innocent ones too: each of their clients
        gets a strike, and is refused at its second strike within the refusal time."""
        from cfgcheck.service.slots import Offenders

        offenders = Offenders(self.offenders)
        clients = process.stuck_clients(self.deadline_s)
        if now - process.last_answer <= FROZEN_S:
            for client in clients:
                offenders.refuse(client, now, REFUSE_OFFENDER_S)
            return (
                f"{len(clients)} client(s) with requests past their deadline refused for "
                f"{REFUSE_OFFENDER_S:g} s"
            )
        refused = sum(offenders.strike(client, now, REFUSE_OFFENDER_S) for client in clients)
        return (
            f"frozen by a call holding the GIL: a strike for {len(clients)} client(s) with "
            f"requests past their deadline, {refused} refused for {REFUSE_OFFENDER_S:g} s at "
            "their second strike"
        )

    def keep_subprocess_alive(self) -> None:
        if self.should_exit.is_set():
            return  # the supervisor is exiting: no replacements
        for idx, process in enumerate(self.processes):
            reason = self.why_replace(process, time.monotonic())
            if reason is None:
                continue
            process.kill()
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                # As uvicorn: a worker that failed before serving would fail again.
                log.error("Worker [%s] failed to start, stopping the parent process.", process.pid)
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            replacement = self.start_worker()
            self.processes[idx] = replacement
            log.error("%s; started worker [%s] in its place", reason, replacement.pid)

    def handle_ttin(self) -> None:  # pragma: no cover - SIGTTIN: one more worker
        log.info("Received SIGTTIN, increasing the number of processes.")
        self.processes_num += 1
        self.processes.append(self.start_worker())

    def restart_all(self) -> None:  # pragma: no cover - SIGHUP: uvicorn's, with watched workers
        for idx, old in enumerate(self.processes):
            if self.should_exit.is_set():
                return
            new = self.start_worker()
            if not new.wait_until_ready(self.config.timeout_worker_healthcheck, self.should_exit):
                new.kill()
                new.join()
                if not self.should_exit.is_set():
                    log.error("New worker [%s] was not ready in time; restart aborted", new.pid)
                return
            old.terminate()
            old.join()
            self.processes[idx] = new


def serve(config: Config, slots: int, hard_limit_s: float, deadline_s: float) -> None:
    """Bind ``config``'s socket and run the supervisor until SIGTERM/SIGINT (as ``uvicorn.run``
    does with ``workers``)."""
    sock = config.bind_socket()
    with contextlib.suppress(KeyboardInterrupt):
        Supervisor(config, [sock], slots, hard_limit_s, deadline_s).run()
