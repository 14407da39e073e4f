"""Secrets never reach the run log: each form a command line carries one in, pinned input ->
output, and arguments that only look near a secret left alone (core/redact.py's rules)."""

import time

import pytest

from trainmeter.core.redact import looks_random, redact_argv, redact_text

SK = "sk-" + "A1b2C3d4E5f6G7h8J9k0"  # 23 characters: an OpenAI-style key
SK_PROJ = "sk-proj-" + "Zz09" * 6
GHP = "ghp_" + "a1B2" * 9  # 36 characters after the prefix, as GitHub issues them
GHO = "gho_" + "Q7w8" * 9
PAT = "github_pat_11ABCDEFG0" + "x_Y1" * 10
HF = "hf_" + "abcdEFGH1234" * 3
XOXB = "xoxb-1234567890-0987654321-" + "AbCdEf" * 4
AKIA = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example id
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # AWS's documented example secret
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
RANDOM = "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY2z"  # 34 random-looking characters, 10 digits
GLPAT = "glpat-" + "x" * 20  # GitLab's personal access token: 20 characters after glpat-
STRIPE = "sk_live_51H" + "abcdefghijklmnopqrstuv"  # Stripe secret key; rk_live_ is restricted
NPM = "npm_" + "abcdefghijklmnopqrstuvwxyz0123456789"  # 36 characters, as npm issues them
SLACK_HOOK = "https://hooks.slack.com/services/T00000000/B00000000/" + "X" * 24

