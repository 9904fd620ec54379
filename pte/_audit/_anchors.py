"""Deployment anchors: signed checkpoints of every run's progress, kept outside its log or store.

A hash chain proves order, not origin: whoever can write a log (or a store's tables) can cut
it, or edit a record and re-hash everything after it, and the result verifies. With a
*deployment key* (an Ed25519 private key only the executing machines hold, `pte init`),
every run signs where it has got to, in a file the deployment keeps apart from its logs
and stores (the *anchors file*):

- before each ``write`` tool is called (the write-ahead point: its ``step_started`` is
  durable and anchored, so the write's consumption is signed before it happens),
- when the run pauses for approval, and at its seal (``run_finished``).

An anchor names the run, the ``seq`` of its last record and that record's hash, and is
signed by the deployment key; each anchor line also carries the SHA-256 of the line before
it, so the anchors file is itself a chain and a line deleted from its middle is detected.

What that gives (`check` on resume and verify, `sign` while a run executes):

- a log or store run that **falls short** of its last anchor (truncated) is refused;
- a run whose anchored records were **edited and re-hashed** is refused (the record at an
  anchor's seq no longer has the anchor's hash);
- records after the last anchor (the *unsigned tail* of a crash) are not trusted: resume
  re-runs the recorded reads of the tail and refuses when one differs (`unsigned_after`);
- a run id **executes its writes once**: a writer may only add anchors to a run whose
  existing anchors it verified (a resume) or that has none (a fresh run). Re-running a
  finished or crashed run from a copied, cut or fresh log is refused before the write, and
  of two processes resuming one run at once only the first anchors (the file is locked).

Without a deployment key nothing is anchored: the chain still shows edits in the middle of
a log, but not a cut at its end nor a consistent rewrite (docs/threat-model.md).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pte._core import (
    AnchorError,
    FileRefused,
    KeyFileError,
    PublicKey,
    SigningKey,
    canonical_json,
    check_file,
)

__all__ = [
    "ANCHORS_FILE_ENV",
    "DEPLOYMENT_KEY_ENV",
    "DEPLOYMENT_PUBLIC_KEY_ENV",
    "Anchors",
    "anchors_from_env",
    "run_problem",
]

#: The deployment's private key (executing machines), its public key (verifiers), the file.
DEPLOYMENT_KEY_ENV = "PTE_DEPLOYMENT_KEY_FILE"
DEPLOYMENT_PUBLIC_KEY_ENV = "PTE_DEPLOYMENT_PUBLIC_KEY_FILE"
ANCHORS_FILE_ENV = "PTE_ANCHORS_FILE"

_DOMAIN = b"pte-anchor-v1\n"
_GENESIS = "0" * 64
_KEYS = frozenset({"pte_anchor", "run_id", "seq", "head", "time", "prev", "key_id", "signature"})


@dataclass(frozen=True)
class Anchor:
    """The run `run_id` had reached the record `seq`, whose hash is `head`, at `time`."""

    run_id: str
    seq: int
    head: str
    time: str
    prev: str
    key_id: str
    signature: str

    def message(self) -> bytes:
        signed = {
            "pte_anchor": "1",
            "run_id": self.run_id,
            "seq": self.seq,
            "head": self.head,
            "time": self.time,
            "prev": self.prev,
            "key_id": self.key_id,
        }
        return _DOMAIN + canonical_json(signed).encode("utf-8")

    def to_line(self) -> bytes:
        doc = {**json.loads(self.message()[len(_DOMAIN) :]), "signature": self.signature}
        return canonical_json(doc).encode("utf-8") + b"\n"


class Anchors:
    """The deployment's anchors file: `sign` with the private key, `check` with the public one.

    `key`: the deployment's signing key (executing machines); `public`: its public key (enough
    to check). A malformed line, a broken chain or a bad signature makes every read fail
    (`AnchorError`), so a damaged anchors file stops runs rather than vouching for them.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, key: SigningKey | None = None, public: PublicKey | None = None
    ) -> None:
        if key is None and public is None:
            raise ValueError("Anchors needs the deployment's signing key or its public key")
        self.path = Path(path)
        self.key = key
        self.public = key.public_key if key is not None else public
        self._lock = threading.Lock()
        # (file identity, bytes checked, chain head, last line, lines, anchors): `_read` checks
        # only what was appended since, so a long-lived anchors file costs little per write.
        self._cache: tuple[tuple[int, int], int, str, bytes, int, list[Anchor]] | None = None

    # -- reading ----------------------------------------------------------------------------------

    def _parse(self, data: bytes, prev: str = _GENESIS, first_line: int = 1) -> tuple[list[Anchor], str]:
        """Anchors in `data` (whole lines) continuing the chain at `prev`; and the new chain head."""
        assert self.public is not None
        out: list[Anchor] = []
        for number, raw in enumerate(data.split(b"\n"), start=first_line):
            if not raw.strip():
                continue
            where = f"anchors file {str(self.path)!r} line {number}"
            try:
                doc = json.loads(raw)
            except ValueError:
                raise AnchorError(f"{where} is not JSON") from None
            if not isinstance(doc, dict) or set(doc) != _KEYS or doc.get("pte_anchor") != "1":
                raise AnchorError(f"{where} is not an anchor")
            seq = doc["seq"]
            if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
                raise AnchorError(f"{where}: seq must be a non-negative integer")
            if not all(isinstance(doc[k], str) for k in _KEYS - {"seq"}):
                raise AnchorError(f"{where}: malformed member")
            anchor = Anchor(
                doc["run_id"], seq, doc["head"], doc["time"], doc["prev"], doc["key_id"], doc["signature"]
            )
            if anchor.prev != prev:
                raise AnchorError(f"{where}: the chain is broken (a line before it was removed or edited)")
            if anchor.key_id != self.public.key_id:
                raise AnchorError(f"{where}: signed by key {anchor.key_id[:16]}…, not the deployment's key")
            try:
                valid = self.public.verify(bytes.fromhex(anchor.signature), anchor.message())
            except ValueError:
                valid = False
            if not valid or raw + b"\n" != anchor.to_line():
                raise AnchorError(f"{where}: the signature does not verify (forged or edited)")
            out.append(anchor)
            prev = hashlib.sha256(raw + b"\n").hexdigest()
        return out, prev

    def _read(self, fh: Any) -> list[Anchor]:
        """Every anchor, checked. Lines already checked by this object are not checked again:
        only what was appended since (the file's identity, size and last line still match)."""
        stat = os.fstat(fh.fileno())
        cached = self._cache
        if cached is not None:
            ident, size, prev, last, lines, anchors = cached
            fh.seek(size - len(last))
            if ident == (stat.st_dev, stat.st_ino) and stat.st_size >= size and fh.read(len(last)) == last:
                tail = fh.read()
                cut = tail.rfind(b"\n") + 1  # whole lines only
                more, prev = self._parse(tail[:cut], prev, lines + 1)
                if more:
                    anchors = anchors + more
                    last = tail[:cut].rstrip(b"\n").rsplit(b"\n", 1)[-1] + b"\n"
                    lines += tail[:cut].count(b"\n")
                    self._cache = (ident, size + cut, prev, last, lines, anchors)
                return anchors
        fh.seek(0)
        data = fh.read()
        cut = data.rfind(b"\n") + 1
        anchors, prev = self._parse(data[:cut])
        last = data[:cut].rstrip(b"\n").rsplit(b"\n", 1)[-1] + b"\n" if cut else b""
        self._cache = ((stat.st_dev, stat.st_ino), cut, prev, last, data[:cut].count(b"\n"), anchors)
        return anchors

    def all(self) -> list[Anchor]:
        """Every anchor, checked (chain and signatures), oldest first; none when the file is missing."""
        self._check_path()
        try:
            with open(self.path, "rb") as fh:
                fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
                try:
                    return self._read(fh)
                finally:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise AnchorError(f"cannot read anchors file {str(self.path)!r}: {exc}") from None

    def _check_path(self) -> None:
        # $PTE_ANCHORS_FILE may name a FIFO (open blocks) or /dev/zero (read never ends).
        try:
            check_file(self.path, "anchors file", missing_ok=True)
        except FileRefused as exc:
            raise AnchorError(str(exc)) from None

    def for_run(self, run_id: str) -> list[Anchor]:
        """The anchors of one run, oldest first."""
        return [a for a in self.all() if a.run_id == run_id]

    def check(self, run_id: str, records: Iterable[Mapping[str, Any]]) -> tuple[int, int | None]:
        """Check a run's records (as stored, with their ``seq`` and ``hash``) against its anchors.

        Returns (how many anchors the run has, the seq of its last anchor or None). Raises
        `AnchorError` when the records fall short of an anchor (truncated) or the record at an
        anchor's seq has another hash (edited and re-hashed, or another run's records).
        """
        anchors = self.for_run(run_id)
        by_seq = {r.get("seq"): r for r in records if r.get("run_id") == run_id}
        last = max((r for r in by_seq if isinstance(r, int)), default=-1)
        for anchor in anchors:
            record = by_seq.get(anchor.seq)
            if record is None:
                raise AnchorError(
                    f"run {run_id} falls short of its signed anchor: the deployment anchored record "
                    f"{anchor.seq} at {anchor.time}, the run's records end at {last} (truncated)"
                )
            if record.get("hash") != anchor.head:
                raise AnchorError(
                    f"run {run_id}'s record {anchor.seq} is not the one the deployment signed at "
                    f"{anchor.time} (edited and re-hashed, or another log's)"
                )
        return len(anchors), (anchors[-1].seq if anchors else None)

    # -- signing ------------------------------------------------------------------------------------

    def sign(self, run_id: str, seq: int, head: str, *, expected: int) -> int:
        """Append an anchor of `run_id` at record `seq` (hash `head`); returns the run's anchor count.

        `expected`: how many anchors this run already has as far as the writer knows (the ones
        `check` verified when it resumed the run, plus the ones it signed since). Any other
        count means another process ran or is running this run: `AnchorError`, and the caller
        stops before its write. An anchor of the same seq and head again is a no-op.
        """
        if self.key is None:
            raise AnchorError("no deployment signing key: cannot anchor")
        self._check_path()
        with self._lock:
            try:
                with open(self.path, "a+b") as fh:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
                    try:
                        anchors = self._read(fh)
                        mine = [a for a in anchors if a.run_id == run_id]
                        if mine and mine[-1].seq == seq and mine[-1].head == head and len(mine) == expected:
                            return expected
                        if len(mine) != expected:
                            raise AnchorError(
                                f"run {run_id} has {len(mine)} signed anchor(s) where this writer expected "
                                f"{expected}: the run already ran (or runs now) elsewhere, from another "
                                "copy of its log; a run id executes its writes once"
                            )
                        assert self._cache is not None
                        prev = self._cache[2]
                        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                        unsigned = Anchor(run_id, seq, head, stamp, prev, self.key.public_key.key_id, "")
                        signature = self.key.sign(unsigned.message()).hex()
                        anchor = Anchor(run_id, seq, head, stamp, prev, unsigned.key_id, signature)
                        fh.seek(0, os.SEEK_END)
                        fh.write(anchor.to_line())
                        fh.flush()
                        os.fsync(fh.fileno())
                        return expected + 1
                    finally:
                        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            except OSError as exc:
                raise AnchorError(f"cannot write anchors file {str(self.path)!r}: {exc}") from None


