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

import hashlib
import json
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pte._audit._anchor_lines import AnchorFile, anchor_place
from pte._audit._anchor_seen import SeenChain
from pte._core import AnchorError, KeyFileError, PublicKey, SigningKey, canonical_json

__all__ = [
    "ANCHORS_FILE_ENV",
    "ANCHORS_IN_STORE",
    "ANCHORS_SEEN_ENV",
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
#: This machine's high-water file of the shared chain (`pte._audit._anchor_seen`).
ANCHORS_SEEN_ENV = "PTE_ANCHORS_SEEN_FILE"
#: The value of ``$PTE_ANCHORS_FILE`` that keeps the chain in the run store.
ANCHORS_IN_STORE = "store"

_DOMAIN = b"pte-anchor-v1\n"
_GENESIS = "0" * 64
_KEYS = frozenset({"pte_anchor", "run_id", "seq", "head", "time", "prev", "key_id", "signature"})
#: How often `Anchors.sign` re-reads and retries when another machine appended first.
_APPEND_ATTEMPTS = 100


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
    """The deployment's anchor chain: `sign` with the private key, `check` with the public one.

    `chain`: where the chain is kept: a file path (`pte._audit._anchor_lines.AnchorFile`), or a
    run store that keeps anchors (SQLite, PostgreSQL: every machine of the deployment shares
    it). `key`: the deployment's signing key (executing machines); `public`: its public key
    (enough to check). `high_water`: this machine's file of how far it has seen the chain
    (`pte._audit._anchor_seen`): a chain rolled back or replaced since is refused. A malformed
    line, a broken chain or a bad signature makes every read fail (`AnchorError`), so a
    damaged chain stops runs rather than vouching for them.
    """

    def __init__(
        self,
        chain: Any,
        *,
        key: SigningKey | None = None,
        public: PublicKey | None = None,
        high_water: str | os.PathLike[str] | None = None,
    ) -> None:
        if key is None and public is None:
            raise ValueError("Anchors needs the deployment's signing key or its public key")
        self.place = anchor_place(chain)
        #: The anchors file (None: the chain is kept in a run store).
        self.path: Path | None = self.place.path if isinstance(self.place, AnchorFile) else None
        self.key = key
        self.public: PublicKey = key.public_key if key is not None else public  # type: ignore[assignment]
        self.seen = SeenChain(high_water, self.public.key_id) if high_water is not None else None
        self._lock = threading.Lock()
        # (lines, chain head, last line, anchors, chain hash after each line): `_read` checks
        # only what was appended since, so a long-lived chain costs little per write.
        self._cache: tuple[int, str, bytes, list[Anchor], list[str]] | None = None

    # -- reading ----------------------------------------------------------------------------------

    def _parse(self, lines: Sequence[bytes], prev: str, first_line: int) -> tuple[list[Anchor], list[str]]:
        """Anchors in `lines` continuing the chain at `prev`; and the chain hash after each."""
        out: list[Anchor] = []
        heads: list[str] = []
        for number, raw in enumerate(lines, start=first_line):
            where = f"{self.place.describe()} line {number}"
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
            heads.append(prev)
        return out, heads

    def _read(self) -> tuple[list[Anchor], int, str]:
        """(every anchor, checked; how many lines; the chain head). Lines this object checked
        before are not checked again: only what was appended since (the last line it read is
        still there). Checked against this machine's high-water mark, which then advances."""
        cached = self._cache
        anchors: list[Anchor] | None = None
        if cached is not None:
            count, head, last, anchors, heads = cached
            new = self.place.anchor_lines(count - 1)
            if new and new[0] == last:
                if len(new) > 1:
                    more, more_heads = self._parse(new[1:], head, count + 1)
                    anchors, heads = anchors + more, heads + more_heads
                    count, head, last = count + len(more), heads[-1], new[-1]
                    self._cache = (count, head, last, anchors, heads)
            else:
                anchors = None  # rolled back or replaced under this object: read it all again
        if anchors is None:
            lines = self.place.anchor_lines(0)
            anchors, heads = self._parse(lines, _GENESIS, 1)
            count, head = len(lines), (heads[-1] if heads else _GENESIS)
            self._cache = (count, head, lines[-1], anchors, heads) if lines else None
        if self.seen is not None:
            self.seen.check(count, heads, self.place.describe())
            self.seen.advance(count, head)
        return anchors, count, head

    def all(self) -> list[Anchor]:
        """Every anchor, checked (chain and signatures), oldest first; none when there is no chain."""
        with self._lock:
            return self._read()[0]

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
        count means another process or machine ran or is running this run: `AnchorError`, and
        the caller stops before its write. An anchor of the same seq and head again is a no-op.
        The check and the append are one step: the append succeeds only if nothing was
        appended to the chain since the check (else it checks again).
        """
        if self.key is None:
            raise AnchorError("no deployment signing key: cannot anchor")
        with self._lock:
            for _ in range(_APPEND_ATTEMPTS):
                anchors, count, prev = self._read()
                mine = [a for a in anchors if a.run_id == run_id]
                if mine and mine[-1].seq == seq and mine[-1].head == head and len(mine) == expected:
                    return expected
                if len(mine) != expected:
                    raise AnchorError(
                        f"run {run_id} has {len(mine)} signed anchor(s) where this writer expected "
                        f"{expected}: the run already ran (or runs now) elsewhere, from another "
                        "copy of its log; a run id executes its writes once"
                    )
                stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                unsigned = Anchor(run_id, seq, head, stamp, prev, self.key.public_key.key_id, "")
                signature = self.key.sign(unsigned.message()).hex()
                line = Anchor(run_id, seq, head, stamp, prev, unsigned.key_id, signature).to_line()
                if self.place.append_anchor(count, line[:-1]):
                    if self.seen is not None:
                        self.seen.advance(count + 1, hashlib.sha256(line).hexdigest())
                    return expected + 1
            raise AnchorError(
                f"cannot append to {self.place.describe()}: other writers appended first "
                f"{_APPEND_ATTEMPTS} times in a row"
            )


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


def anchors_from_env(
    environ: Mapping[str, str] | None = None, *, signing: bool = True, store: Any = None
) -> Anchors | None:
    """The deployment's anchors from the environment, or None when no deployment key is set.

    ``$PTE_DEPLOYMENT_KEY_FILE`` (the private key; `signing`) or, for a verifier,
    ``$PTE_DEPLOYMENT_PUBLIC_KEY_FILE``; the chain is ``$PTE_ANCHORS_FILE``, by default the
    key's path with ``.anchors.jsonl`` appended, or the run store `store` when that variable
    is ``store`` (every machine of the deployment shares it). A signing machine keeps how far
    it has seen the chain in ``$PTE_ANCHORS_SEEN_FILE`` (default: the key's path with
    ``.anchors-seen.json`` appended), so a rollback of the shared chain is refused.
    `AnchorError` when a key cannot be loaded, or the chain is the store and there is none.
    """
    env = os.environ if environ is None else environ
    private = env.get(DEPLOYMENT_KEY_ENV) if signing else None
    public = env.get(DEPLOYMENT_PUBLIC_KEY_ENV)
    source = private or public
    if not source:
        return None
    chain: Any = env.get(ANCHORS_FILE_ENV) or (source.removesuffix(".pub") + ".anchors.jsonl")
    if chain == ANCHORS_IN_STORE:
        if store is None:
            raise AnchorError(
                f"${ANCHORS_FILE_ENV}={ANCHORS_IN_STORE} keeps the deployment's anchors in its run store, "
                "and this command has no run store"
            )
        chain = store
    else:
        AnchorFile(chain).check_path()  # before any run starts: a usage error
    seen = (env.get(ANCHORS_SEEN_ENV) or private + ".anchors-seen.json") if private else None
    try:
        if private:
            return Anchors(chain, key=SigningKey.load(private), high_water=seen)
        from pte._core import TrustedKeys

        (key,) = TrustedKeys.load(source).values()
        return Anchors(chain, public=key)
    except (KeyFileError, ValueError) as exc:
        raise AnchorError(f"deployment key: {exc}") from None
