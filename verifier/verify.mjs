#!/usr/bin/env node
// An independent verifier of PTE audit logs (format pte-audit/2), written from
// docs/audit-format.md and schemas/audit-record.schema.json alone, with Node's standard
// library only (the schema's keywords are checked by the small checker below). It shares no code with
// PTE: JCS (RFC 8785) comes from JavaScript itself (JSON.stringify writes numbers and
// strings exactly as RFC 8785 requires; keys are sorted by UTF-16 code unit here).
//
//   node verifier/verify.mjs LOG [--checkpoint FILE --public-key PEM]
//                                [--deployment-key PEM --anchors FILE] [--json]
//   node verifier/verify.mjs --jcs FILE     # JCS and SHA-256 of each JSON line (for tests)
//
// With the deployment's public key and anchors file, each run is checked against what the
// deployment signed (docs/audit-format.md, "Anchors"). The output says which checks were
// made (chain, schema, sealed, anchors, checkpoint: checked, failed or not available), as
// `pte audit verify` does.
//
// Exit code: 0 the log verifies (and is complete), 1 it does not, 2 usage error.

import { createHash, createPublicKey, verify as cryptoVerify } from "node:crypto";
import { readFileSync } from "node:fs";

// The record schema (docs/audit-format.md section 2, step 4), read from the repository.
const SCHEMA_URL = new URL("../schemas/audit-record.schema.json", import.meta.url);

export const FORMAT = "pte-audit/2";
const GENESIS = "0".repeat(64);
const HEX64 = /^[0-9a-f]{64}$/;

// ---------------------------------------------------------------------------------------
// RFC 8785: the JSON Canonicalization Scheme
// ---------------------------------------------------------------------------------------

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function jcsString(s) {
  // JSON.stringify escapes exactly what RFC 8785 section 3.2.2.2 escapes, but writes lone
  // surrogates as \udxxx where JCS refuses them (they are not Unicode text).
  if (LONE_SURROGATE.test(s)) throw new Error("string holds a lone surrogate");
  return JSON.stringify(s);
}

/** The JCS form of a JSON value (as parsed by JSON.parse). */
export function jcs(value) {
  if (value === null || typeof value === "boolean") return JSON.stringify(value);
  if (typeof value === "number") {
    // ECMAScript Number::toString is RFC 8785's number serialisation (section 3.2.2.3).
    if (!Number.isFinite(value)) throw new Error("NaN or Infinity");
    return JSON.stringify(value);
  }
  if (typeof value === "string") return jcsString(value);
  if (Array.isArray(value)) return "[" + value.map(jcs).join(",") + "]";
  if (typeof value === "object") {
    // Sorted by UTF-16 code units: the default comparison of JavaScript strings.
    const keys = Object.keys(value).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    return "{" + keys.map((k) => jcsString(k) + ":" + jcs(value[k])).join(",") + "}";
  }
  throw new Error(`not JSON: ${typeof value}`);
}

export function sha256Hex(...parts) {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return h.digest("hex");
}

/** JSON.parse that refuses duplicate keys (JSON.parse keeps the last silently). */
function parseStrict(text) {
  const value = JSON.parse(text);
  // A line is only accepted when it is the JCS form of what it parses to, and a duplicate
  // key would vanish from that form: the byte comparison catches duplicates too.
  return value;
}

// ---------------------------------------------------------------------------------------
// The record schema: the JSON Schema 2020-12 keywords schemas/audit-record.schema.json uses
// ---------------------------------------------------------------------------------------

// Annotations (no effect on validity) and the assertions this checker implements. Any other
// keyword in the schema stops the verifier: a check it cannot make is never skipped.
const ANNOTATIONS = new Set(["$schema", "$id", "$defs", "$comment", "title", "description", "examples", "default"]);
const ASSERTIONS = new Set([
  "$ref", "type", "enum", "const", "required", "properties", "additionalProperties", "items",
  "propertyNames", "anyOf", "oneOf", "allOf", "not", "if", "then", "else", "minimum", "maximum",
  "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
]);

let recordSchema = null;

function loadRecordSchema() {
  if (recordSchema === null) {
    const root = JSON.parse(readFileSync(SCHEMA_URL, "utf8"));
    // Record type -> its branch of the root oneOf (each branch pins `type` with const).
    const branches = new Map();
    for (const branch of root.oneOf) {
      const target = resolveRef(root, branch.$ref);
      branches.set(target.properties.type.const, branch);
    }
    const { oneOf, ...common } = root;
    recordSchema = { root, common, branches, patterns: new Map() };
  }
  return recordSchema;
}

