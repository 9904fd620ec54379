"""`pte.Deployment`: a deployment is one thing, and the only way to get an engine.

A deployment folder (``pte init``) holds ``pte-deployment.json`` and its key pair. The
document names everything a run's authority and behaviour depend on (tool packs, allow-list,
manifest, policy, procedures, specialists, approver keys, approval and endorsement stores,
run store, anchors, redaction rules, model endpoint); `fingerprint` hashes it all. The CLI,
the demo, workers and replay build their registry, policy, gates, anchors, redactor and LLM
client from here; a caller may narrow (a subset of packs, an allow-list), never widen.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pte._catalogue import Registry, load_registry
from pte._core import DeploymentError, PTEError, Redactor, TrustedKeys
from pte._deploy._deployment_discovery import find_deployment_folder
from pte._deploy._deployment_document import (
    DOCUMENT_NAME,
    KEY_NAME,
    PUBLIC_KEY_NAME,
    DeploymentDocument,
    resolve_path,
    resolve_store_url,
)
from pte._deploy._deployment_engine import (
    OWN,
    made_engine,
    narrowing,
    recorded_binding,
    with_specialists,
    within_document,
)
from pte._deploy._deployment_fingerprint import digest_of, file_digest, folder_digests
from pte._deploy._deployment_parts import folder_parts, given_parts, recorded_parts
from pte._deploy._pack_imports import (
    forget_imports,
    import_spec,
    is_import_spec,
    server_files,
    spec_file,
    spec_in_folder,
)

__all__ = ["Deployment"]

#: The folder of a deployment given by its parts (`Deployment.of`): it reads nothing from one.
_GIVEN = Path("<given by its parts>")

#: This machine's high-water mark of the deployment's anchor chain, in its folder.
ANCHORS_SEEN_NAME = "anchors-seen.json"


def _split_packs(specs: Iterable[str]) -> list[str]:
    # An importer spec (mcp:CMD, openapi:SPEC#a,b) is one value: its commas are its own.
    return [p for spec in specs for p in ([spec] if is_import_spec(spec) else spec.split(",")) if p]


@dataclass(frozen=True)
class Deployment:
    """A deployment folder read: its document, where it is, and what it builds.

    Make one with ``pte init`` (or `Deployment.from_folder` on a folder that has one); find
    the one in force with `Deployment.discover` (``$PTE_DEPLOYMENT``, else the nearest folder
    upward with a ``pte-deployment.json``). Frozen: narrowing (`narrowed`) makes a new one.
    """

    folder: Path
    document: DeploymentDocument
    #: What a command narrowed it to (packs, allow-list); never wider than the document's.
    packs: tuple[str, ...] = ()
    allow: tuple[str, ...] | None = None
    _document_text: str = field(default="", repr=False, compare=False)
    #: The parts of a deployment given by its parts (`of`, `from_run_record`) instead of read
    #: from a folder; None: read from the folder.
    given: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    # --- finding one ---------------------------------------------------------------------

    @classmethod
    def from_folder(cls, folder: str | os.PathLike[str]) -> Deployment:
        """The deployment in `folder` (or the ``pte-deployment.json`` file given); `DeploymentError`
        when there is none or its document does not parse."""
        path = Path(os.path.expanduser(folder))
        if path.name == DOCUMENT_NAME:
            path = path.parent
        path = path.resolve()
        if not (path / DOCUMENT_NAME).is_file():
            raise DeploymentError(
                f"no deployment in {str(path)!r} (no {DOCUMENT_NAME}); make one with: pte init {path}"
            )
        document, data = DeploymentDocument.read(path / DOCUMENT_NAME)
        packs = tuple(_split_packs(document.tools))
        return cls(path, document, packs, document.allow, data.decode("utf-8"))

    @classmethod
    def discover(
        cls, start: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
    ) -> Deployment | None:
        """The deployment in force: ``$PTE_DEPLOYMENT``, else the nearest one upward from `start`
        (the working directory); None when there is none."""
        folder = find_deployment_folder(start, environ)
        return cls.from_folder(folder) if folder is not None else None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Deployment:
        """`discover`, but a `DeploymentError` saying how to make one when there is none."""
        found = cls.discover(environ=environ)
        if found is None:
            raise DeploymentError(
                "no deployment here: make one with `pte init` (a .pte folder here), or set "
                "$PTE_DEPLOYMENT to a deployment folder"
            )
        return found

    @classmethod
    def of(cls, **parts: Any) -> Deployment:
        """A deployment given by its parts instead of a folder: what a command's flags name
        where no deployment folder is in force, or a program's own registry and gates. The parts
        (`pte._deploy._deployment_parts.PARTS`): ``registry``, ``policy``, ``config``,
        ``approvals``, ``keys``, ``model``, ``llm``, ``anchors``, ``tracer_provider``,
        ``endorsements``, ``fingerprint`` (the deployment in hand), ``specialists``; one not
        given is None: replay takes the run's recorded one, resume has none."""
        return cls(_GIVEN, DeploymentDocument(store=None, endorsements=None), given=given_parts(parts))

    @classmethod
    def from_run_record(
        cls, records: Sequence[Mapping[str, Any]], *, stored: Mapping[str, Any] | None = None
    ) -> Deployment:
        """What the run of `records` recorded (its ``run_started``): its catalogue, policy, engine
        config and model. Evidence, for a replay that runs nothing: it has no approval or
        endorsement store, no keys and no anchors. `stored`: contents earlier runs of the same
        log stored by hash."""
        return cls(
            _GIVEN, DeploymentDocument(store=None, endorsements=None), given=recorded_parts(records, stored)
        )

    @cached_property
    def authority(self) -> Mapping[str, Any]:
        """The parts replay and resume act under (`pte._deploy._deployment_parts.PARTS`): the
        given ones, or those this folder's deployment builds (its registry, policy, gates, keys,
        anchors, specialists; itself as the deployment in hand)."""
        return self.given if self.given is not None else folder_parts(self)

    def with_parts(self, **changes: Any) -> Deployment:
        """This deployment's `authority` with some parts replaced (e.g. the registry a command
        narrowed it to), as a deployment given by its parts."""
        return Deployment(
            self.folder,
            self.document,
            self.packs,
            self.allow,
            self._document_text,
            given=given_parts({**self.authority, **changes}),
        )

    def from_run(self, started: Mapping[str, Any]) -> Deployment:
        """This deployment, after checking that the run whose ``run_started`` record is `started`
        was started under it (its recorded deployment fingerprint); `DeploymentError` naming both
        fingerprints when it was not. A run that recorded none (started before deployments) passes."""
        from pte._audit import deployment_problem

        problem = deployment_problem(started, self)
        if problem is not None:
            raise DeploymentError(f"{problem} (the deployment in hand is in {self.folder})")
        return self

    # --- what it holds open --------------------------------------------------------------

    def close(self) -> None:
        """Close what its importer specs hold open in this process: the MCP sessions (and server
        processes) of its ``mcp:`` specs, the HTTP clients of its ``openapi:`` specs. A spec is
        imported once per process and shared by every deployment naming it (a narrowing, the
        folder read again): their tools fail as ``client_closed`` after, and a deployment built
        again imports it afresh. Idempotent; what is still open at interpreter exit is closed then."""
        specs = [
            spec_in_folder(p, self.folder)
            for p in (*_split_packs(self.document.tools), *self.packs)
            if is_import_spec(p)
        ]
        if specs:
            forget_imports(specs)
        self._imports().clear()  # built again, it imports them afresh
        for built in ("_registry", "authority", "parts"):  # made of, or describing, what was closed
            self.__dict__.pop(built, None)

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- where things are ----------------------------------------------------------------

    def path(self, value: str | None) -> Path | None:
        """A path the document names, resolved against the folder (None stays None)."""
        return None if value is None else resolve_path(self.folder, value)

    @property
    def key_path(self) -> Path:
        """The deployment's signing key (mode 0600): executing machines."""
        return self.folder / KEY_NAME

    @property
    def public_key_path(self) -> Path:
        """The deployment's public key: verifiers."""
        return self.folder / PUBLIC_KEY_NAME

    @property
    def has_key(self) -> bool:
        """Whether this machine holds the deployment's signing key (it may then run writes)."""
        return self.key_path.is_file()

    @property
    def approvals_path(self) -> Path:
        return resolve_path(self.folder, self.document.approvals)

    @property
    def endorsements_path(self) -> Path | None:
        return self.path(self.document.endorsements)

    @property
    def anchors_path(self) -> Path:
        return resolve_path(self.folder, self.document.anchors)

    @property
    def store_url(self) -> str | None:
        """The run store URL, a relative file path resolved against the folder (None: no store)."""
        url = self.document.store
        return None if url is None else resolve_store_url(self.folder, url)

    # --- narrowing -----------------------------------------------------------------------

    def narrowed(
        self, *, packs: Sequence[str] | None = None, allow: Sequence[str] | None = None
    ) -> Deployment:
        """This deployment with fewer packs and/or a narrower allow-list; `DeploymentError` when a
        pack is not one of its packs or a tool is outside its allow-list (narrow, never widen)."""
        chosen = self.packs
        if packs:
            wanted = _split_packs(packs)
            extra = [p for p in wanted if p not in self.packs]
            if extra:
                raise DeploymentError(
                    f"--tools {', '.join(extra)}: not a pack of the deployment in {self.folder} "
                    f"(its packs: {', '.join(self.packs) or 'none'}); a flag may narrow the deployment, "
                    f"never widen it: add the pack to its {DOCUMENT_NAME} instead"
                )
            chosen = tuple(wanted)
        narrowed_allow = self.allow
        if allow:
            names = [a for spec in allow for a in spec.split(",") if a]
            if self.allow is not None:
                outside = [n for n in names if n not in self.allow]
                if outside:
                    raise DeploymentError(
                        f"--allow {', '.join(outside)}: outside the deployment's allow-list "
                        f"({', '.join(self.allow)}); a flag may narrow the deployment, never widen it"
                    )
            narrowed_allow = tuple(names)
        return self._sharing_imports(
            Deployment(self.folder, self.document, chosen, narrowed_allow, self._document_text)
        )

    # --- checking ------------------------------------------------------------------------

    def problems(self) -> list[str]:
        """Every path the document names that cannot be used, as sentences (empty: all good)."""
        doc, found = self.document, []
        for key, what in (
            ("manifest", "tool manifest"),
            ("policy", "policy file"),
            ("specialists", "specialists file"),
            ("approval_keys", "approver public keys"),
        ):
            path = self.path(getattr(doc, key))
            if path is not None and not _is_regular(path):
                found.append(f"{key}: the {what} {str(path)!r} does not exist or is not a regular file")
        procedures = self.path(doc.procedures)
        if procedures is not None and not procedures.is_dir():
            found.append(f"procedures: the procedures folder {str(procedures)!r} does not exist")
        found.extend(
            problem
            for problem in map(self._spec_file_problem, _split_packs(doc.tools))
            if problem is not None
        )
        for rules in doc.secret_rules:
            if not _is_regular(resolve_path(self.folder, rules)):
                found.append(f"redaction.rule_files: {rules!r} does not exist or is not a regular file")
        writable = [("approvals", self.approvals_path)]
        if doc.anchors != "store":  # else the chain is rows of the run store (checked below)
            writable.append(("anchors", self.anchors_path))
        elif self.store_url is None or not self.store_url.startswith(("sqlite:", "postgresql:", "postgres:")):
            found.append('anchors: "store" keeps the anchor chain in the run store: sqlite: or postgresql:')
        if self.endorsements_path is not None:
            writable.append(("endorsements", self.endorsements_path))
        for key, path in writable:
            problem = _writable_file_problem(path)
            if problem:
                found.append(f"{key}: {str(path)!r} {problem}")
        url = self.store_url
        if url is not None and not url.startswith(("postgresql://", "postgres://")):
            path = _store_path(url)
            problem = _writable_file_problem(path) if path is not None else None
            if problem:
                found.append(f"store: {url!r} {problem}")
        if self.has_key:
            mode = self.key_path.stat().st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                found.append(
                    f"{KEY_NAME}: readable by others (mode {oct(mode & 0o777)}); chmod 600 {self.key_path}"
                )
        return found

    def check(self) -> Deployment:
        """This deployment, after checking every path it names (before a run starts: a typo must
        not be found after steps ran); `DeploymentError` listing every problem."""
        found = self.problems()
        if found:
            raise DeploymentError(f"the deployment in {self.folder} cannot be used: " + "; ".join(found))
        return self

    # --- what it builds ------------------------------------------------------------------

    def _imports(self) -> dict[str, Registry]:
        """The imports of its importer specs it serves, by spec: each imported once per deployment
        object, so its registry, policy and fingerprint describe one catalogue even when a spec's
        file changes meanwhile (a deployment built again imports it as it is then). Shared with its
        narrowings and its fingerprint's full deployment (`_sharing_imports`)."""
        pinned: dict[str, Registry] = self.__dict__.setdefault("_imports_pinned", {})
        return pinned

    def _imported(self, spec: str, importer: Callable[[str], Registry] | None) -> Registry:
        """The import of `spec` (as the document writes it) it serves; a relative spec file is
        the one in its folder (`spec_in_folder`), refused by name when there is none there."""
        pinned = self._imports()
        if spec not in pinned:
            problem = self._spec_file_problem(spec)
            if problem is not None:
                raise DeploymentError(f"the deployment in {self.folder} cannot be used: {problem}")
            pinned.setdefault(spec, (importer or import_spec)(spec_in_folder(spec, self.folder)))
        return pinned[spec]

    def _spec_file_problem(self, spec: str) -> str | None:
        """Why the file an ``openapi:`` spec of its `tools` names cannot be read (None: it can, or
        the spec names no file). A relative path is read from the deployment's folder only: a
        document that relied on the working directory of the process is refused, saying so."""
        source = spec_file(spec)
        if source is None:
            return None
        path = resolve_path(self.folder, source)
        if _is_regular(path):
            return None
        missing = (
            f"tools: {spec!r}: the OpenAPI document {str(path)!r} does not exist or is not a regular file"
        )
        if Path(os.path.expanduser(source)).is_absolute():
            return missing
        return (
            f"{missing} (a relative path is read from the deployment's folder, never from the working "
            f"directory): put the file there, or write its absolute path in {DOCUMENT_NAME}"
        )

    def _sharing_imports(self, other: Deployment) -> Deployment:
        """`other` (made from this deployment) serving the imports this one serves."""
        other.__dict__["_imports_pinned"] = self._imports()  # frozen: a cache, not a field
        return other

    def registry(self, *, import_spec_with: Callable[[str], Registry] | None = None) -> Registry:
        """The tool registry: its packs (importer specs imported), allow-list, manifest, procedures.
        Built once per deployment object (an importer spec starts a server): `engine` narrows it."""
        cached = self.__dict__.get("_registry")
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        built = self._built_registry(import_spec_with)
        self.__dict__["_registry"] = built  # frozen: a cache, not a field
        return built

    def _built_registry(self, import_spec_with: Callable[[str], Registry] | None) -> Registry:
        if not self.packs:
            raise DeploymentError(
                f"the deployment in {self.folder} names no tool packs: add them to its {DOCUMENT_NAME} "
                '("tools": ["backoffice"], the packs it serves)'
            )
        refs: list[str | Registry] = [
            self._imported(p, import_spec_with) if is_import_spec(p) else p for p in self.packs
        ]
        manifest = self.path(self.document.manifest)
        try:
            registry = load_registry(refs, allow=self.allow, manifest=manifest)
        except PTEError as exc:
            raise DeploymentError(str(exc)) from None
        folder = self.path(self.document.procedures)
        if folder is None:
            return registry
        from pte._plan import load_procedures

        try:
            return registry.with_procedures(load_procedures(folder, registry))
        except PTEError as exc:
            raise DeploymentError(str(exc)) from None

    def policy(self, registry: Registry, *, import_spec_with: Callable[[str], Registry] | None = None) -> Any:
        """The data-flow policy for `registry` (a registry of this deployment): the tools' own
        declarations, with the deployment's policy file applied."""
        from pte._policy import Policy

        path = self.path(self.document.policy)
        try:
            if path is None:
                return Policy.from_registry(registry)
            # Tool names in the file are checked against the whole packs (a typo is an error),
            # so one compliance-owned file serves every narrowing of the deployment.
            whole = load_registry(
                [self._imported(p, import_spec_with) if is_import_spec(p) else p for p in self.packs]
            )
            policy = Policy.from_registry(whole).with_file(path)
            narrowed = {name: entry for name, entry in policy.tools.items() if name in registry}
            return Policy(narrowed, registry=registry, sources=policy.sources, default=policy.default)
        except PTEError as exc:
            raise DeploymentError(str(exc)) from None

    def approval_keys(self) -> TrustedKeys | None:
        """The trusted approvers' public keys (None: the document names none)."""
        path = self.path(self.document.approval_keys)
        if path is None:
            return None
        try:
            return TrustedKeys.load(path)
        except PTEError as exc:
            raise DeploymentError(f"approval_keys: {exc}") from None

    def approval_gate(self, registry: Registry, policy: Any = None) -> Any:
        """The approval gate over the deployment's approval store, under its approver keys."""
        from pte._policy import ApprovalGate, ApprovalStore

        return ApprovalGate(
            ApprovalStore(self.approvals_path), registry, keys=self.approval_keys(), policy=policy
        )

    def endorsement_gate(self) -> Any:
        """The endorsement gate over the deployment's endorsement store (None: it names none)."""
        path = self.endorsements_path
        if path is None:
            return None
        from pte._policy import EndorsementGate, EndorsementStore

        return EndorsementGate(EndorsementStore(path), keys=self.approval_keys())

    def anchors(self) -> Any:
        """The deployment's anchors (`pte.Anchors`): signing with its key when this machine has it,
        else checking with its public key; None when the folder has neither."""
        from pte._audit import ANCHORS_IN_STORE, Anchors
        from pte._core import SigningKey

        chain: Any = self.anchors_path
        if self.document.anchors == ANCHORS_IN_STORE:  # one chain in the run store, every machine's
            from pte.stores import is_store_url, open_store

            url = self.store_url
            if url is None or not is_store_url(url) or url.startswith("jsonl:"):
                raise DeploymentError(
                    f'the deployment in {self.folder} keeps its anchors in its run store ("anchors": '
                    '"store"), which must be a sqlite: or postgresql: store'
                )
            try:
                chain = open_store(url)
            except PTEError as exc:
                raise DeploymentError(f"the deployment's run store (its anchors): {exc}") from None
        try:
            if self.has_key:
                # This machine's high-water mark of the chain (the folder is per machine: it
                # holds the key): a rollback of the shared chain is refused (pte._audit._anchor_seen).
                seen = self.folder / ANCHORS_SEEN_NAME
                return Anchors(chain, key=SigningKey.load(self.key_path), high_water=seen)
            if self.public_key_path.is_file():
                (key,) = TrustedKeys.load(self.public_key_path).values()
                return Anchors(chain, public=key)
        except (PTEError, ValueError) as exc:
            raise DeploymentError(f"the deployment key in {self.folder}: {exc}") from None
        return None

    def redactor(self, environ: Mapping[str, str] | None = None) -> Redactor:
        """The redactor: the defaults and the environment's (`Redactor.from_env`), plus the
        deployment's secret key names and rule files."""
        env = dict(os.environ if environ is None else environ)
        keys_env, files_env = "PTE_REDACT_KEYS", "PTE_SECRET_RULES"  # as `Redactor.from_env` reads them
        env[keys_env] = ",".join(
            [*filter(None, env.get(keys_env, "").split(",")), *self.document.redact_keys]
        )
        files = [str(resolve_path(self.folder, f)) for f in self.document.secret_rules]
        env[files_env] = os.pathsep.join([*filter(None, env.get(files_env, "").split(os.pathsep)), *files])
        try:
            return Redactor.from_env(env)
        except ValueError as exc:
            raise DeploymentError(f"redaction: {exc}") from None

    def llm(self, **settings: Any) -> Any:
        """The LLM client of the deployment's model endpoint (`pte.OpenAIClient`; the API key from
        the environment). `settings`: timeouts, retries, token bound."""
        from pte._run import OpenAIClient

        return OpenAIClient(
            self.document.model, base_url=self.document.base_url, deployment_dir=self.folder, **settings
        )

    def engine(
        self,
        llm: Any = None,
        *,
        registry: Registry | None = None,
        config: Any = None,
        approval: Any = None,
        endorsement: Any = OWN,
        policy: Any = None,
        recorded: Mapping[str, Any] | None = None,
        invoker: Any = None,
        checks: Sequence[Any] = (),
        **execution: Any,
    ) -> Any:
        """The engine (`pte.Engine`) of this deployment: the one place an engine is made (the
        CLI, the demo, workers, replay and resume all come here; tests/e2e/test_architecture.py
        fails on an ``Engine(`` anywhere else in `pte`).

        `llm`: the planner (None: plans are given). `registry`: a narrowing of the deployment's
        own (a command's ``--tools``/``--allow``, a job's packs): a tool it does not serve, or
        serves with other code or schemas, is refused (`DeploymentError`): narrow, never widen.
        `config`: how the engine behaves (replans, repair, …); its specialists are the
        deployment's. `approval`, `endorsement`: the deployment's decisions in another form (a
        gate over its run store; replay's recorded decisions, re-checked as evidence); default
        its approval store under its approver keys, and its endorsement store (`OWN`; None: no
        endorsement gate, as a replay of a run that could not pause for a person). `policy`: only
        where the deployment names none (a deployment given by its parts without one: a replay's
        recorded policy); its own is never replaced. `recorded`: the ``run_started`` (expanded)
        of a run replay or resume re-drives: the engine records the run's recorded binding (resume
        checked it against this deployment first). `invoker`, `checks`: replay's invoker, extra
        plan checks. `execution`: ``max_concurrency``, ``serial_writes``, ``tracer_provider``; the
        document's ``"execution"`` is their ceiling (a wider limit is capped, serial writes stay on):
        a flag, a worker's settings and a log's record only narrow it.
        """
        if self.given is not None:
            return self._given_engine(
                llm, registry, config, approval, endorsement, policy, recorded, invoker, checks, execution
            )
        if policy is not None:
            raise DeploymentError(
                f"the deployment in {self.folder} applies its own policy: a caller may not replace it"
            )
        own = self.registry()
        registry = own if registry is None else narrowing(registry, own, f"the deployment in {self.folder}")
        policy = self.policy(registry)
        config = with_specialists(config, self.specialists(registry))
        return made_engine(
            registry,
            llm,
            config=config,
            policy=policy,
            approval=approval if approval is not None else self.approval_gate(registry, policy),
            endorsement=self.endorsement_gate() if endorsement is OWN else endorsement,
            # Every run records this deployment's fingerprint and parts; a re-driven run its own.
            binding=recorded_binding(recorded) if recorded is not None else self,
            invoker=invoker,
            checks=checks,
            execution=within_document(execution, self.document),
        )

    def _given_engine(
        self,
        llm: Any,
        registry: Registry | None,
        config: Any,
        approval: Any,
        endorsement: Any,
        policy: Any,
        recorded: Mapping[str, Any] | None,
        invoker: Any,
        checks: Sequence[Any],
        execution: dict[str, Any],
    ) -> Any:
        """`engine` of a deployment given by its parts (`of`): those parts, narrowed, nothing else."""
        from pte._policy import Policy
        from pte._run import EngineConfig

        parts = self.authority
        if registry is None:
            registry = parts["registry"]
        elif parts["registry"] is not None:
            registry = narrowing(registry, parts["registry"], "the deployment given by its parts")
        if registry is None:
            raise DeploymentError("a deployment given by its parts needs a registry to make an engine")
        if parts["policy"] is not None:
            if policy is not None and policy is not parts["policy"]:
                raise DeploymentError(
                    "the deployment given by its parts names its policy: a caller may not replace it"
                )
            policy = parts["policy"]
        elif policy is None:
            policy = Policy.from_registry(registry)
        config = config or parts["config"] or EngineConfig()
        config = with_specialists(config, tuple(parts["specialists"] or ()))
        execution.setdefault("tracer_provider", parts["tracer_provider"])
        return made_engine(
            registry,
            llm,
            config=config,
            policy=policy,
            approval=approval if approval is not None else parts["approvals"],
            endorsement=parts["endorsements"] if endorsement is OWN else endorsement,
            binding=recorded_binding(recorded) if recorded is not None else parts["fingerprint"],
            invoker=invoker,
            checks=checks,
            execution=execution,
        )

    def specialists(self, registry: Registry | None = None) -> tuple[Any, ...]:
        """The deployment's specialists, checked against `registry` (empty: it names none)."""
        path = self.path(self.document.specialists)
        if path is None:
            return ()
        from pte._plan import check_specialists, load_specialists

        try:
            loaded = load_specialists(path)
            if registry is not None:
                check_specialists(loaded, registry)
        except PTEError as exc:
            raise DeploymentError(f"specialists {str(path)!r}: {exc}") from None
        return tuple(loaded)

    # --- the fingerprint -----------------------------------------------------------------

    @cached_property
    def parts(self) -> dict[str, str]:
        """The fingerprint of each part (``document``, ``catalogue``, and each file it names:
        ``policy``, ``manifest``, ``procedures``, ``specialists``, ``approval_keys``,
        ``secret_rules``, ``deployment_key``, ``mcp_servers``: the files its ``mcp:`` commands
        name inside the folder), so a refusal can name what differs."""
        from pte._policy import catalogue_fingerprint

        if self.given is not None:
            raise DeploymentError("a deployment given by its parts has no folder to fingerprint")

        doc = self.document
        parts = {"document": digest_of(doc.canonical())}
        for key in ("manifest", "policy", "specialists", "approval_keys"):
            path = self.path(getattr(doc, key))
            if path is not None:
                parts[key] = file_digest(path, key.replace("_", " "))
        procedures = self.path(doc.procedures)
        if procedures is not None:
            parts["procedures"] = digest_of(folder_digests(procedures, "procedures folder"))
        if doc.secret_rules:
            rules = [file_digest(resolve_path(self.folder, f), "secret rules") for f in doc.secret_rules]
            parts["secret_rules"] = digest_of(rules)
        if self.public_key_path.is_file():
            parts["deployment_key"] = file_digest(self.public_key_path, "public key")
        # The files its mcp: commands name inside the folder (server.py), by the path the command
        # writes: the tool list alone misses a server whose behaviour changed, not its tools.
        servers = {p: files for p in _split_packs(doc.tools) if (files := server_files(p, self.folder))}
        if servers:
            parts["mcp_servers"] = digest_of(servers)
        full = self._sharing_imports(
            Deployment(self.folder, doc, tuple(_split_packs(doc.tools)), doc.allow, self._document_text)
        )
        if full.packs:
            registry = full.registry()
            parts["catalogue"] = catalogue_fingerprint(registry, registry.names, full.policy(registry))
        return parts

    @property
    def fingerprint(self) -> str:
        """SHA-256 over its `parts`: the document, every file it names, its public key and its
        catalogue (tools' schemas and code under its policy). Runs started under it record it
        (``run_started.deployment``) and continue only under it."""
        return digest_of(self.parts)


def recorded_fingerprint(started: Mapping[str, Any]) -> str | None:
    """The deployment fingerprint a ``run_started`` record holds (None: it holds none)."""
    for key in ("deployment_fingerprint", "deployment"):
        value = started.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, Mapping) and isinstance(value.get("fingerprint"), str):
            return str(value["fingerprint"])
    return None


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def _writable_file_problem(path: Path) -> str | None:
    """Why a file the deployment appends to cannot be: a directory, a FIFO, a missing folder."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None if path.parent.is_dir() else "is in a folder that does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return None if stat.S_ISREG(info.st_mode) else "is not a regular file"


def _store_path(url: str) -> Path | None:
    if url.startswith("sqlite:"):
        rest = url.removeprefix("sqlite:")
        rest = rest[2:] if rest.startswith("//") else rest
        return None if rest in ("", ":memory:") else Path(rest)
    return None  # a JSON Lines store is a folder it makes; a database is checked by opening it
