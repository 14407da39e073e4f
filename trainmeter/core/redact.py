"""Hide secrets in a command line before it reaches the run log (which holds physics, never
secrets: docs/spec.md "Run log"). Standard library only.

A value is replaced by ``***`` when any of these says it is a secret (docs/reliability.md
"Secrets"; ``tests/unit/test_redact.py`` pins each form):

- **its shape**, anywhere in any argument: OpenAI/Anthropic-style ``sk-...``, GitHub
  ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``/``github_pat_``, GitLab ``glpat-``/``gldt-``/
  ``glrt-``/``glptt-``, Stripe ``sk_live_``/``rk_live_`` (and ``_test_``), npm ``npm_...``,
  Hugging Face ``hf_...``, Slack ``xox[abprs]-...`` and a Slack webhook's path
  (``https://hooks.slack.com/services/***``), AWS access key ids (``AKIA``/``ASIA`` + 16), JWTs
  (``eyJ...``, three dot-separated parts), ``Bearer``/``Basic`` credentials, and the password
  of a URL (``scheme://user:PASSWORD@host`` keeps ``scheme://user:***@host``);
- **its name**, given by the flag before it (``--flag value``, ``--flag=value``), a
  ``NAME=VALUE`` assignment (``API_KEY=...``, ``wandb.api_key=...``, also nested in a flag's
  value: ``--env=SECRET=***``, :data:`MAX_NESTED` names deep), a header (``X-Api-Key: ***``,
  ``x-auth-token:***``, ``Authorization: token ***``), a URL query parameter
  (``?api_key=***&x=1``), a JSON or Python dict key (``{"token": "***"}``,
  ``{'token': '***'}``) or a bare argument naming an AWS secret (``aws configure set
  aws_secret_access_key VALUE``): the name contains one of :data:`SECRET_WORDS` (key, token,
  secret, pass, auth, cookie, credential, hmac, signature, dsn) or is one of
  :data:`EXACT_SECRET_NAMES` (key, token, pass, pw, pwd, pin);
- **its look**, for a short flag's value (``-k VALUE``) and a positional argument: one of the
  shapes above, or a long random-looking string (:func:`looks_random`).

An argument holding several words (``"--hf_token hf_x"``, ``bash -c "python t.py --api-key
abc"``) is redacted whole by shape, then word by word as a command line of its own, with its
whitespace kept.

Kept, deliberately: a plain number after a name that only counts things (``--max-keys 5``,
``--max-new-tokens 128``, ``--pad-token-id 50256``, ``--passes 3``): a number is hidden only
after a name that names a secret outright (:data:`ALWAYS_WORDS`, or one of
:data:`EXACT_SECRET_NAMES`); one of :data:`PLAIN_VALUES` (``--use-auth false``,
``--auth-mode none``); a path (``/``, ``~``, ``./``, ``../``) after a name that also says
file, path or dir (``--key-file /root/.ssh/id_rsa``); and names built on :data:`HARMLESS`
words (``--tokenizer gpt2``, ``--author``, ``--keyboard``).
"""

from __future__ import annotations

import re

MASK = "***"
SECRET_WORDS = ("key", "token", "secret", "pass", "auth", "cookie", "credential", "hmac",
                "signature", "dsn")  # fmt: skip
ALWAYS_WORDS = ("secret", "passw", "passphrase", "credential", "cookie", "hmac", "signature",
                "dsn", "auth", "apikey", "api_key", "api-key", "private")  # fmt: skip
EXACT_SECRET_NAMES = ("key", "token", "pass", "pw", "pwd", "pin")
HARMLESS = ("tokenizer", "author", "keyboard", "monkey", "keyframe", "passes", "bypass",
            "compass", "passthrough", "keypoint")  # fmt: skip
PLAIN_VALUES = ("true", "false", "none", "null", "yes", "no", "on", "off")
PATH_WORDS = ("file", "path", "dir")
PATH_STARTS = ("/", "~", "./", "../")