CASES = [
    # by shape, wherever it stands
    (["train.py", SK], ["train.py", "***"]),  # a positional key
    (["-k", SK], ["-k", "***"]),  # a short flag
    (["-k" + SK], ["-k***"]),  # a short flag with its value attached
    (["--model", SK_PROJ], ["--model", "***"]),  # a key after a harmless flag
    (["--x", GHP], ["--x", "***"]),
    (["clone", f"https://{GHO}@github.com/o/r"], ["clone", "https://***@github.com/o/r"]),
    (["--note", PAT], ["--note", "***"]),
    (["--repo", "org/model", HF], ["--repo", "org/model", "***"]),
    (["--slack", XOXB], ["--slack", "***"]),
    (["--id", AKIA], ["--id", "***"]),
    (["call", JWT], ["call", "***"]),
    (["-H", f"Authorization: Bearer {RANDOM}"], ["-H", "Authorization: Bearer ***"]),
    (["-H", "Authorization: Basic dXNlcjpwYXNzd29yZA=="], ["-H", "Authorization: Basic ***"]),
    (["train.py", GLPAT], ["train.py", "***"]),
    (["--stripe", STRIPE], ["--stripe", "***"]),
    (["--x=rk_live_51H" + "Zz09" * 6], ["--x=***"]),
    (["publish", NPM], ["publish", "***"]),
    (["--notify", SLACK_HOOK], ["--notify", "https://hooks.slack.com/services/***"]),
    # headers: a Name: value whose name is a secret's, the scheme kept
    (["x-api-key:qwertyuiop"], ["x-api-key:***"]),
    (["-H", "X-Auth-Token: abc"], ["-H", "X-Auth-Token: ***"]),
    (["--header", "Authorization: token ghx"], ["--header", "Authorization: token ***"]),
    (["-H", "Authorization: Bearer short"], ["-H", "Authorization: Bearer ***"]),  # < 8 chars
    # URL query parameters and JSON keys, by name
    (["https://x.com/?api_key=zz9secret&x=1"], ["https://x.com/?api_key=***&x=1"]),
    (
        ["--url", "https://h/d?page=2&access_token=t0k"],
        ["--url", "https://h/d?page=2&access_token=***"],
    ),
    (['{"api_key": "supersecret1"}'], ['{"api_key": "***"}']),
    (['{"password":"supersecret2"}'], ['{"password":"***"}']),
    (["--config", '{"token":"supersecret3"}'], ["--config", '{"token":"***"}']),
    (["--kwargs", "{'token': 's2', 'a': 'b'}"], ["--kwargs", "{'token': '***', 'a': 'b'}"]),
    (["--cfg", '{"a": "b", "secret": "c\\"d"}'], ["--cfg", '{"a": "b", "secret": "***"}']),
    # URLs with a password keep the user and host
    (
        ["--db", "postgres://user:PASSWORD@host:5432/db"],
        ["--db", "postgres://user:***@host:5432/db"],
    ),
    (["--url=redis://:s3cret@cache:6379/0"], ["--url=redis://:***@cache:6379/0"]),
    (["mongodb+srv://admin:hunter2@c0.mongodb.net"], ["mongodb+srv://admin:***@c0.mongodb.net"]),
    # by the flag's name: key, token, secret, pass, auth, cookie, credential, hmac, sig., dsn
    (["--api-key", "abc"], ["--api-key", "***"]),
    (["--api_key=abc"], ["--api_key=***"]),
    (["--token", "abc"], ["--token", "***"]),
    (["--hf-token=abc"], ["--hf-token=***"]),
    (["--secret", "abc"], ["--secret", "***"]),
    (["--passphrase", "correct horse"], ["--passphrase", "***"]),
    (["--password", "123456"], ["--password", "***"]),  # a number, still a password
    (["--db-pass=hunter2"], ["--db-pass=***"]),
    (["--auth", "user:pw"], ["--auth", "***"]),
    (["--cookie", "session=abc"], ["--cookie", "***"]),
    (["--credentials", "/etc/gcp.json"], ["--credentials", "***"]),
    (["--hmac", "00ff"], ["--hmac", "***"]),
    (["--signature=deadbeef"], ["--signature=***"]),
    (["--sentry-dsn", "https://k@o1.ingest.sentry.io/1"], ["--sentry-dsn", "***"]),
    (["--key", "7"], ["--key", "***"]),  # exactly "key": even a number
    (["--pw", "1234"], ["--pw", "***"]),  # exactly "pw" or "pwd": even a number
    (["--pwd", "hunter2"], ["--pwd", "***"]),
    (["--passwd=hunter2"], ["--passwd=***"]),
    (["--authorization", "x"], ["--authorization", "***"]),  # not the harmless "author"
    (["--token", "./tok"], ["--token", "***"]),  # a path, but its name says no file/path/dir
    (["--credentials", "true"], ["--credentials", "true"]),  # a switch's value, kept
    (["--aws-secret-access-key", AWS_SECRET], ["--aws-secret-access-key", "***"]),
    (
        ["aws", "configure", "set", "aws_secret_access_key", AWS_SECRET],
        ["aws", "configure", "set", "aws_secret_access_key", "***"],
    ),
    # NAME=VALUE assignments
    (["OPENAI_API_KEY=abc"], ["OPENAI_API_KEY=***"]),
    (["env", "WANDB_API_KEY=abc", "python"], ["env", "WANDB_API_KEY=***", "python"]),
    (["wandb.api_key=abc"], ["wandb.api_key=***"]),
    (["DB_PASSWORD=1234"], ["DB_PASSWORD=***"]),
    (["SESSION_COOKIE=x"], ["SESSION_COOKIE=***"]),
    (["--env=SECRET=bar"], ["--env=SECRET=***"]),  # nested in a flag's value
    (["--set", "a.b=HF_TOKEN=x"], ["--set", "a.b=HF_TOKEN=***"]),
    (["API_KEY=abc def"], ["API_KEY=***"]),  # the whole value, spaces and all
    # an argument of several words: each word as an argument, the whitespace kept
    (["--hf_token hf_x"], ["--hf_token ***"]),
    (["--openai-key sk-inline"], ["--openai-key ***"]),
    (
        ["bash", "-c", "python s.py --api-key abc123xyz --password=hunter3"],
        ["bash", "-c", "python s.py --api-key *** --password=***"],
    ),
    (["--model=gpt2  --token abc"], ["--model=gpt2  --token ***"]),
    (
        ["sh", "-c", """curl -H 'X-Api-Key: k1' -d '{"token": "t 2"}' https://h/?sig=9"""],
        ["sh", "-c", """curl -H 'X-Api-Key: ***' -d '{"token": "***"}' https://h/?sig=9"""],
    ),
    # a long random-looking positional, and one after a short flag
    (["run", RANDOM], ["run", "***"]),
    (["-t", RANDOM], ["-t", "***"]),
]

