"""Where the runner's (cell, repetition) pairs are computed: this process, a local process pool, or Dask.

The runner (:func:`ltm.experiments.runner.run_experiment`) owns everything that makes a run resumable —
which pairs are done, appending each finished pair to ``results.csv``, the progress bar, the run
record.  An executor only computes: :meth:`Executor.imap_unordered` submits ``fn(*args(item))`` for
every item and yields ``(item, result)`` pairs AS THEY COMPLETE (in any order), so the runner writes
each one the moment it exists and a crash loses nothing already written.  The submission loop is
shared; an executor supplies four primitives (``_submit``, ``_first_completed``, ``_result``,
``_cancel``) and its own start-up and shut-down (it is a context manager).

* :class:`InlineExecutor` — this process, one pair at a time (``--workers 1``; the only executor
  ``--networked`` can use, since its deployment lives in this process).
* :class:`ProcessExecutor` — a ``ProcessPoolExecutor`` of ``--workers`` spawned processes.
* :class:`DaskExecutor` — a ``dask.distributed`` cluster: a ``LocalCluster`` of ``--workers``
  single-threaded worker processes by default, or an existing scheduler (``--scheduler ADDRESS``)
  and whatever workers it has.  Needs the optional extra: ``pip install 'ltm[dask]'``.

What a worker receives: the function by reference (``ltm.experiments.runner._run_cell``, so every
worker needs ``ltm`` importable, of the same version) and the pair's arguments — the scenario's
name and module, the cell's parameters and its seed, a few hundred bytes; what it returns: the
scenario's result rows (a list of flat dicts).  Data sets are read on the worker from the
installed package, never sent.
"""
from __future__ import annotations

import logging
import os
import sys
from collections import deque
from typing import Any, Callable, Iterable, Iterator, TypeVar

from ltm.errors import LtmError

T = TypeVar("T")

EXECUTORS = ("local", "dask")
DASK_INSTALL_HINT = "pip install 'ltm[dask]'"
DEFAULT_CONNECT_TIMEOUT = 10.0  # seconds to reach a --scheduler before giving up


class ExecutorUnavailable(LtmError, RuntimeError):
    """The chosen executor cannot run here (its package is missing, or its cluster is unreachable)."""

    exit_code = 2  # what `ltm experiment run` exits with (ltm/experiments/runner.py)


class Executor:
    """Computes submitted calls somewhere and yields them as they complete (see the module docstring).

    ``window`` bounds the calls in flight (``None``: submit everything at once and let the
    scheduler queue them); ``workers`` is how many run at a time, for the run record.
    """

    name = "executor"
    window: int | None = 1
    workers = 1

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release whatever the executor started (processes, a cluster).  Idempotent."""

    def describe(self) -> dict[str, Any]:
        """What ran the pairs, for ``run.json``: at least ``executor`` and ``workers``."""
        return {"executor": self.name, "workers": self.workers}

    # -- the primitives each executor supplies
    def _submit(self, fn: Callable[..., Any], args: tuple, key: str) -> Any:
        raise NotImplementedError

    def _first_completed(self, futures: list) -> Iterable:
        raise NotImplementedError

    def _result(self, future: Any) -> Any:
        return future.result()

    def _cancel(self, futures: list) -> None:
        for fut in futures:
            fut.cancel()

    # -- the one submission loop
    def imap_unordered(self, fn: Callable[..., Any], items: Iterable[T], args: Callable[[T], tuple],
                       key: Callable[[T], str] = str) -> Iterator[tuple[T, Any]]:
        """Yield ``(item, fn(*args(item)))`` for every item, in completion order.

        Items are submitted in their given order, at most ``window`` at a time.  A call's exception
        is raised here, when its result is taken; then (or when the caller stops iterating) every
        call still pending is cancelled.  ``key(item)`` names the call (Dask shows it).
        """
        queue = deque(items)
        pending: dict[Any, T] = {}
        try:
            while queue or pending:
                while queue and (self.window is None or len(pending) < self.window):
                    item = queue.popleft()
                    pending[self._submit(fn, args(item), key(item))] = item
                for fut in self._first_completed(list(pending)):
                    item = pending.pop(fut)
                    yield item, self._result(fut)
        finally:
            if pending:
                self._cancel(list(pending))


class _Done:
    """The 'future' of a call already made in this process."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value

    def cancel(self) -> bool:
        return False


class InlineExecutor(Executor):
    """Every call in this process, in submission order (exceptions raise at once, with their traceback)."""

    name = "local"

    def _submit(self, fn: Callable[..., Any], args: tuple, key: str) -> _Done:
        return _Done(fn(*args))

    def _first_completed(self, futures: list) -> Iterable:
        return futures