def run_problem(anchors: Anchors, run_id: str, records: Sequence[Mapping[str, Any]]) -> str | None:
    """Why run `run_id`'s records (as stored) are not what the deployment anchored; None: they are.

    Besides `Anchors.check`: a sealed run that the deployment never anchored is not one it ran
    with its key (a run rewritten or made up by a writer of the log or store)."""
    try:
        count, _ = anchors.check(run_id, records)
    except AnchorError as exc:
        return str(exc)
    sealed = any(r.get("type") == "run_finished" for r in records if r.get("run_id") == run_id)
    if sealed and count == 0:
        return (
            f"run {run_id} is sealed but the deployment never anchored it "
            "(made up, or rewritten, without the deployment key)"
        )
    return None


def anchors_from_env(environ: Mapping[str, str] | None = None, *, signing: bool = True) -> Anchors | None:
    """The deployment's anchors from the environment, or None when no deployment key is set.

    ``$PTE_DEPLOYMENT_KEY_FILE`` (the private key; `signing`) or, for a verifier,
    ``$PTE_DEPLOYMENT_PUBLIC_KEY_FILE``; the file is ``$PTE_ANCHORS_FILE``, by default the
    key's path with ``.anchors.jsonl`` appended. `AnchorError` when a key cannot be loaded.
    """
    env = os.environ if environ is None else environ
    private = env.get(DEPLOYMENT_KEY_ENV) if signing else None
    public = env.get(DEPLOYMENT_PUBLIC_KEY_ENV)
    source = private or public
    if not source:
        return None
    path = env.get(ANCHORS_FILE_ENV) or (source.removesuffix(".pub") + ".anchors.jsonl")
    try:
        check_file(path, "anchors file", missing_ok=True)  # before any run starts: a usage error
    except FileRefused as exc:
        raise AnchorError(str(exc)) from None
    try:
        if private:
            return Anchors(path, key=SigningKey.load(private))
        from pte._core import TrustedKeys

        (key,) = TrustedKeys.load(source).values()
        return Anchors(path, public=key)
    except (KeyFileError, ValueError) as exc:
        raise AnchorError(f"deployment key: {exc}") from None
