"""Fake credentials in the real formats of many providers (none of them is live).

Each is built from a seeded generator, so the corpus is the same on every run and no
string in the repository looks like a usable key. `FREE_TEXT` are credentials as they
appear in prose, logs, headers and URLs; `KEYED` are values under secret-looking keys.
"""

from __future__ import annotations

import random
import string

_rng = random.Random(20261123)

UPPER = string.ascii_uppercase
LOWER = string.ascii_lowercase
DIGITS = string.digits
ALNUM = string.ascii_letters + DIGITS
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


def _r(alphabet: str, n: int) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


# (provider, how it appears, the secret text that must never be printed or logged)
FREE_TEXT: list[tuple[str, str, str]] = []


def _add(provider: str, template: str, secret: str) -> None:
    FREE_TEXT.append((provider, template.format(s=secret), secret))


_add("aws", "access key id {s} in use", "AKIA" + _r(UPPER + "234567", 16))
_add("aws", "temporary id {s}.", "ASIA" + _r(UPPER + "234567", 16))
_add("aws", "aws_secret_access_key = {s}", _r(B64, 40))
_add("aws", "export AWS_SECRET_ACCESS_KEY={s}", _r(B64, 40))
_azure_key = _r(B64, 86) + "=="
_add(
    "azure",
    "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={s};EndpointSuffix=core.windows.net",
    _azure_key,
)
_add(
    "azure",
    "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey={s}",
    _r(B64, 43) + "=",
)
_add("azure", "https://acme.blob.core.windows.net/c/f.csv?sv=2022-11-02&sp=r&sig={s}", _r(ALNUM, 43) + "%3D")
_add("azure-openai", "api-key: {s}", _r(HEX, 32))
_add("azure-openai", "AZURE_OPENAI_API_KEY={s}", _r(HEX, 32))
_add("huggingface", "token {s} for the hub", "hf_" + _r(ALNUM, 34))
_add("huggingface", "HF_TOKEN={s}", "hf_" + _r(ALNUM, 34))
_add("github", "pushed with {s}", "ghp_" + _r(ALNUM, 36))
_add("github", "fine-grained {s}", "github_pat_" + _r(ALNUM, 22) + "_" + _r(ALNUM, 59))
_add("github", "app token {s}", "ghs_" + _r(ALNUM, 36))
_add("gitlab", "clone with {s}.", "glpat-" + _r(URLSAFE, 20))
_add("sendgrid", "mail key {s}", "SG." + _r(URLSAFE, 22) + "." + _r(URLSAFE, 43))
_add("npm", "//registry.npmjs.org/:_authToken={s}", "npm_" + _r(ALNUM, 36))
_add("npm", "npm token {s}, keep it", "npm_" + _r(ALNUM, 36))
_add("slack", "bot {s}", "xoxb-" + _r(DIGITS, 12) + "-" + _r(DIGITS, 13) + "-" + _r(ALNUM, 24))
_add(
    "slack",
    "user {s}",
    "xoxp-" + _r(DIGITS, 12) + "-" + _r(DIGITS, 12) + "-" + _r(DIGITS, 13) + "-" + _r(HEX, 32),
)
_slack_hook = "T" + _r(UPPER + DIGITS, 10) + "/B" + _r(UPPER + DIGITS, 10) + "/" + _r(ALNUM, 24)
_add("slack", "post to https://hooks.slack.com/services/{s}", _slack_hook)
_add("stripe", "charge with {s}", "sk_live_" + _r(ALNUM, 24))
_add("stripe", "restricted {s})", "rk_live_" + _r(ALNUM, 24))
_add("openai", "OPENAI_API_KEY={s}", "sk-proj-" + _r(URLSAFE, 48))
_add("openai", "legacy key {s}", "sk-" + _r(ALNUM, 48))
_add("anthropic", "x-api-key: {s}", "sk-ant-api03-" + _r(URLSAFE, 93) + "AA")
_add("google", "maps key {s}", "AIza" + _r(URLSAFE, 35))
_add(
    "google", "https://maps.googleapis.com/maps/api/geocode/json?key={s}&address=x", "AIza" + _r(URLSAFE, 35)
)
_jwt = "eyJ" + _r(URLSAFE, 30) + ".eyJ" + _r(URLSAFE, 60) + "." + _r(URLSAFE, 43)
_add("jwt", "Authorization: Bearer {s}", _jwt)
_add("http", "curl -H 'Authorization: Basic {s}'", _r(B64, 28) + "==")
_pem_body = "\n".join(_r(B64, 64) for _ in range(6))
_add(
    "pem",
    "key:\n-----BEGIN RSA PRIVATE KEY-----\n{s}\n-----END RSA PRIVATE KEY-----\n",
    _pem_body,
)
_add("url", "postgres://admin:{s}@db.internal:5432/ledger", "p@ss/w0rd:" + _r(ALNUM, 10))
_add("url", "redis://:{s}@cache.internal:6379/0", _r(ALNUM, 20))
_add("twilio", "twilio key {s}", "SK" + _r(HEX, 32))
_add("mailgun", "mailgun {s}", "key-" + _r(HEX, 32))
_add("shopify", "shopify {s}", "shpat_" + _r(HEX, 32))
_add("digitalocean", "do token {s}", "dop_v1_" + _r(HEX, 64))
_add("databricks", "databricks {s}", "dapi" + _r(HEX, 32))
_add("pypi", "pypi {s}", "pypi-AgEIcHlwaS5vcmc" + _r(URLSAFE, 70))
_add("postman", "postman {s}", "PMAK-" + _r(HEX, 24) + "-" + _r(HEX, 34))
_add("linear", "linear {s}", "lin_api_" + _r(ALNUM, 40))
_add("telegram", "bot token {s}", _r(DIGITS, 10) + ":AA" + _r(URLSAFE, 33))
_add("generic", "password={s} next", "Tr0ub4dor&3-" + _r(ALNUM, 6))
_add("generic", "db_password: {s}", "s3cr3t!" + _r(ALNUM, 8))
_add("generic", '{{"passphrase": "{s}"}}', "correct horse " + _r(LOWER, 6))

# Values under secret-looking keys (the key rule), as a tool might return them.
KEYED: dict[str, str] = {
    "api_key": _r(ALNUM, 24),
    "password": "hunter2-" + _r(ALNUM, 6),
    "secret_key": _r(ALNUM, 32),
    "pwd": _r(ALNUM, 12),
    "passphrase": "open " + _r(LOWER, 8),
    "credentials": _r(ALNUM, 20),
    "private_key_id": _r(HEX, 40),
    "signing_key": _r(B64, 44),
    "sessionid": _r(HEX, 32),
    "aws_secret_access_key": _r(B64, 40),
    "client_secret": _r(URLSAFE, 40),
    "refresh_token": _r(URLSAFE, 64),
    "Authorization": "Token " + _r(HEX, 40),
    "connection_string": "Server=db;User Id=sa;Password=" + _r(ALNUM, 12),
}

PROVIDERS = sorted({provider for provider, _, _ in FREE_TEXT})

ALL_SECRETS: list[str] = [secret for _, _, secret in FREE_TEXT] + list(KEYED.values())


def fragments(secret: str) -> list[str]:
    """Pieces of a secret that must not appear either (a multi-line secret line by line)."""
    return [line for line in secret.splitlines() if len(line) >= 8] or [secret]