function resolveRef(root, ref) {
  if (typeof ref !== "string" || !ref.startsWith("#/$defs/")) throw new Error(`schema: unsupported $ref ${ref}`);
  const target = root.$defs[ref.slice("#/$defs/".length)];
  if (target === undefined) throw new Error(`schema: unresolved $ref ${ref}`);
  return target;
}

function jsonType(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v; // boolean, string, object
}

function isType(v, t) {
  const k = jsonType(v);
  return k === t || (t === "number" && k === "integer");
}

function where(path) {
  return path === "" ? "" : ` (at $${path})`;
}

/** The first way `value` breaks `schema` (a message), or null when it is valid. */
function schemaProblem(value, schema, ctx, path) {
  if (schema === true) return null;
  if (schema === false) return `no value is allowed here${where(path)}`;
  for (const k of Object.keys(schema)) {
    if (!ANNOTATIONS.has(k) && !ASSERTIONS.has(k)) throw new Error(`schema: unsupported keyword ${k}`);
  }
  if (schema.$ref !== undefined) {
    const p = schemaProblem(value, resolveRef(ctx.root, schema.$ref), ctx, path);
    if (p) return p;
  }
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => isType(value, t))) return `${jsonType(value)} is not of type ${types.join(" or ")}${where(path)}`;
  }
  if ("const" in schema && jcs(value) !== jcs(schema.const)) return `${jcs(schema.const)} was expected${where(path)}`;
  if (schema.enum !== undefined && !schema.enum.some((e) => jcs(e) === jcs(value))) {
    return `not one of ${jcs(schema.enum)}${where(path)}`;
  }
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) return `less than ${schema.minimum}${where(path)}`;
    if (schema.maximum !== undefined && value > schema.maximum) return `more than ${schema.maximum}${where(path)}`;
    if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) return `not over ${schema.exclusiveMinimum}${where(path)}`;
    if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) return `not under ${schema.exclusiveMaximum}${where(path)}`;
  }
  if (typeof value === "string") {
    const length = [...value].length; // in code points, as JSON Schema counts
    if (schema.minLength !== undefined && length < schema.minLength) return `shorter than ${schema.minLength}${where(path)}`;
    if (schema.maxLength !== undefined && length > schema.maxLength) return `longer than ${schema.maxLength}${where(path)}`;
    if (schema.pattern !== undefined) {
      let regex = ctx.patterns.get(schema.pattern);
      if (regex === undefined) ctx.patterns.set(schema.pattern, (regex = new RegExp(schema.pattern, "u")));
      if (!regex.test(value)) return `does not match ${schema.pattern}${where(path)}`;
    }
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) return `fewer than ${schema.minItems} items${where(path)}`;
    if (schema.maxItems !== undefined && value.length > schema.maxItems) return `more than ${schema.maxItems} items${where(path)}`;
    if (schema.items !== undefined) {
      for (let i = 0; i < value.length; i++) {
        const p = schemaProblem(value[i], schema.items, ctx, `${path}[${i}]`);
        if (p) return p;
      }
    }
  } else if (jsonType(value) === "object") {
    for (const name of schema.required ?? []) {
      if (!Object.prototype.hasOwnProperty.call(value, name)) return `missing required ${JSON.stringify(name)}${where(path)}`;
    }
    const props = schema.properties ?? {};
    for (const [k, v] of Object.entries(value)) {
      if (schema.propertyNames !== undefined) {
        const q = schemaProblem(k, schema.propertyNames, ctx, `${path}.${k} (name)`);
        if (q) return q;
      }
      const sub = Object.prototype.hasOwnProperty.call(props, k) ? props[k] : schema.additionalProperties;
      if (sub === undefined) continue;
      if (sub === false) return `unexpected member ${JSON.stringify(k)}${where(path)}`;
      const p = schemaProblem(v, sub, ctx, `${path}.${k}`);
      if (p) return p;
    }
  }
  for (const sub of schema.allOf ?? []) {
    const p = schemaProblem(value, sub, ctx, path);
    if (p) return p;
  }
  if (schema.anyOf !== undefined && !schema.anyOf.some((sub) => schemaProblem(value, sub, ctx, path) === null)) {
    return `matches none of the allowed forms${where(path)}`;
  }
  if (schema.oneOf !== undefined && schema.oneOf.filter((sub) => schemaProblem(value, sub, ctx, path) === null).length !== 1) {
    return `does not match exactly one of the allowed forms${where(path)}`;
  }
  if (schema.not !== undefined && schemaProblem(value, schema.not, ctx, path) === null) return `matches a form that is not allowed${where(path)}`;
  if (schema.if !== undefined) {
    const branch = schemaProblem(value, schema.if, ctx, path) === null ? schema.then : schema.else;
    if (branch !== undefined) {
      const p = schemaProblem(value, branch, ctx, path);
      if (p) return p;
    }
  }
  return null;
}

