"""A real S3 endpoint for the tests: moto's S3 server, over HTTP, in a process of
its own (the suite starts it; nothing to install but the test extra). Storage
URIs carry the endpoint in pyarrow's query options, the way a user names a
MinIO or Ceph endpoint; credentials come from the environment (tests/conftest.py
gives the session and its Ray actors fake ones, which moto accepts)."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

from pyarrow import fs as pafs

REGION = "us-east-1"


class S3Server:
    START_TIMEOUT_S = 60.0

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint = f"127.0.0.1:{self.port}"
        # Its log (a line a request) goes to a file: a pipe nobody reads would fill and stall the server.
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        deadline = time.monotonic() + self.START_TIMEOUT_S
        while True:
            try:
                urllib.request.urlopen(f"http://{self.endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    self._log.seek(0)
                    raise RuntimeError(f"moto's S3 server did not start: {self._log.read().decode()[-2000:]}") from None
                time.sleep(0.1)
        self.bucket = "weir-tests"
        pafs.S3FileSystem(
            endpoint_override=self.endpoint, scheme="http", region=REGION, allow_bucket_creation=True
        ).create_dir(self.bucket)

    def uri(self, path: str = "") -> str:
        """A fresh folder in the bucket (``path`` under it), as an ``s3://`` URI with the endpoint in its query."""
        folder = f"{self.bucket}/{uuid.uuid4().hex[:12]}" + (f"/{path}" if path else "")
        return f"s3://{folder}?endpoint_override={self.endpoint}&scheme=http&region={REGION}"

    def stop(self) -> None:
        self._proc.kill()
        self._proc.wait()
        self._log.close()


def files_under(uri: str) -> list[str]:
    """Every file under a storage URI (any pyarrow.fs), as paths of its file system."""
    fs, path = pafs.FileSystem.from_uri(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File)
