"""Making a deployment folder (``pte init``): its document and its key pair.

The key is created readable by its owner only (0600) and never replaced: the anchors it
signed need it. A folder that already holds a document is refused, so ``pte init`` run twice
cannot silently change what running deployments are.
"""

from __future__ import annotations

import os
from pathlib import Path

from pte._core import DeploymentError, SigningKey
from pte._deploy._deployment import Deployment
from pte._deploy._deployment_document import DOCUMENT_NAME, KEY_NAME, PUBLIC_KEY_NAME, DeploymentDocument

__all__ = ["init_deployment"]


def init_deployment(folder: str | os.PathLike[str], document: DeploymentDocument) -> tuple[Deployment, bool]:
    """Write `document` and a new key pair into `folder` (made if missing); the deployment and
    whether the key is new (an existing key pair of an earlier ``pte init`` is kept)."""
    where = Path(folder)
    target = where / DOCUMENT_NAME
    if target.exists():
        raise DeploymentError(
            f"{target} exists; refusing to replace a deployment (edit it, or pte init another folder)"
        )
    private, public = where / KEY_NAME, where / PUBLIC_KEY_NAME
    if private.exists() != public.exists():
        raise DeploymentError(
            f"{where} holds one half of a key pair ({KEY_NAME}, {PUBLIC_KEY_NAME}); "
            "remove it or restore the other"
        )
    new_key = not private.exists()
    try:
        where.mkdir(parents=True, exist_ok=True)
        if new_key:
            key = SigningKey.generate()
            fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(key.to_pem())
            public.write_bytes(key.public_key.to_pem())
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as text:
            text.write(document.to_json())
    except OSError as exc:
        raise DeploymentError(
            f"cannot write the deployment in {str(where)!r}: {exc.strerror or exc}"
        ) from None
    return Deployment.from_folder(where), new_key