/** Step 4 of verifying a line: the record against its type's branch of the record schema. */
export function recordProblem(record) {
  const ctx = loadRecordSchema();
  const branch = ctx.branches.get(record.type);
  if (branch === undefined) return `unknown record type ${JSON.stringify(record.type)}`;
  return schemaProblem(record, ctx.common, ctx, "") ?? schemaProblem(record, branch, ctx, "");
}

// ---------------------------------------------------------------------------------------
// Signatures
// ---------------------------------------------------------------------------------------

function loadPublicKey(path) {
  const key = createPublicKey(readFileSync(path));
  if (key.asymmetricKeyType !== "ed25519") throw new Error(`${path}: not an Ed25519 public key`);
  return key;
}

function rawPublicKeyHex(key) {
  // The SubjectPublicKeyInfo DER of an Ed25519 key ends with the 32 raw key bytes.
  const der = key.export({ type: "spki", format: "der" });
  return der.subarray(der.length - 32).toString("hex");
}

// The 12-byte SubjectPublicKeyInfo DER prefix of every Ed25519 public key (RFC 8410).
const ED25519_SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

/** An Ed25519 public key from its 32 raw bytes (hex). */
function publicKeyFromRaw(hex) {
  return createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, Buffer.from(hex, "hex")]), format: "der", type: "spki" });
}

// Format 3 approves one run (its `run` is signed); format 2 approved a plan.
const APPROVAL_DOMAINS = { "2": "pte-approval-v2\n", "3": "pte-approval-v3\n" };
const APPROVAL_SIGNED = ["plan_hash", "catalogue", "by", "at", "expires", "key_id"];
const HEX128 = /^[0-9a-f]{128}$/;

// An approval of a procedure version (docs/procedures.md): bound to no run, so no run check.
const PROCEDURE_APPROVAL_DOMAIN = "pte-procedure-approval-v1\n";
const PROCEDURE_APPROVAL_SIGNED = ["procedure", "version", "catalogue", "by", "at", "expires", "key_id"];

/** An `approval` record (docs/audit-format.md, "Approvals"): its id, and its signature when signed. */
function checkApproval(n, record) {
  if (record.procedure !== undefined) return checkProcedureApproval(n, record);
  const version = record.run === undefined ? "2" : "3";
  if (version === "3" && record.run !== record.run_id) throw new Issue(n, "the approval approves another run");
  const signed = { pte_approval: version };
  for (const name of APPROVAL_SIGNED) signed[name] = record[name] ?? null;
  if (version === "3") signed.run = record.run;
  checkSignedDecision(n, record, "approval", "approval_id", APPROVAL_DOMAINS[version], signed);
}

/** The procedure variant of an `approval` record: its id, and its signature when signed. */
function checkProcedureApproval(n, record) {
  const signed = { pte_procedure_approval: "1" };
  for (const name of PROCEDURE_APPROVAL_SIGNED) signed[name] = record[name] ?? null;
  checkSignedDecision(n, record, "approval", "approval_id", PROCEDURE_APPROVAL_DOMAIN, signed);
}

// An endorsement (docs/audit-format.md, "Endorsements"): one person's decision on the exact
// values of one call of one run.
const ENDORSEMENT_DOMAIN = "pte-endorsement-v1\n";
const ENDORSEMENT_SIGNED = ["run", "step_id", "element", "value_hash", "decision", "by", "at", "note", "key_id"];