KEPT = [
    ["train.py", "--lr", "3e-4", "--batch-size", "32", "--epochs=3"],
    ["--max-keys", "5", "--max-new-tokens", "128", "--pad-token-id", "50256"],
    ["--max_tokens=4096", "--passes", "3", "--num-tokens=-1"],
    ["--tokenizer", "gpt2", "--tokenizer_name=meta-llama/Llama-2-7b-hf", "--author", "ada"],
    ["--model", "mistralai/Mistral-7B-Instruct-v0.2", "--revision", "main"],
    ["-v", "-n", "4", "-o", "out/run_2026_01_01", "-p", "8080"],
    ["trainer.max_steps=100", "optimizer.lr=0.1", "model.tokenizer=gpt2", "NUM_TOKENS=5"],
    ["--data", "data/train/shard_00012345_of_00099999.bin", "--seed", "-1"],
    ["--url", "https://example.com/path?q=1", "--db", "postgres://host:5432/db"],
    ["--run-id", "123e4567-e89b-12d3-a456-426614174000", "--", "script.py"],
    ["--keyboard-layout", "us", "--save-every", "1000", "--notes", "a b c"],
    ["--use-auth", "false", "--auth-mode", "none", "--use-token=True", "--password", "off"],
    ["--key-file=/root/.ssh/id_rsa", "--private-key-file", "/k.pem", "--ssh-key-path", "~/.ssh/id"],
    ["--token-dir", "./tok", "--keys_path=../keys", "--password-file", "/run/secrets/db"],
    ["uvicorn", "app.keys:app", "--host", "tokenserver:8080", "--notes", "x: y"],
    ["--url", "https://x.com/a?page=2&q=tok", '{"lr": "3e-4"}', "--cmd", "python t.py --lr 1"],
]


@pytest.mark.parametrize(("argv", "expected"), CASES)
def test_each_secret_form_is_hidden(argv, expected):
    assert redact_argv(argv) == expected


def test_the_table_holds_at_least_30_forms():
    assert len(CASES) >= 30


@pytest.mark.parametrize("argv", KEPT)
def test_arguments_that_are_not_secrets_are_left_alone(argv):
    assert redact_argv(argv) == argv


def test_text_keeps_what_surrounds_a_secret():
    text = f"login {SK} at postgres://u:pw@h/db done"
    assert redact_text(text) == "login *** at postgres://u:***@h/db done"
    text = 'curl -H "X-Auth-Token: abc" "https://h/?token=t&n=1" -d {"pass": "p"} done'
    assert redact_text(text) == (
        'curl -H "X-Auth-Token: ***" "https://h/?token=***&n=1" -d {"pass": "***"} done'
    )


def test_random_looking_needs_length_both_cases_and_digits():
    assert looks_random(RANDOM)
    assert not looks_random(RANDOM[:31])  # 31 characters: too short
    assert not looks_random(RANDOM.lower())  # one case
    assert not looks_random("AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh")  # no digits


def test_nested_names_are_followed_four_deep():
    # --env=, then A= .. D= are 4 nested names: TOKEN= is the 5th, past MAX_NESTED
    assert redact_argv(["--env=A=B=C=TOKEN=x"]) == ["--env=A=B=C=TOKEN=***"]
    assert redact_argv(["--env=A=B=C=D=TOKEN=x"]) == ["--env=A=B=C=D=TOKEN=x"]


def test_the_longest_argument_is_redacted_in_bounded_time_and_depth():
    # 131072 bytes: Linux's longest single argument (MAX_ARG_STRLEN). Before the URL scheme's
    # lookbehind "a" * 131072 took about 30 s (each start rescanned the rest: n² steps, 0.7 s
    # measured at 20000); "a=b" repeated recursed once per "=" past Python's recursion limit.
    # Measured here: under 0.4 s each.
    n = 131072
    started = time.perf_counter()
    assert redact_argv(["a" * n]) == ["a" * n]
    assert redact_argv(["a=b" * (n // 3)]) == ["a=b" * (n // 3)]
    assert redact_argv(["x: " * (n // 3)]) == ["x: " * (n // 3)]
    assert time.perf_counter() - started < 10  # generous: a shared, loaded machine
