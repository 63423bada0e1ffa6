"""The ledger's client through Sentinel over TLS, against a real redis-server and
redis-sentinel that listen for TLS only (certificates made here by openssl, a test CA given
to the client as OpenSSL's SSL_CERT_FILE): REDIS_SENTINEL_TLS reaches the Sentinel and the
primary it names, and REDIS_SENTINEL_DB is the database written."""

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from ledger import settings
from ledger.connection import close, connect
from tests.support.processes import free_port, wait_until
from tests.support.stopping import stop_all

pytestmark = pytest.mark.skipif(not shutil.which("openssl"), reason="needs openssl")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def certificates(folder: Path) -> dict[str, Path]:
    """A CA, and a certificate it signed for 127.0.0.1."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            "-out", "ca.crt", "-days", "2", "-subj", "/CN=ledger test CA", cwd=folder)  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
            "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=folder)  # fmt: skip
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "san.ext",
            cwd=folder)  # fmt: skip
    return {name: folder / f"{name}" for name in ("ca.crt", "server.crt", "server.key")}


def tls_lines(files: dict[str, Path], port: int) -> str:
    return (
        f"bind 127.0.0.1\nport 0\ntls-port {port}\ntls-cert-file {files['server.crt']}\n"
        f"tls-key-file {files['server.key']}\ntls-ca-cert-file {files['ca.crt']}\n"
        "tls-auth-clients no\ntls-replication yes\n"
    )


class TlsSentinel:
    """One redis-server and one redis-sentinel watching it (quorum 1), both TLS only."""

    def __init__(self, folder: Path) -> None:
        self.files = certificates(folder)
        self.primary, self.sentinel = free_port(), free_port()
        primary_conf = folder / "redis.conf"
        primary_conf.write_text(
            tls_lines(self.files, self.primary) + f'dir {folder}\nsave ""\nappendonly no\n'
        )
        sentinel_conf = folder / "sentinel.conf"
        sentinel_conf.write_text(
            tls_lines(self.files, self.sentinel)
            + f"dir {folder}\nsentinel monitor ledger 127.0.0.1 {self.primary} 1\n"
        )
        log = open(folder / "servers.log", "ab")
        self.procs = [
            subprocess.Popen(["redis-server", str(primary_conf)], stdout=log, stderr=log),
            subprocess.Popen(["redis-sentinel", str(sentinel_conf)], stdout=log, stderr=log),
        ]
        log.close()

    def client(self, port: int, db: int = 0) -> Redis:
        return Redis(
            host="127.0.0.1",
            port=port,
            db=db,
            ssl=True,
            ssl_ca_certs=str(self.files["ca.crt"]),
            socket_timeout=5,
        )

    def knows_the_primary(self) -> bool:
        try:
            with self.client(self.sentinel) as sentinel:
                return bool(sentinel.sentinel_get_master_addr_by_name("ledger"))
        except RedisConnectionError:
            return False

    def stop(self) -> None:
        stop_all(self.procs)


@pytest.fixture
def tls_sentinel(tmp_path: Path) -> Iterator[TlsSentinel]:
    servers = TlsSentinel(tmp_path)
    try:
        wait_until(servers.knows_the_primary, 30, 0.1, what="the Sentinel over TLS")
        yield servers
    finally:
        servers.stop()


def test_the_ledger_reaches_its_primary_through_sentinel_over_tls_in_its_database(
    tls_sentinel: TlsSentinel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_sentinel.files["ca.crt"]))  # the system's CAs
    env = {
        "REDIS_SENTINELS": f"127.0.0.1:{tls_sentinel.sentinel}",
        "REDIS_SENTINEL_TLS": "true",
        "REDIS_SENTINEL_DB": "3",
    }
    client = connect(settings.load(env))
    try:
        client.set("ledger-test", "written")
    finally:
        close(client)
    with tls_sentinel.client(tls_sentinel.primary, db=3) as primary:
        assert primary.get("ledger-test") == b"written"
    with tls_sentinel.client(tls_sentinel.primary, db=0) as primary:
        assert primary.get("ledger-test") is None
    plain = connect(settings.load({**env, "REDIS_SENTINEL_TLS": "false"}))
    try:
        with pytest.raises(RedisConnectionError):  # a TLS-only Sentinel: no plain answer
            plain.set("ledger-test", "plain")
    finally:
        close(plain)