/** An `endorsement` or `endorsement_rejected` record: its id, its run, and its signature when signed. */
function checkEndorsement(n, record) {
  if (record.run !== record.run_id) throw new Issue(n, "the endorsement is about another run");
  const signed = { pte_endorsement: "1" };
  for (const name of ENDORSEMENT_SIGNED) signed[name] = record[name] ?? null;
  checkSignedDecision(n, record, "endorsement", "endorsement_id", ENDORSEMENT_DOMAIN, signed);
}

/**
 * What every signed decision record shares (an approval of a run or of a procedure, an
 * endorsement): its `idField` is the hash of its `signed` members with its public key and
 * signature, and a signature, when there is one, verifies under its own public key over
 * `domain` and `signed`. `what` names it in the issues.
 */
function checkSignedDecision(n, record, what, idField, domain, signed) {
  const stored = { ...signed, public_key: record.public_key ?? null, signature: record.signature ?? null };
  if (sha256Hex(jcs(stored)) !== record[idField]) throw new Issue(n, `${idField} is not the hash of the ${what}`);
  if (record.signature === null || record.signature === undefined) {
    if (record.signed === true) throw new Issue(n, `${what} marked signed carries no signature`);
    return;
  }
  const pub = record.public_key;
  if (typeof pub !== "string" || !HEX64.test(pub) || typeof record.signature !== "string" || !HEX128.test(record.signature)) {
    throw new Issue(n, `${what} signature or public key is malformed`);
  }
  if (sha256Hex(Buffer.from(pub, "hex")) !== record.key_id) throw new Issue(n, `${what} key_id does not name its public key`);
  const message = Buffer.from(domain + jcs(signed), "utf8");
  if (!cryptoVerify(null, message, publicKeyFromRaw(pub), Buffer.from(record.signature, "hex"))) {
    throw new Issue(n, `${what} signature does not verify`);
  }
}

function verifySignature(publicKey, message, signatureB64) {
  let sig;
  try {
    sig = Buffer.from(signatureB64, "base64url");
  } catch {
    return false;
  }
  if (sig.length !== 64) return false;
  return cryptoVerify(null, Buffer.from(message, "utf8"), publicKey, sig);
}

// ---------------------------------------------------------------------------------------
// The log
// ---------------------------------------------------------------------------------------

class Issue extends Error {
  constructor(line, message) {
    super(`line ${line}: ${message}`);
    this.line = line;
    this.schema = message.startsWith("schema:");
  }
}

/** Split the file into lines, keeping byte-exactness (a partial last line is an issue). */
function splitLines(buf) {
  const lines = [];
  let start = 0;
  for (;;) {
    const end = buf.indexOf(0x0a, start);
    if (end < 0) break;
    lines.push(buf.subarray(start, end));
    start = end + 1;
  }
  return { lines, partial: start < buf.length ? buf.length - start : 0 };
}

const decoder = new TextDecoder("utf-8", { fatal: true });

/**
 * Verify a log. Returns { ok, intact, complete, records, runs, log_id, last_hash, heads, issue }.
 * `heads[i]` is the hash of record i (for checkpoints).
 */
