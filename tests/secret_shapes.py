"""Secrets and code for the redaction tests and bench/redact.py (issue 37, issue 44).

SHAPES: credentials constructed from each kind's documented token format (not copied from any rule
list), each with the part that must never survive and the reason it is a secret. CODE: lines of code
and prose with the trigger words that must come through unchanged. The corpus builders make realistic
texts deterministically (no secret unless asked): a build/test log, a JSON API dump, source files and a
transcript mix with one secret per 10 KB."""

from __future__ import annotations

import json
import random

_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_HEX = "0123456789abcdef"
_B64 = _ALNUM + "+/"


def fill(alphabet: str, n: int, seed: int) -> str:
    """``n`` characters of ``alphabet``, the same for the same seed."""
    rnd = random.Random(seed)
    return "".join(rnd.choice(alphabet) for _ in range(n))


def _a(n: int, seed: int) -> str:
    return fill(_ALNUM, n, seed)


def _h(n: int, seed: int) -> str:
    return fill(_HEX, n, seed)


_KEY = "\n".join(fill(_B64, 64, 900 + i) for i in range(4))
_PGP_BODY = "\n".join(fill(_B64, 64, 950 + i) for i in range(3))


def _shapes() -> list[tuple[str, str, str]]:
    s: list[tuple[str, str, str]] = []

    def add(text: str, core: str, why: str) -> None:
        s.append((text, core, why))

    # --- prefixed tokens: a vendor prefix and a random body --------------------------------------------
    for i, (prefix, body, why) in enumerate([
        ("sk-ant-api03-", _a(40, 1) + "-" + _a(20, 2), "Anthropic API key: sk-ant-api03- + base64url"),
        ("sk-ant-admin01-", _a(48, 3), "Anthropic admin key"),
        ("sk-ant-oat01-", _a(48, 4), "Anthropic OAuth token (sk- family)"),
        ("sk-proj-", _a(48, 5), "OpenAI project key"),
        ("sk-svcacct-", _a(40, 6), "OpenAI service-account key"),
        ("sk-", _a(48, 7), "OpenAI legacy user key"),
        ("sk_live_", _a(24, 8), "Stripe secret key, live"),
        ("sk_test_", _a(24, 9), "Stripe secret key, test mode still grants API access"),
        ("rk_live_", _a(24, 10), "Stripe restricted key"),
        ("ghp_", _a(36, 11), "GitHub classic personal access token"),
        ("gho_", _a(36, 12), "GitHub OAuth access token"),
        ("ghu_", _a(36, 13), "GitHub App user-to-server token"),
        ("ghs_", _a(36, 14), "GitHub App installation token"),
        ("ghr_", _a(36, 15), "GitHub refresh token"),
        ("github_pat_", _a(22, 16) + "_" + _a(59, 17), "GitHub fine-grained PAT"),
        ("glpat-", _a(20, 18), "GitLab personal access token"),
        ("glrt-", _a(20, 19), "GitLab runner authentication token"),
        ("gldt-", _a(20, 20), "GitLab deploy token"),
        ("glptt-", _h(40, 21), "GitLab pipeline trigger token"),
        ("npm_", _a(36, 22), "npm automation/publish token"),
        ("xoxb-", "1234567890123-1234567890123-" + _a(24, 23), "Slack bot token"),
        ("xoxp-", "1234567890123-1234567890123-1234567890123-" + _h(32, 24), "Slack user token"),
        ("xapp-", "1-A0123456789-1234567890123-" + _h(64, 25), "Slack app-level token"),
        ("AIza", "Sy" + _a(33, 26), "Google API key"),
        ("ya29.", "a0" + _a(60, 27), "Google OAuth 2 access token"),
        ("GOCSPX-", _a(28, 28), "Google OAuth client secret"),
        ("hf_", fill("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", 34, 29), "Hugging Face user token"),
        ("api_org_", _a(34, 30), "Hugging Face organisation token"),
        ("SG.", _a(22, 31) + "." + _a(43, 32), "SendGrid API key: SG.<id>.<secret>"),
        ("dop_v1_", _h(64, 33), "DigitalOcean personal access token"),
        ("doo_v1_", _h(64, 34), "DigitalOcean OAuth token"),
        ("dapi", _h(32, 35), "Databricks personal access token"),
        ("dapi", _h(32, 36) + "-2", "Databricks token with its workspace suffix"),
        ("key-", _h(32, 37), "Mailgun API key"),
        ("shpat_", _h(32, 38), "Shopify Admin API access token"),
        ("shpss_", _h(32, 39), "Shopify app shared secret"),
        ("HRKU-", "AA" + _a(58, 40), "Heroku API key, HRKU- format"),
        ("ATATT", "3xFfGF0" + _a(180, 41) + "=" + _h(8, 42), "Atlassian API token"),
        ("pypi-", "AgEIcHlwaS5vcmc" + _a(60, 43), "PyPI upload token (macaroon)"),
        (_a(14, 44) + ".atlasv1.", _a(67, 45), "Terraform Cloud API token"),
        ("hvs.", "CAESI" + _a(85, 46), "Vault service token"),
        ("hvb.", "AAAAAQ" + _a(120, 47), "Vault batch token"),
        ("lin_api_", _a(40, 48), "Linear API key"),
        ("secret_", _a(43, 49), "Notion integration secret (old format)"),
        ("ntn_", "1" * 11 + _a(35, 50), "Notion integration token"),
        ("AGE-SECRET-KEY-1", fill("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58, 51).upper(), "age identity (private key)"),
        ("sq0atp-", _a(22, 52), "Square access token (sandbox format)"),
        ("sq0csp-", _a(43, 53), "Square OAuth secret"),
        ("EAAA", _a(60, 54), "Square production access token"),
    ]):
        token = prefix + body
        add(token, body[-16:], why)
    add("AKIA" + fill("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, 60), fill("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, 60),
        "AWS access key id")
    add("ASIA" + fill("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, 61), fill("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, 61),
        "AWS temporary access key id")
    add("AROA" + fill("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, 62), fill("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, 62),
        "AWS role id (identifies a principal)")
    jwt = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6ImZsb3dlciJ9." + _a(43, 63))
    add(jwt, jwt[-20:], "JWT: three base64url parts, header starts eyJ")
    discord = "MTk4NjIyNDgzNDcxOTI1MjQ4" + "." + _a(6, 64) + "." + _a(38, 65)
    add(discord, discord[-20:], "Discord bot token: base64(user id).timestamp.hmac")
    tele = "123456789:AA" + _a(33, 66)
    add(tele, tele[-20:], "Telegram bot token: id:35-character secret")
    add("https://api.telegram.org/bot" + tele + "/getMe", tele[-20:], "Telegram bot token inside the API URL")
    add("https://hooks.slack.com/services/T0" + _a(8, 67).upper() + "/B0" + _a(8, 68).upper() + "/" + _a(24, 69),
        _a(24, 69), "Slack incoming webhook URL (the path is the credential)")
    add("https://discord.com/api/webhooks/123456789012345678/" + _a(68, 70), _a(68, 70)[-30:],
        "Discord webhook URL")
    add("https://" + _h(32, 71) + "@o123456.ingest.sentry.io/4504", _h(32, 71), "Sentry DSN: the key before @")

    # --- key blocks -------------------------------------------------------------------------------------
    add(f"-----BEGIN RSA PRIVATE KEY-----\n{_KEY}\n-----END RSA PRIVATE KEY-----", _KEY[70:110], "PEM RSA key")
    add(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{_KEY}", _KEY[140:180], "OpenSSH key, END line cut off")
    add(f"-----BEGIN EC PRIVATE KEY-----\n{_KEY[:130]}\n-----END EC PRIVATE KEY-----", _KEY[66:100], "PEM EC key")
    add(f"-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\n{_PGP_BODY}\n=Ab3x\n"
        f"-----END PGP PRIVATE KEY BLOCK-----", _PGP_BODY[70:110], "PGP private key block")
    add(f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{_PGP_BODY}", _PGP_BODY[140:180], "PGP block, END cut off")
    add("PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: ci\nPublic-Lines: 2\n"
        f"{_KEY[:64]}\n{_KEY[65:100]}\nPrivate-Lines: 1\n{_KEY[130:194]}\nPrivate-MAC: {_h(64, 72)}",
        _KEY[140:180], "PuTTY .ppk private lines")
    gcp = json.dumps({"type": "service_account", "private_key_id": _h(40, 73),
                      "private_key": f"-----BEGIN PRIVATE KEY-----\n{_KEY}\n-----END PRIVATE KEY-----\n"})
    add(gcp, _KEY[200:240], "GCP service-account JSON: the PEM key with escaped newlines")

    # --- headers ----------------------------------------------------------------------------------------
    add("Authorization: Bearer " + _a(40, 74), _a(40, 74)[:20], "Authorization header, Bearer")
    add("Authorization: Basic " + _a(28, 75) + "==", _a(28, 75), "Authorization header, Basic")
    add("authorization: token " + _h(40, 76), _h(40, 76), "GitHub-style token scheme")
    add("Proxy-Authorization: Basic " + _a(24, 77), _a(24, 77), "proxy credentials")
    add("Authorization: Bot " + discord, discord[-20:], "Discord bot header")
    add("Bearer " + _a(32, 78), _a(32, 78), "a bare bearer token")
    add('curl -H "x-api-key: ' + _a(32, 79) + '" https://api.example.com', _a(32, 79), "any secret-named header")
    add("X-Auth-Token: " + _a(32, 80), _a(32, 80), "OpenStack-style auth header")
    add("PRIVATE-TOKEN: " + _a(20, 81), _a(20, 81), "GitLab API header")
    add("X-Vault-Token: s." + _a(24, 82), _a(24, 82), "Vault header (legacy s. token)")
    add("Cookie: session_id=" + _a(32, 83) + "; theme=dark", _a(32, 83), "session cookie")
    add("Set-Cookie: sid=" + _a(32, 84) + "; Path=/; HttpOnly; Secure", _a(32, 84), "cookie being set")

    # --- URLs and connection strings ------------------------------------------------------------------
    add("postgres://flower:Pg-s3cret-" + _a(8, 85) + "@db.example.com:5432/app", "Pg-s3cret-" + _a(8, 85),
        "password in a URL")
    add("redis://:r3dis" + _a(12, 86) + "@cache:6379/0", "r3dis" + _a(12, 86), "redis URL, no user")
    add("mongodb+srv://app:m0ngo" + _a(10, 87) + "@cluster0.example.net/db", "m0ngo" + _a(10, 87),
        "mongodb+srv URL")
    add("https://deploy:" + "ghp_" + _a(36, 88) + "@github.com/o/r.git", _a(36, 88), "git credential in a clone URL")
    add("Server=tcp:db.example.com;Database=app;User Id=app;Password=Odbc" + _a(12, 89) + ";",
        "Odbc" + _a(12, 89), "ODBC / ADO.NET connection string")
    add("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + _a(86, 90) + "==;EndpointSuffix=core.windows.net",
        _a(86, 90)[:30], "Azure storage connection string")
    add("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=" + _a(43, 91) + "=",
        _a(43, 91)[:30], "Azure Service Bus connection string")
    add("https://acct.blob.core.windows.net/c/f?sv=2022-11-02&se=2026-01-01&sig=" + _a(40, 92) + "%3D",
        _a(40, 92), "Azure SAS URL: sig= is the signature")
    add("https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=" + _h(64, 93),
        _h(64, 93), "S3 presigned URL signature")
    add("https://b.s3.amazonaws.com/k?X-Amz-Security-Token=FwoGZXIvYXdzE" + _a(80, 94) + "&X-Amz-Expires=60",
        _a(80, 94)[:30], "S3 presigned URL session token")
    add("jdbc:postgresql://db:5432/app?user=app&password=Jdbc" + _a(10, 95), "Jdbc" + _a(10, 95),
        "JDBC URL password parameter")

    # --- command lines ----------------------------------------------------------------------------------
    add("curl -u admin:Cu" + _a(14, 96) + " https://api.example.com", "Cu" + _a(14, 96), "curl basic auth")
    add("curl --user=ci:Us" + _a(14, 97) + " https://x", "Us" + _a(14, 97), "curl --user=")
    add("mysql -h db -u root -pMy" + _a(12, 98) + " app", "My" + _a(12, 98), "mysql -p<password>")
    add("mysqldump -u root -p'Dump " + _a(10, 99) + "' app", _a(10, 99), "mysqldump -p'<password>'")
    add("psql --password Pq" + _a(12, 100) + " -h db", "Pq" + _a(12, 100), "--password <value>")
    add("deploy --token=Tk" + _a(16, 101), "Tk" + _a(16, 101), "--token=<value>")
    add("client --api-key " + _a(24, 102), _a(24, 102), "--api-key <value>")
    add('vault login -token "' + _a(26, 103) + '"', _a(26, 103), "single-dash flag, quoted value")
    add("machine api.example.com login bot password Nr" + _a(14, 104), "Nr" + _a(14, 104), ".netrc entry")
    add("machine git.example.com\n  login bot\n  password Nr" + _a(14, 105), "Nr" + _a(14, 105),
        ".netrc entry over lines")

    # --- assignments: the name says it is a secret ---------------------------------------------------
    for i, (text, core, why) in enumerate([
        ("INFO: DB_PASSWORD={v}", None, "assignment after a log label"),
        ("note=SECRET={v}", None, "assignment after another assignment"),
        ("Step two: password={v}", None, "assignment after words and a colon"),
        (json.dumps({"cmd": "export GITHUB_TOKEN={v} && make"}), None, "assignment inside a JSON string"),
        (json.dumps(json.dumps({"password": "{v}"})), None, "JSON inside a JSON string (escaped quotes)"),
        ("PGPASSWORD={v} psql -h db", None, "PGPASSWORD (one part ending in password)"),
        ("SENTRY_DSN=https://{v}@sentry.example.com/1", None, "*_DSN"),
        ("DATABASE_CONNECTION_STRING=Host=db;Username=u;Database=app;Extra={v}", None, "*_CONNECTION_STRING"),
        ("SLACK_WEBHOOK_URL=https://example.com/hook/{v}", None, "*_WEBHOOK_URL"),
        ("AUTH_JWT={v}", None, "*_JWT*"),
        ('DOCKER_AUTH_CONFIG={"auths":{"r.example.com":{"auth":"{v}"}}}', None, "docker auth in DOCKER_AUTH_CONFIG"),
        ('{"auths": {"ghcr.io": {"auth": "{v}"}}}', None, "docker config.json auth"),
        ("    client-key-data: {v}", None, "kubeconfig client key"),
        ("    token: {v}", None, "kubeconfig user token"),
        ("db:\n  password: {v}\n  user: app", None, "YAML"),
        ('password = "{v}"', None, "TOML / quoted INI"),
        ("[pypi]\nusername = __token__\npassword = {v}", None, "INI (.pypirc)"),
        ("API_KEY={v}", None, ".env"),
        ('{"apiKey": "{v}", "region": "eu"}', None, "camelCase key in JSON"),
        ('{"client_secret": "{v}"}', None, "OAuth client secret in JSON"),
        ("MYSQL_PWD={v}", None, "MYSQL_PWD"),
        ("passphrase: {v}", None, "passphrase"),
        ("AWS_SECRET_ACCESS_KEY={v}", None, "AWS secret key (no shape of its own)"),
        ("//registry.npmjs.org/:_authToken={v}", None, ".npmrc auth token"),
        ("AZURE_CLIENT_SECRET={v}", None, "Azure service principal secret"),
        ("HEROKU_API_KEY=" + "{v}", None, "Heroku classic API key (a UUID: only the name says so)"),
        ("export ANTHROPIC_AUTH_TOKEN='{v}'", None, "quoted shell export"),
        ("2026-12-04T10:00:00Z worker[12] WARN retrying with api_key={v} after 503", None,
         "assignment in the middle of a log line"),
        ("settings.SECRET_KEY = '{v}'", None, "attribute assigned a literal"),
        ("conn = connect(host='db', password='{v}')", None, "keyword argument with a literal"),
        ("ENCRYPTION_KEY: \"{v}\"", None, "encryption key"),
        ("x-amz-security-token={v}", None, "lowercase S3 query parameter"),
        ("TF_TOKEN_app_terraform_io={v}", None, "Terraform credential variable"),
        ("VAULT_TOKEN={v}", None, "Vault token variable"),
        ("OPENAI_API_KEY={v}", None, "API key variable"),
        ("GOOGLE_CLIENT_SECRET={v}", None, "Google client secret variable"),
        ("csrftoken={v}", None, "one part ending in token"),
        ("signing_key: {v}", None, "signing key"),
    ]):
        value = f"V{i:02d}x" + _a(18, 200 + i)
        add(text.replace("{v}", value), value, why)
    return s


SHAPES = _shapes()

# code and prose with the trigger words: never changed
CODE = [
    "self.api_key = os.environ['API_KEY']",
    "password = getpass.getpass('Password: ')",
    "auth = request.headers.get('Authorization')",
    "c.token = t",
    "Authorization: see the gateway docs",
    "token = os.environ.get('GITHUB_TOKEN')",
    "self.api_key = api_key",
    "api_key = settings.API_KEY",
    "password = config['db']['password']",
    "secret = load_secret(path)",
    "token = self._token",
    "headers = {'Authorization': f'Bearer {token}'}",
    "headers['Authorization'] = 'Bearer ' + token",
    "req.add_header('Authorization', auth)",
    "auth = requests.auth.HTTPBasicAuth(user, password)",
    "def login(self, username: str, password: str) -> Token:",
    "def connect(host, port, password=None, token=None):",
    "    password: str",
    "    api_key: Optional[str] = None",
    "conn = psycopg.connect(dsn=dsn)",
    "client = Client(api_key=api_key, timeout=30)",
    "if token is None: token = refresh()",
    "if password == confirm: save(password)",
    "token := next(tokens)",
    "for key, value in os.environ.items():",
    "secret_name = f'{prefix}_SECRET'",
    "DB_PASSWORD=${DB_PASSWORD}",
    "TOKEN=$(cat /run/secrets/token)",
    "export GITHUB_TOKEN=\"$GH_TOKEN\"",
    "PASSWORD=<your password here>",
    "password: \"{{ vault_password }}\"",
    "api_key: ${API_KEY}",
    "token: null",
    "secret: ''",
    "password = None",
    "SECRET_KEY = env('SECRET_KEY')",
    "key = cache_key(request)",
    "key=lambda item: item[1]",
    "sorted(items, key=len)",
    "primary_key = True",
    "token_count = len(tokens)",
    "max_tokens=4096",
    "password_file: /run/secrets/db",
    "auth_method: oauth",
    "AUTH_TYPE=basic",
    "SSH_AUTH_SOCK=/tmp/ssh-XXXX/agent.123",
    "Author: Jane Doe <jane@example.com>",
    "author = 'Guido'",
    "GIT_AUTHOR_NAME=flower",
    "tokenizer: splits on whitespace first",
    "the password: reset flow failed, the mail never arrived",
    "Password: must be at least 12 characters long",
    "secret: see the vault docs for rotation",
    "token: expires after an hour of inactivity",
    "Bearer tokens are described in RFC 6750",
    "Authorization is handled by the gateway",
    "Set the Authorization header to Bearer <token>.",
    "Cookie: see the session docs",
    "Set-Cookie: theme=dark; Path=/",
    "curl -u $USER:$PASS https://example.com",
    "git push -u origin main",
    "docker run -u 1000:1000 image",
    "mysql -u root -p app",
    "mysql -P 3306 -h db",
    "psql --password --host db",
    "deploy --token-file /run/token",
    "Use --password to be prompted for it.",
    "https://user@example.com/repo.git",
    "postgres://app:%s@%s/%s",
    "url = f'postgres://{user}:{password}@{host}/db'",
    "https://example.com/search?q=token&page=2",
    "sig = inspect.signature(func)",
    "signature: Signature",
    "_DD_SIGNATURE = 0x08074b50",
    "AUTH=CRAM-MD5",
    "imap.login(user, password)",
    "pwd = os.getcwd()",
    "cd $PWD && make",
    "credentials = service_account.Credentials.from_service_account_file(path)",
    "token_type: bearer",
    "client_secret = client_secrets[0]",
    "return {'password': password, 'user': user}",
    "\"password\": self.password,",
    "os.environ['ANTHROPIC_API_KEY'] = key",
    "assert redact(text) == expected",
    "webhook_id: 42",
    "jwt.decode(token, key, algorithms=['HS256'])",
    "jwt_algorithm = 'HS256'",
    "machine example.com login anonymous",
    "password   - the password to use",
    "* password : str, the password of the account",
    "EXACT_TOKEN_TYPES = {",
    "self.passwd = {}",
    "authorization = (\"Authorization: Basic %s\\r\\n\" %",
    "Token = Ignore + PlainToken",
    "cache_token = current_token",
    "TOKEN_MAP = {\"NAME\": token.NAME,",
]


# --- corpora -----------------------------------------------------------------------------------------

def build_log(size: int, seed: int = 1) -> str:
    """A CI log of about ``size`` characters: compiler lines, pip/npm installs, pytest progress, a
    warning or traceback now and then. No secret."""
    rnd = random.Random(seed)
    mods = ["tokenizer", "parser", "auth_flow", "scheduler", "session", "cache", "http_client", "models",
            "metrics", "storage", "api", "cli", "store", "migrations"]
    out, n, i = [], 0, 0
    while n < size:
        i += 1
        k = rnd.random()
        m = rnd.choice(mods)
        if k < 0.35:
            line = (f"tests/test_{m}.py::Test{m.title().replace('_', '')}::test_{rnd.choice(['roundtrip', 'empty', 'unicode', 'token_expiry', 'key_rotation', 'large_input'])}_{i % 17} "
                    f"{rnd.choice(['PASSED', 'PASSED', 'PASSED', 'SKIPPED', 'FAILED'])} [{i % 100:3d}%]")
        elif k < 0.55:
            line = (f"gcc -pthread -Wno-unused-result -Wsign-compare -DNDEBUG -g -fwrapv -O2 -Wall -fPIC "
                    f"-I/usr/include/python3.11 -c src/{m}.c -o build/temp.linux-x86_64-cpython-311/src/{m}.o")
        elif k < 0.65:
            line = (f"  Downloading {m.replace('_', '-')}-{i % 9}.{i % 13}.{i % 7}-py3-none-any.whl "
                    f"({rnd.randint(10, 900)} kB)")
        elif k < 0.72:
            line = f"npm WARN deprecated {m}@{i % 5}.{i % 11}.0: this package is no longer supported"
        elif k < 0.78:
            line = (f"{2026}-12-04T{i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}.{i % 1000:03d}Z INFO  "
                    f"[worker-{i % 8}] {m}: processed batch {i} in {rnd.randint(1, 999)} ms (keys={i % 300}, retries=0)")
        elif k < 0.8:
            line = (f"Traceback (most recent call last):\n  File \"/app/{m}.py\", line {i % 400}, in handle\n"
                    f"    return self.cache[key]\nKeyError: 'session:{i}'")
        elif k < 0.83:
            line = f"warning: unused variable 'token_len' [-Wunused-variable] in src/{m}.c:{i % 900}:12"
        else:
            line = (f"[{i:6d}] {rnd.choice(['Compiling', 'Linking', 'Checking', 'Building'])} {m} "
                    f"({rnd.choice(['debug', 'release'])}) ... ok")
        out.append(line)
        n += len(line) + 1
    return "\n".join(out)


def api_dump(size: int, seed: int = 2) -> str:
    """A pretty-printed JSON API dump (issues with users and labels) of about ``size`` characters."""
    rnd = random.Random(seed)
    items, n, i = [], 0, 0
    while n < size:
        i += 1
        login = f"user{rnd.randint(1, 5000)}"
        item = {"url": f"https://api.example.com/repos/acme/app/issues/{i}", "id": 1000000 + i,
                "node_id": "I_kwDO" + fill(_ALNUM, 14, i), "number": i,
                "title": rnd.choice(["Crash when the token expires", "Add key rotation", "Docs: auth flow",
                                     "Slow tokenizer on long input", "Cache keys collide"]),
                "user": {"login": login, "id": rnd.randint(1, 10**7), "type": "User", "site_admin": False,
                         "avatar_url": f"https://avatars.example.com/u/{i}?v=4"},
                "labels": [{"name": rnd.choice(["bug", "enhancement", "auth", "docs"]), "color": fill(_HEX, 6, i)}],
                "state": rnd.choice(["open", "closed"]), "comments": rnd.randint(0, 40),
                "created_at": f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}T10:{i % 60:02d}:00Z",
                "author_association": rnd.choice(["MEMBER", "CONTRIBUTOR", "NONE"]),
                "body": "Steps: run the tool with a large input; the key lookup takes seconds. "
                        "Expected: under a second. See the logs attached."}
        items.append(item)
        n += 700
    return json.dumps(items, indent=2)


_GENERIC = [
    ["    def parse(self, lines):", "        out = []", "        for number, line in enumerate(lines, 1):",
     "            line = line.strip()", "            if not line or line.startswith('#'):", "                continue",
     "            name, _, rest = line.partition(' ')", "            out.append((number, name, rest.split(',')))",
     "        return out"],
    ["    def summary(self, rows):", "        totals = {}", "        for row in rows:",
     "            totals[row.kind] = totals.get(row.kind, 0) + row.size",
     "        return sorted(totals.items(), key=lambda item: (-item[1], item[0]))"],
    ["    def retry(self, call, attempts=5, delay=0.5):", "        for attempt in range(attempts):", "            try:",
     "                return call()", "            except ConnectionError as exc:",
     "                log.warning('attempt %d failed: %s', attempt + 1, exc)",
     "                time.sleep(delay * 2 ** attempt)", "        raise RuntimeError('gave up')"],
    ["    @property", "    def closed(self) -> bool:", '        """Whether the session was closed."""',
     "        return self._session is None or self._session.closed"],
    ["    def __repr__(self):", "        return f'{type(self).__name__}({self.base_url!r}, timeout={self.timeout})'"],
    ["    def paginate(self, path, page_size=100):", "        page = 1", "        while True:",
     "            batch = self.request('GET', path, page=page, per_page=page_size).json()",
     "            if not batch:", "                return", "            yield from batch", "            page += 1"],
]


def source_files(size: int, seed: int = 3) -> list[str]:
    """Python modules: generic code, with a client now and then that handles a credential by
    reference only (the code that must never change)."""
    rnd = random.Random(seed)
    body = [line for line in CODE if not line.startswith(("Authorization:", "Cookie:", "Set-Cookie:"))]
    files, n, f = [], 0, 0
    while n < size:
        f += 1
        lines = [f'"""Module {f}: clients and helpers."""', "", "import logging", "import os", "import time", "",
                 "log = logging.getLogger(__name__)", ""]
        for c in range(rnd.randint(3, 8)):
            lines += [f"class Client{f}_{c}:", f'    """A client for service {c}."""', "",
                      "    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 30.0):",
                      "        self.base_url = base_url.rstrip('/')",
                      "        self.api_key = api_key or os.environ['API_KEY']",
                      "        self.timeout = timeout", "        self._session = None", ""]
            for _ in range(rnd.randint(3, 6)):
                lines += rnd.choice(_GENERIC) + [""]
            lines += ["    def check(self):", "        " + rnd.choice(body).strip(), ""]
        text = "\n".join(lines)
        files.append(text)
        n += len(text)
    return files


def transcript_mix(size: int, every: int = 10_000, seed: int = 4) -> str:
    """CLI transcript lines (JSON, one entry a line) whose tool results are logs, with one secret from
    SHAPES about every ``every`` characters."""
    rnd = random.Random(seed)
    log = build_log(size + 50_000, seed + 1).split("\n")
    out, n, next_secret, li, k = [], 0, every, 0, 0
    while n < size:
        chunk = "\n".join(log[li:li + 30])
        li += 30
        if n >= next_secret:
            chunk += "\n" + SHAPES[k % len(SHAPES)][0]
            k += 1
            next_secret += every
        i = len(out)
        entry = {"type": "user", "uuid": f"u{i}", "parentUuid": f"a{i}", "sessionId": "s",
                 "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                                          "content": chunk}]}}
        line = json.dumps(entry)
        out.append(json.dumps({"type": "assistant", "uuid": f"a{i}", "message": {"role": "assistant", "content": [
            {"type": "text", "text": rnd.choice(["Running the tests.", "Checking the build log."])},
            {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": "make test"}}]}}))
        out.append(line)
        n += len(line) + len(out[-2]) + 2
    return "\n".join(out)
