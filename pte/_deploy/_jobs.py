"""Signed jobs: what ``pte submit`` queues is signed with the deployment key; workers check it.

A job is stored in the run store (``pte_runs.job``), which any writer of the database can
change; the broker carries only its run id. So a job counts only as a *signed* document:

- ``pte submit`` redacts the job with the deployment's redactor (a secret in a plan or a
  request is stored as the run's records would show it, never in clear), adds the run id,
  the allow-list it was narrowed to and the *deployment fingerprint* (`job_fingerprint`: the
  catalogue of its tools, their policy and the procedures it may call), and signs the
  canonical JSON of all of it with the deployment key (Ed25519, `pte._core`);
- a worker acts on a job only when that signature verifies under the deployment's public key
  and names this very run (`job_refusal`); otherwise the run ends
  ``failed_closed(job_signature_invalid)`` on the record and no tool runs. A job signed for
  another catalogue, policy or set of procedures ends ``failed_closed(deployment_mismatch)``.

A job copied to another run, or edited in the table, no longer verifies: the signature covers
the run id and exactly what is stored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pte._catalogue import Registry
from pte._core import KeyFileError, PTEError, PublicKey, Redactor, SigningKey, TrustedKeys, canonical_json

__all__ = [
    "JOB_FORMAT",
    "deployment_job_key",
    "deployment_public_key",
    "deployment_signing_key",
    "job_fingerprint",
    "job_policy",
    "job_refusal",
    "redact_job",
    "sign_job",
]

#: The signed job format; a job without it (or with another) is not a signed job.
JOB_FORMAT = 1
_DOMAIN = b"pte-job-v1\n"
_SIGNATURE = "signature"


def job_policy(registry: Registry, policy_document: Any) -> Any:
    """The policy a job runs under: its tools' own declarations, with the deployment's document."""
    from pte._policy import Policy

    policy = Policy.from_registry(registry)
    if policy_document is not None:
        policy = policy.with_document(policy_document, source="<deployment policy>", ignore_unknown=True)
    return policy


def job_fingerprint(registry: Registry, policy_document: Any) -> str:
    """SHA-256 of what a job's run depends on here: every tool it may call (description,
    schemas, code hash: `catalogue_fingerprint`), their policy, and the procedures (by version).

    The submitter computes it over its allow-list, the worker over the same allow-list of what
    it serves: they agree only when both have the same deployment."""
    from pte._core import sha256_hex
    from pte._policy import catalogue_fingerprint

    catalogue = catalogue_fingerprint(registry, registry.names, job_policy(registry, policy_document))
    procedures = sorted(
        (name, str(getattr(proc, "version", ""))) for name, proc in registry.procedures.items()
    )
    return sha256_hex(canonical_json({"catalogue": catalogue, "procedures": procedures}))


def redact_job(job: Mapping[str, Any], redactor: Redactor | None) -> tuple[dict[str, Any], bool]:
    """`job` as its run's records would show it (secrets replaced), and whether anything was.

    The policy document is structure (its keys name tools and parameters), as in ``run_started``.
    """
    if redactor is None:
        return dict(job), False
    out = {key: redactor.redact_structure(value) if key == "policy" else redactor.redact(value)
           for key, value in job.items()}  # fmt: skip
    return out, canonical_json(out) != canonical_json(dict(job))


def _message(job: Mapping[str, Any]) -> bytes:
    return _DOMAIN + canonical_json({k: v for k, v in job.items() if k != _SIGNATURE}).encode("utf-8")


def sign_job(job: Mapping[str, Any], run_id: str, key: SigningKey) -> dict[str, Any]:
    """`job` for run `run_id`, signed with the deployment key `key` (the stored form)."""
    signed = {**{k: v for k, v in job.items() if k != _SIGNATURE}, "pte_job": JOB_FORMAT, "run_id": run_id}
    public = key.public_key
    signed[_SIGNATURE] = {
        "key_id": public.key_id,
        "signature": key.sign(_message(signed)).hex(),
    }
    return signed


def job_refusal(job: Mapping[str, Any] | None, run_id: str, key: PublicKey) -> str | None:
    """Why `job` does not count as run `run_id`'s job under the deployment key `key`; None: it does."""
    if not job:
        return f"run {run_id} has no submitted job"
    signature = job.get(_SIGNATURE)
    if job.get("pte_job") != JOB_FORMAT or not isinstance(signature, Mapping):
        return f"run {run_id}'s job is not signed (pte submit signs every job with the deployment key)"
    if job.get("run_id") != run_id:
        return f"run {run_id}'s job was signed for run {job.get('run_id')!r}, not this one"
    if signature.get("key_id") != key.key_id:
        return (
            f"run {run_id}'s job is signed by key {str(signature.get('key_id'))[:16]}…, not by this "
            f"deployment's key {key.key_id[:16]}…"
        )
    try:
        raw = bytes.fromhex(str(signature.get("signature")))
    except ValueError:
        raw = b""
    try:
        valid = key.verify(raw, _message(job))
    except Exception:  # a malformed signature is a signature that does not verify
        valid = False
    if not valid:
        return f"run {run_id}'s job does not verify under the deployment key: it was changed after pte submit"
    return None


def deployment_signing_key(environ: Mapping[str, str] | None = None) -> SigningKey | None:
    """The deployment key that signs jobs (``$PTE_DEPLOYMENT_KEY_FILE``, `pte init`), or None."""
    from pte._audit import DEPLOYMENT_KEY_ENV

    env = os.environ if environ is None else environ
    path = env.get(DEPLOYMENT_KEY_ENV)
    if not path:
        return None
    try:
        return SigningKey.load(path)
    except KeyFileError as exc:
        raise PTEError(f"deployment key: {exc}") from None


def deployment_job_key(environ: Mapping[str, str] | None = None) -> PublicKey | None:
    """The public key jobs must be signed with: the deployment key's (``$PTE_DEPLOYMENT_KEY_FILE``,
    else ``$PTE_DEPLOYMENT_PUBLIC_KEY_FILE``), or None when the deployment has no key."""
    from pte._audit import DEPLOYMENT_PUBLIC_KEY_ENV

    env = os.environ if environ is None else environ
    private = deployment_signing_key(env)
    if private is not None:
        return private.public_key
    path = env.get(DEPLOYMENT_PUBLIC_KEY_ENV)
    if not path:
        return None
    try:
        keys = TrustedKeys.load(path)
    except KeyFileError as exc:
        raise PTEError(f"deployment public key: {exc}") from None
    if len(keys) != 1:
        raise PTEError(f"deployment public key file {path!r} must hold exactly one key, not {len(keys)}")
    return next(iter(keys.values()))


def deployment_public_key(deployment: Any) -> PublicKey | None:
    """The public key of `deployment` (`pte.Deployment`): its key's, else its ``.pub`` file's;
    None when the folder holds neither."""
    try:
        if deployment.has_key:
            return SigningKey.load(deployment.key_path).public_key
        if deployment.public_key_path.is_file():
            keys = TrustedKeys.load(deployment.public_key_path)
            if len(keys) == 1:
                return next(iter(keys.values()))
    except KeyFileError as exc:
        raise PTEError(f"the deployment key in {deployment.folder}: {exc}") from None
    return None