export function verifyLog(buf) {
  const { lines, partial } = splitLines(buf);
  const heads = [];
  let prev = GENESIS;
  let currentRun = null;
  const seenRuns = new Set();
  const sealed = new Set();
  const openRuns = new Map();
  const stored = new Map(); // content hash -> value
  const runRecords = new Map(); // run id -> [{seq, hash, type, bound}]
  let logId = null;
  const result = (intact, complete, issue, schemaIssue = false) => ({
    ok: intact && complete,
    intact,
    complete,
    records: heads.length,
    runs: seenRuns.size,
    log_id: logId,
    last_hash: heads.length ? heads[heads.length - 1] : null,
    heads,
    issue,
    schema_issue: schemaIssue,
    // Each run's records (hash and seq), in log order: what anchors are checked against.
    runRecords,
  });
  try {
    for (let i = 0; i < lines.length; i++) {
      const n = i + 1;
      const raw = lines[i];
      let text;
      try {
        text = decoder.decode(raw);
      } catch {
        throw new Issue(n, "not valid UTF-8");
      }
      let record;
      try {
        record = parseStrict(text);
      } catch (e) {
        throw new Issue(n, `not valid JSON: ${e.message}`);
      }
      if (record === null || typeof record !== "object" || Array.isArray(record)) {
        throw new Issue(n, "not a JSON object");
      }
      let canonical;
      try {
        canonical = jcs(record);
      } catch (e) {
        throw new Issue(n, `not representable in JCS: ${e.message}`);
      }
      if (canonical !== text) throw new Issue(n, "not in RFC 8785 canonical form");
      for (const name of ["run_id", "ts", "type"]) {
        if (typeof record[name] !== "string" || record[name] === "") throw new Issue(n, `bad or missing ${name}`);
      }
      for (const name of ["prev", "hash"]) {
        if (typeof record[name] !== "string" || !HEX64.test(record[name])) throw new Issue(n, `bad or missing ${name}`);
      }
      if (record.seq !== i) throw new Issue(n, `seq ${record.seq} where ${i} was expected`);
      if (record.prev !== prev) throw new Issue(n, "prev is not the previous record's hash");
      const body = { ...record };
      delete body.hash;
      const digest = sha256Hex(record.prev, jcs(body));
      if (digest !== record.hash) throw new Issue(n, "hash mismatch");
      const problem = recordProblem(record);
      if (problem !== null) throw new Issue(n, `schema: ${problem}`);
      const type = record.type;
      if (i === 0) {
        if (type !== "run_started" || record.format !== FORMAT) {
          throw new Issue(n, `the log does not start with a ${FORMAT} run_started`);
        }
        logId = record.hash;
      }
      if (type === "run_started") checkRunStarted(n, record, stored);
      if (type === "approval") checkApproval(n, record);
      if (type === "endorsement" || type === "endorsement_rejected") checkEndorsement(n, record);
      const run = record.run_id;
      if (run !== currentRun) {
        if (seenRuns.has(run)) throw new Issue(n, `record of run ${run} after run ${currentRun} began`);
        if (type !== "run_started") throw new Issue(n, `run ${run} does not begin with run_started`);
        seenRuns.add(run);
        currentRun = run;
        if (typeof record.resumes === "string") openRuns.delete(record.resumes);
      } else if (sealed.has(run)) {
        throw new Issue(n, `${type} after run_finished of run ${run}`);
      } else if (type === "run_started") {
        throw new Issue(n, `second run_started in run ${run}`);
      }
      if (type === "run_finished") {
        sealed.add(run);
        openRuns.delete(run);
      } else {
        openRuns.set(run, n);
      }
      if (!runRecords.has(run)) runRecords.set(run, []);
      // `bound`: a run_started naming its deployment (anchored as it starts, section 7a).
      runRecords.get(run).push({ seq: record.seq, hash: digest, type, bound: type === "run_started" && record.deployment !== undefined && record.deployment !== null });
      heads.push(digest);
      prev = digest;
    }
  } catch (e) {
    if (e instanceof Issue) return result(false, false, e.message, e.schema);
    throw e;
  }
  if (partial) return result(false, false, `line ${lines.length + 1}: partial last line (${partial} bytes)`);
  if (heads.length === 0) return result(true, false, "incomplete: the log holds no records");
  if (openRuns.size) {
    const [run, line] = openRuns.entries().next().value;
    return result(true, false, `line ${line}: incomplete: run ${run} has no run_finished`);
  }
  return result(true, true, null);
}

