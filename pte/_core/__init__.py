"""Canonical JSON, strict JSON, JSON-pointer array indices, every exception, signing, key files,
logging, redaction, the data budget: what every area needs and that needs nothing of PTE.

This module is the area's face: other areas import only what it re-exports.
"""

from __future__ import annotations

from pte._core import _strict_json as strict_json
from pte._core import _strict_yaml as strict_yaml
from pte._core._bounded_files import (
    MAX_INPUT_FILE_BYTES,
    FileRefused,
    check_file,
    check_folder,
    read_at_most,
    read_bounded_bytes,
    read_bounded_text,
)
from pte._core._call_role import (
    call_role,
    current_role,
)
from pte._core._canonical import (
    CanonicalizationError,
    canonical_bytes,
    canonical_json,
    canonical_json_v1,
    canonical_loads,
    hash_json,
    is_canonical,
    sha256_hex,
    well_formed,
    without_member,
)
from pte._core._data_budget import (
    DEFAULT_DATA_BUDGET,
    render_budgeted,
)
from pte._core._ecma_patterns import (
    ecma_pattern,
    ecma_schema,
    ecma_validator,
)
from pte._core._errors import (
    PLAN_REASONS,
    REPAIRABLE_REASONS,
    AnchorError,
    ApprovalConsumed,
    ApprovalMissing,
    ApprovalRejected,
    ApprovalStoreError,
    AuditFormatError,
    AuditWriteError,
    CheckpointError,
    ConditionNotMet,
    DeploymentError,
    EndorsementStoreError,
    FailedClosed,
    ImportRefused,
    ImportSourceError,
    KeyFileError,
    LLMError,
    LogEnded,
    LogNotIntact,
    MCPError,
    OpenAPIError,
    PlanRejected,
    PolicyError,
    ProcedureError,
    PTEError,
    ReasonCode,
    ReplayDataError,
    ReplayDivergence,
    ReportError,
    RequeueRefused,
    RunPaused,
    SpecialistError,
    StoreError,
    StrictJSONError,
    ToolError,
    ToolPackError,
    ToolRegistrationError,
    TransientError,
)
from pte._core._json_pointer import (
    array_index,
)
from pte._core._key_files import (
    read_key_file,
)
from pte._core._linear_patterns import (
    DECIMAL_STRING_PATTERN,
    DECIMAL_STRING_RE2,
    ExplainingValidator,
    is_decimal_string,
    pattern_matcher,
)
from pte._core._logs import (
    configure_logging,
    get_logger,
    is_terminal,
    quiet_logging,
)
from pte._core._nesting import (
    count_values,
    nests_deeper_than,
    outside_strings,
)
from pte._core._numbers import (
    MAX_DECIMAL_DIGITS,
    MAX_DECIMAL_EXPONENT,
    decimal_in_bounds,
    decimal_of_text,
)
from pte._core._redaction import (
    DEFAULT_REDACT_KEYS,
    REDACTED,
    Redactor,
)
from pte._core._resources import (
    data_dir,
    load_schema,
)
from pte._core._secret_rules import (
    SecretRules,
    default_rule_files,
)
from pte._core._shared_lines import (
    append_line,
    read_shared,
)
from pte._core._signing import (
    PublicKey,
    SignedDecision,
    SigningKey,
    TrustedKeys,
    check_signature_fields,
    sign_decision,
)
from pte._core._strict_json import (
    loads,
)
from pte._core._version import (
    __version__,
)

__all__ = [
    "DECIMAL_STRING_PATTERN",
    "DECIMAL_STRING_RE2",
    "DEFAULT_DATA_BUDGET",
    "DEFAULT_REDACT_KEYS",
    "MAX_DECIMAL_DIGITS",
    "MAX_DECIMAL_EXPONENT",
    "MAX_INPUT_FILE_BYTES",
    "PLAN_REASONS",
    "REDACTED",
    "REPAIRABLE_REASONS",
    "AnchorError",
    "ApprovalConsumed",
    "ApprovalMissing",
    "ApprovalRejected",
    "ApprovalStoreError",
    "AuditFormatError",
    "AuditWriteError",
    "CanonicalizationError",
    "CheckpointError",
    "ConditionNotMet",
    "DeploymentError",
    "EndorsementStoreError",
    "ExplainingValidator",
    "FailedClosed",
    "FileRefused",
    "ImportRefused",
    "ImportSourceError",
    "KeyFileError",
    "LLMError",
    "LogEnded",
    "LogNotIntact",
    "MCPError",
    "OpenAPIError",
    "PTEError",
    "PlanRejected",
    "PolicyError",
    "ProcedureError",
    "PublicKey",
    "ReasonCode",
    "Redactor",
    "ReplayDataError",
    "ReplayDivergence",
    "ReportError",
    "RequeueRefused",
    "RunPaused",
    "SecretRules",
    "SignedDecision",
    "SigningKey",
    "SpecialistError",
    "StoreError",
    "StrictJSONError",
    "ToolError",
    "ToolPackError",
    "ToolRegistrationError",
    "TransientError",
    "TrustedKeys",
    "__version__",
    "append_line",
    "array_index",
    "call_role",
    "canonical_bytes",
    "canonical_json",
    "canonical_json_v1",
    "canonical_loads",
    "check_file",
    "check_folder",
    "check_signature_fields",
    "configure_logging",
    "count_values",
    "current_role",
    "data_dir",
    "decimal_in_bounds",
    "decimal_of_text",
    "default_rule_files",
    "ecma_pattern",
    "ecma_schema",
    "ecma_validator",
    "get_logger",
    "hash_json",
    "is_canonical",
    "is_decimal_string",
    "is_terminal",
    "load_schema",
    "loads",
    "nests_deeper_than",
    "outside_strings",
    "pattern_matcher",
    "quiet_logging",
    "read_at_most",
    "read_bounded_bytes",
    "read_bounded_text",
    "read_key_file",
    "read_shared",
    "render_budgeted",
    "sha256_hex",
    "sign_decision",
    "strict_json",
    "strict_yaml",
    "well_formed",
    "without_member",
]
