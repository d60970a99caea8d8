"""Which collective engine a client uses: ``PJRTKIT_COLLECTIVES`` names one of those its
plugin offers, or (unset, ``auto``) the first offered one that can run here."""
from __future__ import annotations

import os
from collections.abc import Sequence

from pjrtkit.distributed.engines.base import CollectiveEngine, EngineUnavailable
from pjrtkit.distributed.engines.gloo import GlooEngine
from pjrtkit.distributed.engines.mpi import MpiEngine
from pjrtkit.distributed.engines.nccl import NcclEngine, RcclEngine
from pjrtkit.errors import InvalidArgument

ENGINE_VARIABLE = "PJRTKIT_COLLECTIVES"


def engine_classes() -> dict[str, type[CollectiveEngine]]:
    return {cls.name: cls for cls in (GlooEngine, MpiEngine, NcclEngine, RcclEngine)}


def choose_engine(offered: Sequence[str], platform: str) -> type[CollectiveEngine]:
    """The engine class for a client of ``platform`` whose plugin offers ``offered``
    (preferred first): ``PJRTKIT_COLLECTIVES`` names one, or, unset (or ``auto``), the first
    offered engine that can run here. FailedPrecondition (``EngineUnavailable``) naming what is
    missing and how to install it."""
    classes = engine_classes()
    wanted = os.environ.get(ENGINE_VARIABLE, "").strip().lower()
    if wanted and wanted != "auto":
        if wanted not in classes:
            raise InvalidArgument(f"{ENGINE_VARIABLE}={wanted!r}: known engines are "
                                  f"{', '.join(sorted(classes))} (or auto)")
        if wanted not in offered:
            raise EngineUnavailable(f"{ENGINE_VARIABLE}={wanted}: {platform} runs collectives "
                                    f"across processes on {', '.join(offered)} only")
        problem = classes[wanted].problem()
        if problem:
            raise EngineUnavailable(f"{platform} across processes: {ENGINE_VARIABLE}={wanted} "
                                    f"cannot run here: {problem}")
        return classes[wanted]
    problems = []
    for name in offered:
        cls = classes[name]
        if cls.chosen_automatically():
            return cls
        problems.append(f"{name}: {cls.problem() or 'not picked automatically here'}")
    raise EngineUnavailable(
        f"{platform} across processes needs a collective engine and none can run here ("
        + "; ".join(problems) + f"). Install one (e.g. pip install "
        f"'{classes[offered[0]].extra}') or set {ENGINE_VARIABLE}")