function checkRunStarted(n, record, stored) {
  if (record.format !== FORMAT) throw new Issue(n, `run_started of format ${JSON.stringify(record.format)}`);
  const fresh = record.stored ?? {};
  if (typeof fresh !== "object" || fresh === null || Array.isArray(fresh)) throw new Issue(n, "stored is not an object");
  for (const [h, value] of Object.entries(fresh)) {
    // Stored twice (two writers at once) is allowed: the value must hash to its key either way.
    if (sha256Hex(jcs(value)) !== h) throw new Issue(n, `stored content ${h.slice(0, 12)}… does not hash to its key`);
    stored.set(h, value);
  }
  for (const name of ["catalogue", "policy"]) {
    const h = record[name];
    if (h === undefined || h === null) continue;
    if (!stored.has(h)) throw new Issue(n, `${name} ${String(h).slice(0, 12)}… is not stored in the log`);
  }
  if (record.catalogue !== undefined) {
    const catalogue = stored.get(record.catalogue);
    const isObject = (t) => t !== null && typeof t === "object" && !Array.isArray(t);
    if (!Array.isArray(catalogue) || !catalogue.every(isObject)) throw new Issue(n, "the stored catalogue is not a list of tools");
    const byName = new Map(catalogue.map((t) => [t.name, t]));
    const tools = record.tools ?? [];
    if (tools.length !== catalogue.length || tools.some((t) => !byName.has(t.name))) {
      throw new Issue(n, "tools and the stored catalogue name different tools");
    }
    for (const tool of tools) {
      const entry = byName.get(tool.name);
      if (entry === undefined) throw new Issue(n, `tool ${tool.name} is not in the catalogue`);
      // A missing schema hashes as null, as the Python verifier reads it (`dict.get`).
      const schemas = { input_schema: entry.input_schema ?? null, output_schema: entry.output_schema ?? null };
      if (sha256Hex(jcs(schemas)) !== tool.schema_hash) throw new Issue(n, `tool ${tool.name}: schema_hash does not match the catalogue`);
      for (const field of ["effect", "sinks", "requires_approval", "provenance", "idempotent", "timeout_s"]) {
        if (field in tool && jcs(tool[field]) !== jcs(entry[field] ?? null)) throw new Issue(n, `tool ${tool.name}: ${field} differs from the catalogue`);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Checkpoints
// ---------------------------------------------------------------------------------------

/** Check a signed checkpoint against a verified log; returns null or the problem. */
export function checkCheckpoint(checkpoint, publicKey, report) {
  const { signature, ...signed } = checkpoint;
  if (signed.pte_checkpoint !== "1") return "not a pte_checkpoint 1 document";
  if (typeof signature !== "string" || !verifySignature(publicKey, jcs(signed), signature)) {
    return "checkpoint signature does not verify with the given public key";
  }
  if (signed.key_id !== rawPublicKeyHex(publicKey)) return "checkpoint names another key";
  if (signed.log_id !== report.log_id) return "checkpoint is of another log";
  if (!Number.isInteger(signed.records) || signed.records < 1) return "checkpoint record count is not a positive integer";
  if (report.heads.length < signed.records) {
    return `truncated: the checkpoint covers ${signed.records} records, the log verifies ${report.heads.length}`;
  }
  if (report.heads[signed.records - 1] !== signed.head) {
    return `rewritten: record ${signed.records - 1} does not have the checkpoint's head hash`;
  }
  return null;
}

// ---------------------------------------------------------------------------------------
// Anchors (docs/audit-format.md, "Anchors"): the deployment's signed progress of each run
// ---------------------------------------------------------------------------------------

const ANCHOR_DOMAIN = "pte-anchor-v1\n";
const ANCHOR_KEYS = ["head", "key_id", "prev", "pte_anchor", "run_id", "seq", "signature", "time"];

/** Every anchor of an anchors file, checked (chain, key, signature, canonical form); throws the problem. */
export function readAnchors(buf, publicKey) {
  const keyId = sha256Hex(Buffer.from(rawPublicKeyHex(publicKey), "hex"));
  const anchors = [];
  let prev = GENESIS;
  const { lines } = splitLines(buf); // a partial last line is being written: not an anchor yet
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i];
    const where = `anchors file line ${i + 1}`;
    let text;
    let doc;
    try {
      text = decoder.decode(raw);
    } catch {
      throw new Error(`${where} is not UTF-8`);
    }
    if (text.trim() === "") continue;
    try {
      doc = JSON.parse(text);
    } catch {
      throw new Error(`${where} is not JSON`);
    }
    if (doc === null || typeof doc !== "object" || Array.isArray(doc) || jcs(Object.keys(doc).sort()) !== jcs(ANCHOR_KEYS) || doc.pte_anchor !== "1") {
      throw new Error(`${where} is not an anchor`);
    }
    if (!Number.isInteger(doc.seq) || doc.seq < 0) throw new Error(`${where}: seq must be a non-negative integer`);
    if (!ANCHOR_KEYS.filter((k) => k !== "seq").every((k) => typeof doc[k] === "string")) throw new Error(`${where}: malformed member`);
    if (doc.prev !== prev) throw new Error(`${where}: the chain is broken (a line before it was removed or edited)`);
    if (doc.key_id !== keyId) throw new Error(`${where}: signed by key ${doc.key_id.slice(0, 16)}…, not the deployment's key`);
    const { signature, ...signed } = doc;
    const message = Buffer.from(ANCHOR_DOMAIN + jcs(signed), "utf8");
    const valid = /^[0-9a-fA-F]{128}$/.test(signature) && cryptoVerify(null, message, publicKey, Buffer.from(signature, "hex"));
    if (!valid || jcs(doc) !== text) throw new Error(`${where}: the signature does not verify (forged or edited)`);
    anchors.push(doc);
    prev = sha256Hex(Buffer.concat([raw, Buffer.from("\n")]));
  }
  return anchors;
}

/**
 * Check each run of a verified log against the deployment's anchors: every anchor of a run
 * names a record the run reaches, with the anchor's hash; a sealed run has at least one, and
 * so does a run whose run_started names its deployment (a bound run is anchored as it starts).
 * Returns { problem, runs, anchors }.
 */
export function checkAnchors(report, anchors) {
  const byRun = new Map();
  for (const a of anchors) {
    if (!byRun.has(a.run_id)) byRun.set(a.run_id, []);
    byRun.get(a.run_id).push(a);
  }
  let signed = 0;
  for (const [run, records] of report.runRecords) {
    const mine = byRun.get(run) ?? [];
    const bySeq = new Map(records.map((r) => [r.seq, r]));
    const last = records.length ? records[records.length - 1].seq : -1;
    for (const a of mine) {
      const record = bySeq.get(a.seq);
      if (record === undefined) {
        return { problem: `run ${run} falls short of its signed anchor: the deployment anchored record ${a.seq} at ${a.time}, the run's records end at ${last} (truncated)` };
      }
      if (record.hash !== a.head) {
        return { problem: `run ${run}'s record ${a.seq} is not the one the deployment signed at ${a.time} (edited and re-hashed, or another log's)` };
      }
    }
    if (mine.length === 0 && records.some((r) => r.type === "run_finished")) {
      return { problem: `run ${run} is sealed but the deployment never anchored it (made up, or rewritten, without the deployment key)` };
    }
    if (mine.length === 0 && records.some((r) => r.bound)) {
      return { problem: `run ${run} names a deployment but was never anchored: its start was never signed (made up, or rewritten, without the deployment key)` };
    }
    signed += mine.length;
  }
  return { problem: null, runs: report.runRecords.size, anchors: signed };
}

// ---------------------------------------------------------------------------------------
// The verdict: which checks were made and what each found (as `pte audit verify` says it)
// ---------------------------------------------------------------------------------------

export const CHECKED = "checked";
export const FAILED = "failed";
export const NOT_AVAILABLE = "not available";

/**
 * The checks of a verdict, named as PTE names them: chain, schema, sealed, anchors and, when
 * a checkpoint was given, checkpoint; each { state, detail }. `anchors`: the anchors file's
 * anchors (or an Error when it does not read), or undefined without a deployment key.
 */
export function judge(report, anchors, checkpoint) {
  const checks = {};
  if (report.intact) {
    checks.chain = { state: CHECKED, detail: `${report.records} record(s), ${report.runs} run(s): canonical, chained and hashed right` };
    checks.schema = { state: CHECKED, detail: "every record valid against the audit record schema" };
  } else if (report.schema_issue) {
    checks.chain = { state: NOT_AVAILABLE, detail: `checked up to ${report.issue}, not past it` };
    checks.schema = { state: FAILED, detail: report.issue };
  } else {
    checks.chain = { state: FAILED, detail: report.issue };
    checks.schema = { state: NOT_AVAILABLE, detail: `not checked past ${report.issue}` };
  }
  if (!report.intact) checks.sealed = { state: NOT_AVAILABLE, detail: "not checked: the records do not verify" };
  else if (report.complete) checks.sealed = { state: CHECKED, detail: "every run sealed (or resumed by a later run)" };
  else checks.sealed = { state: FAILED, detail: report.issue };
  if (anchors === undefined) {
    checks.anchors = { state: NOT_AVAILABLE, detail: "no deployment public key given: a cut at the end or a consistent rewrite cannot be ruled out" };
  } else if (!report.intact) {
    checks.anchors = { state: NOT_AVAILABLE, detail: "not checked: the records do not verify" };
  } else if (anchors instanceof Error) {
    checks.anchors = { state: FAILED, detail: anchors.message };
  } else {
    const found = checkAnchors(report, anchors);
    checks.anchors = found.problem !== null
      ? { state: FAILED, detail: found.problem }
      : { state: CHECKED, detail: `${found.runs} run(s) as the deployment signed them (${found.anchors} anchor(s)); records after a run's last anchor are covered by the chain only` };
  }
  if (checkpoint !== null && checkpoint !== undefined) {
    checks.checkpoint = checkpoint.ok
      ? { state: CHECKED, detail: `the checkpoint of ${checkpoint.records} record(s) holds` }
      : { state: FAILED, detail: checkpoint.problem };
  }
  const failed = Object.entries(checks).filter(([, c]) => c.state === FAILED).map(([name]) => name);
  const status = failed.some((name) => name !== "sealed") ? "tampered" : failed.length ? "incomplete" : "ok";
  // The problem named: a tampering before a run merely not sealed.
  const first = failed.find((name) => name !== "sealed") ?? failed[0];
  const problem = first !== undefined ? checks[first].detail : null;
  return { status, ok: status === "ok", problem, checks };
}

// ---------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------

function usage(message) {
  process.stderr.write(`verify.mjs: ${message}\n`);
  process.exit(2);
}

function main(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => (i + 1 < argv.length ? argv[++i] : usage(`${a} needs a value`));
    if (a === "--json") args.json = true;
    else if (a === "--checkpoint") args.checkpoint = next();
    else if (a === "--public-key") args.publicKey = next();
    else if (a === "--jcs") args.jcs = next();
    else if (a === "--deployment-key") args.deploymentKey = next();
    else if (a === "--anchors") args.anchors = next();
    else if (a.startsWith("-")) usage(`unknown option ${a}`);
    else if (args.log === undefined) args.log = a;
    else usage(`unexpected argument ${a}`);
  }
  if (args.jcs !== undefined) {
    // One JSON value per line in; its JCS form and SHA-256 out, one JSON array per line.
    const text = readFileSync(args.jcs, "utf8");
    const out = [];
    for (const line of text.split("\n")) {
      if (line === "") continue;
      try {
        const c = jcs(JSON.parse(line));
        out.push(JSON.stringify([c, sha256Hex(c)]));
      } catch (e) {
        out.push(JSON.stringify([null, e.message]));
      }
    }
    process.stdout.write(out.join("\n") + "\n");
    return 0;
  }
  if (args.log === undefined) usage("give a LOG");
  if ((args.checkpoint === undefined) !== (args.publicKey === undefined)) usage("--checkpoint needs --public-key (and back)");
  if ((args.deploymentKey === undefined) !== (args.anchors === undefined)) usage("--deployment-key needs --anchors (and back)");
  let buf;
  try {
    buf = readFileSync(args.log);
  } catch (e) {
    usage(`cannot read ${args.log}: ${e.message}`);
  }
  const report = verifyLog(buf);
  let checkpoint = null;
  if (args.checkpoint !== undefined) {
    let doc;
    let key;
    try {
      doc = JSON.parse(readFileSync(args.checkpoint, "utf8"));
      key = loadPublicKey(args.publicKey);
    } catch (e) {
      usage(e.message);
    }
    const problem = report.intact || report.heads.length ? checkCheckpoint(doc, key, report) : "the log does not verify";
    checkpoint = { ok: problem === null, records: doc.records, problem };
  }
  let anchors;
  if (args.deploymentKey !== undefined) {
    let key;
    try {
      key = loadPublicKey(args.deploymentKey);
    } catch (e) {
      usage(e.message);
    }
    let file = null;
    try {
      file = readFileSync(args.anchors);
    } catch (e) {
      if (e.code !== "ENOENT") usage(`cannot read ${args.anchors}: ${e.message}`);
    }
    try {
      anchors = file === null ? [] : readAnchors(file, key); // no file yet: nothing anchored
    } catch (e) {
      anchors = e;
    }
  }
  const verdict = judge(report, anchors, checkpoint);
  const { heads, runRecords, schema_issue, ...summary } = report;
  if (args.json) {
    process.stdout.write(JSON.stringify({ ...summary, ...verdict, checkpoint }) + "\n");
  } else {
    const first = verdict.ok
      ? `ok: ${report.records} record(s), ${report.runs} run(s)` + (checkpoint ? `, checkpoint of ${checkpoint.records} record(s) holds` : "")
      : `${verdict.status === "incomplete" ? "incomplete" : "FAILED"}: ${verdict.problem}`;
    const lines = [first, ...Object.entries(verdict.checks).map(([name, c]) => `  ${name.padEnd(10)} ${c.state}: ${c.detail}`)];
    process.stdout.write(lines.join("\n") + "\n");
  }
  return verdict.ok ? 0 : 1;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = main(process.argv.slice(2));
}
