"""Constant folding in a forked child, where a signal ends it.

onnx-graphsurgeon folds by running ONNX-Runtime on the constant part of the graph from the main
thread: a fold that computes for minutes (a Loop of many steps, once ``--max-nodes`` allows it)
holds every signal back until it returns. Run in a child (:class:`toolkit.core.process.supervise.Child`),
the fold's result (the folded model and what each pass did) comes back through a pipe, and a
signal to this process kills the child at once.

The child is started before the validation's background session exists (a fork copies only the
forking thread: a lock a live thread held would stay locked in the child). A model over
:data:`IN_PROCESS_BYTES` is folded in this process (its result could not come back through one
protobuf message); so is every fold where fork does not exist or off the main thread.

No Typer or Rich here.
"""

from __future__ import annotations

from typing import Callable, List, Optional

from toolkit.core.contain import carried
from toolkit.core.errors import ToolkitError
from toolkit.core.process.interrupt import can_isolate
from toolkit.core.process.supervise import Child, ChildOutcome, exit_status

IN_PROCESS_BYTES = 1 << 30  # a model bigger than this is folded in this process


class LogRelay:
    """The log a fold writes to: the caller's log here; in the fold's child, a list whose lines
    come back with the result and go to the caller's log then, in their order."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.kept: Optional[List[str]] = None

    def __call__(self, line: str) -> None:
        if self.kept is None:
            self.log(line)
        else:
            self.kept.append(line)


class FoldInChild:
    """``build(level, excluded)`` (a folded model; it fills ``report`` and writes to ``relay``)
    computed in a forked child: :meth:`start` starts one, :meth:`finish` takes its result, calling
    the object does both."""

    def __init__(self, build: Callable, report, model, relay: LogRelay) -> None:
        self.build, self.report, self.relay = build, report, relay
        self.isolated = can_isolate() and model.ByteSize() <= IN_PROCESS_BYTES

    def __call__(self, level: Optional[str], excluded: set, **kwargs):
        return self.finish(self.start(level, excluded, **kwargs))

    def start(self, level: Optional[str], excluded: set, **kwargs):
        """The fold started (a Child), or the folded model itself where no child is used."""
        if level is None or not self.isolated:  # (nothing folded: nothing that could hang)
            got = carried(self.build, level, excluded, catching=SystemExit, **kwargs)
            if isinstance(got.error, SystemExit):  # (as in a child: never the command's own exit)
                raise ToolkitError(_no_result(ChildOutcome(exit_code=exit_status(got.error))))
            return _Done(got.value)
        return Child(_fold, (self.build, self.report, self.relay, level, excluded, kwargs))

    def finish(self, started):
        """The folded model of a started fold (its report copied into ``self.report``)."""
        if isinstance(started, _Done):
            return started.model
        got = started.wait()
        if got.crashed:
            raise ToolkitError(_no_result(got))
        model, passes, converged, lines = got.value
        self.report.passes, self.report.converged = passes, converged
        for line in lines:
            self.relay.log(line)
        return model

    @staticmethod
    def kill(started) -> None:
        if isinstance(started, Child):
            started.kill()


def _no_result(got) -> str:
    """The error of a fold whose child ended without a result (``got``: its ChildOutcome)."""
    if got.signal is not None:
        return (f"constant folding ended without a result ({got.signal_name}): out of memory? "
                "--max-tensor-size and --max-nodes bound what it computes")
    return (f"constant folding ended without a result: something it ran (a custom op, a library) called exit() "
            f"(code {got.exit_code}); nothing was written (without --fold-constants the model is not folded)")


class _Done:
    def __init__(self, model) -> None:
        self.model = model


def _fold(_phase, build: Callable, report, relay: LogRelay, level: str, excluded: set,
          kwargs: dict):  # pragma: no cover - in the child
    relay.kept = []
    model = build(level, excluded, **kwargs)
    return model, report.passes, report.converged, relay.kept
