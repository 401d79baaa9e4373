"""Feeds from user code: ``--data-loader-script SCRIPT[:FUNC]``.

The script is a Python file with a function (``load_data`` unless named) that returns or
yields feed dicts (``{input name: array}``), one per iteration, as Polygraphy's data loader
scripts do::

    import numpy as np

    def load_data():
        for _ in range(5):
            yield {"x": np.ones((1, 3, 224, 224), dtype=np.float32)}

The script runs in the process that needs the data, when the data is needed (never for
``--help``). Its exceptions become one :class:`~toolkit.core.errors.InputError` naming the
script and the line.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Dict, List, Optional, Tuple

import numpy as np

from toolkit.core.errors import InputError, UsageError

DEFAULT_FUNC = "load_data"


def split_script_spec(spec: str, func_name: Optional[str] = None) -> Tuple[str, str]:
    """``SCRIPT[:FUNC]`` (and ``--data-loader-func-name``) -> (script path, function name)."""
    path, func = _script_and_function(spec)
    if func and func_name and func != func_name:
        raise UsageError(f"--data-loader-script names function '{func}' and --data-loader-func-name '{func_name}'; give one")
    return path, func or func_name or DEFAULT_FUNC


def _script_and_function(spec: str) -> Tuple[str, Optional[str]]:
    """``SCRIPT:FUNC`` -> (SCRIPT, FUNC); a spec naming no function (``SCRIPT``, an existing file
    whose name holds ':', a Windows drive ``C:\\x.py``) -> (spec, None)."""
    head, sep, tail = spec.rpartition(":")
    if sep and head and _is_function_part(tail) and not os.path.exists(spec):
        return head, tail
    return spec, None


def _is_function_part(tail: str) -> bool:
    """Whether the text after a spec's last ':' can name a function (not empty, no path separator)."""
    return bool(tail) and "/" not in tail and "\\" not in tail


def _where(exc: BaseException, path: str) -> str:
    """``SCRIPT, line N`` for the deepest frame of ``exc`` inside the script."""
    target = os.path.realpath(path)
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.realpath(frame.filename) == target:
            line = frame.lineno
    if line is None and isinstance(exc, SyntaxError) and exc.lineno:
        line = exc.lineno
    return f"{path}, line {line}" if line else path


def _fail(exc: BaseException, path: str, doing: str) -> InputError:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return InputError(f"data loader script {_where(exc, path)}: {type(exc).__name__} while {doing}: {text}")


def _script_object(path: str, func: str):
    """What the script defines under ``func`` (InputError naming what it defines instead)."""
    import runpy

    try:
        namespace = runpy.run_path(path, run_name="__toolkit_data_loader__")
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - user code: any error is the script's
        raise _fail(exc, path, "loading the script") from None
    if func not in namespace:
        found = sorted(n for n, v in namespace.items() if callable(v) and not n.startswith("_"))
        raise InputError(
            f"data loader script {path} defines no '{func}'"
            + (f" (it defines: {', '.join(found)}); name one with {path}:NAME" if found else "")
        )
    return namespace[func]


def _feeds_from(source, path: str, func: str) -> List[Dict[str, object]]:
    """The feeds ``source`` gives (called, when it is a function): one dict per iteration."""
    feeds: List[Dict[str, object]] = []
    try:
        items = source() if callable(source) else source
        for k, item in enumerate(items):
            if not hasattr(item, "items"):
                raise InputError(
                    f"data loader script {path}: '{func}' gave a {type(item).__name__} for iteration {k}; "
                    "each iteration must be a dict of input name -> array"
                )
            feeds.append({str(name): np.asarray(value) for name, value in item.items()})
    except InputError:
        raise
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001
        raise _fail(exc, path, f"running '{func}'") from None
    return feeds


def load_script_feeds(spec: str, func_name: Optional[str] = None) -> List[Dict[str, object]]:
    """Run the data loader script and return its feeds (numpy arrays), one per iteration."""
    path, func = split_script_spec(spec, func_name)
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such data loader script (give SCRIPT[:FUNC], e.g. data_loader.py:load_data)")
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)  # the script may import modules beside it
    try:
        source = _script_object(path, func)
        feeds = _feeds_from(source, path, func)
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    if not feeds:
        raise InputError(f"data loader script {path}: '{func}' gave no feeds")
    return feeds
