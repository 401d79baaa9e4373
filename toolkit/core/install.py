"""How to install one of toolkit's optional extras, as a command that works wherever toolkit
came from. (``pip install 'toolkit[trt]'`` would fetch an unrelated package of that name from
the package index; the extra's own requirements are what it stands for.)"""

from __future__ import annotations

import importlib
import shlex
from typing import Any, List

from toolkit.core.errors import DependencyError


def extra_requirements(extra: str) -> List[str]:
    """The requirements toolkit's ``extra`` adds (from the installed package's metadata)."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution
    except ImportError:  # pragma: no cover - Python < 3.8
        return []
    try:
        requires = distribution("toolkit").requires or []
    except PackageNotFoundError:
        return []
    out = []
    for req in requires:
        spec, _, marker = req.partition(";")
        marker = marker.replace(" ", "").replace("'", '"')
        if f'extra=="{extra}"' in marker:
            out.append(spec.strip())
    return out


def extra_install_command(extra: str) -> str:
    """``pip install 'tensorrt>=10,<12' ...``: the extra's requirements, ready to paste."""
    reqs = extra_requirements(extra)
    if not reqs:
        return f"pip install the '{extra}' extra of toolkit from where toolkit was installed (e.g. pip install -e '.[{extra}]')"
    return "pip install " + " ".join(shlex.quote(r.replace(" ", "")) for r in reqs)


def import_extra(module: str, extra: str, missing: str) -> Any:
    """``module``, imported; when it is not installed, a :class:`DependencyError` (exit 4): the
    sentence ``missing`` and the extra's install command."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise DependencyError(f"{missing}; install it with: {extra_install_command(extra)}") from None
