"""One client's part in a multi-process job: its placement, the key-value store, the processes'
states as jaxlib reports them, the collective engine, and what a failed collective says."""
from __future__ import annotations

import atexit
import itertools
import json
import threading
import weakref
from collections.abc import Callable

from pjrtkit.distributed import liveness
from pjrtkit.distributed.engines.base import CollectiveEngine
from pjrtkit.distributed.engines.choice import choose_engine
from pjrtkit.distributed.placement import Placement, rendezvous_timeout_s
from pjrtkit.distributed.store import KeyValueStore, PrefixedStore
from pjrtkit.distributed.topology import exchange_topology
from pjrtkit.errors import ErrorCode, FailedPrecondition, PjrtError
from pjrtkit.fp_state import clean_thread
from pjrtkit.types import MultiProcessSupport, Topology


# PJRT_ProcessState values (PJRT_Client_UpdateGlobalProcessInfo).
PROCESS_STATES = {0: "unspecified", 1: "uninitialized", 2: "disconnected", 3: "connected",
                  4: "error"}
LOST_STATES = frozenset({"disconnected", "error"})
# The longest an exiting process waits for the engine's import thread (ProcessRuntime).
PREPARE_JOIN_AT_EXIT_S = 60.0

# The live runtimes of this process (``live_runtimes``: tools and tests read their store
# traffic).
_live: "weakref.WeakSet[ProcessRuntime]" = weakref.WeakSet()

def _fresh_prefix(store: KeyValueStore, node: int) -> str:
    """``pjrtkit/<g>/``, ``g`` the first generation under which this process has not yet
    announced itself: a client made again in the same job (jax.clear_backends) needs new keys
    (the store does not overwrite), and every process of the job counts the same way."""
    for generation in itertools.count():
        prefix = f"pjrtkit/{generation}/"
        if store.try_get(f"{prefix}process/{node}") is None:
            return prefix


class ProcessRuntime:
    """Made by the client when ``num_nodes > 1``; ``join`` exchanges topologies."""

    def __init__(self, platform: str, placement: Placement, store: KeyValueStore | None,
                 support: MultiProcessSupport | None,
                 process_state: Callable[[int], tuple[int, int] | None] | None = None):
        if support is None:
            raise FailedPrecondition(
                f"{platform} runs in one process only: its plugin does not declare multi-process "
                f"support (pjrtkit_multi_process), so it cannot be used with jax.distributed "
                f"({placement.num_nodes} processes)")
        if store is None:
            raise FailedPrecondition(
                f"{platform}: a job of {placement.num_nodes} processes needs the PJRT host's "
                f"key-value store, and PJRT_Client_Create was given none")
        self.platform = platform
        self.placement = placement
        self.support = support
        self.root_store = store
        self.store = PrefixedStore(store, _fresh_prefix(store, placement.node_id))
        self.rendezvous_timeout_s = rendezvous_timeout_s()
        self.engine_class = choose_engine(support.engines, platform)
        self._engine: CollectiveEngine | None = None
        self._engine_lock = threading.Lock()
        self._prepared = threading.Thread(target=clean_thread(self._prepare), daemon=True,
                                          name=f"pjrtkit-{platform}-engine-import")
        self._prepare_error: BaseException | None = None
        _live.add(self)
        # (PJRT_ProcessState, error code) of a process as jaxlib last reported it
        # (PJRT_Client_UpdateGlobalProcessInfo, kept by the C layer), or None.
        self.process_state = process_state or (lambda task: None)
        self._identities: dict[int, dict] = {}

    def join(self, local: Topology) -> Topology:
        """The job's topology (every process's devices), and this process made known for
        naming it after a failure."""
        self.store.put(f"process/{self.placement.node_id}",
                       json.dumps(liveness.identity()).encode())
        return exchange_topology(local, self.placement, self.store,
                                 global_topology=self.support.global_topology,
                                 timeout_s=self.rendezvous_timeout_s, platform=self.platform)

    def prepare_engine(self) -> None:
        """Import the engine's package on a thread (torch takes seconds): called when a
        program spanning processes is loaded, so its first collective does not import it
        inside a launch, and programs that never cross processes never pay it."""
        with self._engine_lock:
            if self._prepared.ident is None:
                self._start_preparing()

    def _start_preparing(self) -> None:
        """Start the import thread (engine lock held), and have the interpreter's exit wait
        for it: a daemon thread still inside the import when Python finalizes is stopped by
        pthread_exit, whose unwinding through the engine's C++ frames aborted the process
        (std::terminate, "FATAL: exception not rethrown") after its tests had passed."""
        self._prepared.start()
        atexit.register(self._prepared.join, PREPARE_JOIN_AT_EXIT_S)

    def _prepare(self) -> None:
        try:
            self.engine_class.prepare()
        except BaseException as exc:  # noqa: BLE001 - raised by the first collective
            self._prepare_error = exc

    def engine(self) -> CollectiveEngine:
        with self._engine_lock:
            if self._engine is None:
                if self._prepared.ident is None:
                    self._start_preparing()
                self._prepared.join()
                if self._prepare_error is not None:
                    raise self._prepare_error
                self._engine = self.engine_class(self)
            return self._engine

    def _identity(self, node: int) -> dict | None:
        if node not in self._identities:
            blob = self.store.try_get(f"process/{node}")
            if blob is None:
                return None
            self._identities[node] = json.loads(blob)
        return self._identities[node]

    def lost_processes(self, processes) -> dict[int, str]:
        """Which of ``processes`` are gone, with how we know: a process on this host whose
        pid is no longer running, or one the coordination service reports disconnected."""
        lost = {}
        here = liveness.identity()
        for node in processes:
            if node == self.placement.node_id:
                continue
            state = self.process_state(node)
            name = PROCESS_STATES.get(state[0]) if state else None
            if name in LOST_STATES:
                lost[node] = f"the coordination service reports it {name}"
                continue
            identity = self._identity(node)
            if identity and liveness.same_host(identity, here) and not liveness.running(identity):
                lost[node] = f"its process (pid {identity['pid']}) has ended"
        return lost

    def collective_error(self, exc: Exception, program: str, processes) -> PjrtError:
        """What a failed collective across ``processes`` becomes."""
        if isinstance(exc, PjrtError) and exc.code != ErrorCode.UNKNOWN:
            return exc
        lost = self.lost_processes(processes)
        where = (f"{self.platform}: a collective of {program} across processes "
                 f"{list(processes)} failed on {self.engine_class.name} in process "
                 f"{self.placement.node_id}")
        if lost:
            names = "; ".join(f"process {node}: {how}" for node, how in sorted(lost.items()))
            return PjrtError(f"{where}: lost {names} ({type(exc).__name__}: {exc})",
                             code=ErrorCode.UNAVAILABLE)
        return PjrtError(f"{where}: {type(exc).__name__}: {exc}", code=ErrorCode.INTERNAL)

    def close(self) -> None:
        with self._engine_lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()





def live_runtimes() -> list[ProcessRuntime]:
    """The multi-process runtimes of this process's live clients (one per platform in a job)."""
    return list(_live)