# shapes of secrets, replaced wherever they appear (group "keep" is kept before the mask)
_SHAPES = [
    # a URL's password; the scheme starts where a scheme can (else each start rescans: n²)
    re.compile(r"(?<![A-Za-z0-9+.\-])(?P<keep>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:)[^\s@/]+(?=@)"),
    re.compile(r"\bsk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_\-]{16,}"),  # sk-..., sk-proj-..., sk-ant-...
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    re.compile(r"\bgl(?:pat|dt|rt|ptt)-[A-Za-z0-9_\-]{20,}"),  # GitLab tokens
    re.compile(r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{10,}"),  # Stripe secret and restricted keys
    re.compile(r"\bnpm_[A-Za-z0-9]{36,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"(?P<keep>\bhooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_\-]+"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"),  # a JWT
    re.compile(r"(?i)(?P<keep>\b(?:bearer|basic)\s+)[A-Za-z0-9+/=_\-.~]{8,}"),
]
# a value after its name, hidden when the name is a secret's (_hide): JSON, URL query, header
_NAMED = [
    # "name": "value" (JSON), or 'name': 'value' (a Python dict)
    re.compile(
        r"""(?P<keep>(?P<q>["'])(?P<name>(?:(?!(?P=q))[^\\])+)(?P=q)\s*:\s*(?P=q))"""
        r"""(?P<value>(?:(?!(?P=q))[^\\]|\\.)*)(?=(?P=q))"""
    ),
    re.compile(r"(?P<keep>[?&](?P<name>[^=&#\s?]+)=)(?P<value>[^&#\s]*)"),
    # Name: value, not a URL's scheme (//) nor a module path (pkg.mod:func)
    re.compile(
        r"(?i)(?<![\w.\-])(?P<keep>(?P<name>[a-z][\w\-]*):\s*(?:(?:bearer|basic|token)\s+)?)"
        r"(?P<value>[^\s\"',;/][^\s\"',;]*)"
    ),
]
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_ASSIGN = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)=(?P<value>.*)", re.S)
_AWS_NAME = re.compile(r"aws_[a-z_]*(?:secret|token|key)[a-z_]*", re.I)
_RANDOM = re.compile(r"[A-Za-z0-9+/=_\-]{32,}")
_SPACE = re.compile(r"(\s+)")
MAX_NESTED = 4  # NAME=VALUE inside a value, followed this deep (a=b=c=...: recursion, time)


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with every secret replaced by ``***`` (see the module's rules); other
    arguments unchanged, in order. Never raises for a list of strings."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("--"):  # a flag is no value: --token --verbose
            hide_next = False
            out.append(_hidden_value(arg, out[-1]))
            continue
        if _several_words(arg):
            text, hide_next = _words(arg), False
        elif arg.startswith("-") and len(arg) > 1 and not _NUMBER.fullmatch(arg):
            text, hide_next = _flag(arg)
        elif _AWS_NAME.fullmatch(arg):
            text, hide_next = arg, True
        else:
            text = _assignment(arg)
        out.append(text)
    return out


def redact_text(text: str) -> str:
    """``text`` with every secret of a known shape, or named before it (header, URL query,
    JSON key), replaced (``scheme://user:***@host``)."""
    for shape in _SHAPES:
        text = shape.sub(_mask, text)
    for named in _NAMED:
        text = named.sub(_mask_named, text)
    return text


def looks_random(value: str) -> bool:
    """True for a long random-looking token: 32 characters or more of letters, digits and
    ``+/=_-``, with upper and lower case letters and at least 4 digits (model names and paths
    have dots, few digits or one case)."""
    if not _RANDOM.fullmatch(value):
        return False
    digits = sum(c.isdigit() for c in value)
    return digits >= 4 and any(c.isupper() for c in value) and any(c.islower() for c in value)


def secret_name(name: str) -> bool:
    """Does a flag or variable name (dashes stripped) name a secret (one of
    :data:`EXACT_SECRET_NAMES`, or :data:`SECRET_WORDS` once :data:`HARMLESS` words are taken
    out)?"""
    low = re.sub("authori[sz]", "auth", name.lower().lstrip("-"))  # not HARMLESS's author
    if low in EXACT_SECRET_NAMES:
        return True
    for word in HARMLESS:
        low = low.replace(word, "")
    return any(w in low for w in SECRET_WORDS)


def _always(name: str) -> bool:
    """A name that hides even a number after it (``--password 123456``, ``--pin 1234``)."""
    low = name.lower().lstrip("-")
    return low in EXACT_SECRET_NAMES or any(w in low for w in ALWAYS_WORDS)


def _plain(name: str, value: str) -> bool:
    """A value that is no secret after a secret's name: a switch (``--use-auth false``), or a
    path after a name that says it takes one (``--key-file /root/.ssh/id_rsa``)."""
    if value.lower() in PLAIN_VALUES:
        return True
    low = name.lower()
    return value.startswith(PATH_STARTS) and any(w in low for w in PATH_WORDS)


def _hide(name: str, value: str) -> bool:
    """Hide ``value`` given after (or assigned to) ``name``?"""
    if not secret_name(name):
        return looks_random(value)
    if _plain(name, value):
        return False
    return _always(name) or not _NUMBER.fullmatch(value)


def _flag(arg: str) -> tuple[str, bool]:
    """A flag argument, redacted; and whether the next argument is its secret value."""
    if "=" in arg:
        name, value = arg.split("=", 1)
        return f"{name}={MASK if _hide(name, value) else _free(value)}", False
    if arg.startswith("--"):
        return arg, secret_name(arg)
    # a short flag: -k VALUE, or -kVALUE: hidden when the value looks like a secret
    if len(arg) > 2:
        return arg[:2] + (MASK if looks_random(arg[2:]) else redact_text(arg[2:])), False
    return arg, True


def _hidden_value(value: str, flag: str) -> str:
    """The argument after a flag that may take a secret (``flag`` as it was written out)."""
    if flag.startswith("--") or _AWS_NAME.fullmatch(flag):
        return MASK if _hide(flag, value) else _free(value)
    # after a short flag only the value's look says
    return MASK if looks_random(value) else _free(value)


def _assignment(arg: str, nested: int = 0) -> str:
    """A positional argument: ``NAME=VALUE`` by its name, anything else by its look;
    ``nested``: how many names (``--env=A=...``) came before it in the same argument."""
    m = _ASSIGN.fullmatch(arg) if nested <= MAX_NESTED else None
    if m is None:
        return MASK if looks_random(arg) else redact_text(arg)
    if _hide(m["name"], m["value"]):
        return f"{m['name']}={MASK}"
    return f"{m['name']}={_free(m['value'], nested + 1)}"  # it may name a secret: A=SECRET=x


def _free(value: str, nested: int = 1) -> str:
    """A value its name does not hide, redacted as a positional argument (``SECRET=x`` by
    its name) or, holding several words, word by word."""
    return _words(value) if _several_words(value) else _assignment(value, nested)


def _several_words(arg: str) -> bool:
    """Several words, not one ``NAME=VALUE`` whose value has spaces (``--pass=a b``)."""
    return _SPACE.search(arg.split("=", 1)[0]) is not None


def _words(arg: str) -> str:
    """An argument of several words: shapes over it whole (``Bearer X``, JSON), then each
    word redacted as an argument of its own command line, the whitespace kept."""
    parts = _SPACE.split(redact_text(arg))
    parts[::2] = redact_argv(parts[::2])
    return "".join(parts)


def _mask(m: re.Match) -> str:
    keep = m.groupdict().get("keep") or ""
    return keep + MASK


def _mask_named(m: re.Match) -> str:
    return m["keep"] + MASK if _hide(m["name"], m["value"]) else m[0]