class ProcessExecutor(Executor):
    """A ``ProcessPoolExecutor`` of ``workers`` spawned processes; ``2 × workers`` calls in flight."""

    name = "local"

    def __init__(self, workers: int) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.workers = workers
        self.window = 2 * workers  # enough to keep every worker busy, few enough to cancel fast
        # spawn, not fork: a forked child would inherit this process's threads and open sockets
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))

    def _submit(self, fn: Callable[..., Any], args: tuple, key: str) -> Any:
        return self._pool.submit(fn, *args)

    def _first_completed(self, futures: list) -> Iterable:
        from concurrent.futures import FIRST_COMPLETED, wait

        return wait(futures, return_when=FIRST_COMPLETED)[0]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class DaskExecutor(Executor):
    """A ``dask.distributed`` cluster: a new ``LocalCluster`` or an existing scheduler.

    ``scheduler=None`` starts ``LocalCluster(n_workers=workers, threads_per_worker=1,
    processes=True)`` (``workers=None``: one per core) and shuts it down on :meth:`close`;
    ``scheduler="tcp://host:8786"`` connects to a running scheduler (``connect_timeout``
    seconds) and uses its workers (``workers`` is then ignored), leaving the cluster running.
    Every pair is submitted at once in grid order (the scheduler runs them roughly in that order).
    """

    name = "dask"
    window = None

    def __init__(self, workers: int | None = None, scheduler: str | None = None, *,
                 connect_timeout: float | None = None, quiet: bool = True) -> None:
        try:
            import distributed
        except ImportError as exc:
            raise ExecutorUnavailable(f"--executor dask needs dask.distributed, which is not installed "
                                      f"({exc.name or exc}): {DASK_INSTALL_HINT}") from None
        self.scheduler = scheduler
        self._cluster = None
        connect_timeout = DEFAULT_CONNECT_TIMEOUT if connect_timeout is None else connect_timeout
        self._completed = None  # distributed.as_completed over the submitted futures
        level = logging.ERROR if quiet else logging.WARNING
        if scheduler is None:
            self.workers = workers or os.cpu_count() or 1
            # one thread per worker process: the cells are numpy-bound and single-threaded BLAS
            # (Dask's workers set OPENBLAS_NUM_THREADS=1); no dashboard (it needs bokeh, and a port)
            self._cluster = distributed.LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                                     dashboard_address=None, silence_logs=level)
            address = self._cluster.scheduler_address
        else:
            address = scheduler
        try:
            # set_as_default=False: do not make this client the process-wide dask scheduler
            self._client = distributed.Client(address, timeout=connect_timeout, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            self.close()
            raise ExecutorUnavailable(f"cannot reach the Dask scheduler at {address} "
                                      f"within {connect_timeout:g} s: {' '.join(str(exc).split())}") from None
        if scheduler is not None:
            self.workers = len(self._client.scheduler_info().get("workers", {}))
            if workers is not None:
                print(f"ltm experiment: --scheduler: using the cluster's own {self.workers} worker(s); "
                      f"ignoring --workers {workers}", file=sys.stderr)
            if not self.workers:
                print(f"ltm experiment: the Dask scheduler at {scheduler} has no workers yet; the cells wait for "
                      f"one (start it with: dask worker {scheduler})", file=sys.stderr)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["scheduler"] = self.scheduler  # None: a LocalCluster of this run's own
        return out

    def _submit(self, fn: Callable[..., Any], args: tuple, key: str) -> Any:
        import uuid

        from distributed import as_completed

        # pure=False + a unique key: a pair is computed once per submission, never served from
        # another client's result of the same arguments
        fut = self._client.submit(fn, *args, key=f"{key}-{uuid.uuid4().hex[:8]}", pure=False)
        if self._completed is None:
            # one iterator over every submitted future (not a wait() per completion, which would
            # watch every pending future again each time); loop= as this client is not the default
            self._completed = as_completed([fut], loop=self._client.loop)
        else:
            self._completed.add(fut)
        return fut

    def _first_completed(self, futures: list) -> Iterable:
        return [next(self._completed)]

    def _cancel(self, futures: list) -> None:
        try:
            self._client.cancel(futures)
        except Exception:  # noqa: BLE001 - the client may already be gone; close() ends the cluster
            pass

    def close(self) -> None:
        client, cluster = getattr(self, "_client", None), self._cluster
        self._client = self._cluster = None
        if client is not None:
            if cluster is not None:
                # our own workers only: a worker whose heartbeat races the scheduler's shutdown
                # logs a harmless traceback at ERROR level
                try:
                    client.run(_silence_distributed_logs)
                except Exception:  # noqa: BLE001 - best effort; the workers are going anyway
                    pass
            client.close()
        if cluster is not None:
            cluster.close()


def _silence_distributed_logs() -> None:
    """Run on a LocalCluster's workers just before it shuts down."""
    logging.getLogger("distributed").setLevel(logging.CRITICAL)


def make_executor(executor: str = "local", workers: int | None = None, scheduler: str | None = None,
                  connect_timeout: float | None = None) -> Executor:
    """The executor named by ``--executor`` (``local`` or ``dask``) with ``--workers``/``--scheduler``.

    ``local``: in this process for one worker (the default), else a process pool; ``--scheduler``
    is refused there.  ``dask``: see :class:`DaskExecutor`.
    """
    if workers is not None and workers < 1:
        raise ValueError("--workers must be ≥ 1")
    if executor == "local":
        if scheduler is not None:
            raise ValueError("--scheduler needs --executor dask")
        return InlineExecutor() if (workers or 1) == 1 else ProcessExecutor(workers)
    if executor == "dask":
        return DaskExecutor(workers, scheduler, connect_timeout=connect_timeout)
    raise ValueError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
