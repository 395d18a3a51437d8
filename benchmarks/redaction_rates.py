"""The redactor measured from outside its own patterns (issue 23, item 4; ADR 0108).

``PYTHONPATH=src python -m benchmarks.redaction_rates`` prints three figures, the same ones
``tests/test_redaction_measured.py`` asserts bounds on:

- the miss rate on generated AWS secret access keys (40 random characters of the base64
  alphabet, seeded) in nine realistic contexts;
- survivors of an outside-style secret corpus (shapes written from how tools and providers
  print credentials, not from the redactor's patterns);
- the over-redaction rate on ordinary operator text (provider errors, pool and resource
  names, ARNs, paths, image refs): texts ``redact`` changes at all.

Every secret here is made up (random, seeded) or a documented example value.
"""

from __future__ import annotations

import random
import string

from lifecycle._core.redact import redact

__all__ = [
    "AWS_KEYS",
    "ORDINARY_TEXT",
    "OUTSIDE_SECRETS",
    "aws_key_misses",
    "over_redacted",
    "survivors",
]

AWS_KEYS = 100_000
B64 = string.ascii_letters + string.digits + "+/"
B62 = string.ascii_letters + string.digits

#: Where a secret access key is met: bare in prose, quoted, JSON, env, INI, CLI, headers.
AWS_CONTEXTS = (
    "credentials AKIAIOSFODNN7EXAMPLE {} were rejected",
    "{}",
    "the secret key {} is not valid",
    '{{"AccessKeyId": "ASIAIOSFODNN7EXAMPLE", "SecretAccessKey": "{}"}}',
    "AWS_SECRET_ACCESS_KEY={}",
    "aws_secret_access_key = {}",
    "aws configure set aws_secret_access_key {} --profile ml",
    "boto3.client('ec2', aws_secret_access_key='{}')",
    "key({}) rejected",
)


def survivors(text: str, secret: str, window: int = 12) -> list[str]:
    """Pieces of ``secret`` (``window`` characters in a row, or the whole of a shorter one)
    still in ``text``: half a key is a leak too."""
    if len(secret) <= window:
        return [secret] if secret in text else []
    return [
        secret[i : i + window]
        for i in range(len(secret) - window + 1)
        if secret[i : i + window] in text
    ]


def aws_key_misses(count: int, seed: int) -> list[str]:
    """The generated keys (of ``count``) some piece of which survives ``redact``."""
    rng = random.Random(seed)
    missed = []
    for i in range(count):
        key = "".join(rng.choice(B64) for _ in range(40))
        text = AWS_CONTEXTS[i % len(AWS_CONTEXTS)].format(key)
        if survivors(redact(text), key):
            missed.append(key)
    return missed


