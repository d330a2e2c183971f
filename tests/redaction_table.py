"""The redaction table of issue 13: secrets as they appear (shapes recognised anywhere, and named
ones that are secrets because of their key), the carriers they travel in, every place flower writes or
prints a text, and prose with the trigger words that must pass unchanged."""

from __future__ import annotations

import json
import os

import flower

# (the secret as it appears, the part that must never survive). Shape secrets are recognisable
# anywhere; named ones are secrets only because of the key they are assigned to (NAMED below).
B64 = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0"


SHAPES = [
    ("sk-ant-api03-" + "Ab9" * 12, "Ab9Ab9Ab9Ab9"),
    ("sk-ant-admin01-" + "Zq7_" * 8, "Zq7_Zq7_Zq7_"),
    ("sk-proj-" + "T3BlbkFJ" * 5, "T3BlbkFJT3BlbkFJ"),
    ("sk-" + "a1B2c3D4e5F6g7H8i9J0", "a1B2c3D4e5F6g7H8"),
    ("sk_live_" + "51HxYzAbCdEfGh12345", "51HxYzAbCdEfGh12345"),
    ("sk_test_" + "4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc"),
    ("rk_live_" + "51AbCdEfGhIjKlMnOp99", "51AbCdEfGhIjKlMnOp99"),
    ("rk_test_" + "51ZyXwVuTsRqPoNm88", "51ZyXwVuTsRqPoNm88"),
    ("ghp_" + "16C7e42F292c6912E7710c838347Ae178B4a", "16C7e42F292c6912E7710c"),
    ("gho_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345", "aBcDeFgHiJkLmNoPqRsTuV"),
    ("ghu_" + "0123456789abcdefABCDEF0123456789", "0123456789abcdefABCDEF"),
    ("ghs_" + "ZYXWVUTSRQPONMLKJIHGFEDCBA987654", "ZYXWVUTSRQPONMLKJIHGFE"),
    ("ghr_" + "1a2b3c4d5e6f7g8h9i0jKLMNOPQRSTUV", "1a2b3c4d5e6f7g8h9i0jKL"),
    ("github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "11ABCDEFG0123456789_abcd"),
    ("glpat-" + "xT8kP2mN9qR4sV7wY1zB", "xT8kP2mN9qR4sV7wY1zB"),
    ("npm_" + "a0B1c2D3e4F5g6H7i8J9k0L1m2N3o4P5q6R7", "a0B1c2D3e4F5g6H7i8J9k0L1"),
    ("AKIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
    ("ASIAY34FZKBOKMUTVV7A", "Y34FZKBOKMUTVV7A"),
    ("xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp", "AbCdEfGhIjKlMnOp"),
    ("xoxp-987654321098-aBcDeFgHiJ", "987654321098-aBcDeFgHiJ"),
    ("xoxa-2-1234567890-abcdefABCDEF", "1234567890-abcdefABCDEF"),
    ("AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY", "SyD-9tSrke72PouQMnMX"),
    ("AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "SyA1b2C3d4E5f6G7h8I9"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "dozjgNryP4J3jVmNHl0w5N"),
    ("eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJmbG93ZXIifQ.c2lnbmF0dXJlLXBhcnQtaGVyZQ",
     "c2lnbmF0dXJlLXBhcnQtaGVyZQ"),
    (f"-----BEGIN RSA PRIVATE KEY-----\n{B64}\n{B64[::-1]}\n-----END RSA PRIVATE KEY-----", B64[10:40]),
    (f"-----BEGIN OPENSSH PRIVATE KEY-----\n{B64[5:]}\n{B64[::-1]}", B64[20:50]),     # no END line
    (f"-----BEGIN PRIVATE KEY-----\n{B64[3:]}", B64[30:60]),                          # no END line
    ("Authorization: Bearer abcDEF123ghiJKL456mnoPQR", "abcDEF123ghiJKL456"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZDEyMw==", "dXNlcjpwYXNzd29yZDEyMw"),
    ("authorization: token 9f8e7d6c5b4a39281706f5e4", "9f8e7d6c5b4a39281706f5e4"),
    ("Proxy-Authorization: Basic cHJveHk6c2VjcmV0MTIz", "cHJveHk6c2VjcmV0MTIz"),
    ("Bearer eyJraWQiOiJhYmMxMjMiLCJ0eXAiOiJKV1QifQxyz", "eyJraWQiOiJhYmMxMjMi"),
    ("postgres://flower:Pg-s3cret-99@db.example.com:5432/app", "Pg-s3cret-99"),
    ("postgresql://admin:hunter2hunter2@10.0.0.1/db", "hunter2hunter2"),
    ("https://deploy:gh0st-Pa55@git.example.com/repo.git", "gh0st-Pa55"),
    ("redis://:r3disPassW0rd@cache:6379/0", "r3disPassW0rd"),
]


# (key, value): a secret because its key is a secret name
NAMED = [
    ("GITHUB_TOKEN", "plain-looking-value-7781"), ("db_password", "hunter2isnotsafe"),
    ("client_secret", "Q8yz-client-secret-value"), ("api-key", "k3y-for-the-api-000"),
    ("apiKey", "camelCaseKeyValue42"), ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("auth_token", "tok-5566-7788-9900"), ("PASSWORD", "CorrectHorseBattery9"), ("private_key", "pk-material-abc-123"),
    ("access_key", "AKIDEXAMPLEACCESS01"), ("passphrase", "open-sesame-2024x"), ("SLACK_SIGNING_SECRET", "8f742231b10e8888abcd"),
]


def shape_carriers(secret: str) -> dict[str, str]:
    return {
        "plain text": f"the value is {secret} and more",
        "after a newline": f"first line\n{secret}\nlast line",
        "inside JSON": json.dumps({"note": f"use {secret}", "list": [secret]}),
        "in a URL": f"fetch https://api.example.com/v1?key={secret}&x=1 now",
        "in YAML": f"config:\n  value: {secret}\n  other: 1",
        "in a shell command": f"curl -s -H 'X-Key: {secret}' https://example.com | jq .",
    }


def named_carriers(key: str, value: str) -> dict[str, str]:
    env_key = key.upper().replace("-", "_")
    return {
        "env style": f"{env_key}={value if ' ' not in value else repr(value)}",
        "shell export": f"export {env_key}=\"{value}\" && ./run.sh",
        "inside JSON": json.dumps({key: value, "user": "alice"}),
        "in YAML": f"settings:\n  {key}: {value}\n  retries: 3",
        "quoted assignment": f"{key} = '{value}'",
        "after a newline": f"notes\n{key}: \"{value}\"\nend",
    }


def cases():
    for secret, core in SHAPES:
        for carrier, body in shape_carriers(secret).items():
            yield f"{secret[:12]}.. / {carrier}", body, core
    for key, value in NAMED:
        for carrier, body in named_carriers(key, value).items():
            yield f"{key} / {carrier}", body, value


def places(body: str, tmp: str) -> dict[str, str]:
    """Every place a text can leave flower through, rendered to what lands on disk or on screen."""
    out = {"redact": flower.redact(body)}
    out["event --json"] = flower.Event("text", data={"text": body, "nested": {"k": [body]}}).as_json()
    result = flower.StepResult(step="work", text=body, error=body, errors=[body])
    out["manifest row"] = json.dumps(result.row("run"), ensure_ascii=False)
    ledger = flower.Ledger.parse(f"## Status\n{body}\n## Decisions\nx\n## Dead ends\n(none)\n"
                                 f"## Next step\nrun `make`\n## Pointers\n- a.py")
    out["handoff document"] = ledger.render("work", 1)
    carry = flower.assemble_carry(ledger, nav={"handoff document": "/x.md"}, thread=[("user", body), ("assistant", body)])
    out["carry"] = carry.text
    entries = [{"type": "user", "uuid": "u1", "message": {"role": "user", "content": body}},
               {"type": "assistant", "uuid": "a1", "parentUuid": "u1",
                "message": {"role": "assistant", "content": [{"type": "text", "text": body}]}}]
    out["retired transcript"] = flower.slim_transcript(entries, "sid")
    out["show"] = flower.render_entries(entries)
    out["show --raw"] = json.dumps(flower.redact_obj(entries[1]), ensure_ascii=False)
    lineage = flower.Lineage.open(tmp, tmp)
    lineage.remember("work", "sid-1", prompt=body)
    with open(os.path.join(tmp, "lineage.json"), encoding="utf-8") as fh:
        out["lineage start record"] = fh.read()
    return out


PROSE = [
    "tried regex tokenizer: catastrophic backtracking on nested quotes",
    "the tokenizer: splits on whitespace first",
    "secretary: Jane Doe will review the draft",
    "passwordless login works through magic links",
    "tokens: 4,000 used of 200,000",
    "token count: 12000 tokens in the prompt",
    "password: reset flow failed, the mail never arrived",
    "Next step: read the token bucket implementation in rate.py",
    "keyboard: layout is US; key: F5 reloads",
    "the secret sauce is caching, nothing more",
    "secrets.py holds the loader; see secrets.py:40",
    "max_tokens=4096 is the default",
    "num_tokens: 512",
    "token_count = 1200",
    "password = 12345",
    "password: true",
    "api_key: null",
    "TOKEN=${TOKEN}",
    "PASSWORD=<your password here>",
    "db_password: \"\"",
    "client_secret: ****",
    "git log --oneline | head -3",
    "Run git status, then edit flower.py line 40; the token count is 12000.",
    "https://example.com/docs?page=2&sort=asc",
    "user@example.com wrote: the build passes",
    "ssh://git@github.com/owner/repo.git",
    "skip-the-tests flag: --no-tests",
    "risk-based review: sk-level detail is not needed",
    "Bearer tokens are described in RFC 6750",
    "Authorization is handled by the gateway",
    "the tokenizers: bpe and unigram",
    "secretKeeper: a class that wraps the vault",
    "credentialsPath: ~/.config/app",
    "author: flower dev <dev@flower.invalid>",
    "key_id: 42",
    "password_file: /run/secrets/db",
    "AWS_ACCESS_KEY_ID_FILE=/etc/aws/id",
]
