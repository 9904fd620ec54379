"""Finding the deployment the way git finds a repository.

``$PTE_DEPLOYMENT`` (a deployment folder, or its ``pte-deployment.json``) when set; else the
nearest folder upward from the working directory that holds ``pte-deployment.json``, or a
``.pte`` folder that does (``pte init`` with no folder makes ``.pte``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pte._core import DeploymentError
from pte._deploy._deployment_document import DOCUMENT_NAME

__all__ = ["DEFAULT_FOLDER", "DEPLOYMENT_ENV", "find_deployment_folder"]

#: The variable naming the deployment folder.
DEPLOYMENT_ENV = "PTE_DEPLOYMENT"
#: The folder ``pte init`` makes when given none (found from anywhere below it).
DEFAULT_FOLDER = ".pte"


def find_deployment_folder(
    start: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Path | None:
    """The deployment folder in force, or None when there is none.

    ``$PTE_DEPLOYMENT`` names it (a missing folder is a `DeploymentError`, never a silent
    fall-back to another deployment); else the nearest one upward from `start` (the cwd).
    """
    env = os.environ if environ is None else environ
    named = env.get(DEPLOYMENT_ENV)
    if named:
        path = Path(os.path.expanduser(named))
        folder = path.parent if path.name == DOCUMENT_NAME else path
        if not (folder / DOCUMENT_NAME).is_file():
            raise DeploymentError(
                f"${DEPLOYMENT_ENV} is {named!r}, which holds no {DOCUMENT_NAME} "
                f"(make one with: pte init {named})"
            )
        return folder.resolve()
    here = Path(start if start is not None else os.getcwd()).resolve()
    # The filesystem root is a ceiling, never a deployment found by walking up: a stray
    # document there would put every command on the machine under it.
    for folder in [f for f in (here, *here.parents) if f != f.parent]:
        for candidate in (folder, folder / DEFAULT_FOLDER):
            if (candidate / DOCUMENT_NAME).is_file():
                return candidate
    return None