def _r(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


_rng = random.Random(2023)
_PW = "Tr0ub4dor&3x"
_AKIA = "AKIA" + _r(_rng, string.ascii_uppercase + "234567", 16)
_GH = "ghp_" + _r(_rng, B62, 36)

#: (name, text, secret): how tools, drivers and providers print credentials, collected from
#: their documentation and bug reports' shapes, not from the redactor's rules.
OUTSIDE_SECRETS: tuple[tuple[str, str, str], ...] = (
    ("userinfo-hash", "could not connect to postgresql://app:pa#ss9word@db:5432/app", "pa#ss9word"),
    ("userinfo-slash", "dial redis://default:ab/cd/ef12@cache:6379 failed", "ab/cd/ef12"),
    ("userinfo-question", "amqp://guest:what?now42@mq:5672/ refused", "what?now42"),
    ("userinfo-space", "mysql://root:correct horse@db/app: access denied", "correct horse"),
    ("userinfo-mixed", "mongodb://u:#/?x y9@m1,m2/db", "#/?x y9"),
    ("userinfo-no-user", "redis://:s3cr3t#1@10.0.0.7:6379/0", "s3cr3t#1"),
    ("userinfo-ipv6", "postgres://u:pw#1x@[fd00::1]:5432/db", "pw#1x"),
    ("curl-u", "curl -u deploy:Zx9-ppq7 https://registry.example/v2/", "Zx9-ppq7"),
    ("curl-user-eq", "curl --user=ci:Ki7!pass https://x", "Ki7!pass"),
    ("curl-u-quoted", "curl -u 'ci:pa ss 42' https://x", "pa ss 42"),
    ("mysql-p-glued", "mysql -h db -u root -pQ7wertyX app", "Q7wertyX"),
    ("mysql-p-glued-lower", "mysqldump -uroot -phunter42 --all-databases", "hunter42"),
    ("docker-login-p", "docker login -u bot -p xY7-reg-tok registry.example", "xY7-reg-tok"),
    ("sshpass", "sshpass -p 'Pa55 word' ssh ops@bastion", "Pa55 word"),
    ("password-flag", "pg_dump --password Hx8kk2 --host db", "Hx8kk2"),
    ("password-flag-eq", "app --password=Hx8kk2 --verbose", "Hx8kk2"),
    ("token-flag", "kubectl --token=eyQw9-not-a-jwt-882 get pods", "eyQw9-not-a-jwt-882"),
    ("api-key-flag", "modal deploy --api-key 3fa9cc18e02b", "3fa9cc18e02b"),
    ("client-secret-flag", "az login --service-principal --client-secret Q~ab12.cd", "Q~ab12.cd"),
    ("key-id-glued", f"InvalidClientTokenId: keyid{_AKIA} is not valid", _AKIA),
    ("key-id-underscore", f"MY_KEY_{_AKIA} unknown", _AKIA),
    ("key-id-colon-glued", f"creds:{_AKIA}:x", _AKIA),
    ("github-glued", f"remote: Bad credentials for token{_GH}", _GH),
    ("env-export", f"export PGPASSWORD={_PW}", _PW),
    ("ini-line", f"password = {_PW}", _PW),
    ("yaml-quoted", f"  password: '{_PW}'", _PW),
    ("json-camel", f'{{"dbPassword":"{_PW}"}}', _PW),
    ("dsn-keywords", f"host=db user=app password={_PW} sslmode=require", _PW),
    ("jdbc", f"jdbc:postgresql://db/app?user=app&password={_PW}", _PW),
    ("odbc", f"Driver={{ODBC}};Server=db;Uid=sa;Pwd={_PW};", _PW),
    ("header-bearer", "Authorization: Bearer 9f8e7d6c5b4a39281706", "9f8e7d6c5b4a39281706"),
    ("header-api-key", "x-api-key: 0a1b2c3d4e5f60718293", "0a1b2c3d4e5f60718293"),
    ("slack-webhook-token", "xoxb-123456789012-1234567890123-" + "AbCdEfGh" * 3, "AbCdEfGh" * 3),
    ("aws-doc-secret", "secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY rejected", "wJalrXUtnFEMI"),
    ("aws-no-digit-secret", "secret " + "kQzPwXvRtYuBnMaSdFgHjKlZxCvBnMqWeRtYuIoP", "kQzPwXvRtYuB"),
    ("aws-slashy-secret", "secret " + "Ab/Cd/Ef/Gh/Ij/Kl/Mn/Op/Qr/St/Uv/Wx/Yz12", "Ab/Cd/Ef/Gh/Ij"),
    ("modal-token", "Token ak-" + _r(_rng, B62, 22) + " is invalid", ""),
    ("openai-in-error", "Incorrect API key provided: sk-" + _r(_rng, B62, 48), ""),
    (
        "private-key-cut",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA",
        "b3BlbnNzaC1r",
    ),
    ("netrc", f"machine api.example login ci password {_PW}", _PW),
    # issue 35: shapes an outside corpus still found
    ("npmrc-auth", "//registry.npmjs.org/:_auth=Y2k6aHVudGVyMg==", "Y2k6aHVudGVyMg"),
    ("npmrc-auth-token", "//npm.example/:_authToken=4f1c-77ab-90de", "4f1c-77ab-90de"),
    ("npmrc-password", "//npm.example/:_password=aHVudGVyMg==", "aHVudGVyMg"),
    ("go-mysql-dsn", "dial app:Kp9;x,y_2@tcp(db:3306)/orders failed", "Kp9;x,y_2"),
    ("go-mysql-dsn-unix", "root:Kp9-x2@unix(/run/mysqld.sock)/app", "Kp9-x2"),
    ("redis-cli-a", "redis-cli -h cache -a Kp9x2 ping", "Kp9x2"),
    ("redis-cli-pass", "redis-cli --pass Kp9x2 info", "Kp9x2"),
    ("redis-cli-url", "redis-cli -u redis://:Kp9x2@cache:6379 ping", "Kp9x2"),
    (
        "modal-secret-underscore",
        "Token as-" + _r(_rng, B62, 10) + "_" + _r(_rng, B62, 11) + " is invalid",
        "",
    ),
    ("password-semicolon", "password=Kp9;x,y2 other=1", ";x,y2"),
    ("password-comma-dsn", "host=db password=Kp9,x;y2 sslmode=require", ",x;y2"),
)
# entries whose secret is the random tail of their text
OUTSIDE_SECRETS = tuple(
    (n, t, s or t.split(" ")[1 if n.startswith("modal-") else -1]) for n, t, s in OUTSIDE_SECRETS
)

#: What an operator reads and must keep reading: provider errors, names, ARNs, paths, refs.
ORDINARY_TEXT: tuple[str, ...] = (
    "InsufficientInstanceCapacity: We currently do not have sufficient p4d.24xlarge capacity",
    "AuthFailure: AWS was not able to validate the provided access credentials",
    "UnauthorizedOperation: You are not authorized to perform this operation.",
    "InvalidParameterCombination: Network interfaces and an instance-level subnet ID may not "
    "be specified on the same request",
    "RequestLimitExceeded: Request limit exceeded.",
    "MaxSpotInstanceCountExceeded: Max spot instance count exceeded",
    "SpotMaxPriceTooLow: Your Spot request price of 0.5 is lower than the minimum required",
    "InvalidAMIID.NotFound: The image id '[ami-0abcdef1234567890]' does not exist",
    "VcpuLimitExceeded: You have requested more vCPU capacity than your current vCPU limit",
    "ExpiredToken: The security token included in the request is expired",
    "InvalidClientTokenId: The security token included in the request is invalid.",
    "AuthError: Token missing. Run `modal token new` to authenticate.",
    "modal.exception.NotFoundError: App 'trainer-prod' not found",
    "Sandbox sb-5KjsW4mLBlZ0Lp8vvQtXoD terminated: exit code 137 (OOMKilled)",
    "RemoteError: Function ml-pipeline.train timed out after 3600s",
    "node pool as-prod2025 has no free capacity",
    "pool ak-west1-gpu drained",
    "nodepool gpu-a100x8-useast1 scaled to 0",
    "karpenter NodeClaim default-x7k2p launched on p5.48xlarge",
    "Pod ml/trainer-0 (uid 3f2c9a8e-1b7d-4c55-9e0f-8a6b2d1c4e7f) Failed: Evicted",
    "pod ml/llama-finetune-7b-0 was OOMKilled",
    "0/12 nodes are available: 4 Insufficient nvidia.com/gpu, 8 node(s) had untolerated taint",
    "failed to pull image nvcr.io/nvidia/pytorch:24.05-py3: 401 Unauthorized",
    "image 123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:v2025.11.30-gpuCuda12",
    "ghcr.io/org/trainerImage:2025.11.30-cu121-PyTorch2Nightly",
    "image docker.io/library/python@sha256:" + "0123456789abcdef" * 4,
    "arn:aws:iam::123456789012:role/EKSNodeGroupRole2024Prod",
    "arn:aws:s3:::ml-artifacts-prod/ModelRegistry/v12/weights",
    "arn:aws:ec2:us-east-1:123456789012:instance/i-0abc123def4567890",
    "arn:aws:sts::123456789012:assumed-role/KarpenterNodeRole/i-0abc123def4567890",
    "could not read s3://ml-artifacts/ResNet50Weights2025/checkpoint-0042.pt",
    "s3://my-bucket/path/to/object.tar",
    "gs://trainingBucket01/logs/Experiment42Results/ is empty",
    "wrote /mnt/data/ResNet50Weights/checkpoint2025.pt",
    "/var/lib/kubelet/pods/3f2c9a8e/volumes/kubernetes.io~csi/pvc-1/mount",
    "/home/ubuntu/.cache/huggingface/hub/models--meta-llama--Llama-2-7b-hf/snapshots/main",
    "/Users/Alice/Library/Caches/ModelWeightsCache2025/shard7",
    "restore of snapshot snap-0a1b2c3d4e5f67890 blocked: kernel 6.1 vs 5.15",
    "volume PersistentVolumeClaim/models mounted at /models",
    "secret ml/db-creds not found",
    "SecretNotFound: secret ml/db-creds not found",
    "Token: expired",
    "tests pass: 3 of 3",
    "tokenizer: BertTokenizerFast loaded from bert-base-uncased",
    "max_tokens=4096 token_type=bearer secret_name=db-creds password_file=/run/pw",
    "basic checks passed, 3 of 3",
    'Password authentication failed for user "admin"',
    "sqlite:///var/lib/lifecycle/store.db?mode=ro",
    "postgresql://admin@db.internal:5432/ctl?sslmode=require",
    "https://console.aws.amazon.com:443/ec2/home?region=us-east-1#Instances:",
    "docker run -p 8080:80 -p 9090:9090/tcp trainer",
    "ssh -p 2222 ops@bastion.example.com",
    "gcc -pthread -pedantic -O2 main.c",
    "mkdir -p /data/checkpoints",
    "region eu-west-1 could not be listed: EndpointConnectionError",
    "commit 0123456789abcdef0123456789abcdef01234567 deployed",
    "workflow fleet/a100-burnin: Excluded 1 node(s) with fewer than 8 allocatable GPUs",
    "spot instance i-0abc123def4567890 reclaimed (Server.SpotInstanceTermination)",
    "InternalFrameTitlePaneMaximizeButtonWindowNotFocusedState",
    "AbstractSingletonProxyFactoryBeanDefinitionRegistry",
    "ml/llama-70b-finetune-2025-11-30t10-00-00z-7f9c",
    "job ml-eval-harness-2025-11-30 finished in 2h13m",
    "NVIDIA A100-SXM4-80GB GPU-5a8e9c1d-2b3f-4e6a-8d7c-1f0e9b8a7c6d lost",
    "auth: UnauthorizedOperation [spot]: You are not authorized to perform this operation.",
    "ECDSA key fingerprint is SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s.",
    "256 SHA256:4vP6Ah2hXb2Y1B3y+q8V9gkqzQkzF1U/8L0Tq7X9yJk ops@bastion (ED25519)",
    "retried 3 times, waited 10s; gave up, node drained",
    "ls -a /data; redis-cli --no-auth-warning info",
    "dial tcp 10.0.0.7:3306: connect: connection refused",
)


def over_redacted(texts: tuple[str, ...]) -> list[str]:
    """The ordinary texts ``redact`` changes."""
    return [t for t in texts if redact(t) != t]


def main() -> None:
    missed = aws_key_misses(AWS_KEYS, seed=23)
    print(
        f"AWS secret access keys: {len(missed)} of {AWS_KEYS} missed "
        f"({len(missed) / AWS_KEYS:.4%}; {1 - len(missed) / AWS_KEYS:.4%} redacted)"
    )
    leaked = [n for n, t, s in OUTSIDE_SECRETS if survivors(redact(t), s)]
    print(f"outside secret corpus: {len(leaked)} of {len(OUTSIDE_SECRETS)} shapes survive {leaked}")
    changed = over_redacted(ORDINARY_TEXT)
    print(f"ordinary operator text: {len(changed)} of {len(ORDINARY_TEXT)} changed")
    for text in changed:
        print(f"  {text!r} -> {redact(text)!r}")


if __name__ == "__main__":
    main()
