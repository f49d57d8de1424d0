"""The real `Dockerfile` builds and its image works, with no image registry: a debootstrapped Debian root as the base.

1. `debootstrap --variant=minbase` a Debian bookworm root (python3, venv, CA certificates) from
   the mirror this machine's apt uses. The root's tarball is cached under
   /var/cache/mrtr-harness/ (MRTR_IMAGE_CACHE overrides), keyed by a hash of suite, mirror and
   package list, so only the first run pays for it (about 2 minutes).
2. `docker import` it as BASE_IMAGE, adding this host's CA bundle (pip in the build may go
   through a TLS-intercepting egress proxy) and a pip.conf that points pip at it. Host-specific
   things live in this test base only, never in the Dockerfile.
3. Build the repository's Dockerfile with `--build-arg BASE_IMAGE=...` and host networking
   (pip install reaches PyPI through the host's network).
4. Run the image: `--version`, and `validate scenarios/smoke.toml`.

The engine is the one that answers, or a private dockerd (stopped by PID, its data discarded).
Skipped when debootstrap or dockerd is missing, failed instead when MRTR_REQUIRE_SERVICES=1.
On a shared engine the built app image (hundreds of MB, not cached) is removed at the end; the
base image is kept (tagged with its cache key, so a later run reuses it without importing).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness import __version__ as HARNESS_VERSION
from tests.services import _unmount_under, docker_engine, fail_or_skip, mounts_under, require_binary

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parent.parent
SUITE = "bookworm"
PACKAGES = ("python3", "python3-pip", "python3-venv", "ca-certificates")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
CACHE_ENV = "MRTR_IMAGE_CACHE"
DEFAULT_CACHE = Path("/var/cache/mrtr-harness")
BASE_REPO, BASE_TAG = "mrtr-harness/debian-base", "test"
APP_REPO, APP_TAG = "mrtr-harness", "test"
KEY_LABEL = "org.mrtr-harness.base-key"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
DEBOOTSTRAP_TIMEOUT_S = 900
BUILD_TIMEOUT_S = 900
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def apt_mirror(suite: str = SUITE) -> str:
    """The Debian mirror this machine's apt uses for `suite` (deb822 or one-line sources), else deb.debian.org."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        if not path.is_file() or not (path.name == "sources.list" or path.suffix in (".list", ".sources")):
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.M))
                if ("deb" in fields.get("Types", "").split() and suite in fields.get("Suites", "").split()
                        and fields.get("Enabled", "yes").lower() != "no" and fields.get("URIs")):
                    return fields["URIs"].split()[0].rstrip("/")
        else:
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                    return words[1].rstrip("/")
    return DEFAULT_MIRROR


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def root_key(mirror: str) -> str:
    """The cache key of the debootstrapped root: what goes into it, not where it came from in time."""
    recipe = f"debootstrap --variant=minbase --include={','.join(sorted(PACKAGES))} {SUITE} {mirror}"
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (a lock file), so parallel runs debootstrap once."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def debootstrap_root_tarball(mirror: str) -> tuple[Path, float | None]:
    """The cached tarball of the Debian root, made first if missing; and the seconds that took (None: cached)."""
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except PermissionError:
        fail_or_skip(f"cannot create the image cache {folder} (set {CACHE_ENV} to a writable folder)")
    tarball = folder / f"debian-{SUITE}-minbase-{root_key(mirror)}.tar"
    with locked(folder / f"{tarball.name}.lock"):
        if tarball.is_file():
            return tarball, None
        binary = require_binary("debootstrap")
        if os.geteuid() != 0:
            fail_or_skip("debootstrap needs root to build the base image's root (none is cached yet)")
        start = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix="mrtr-debootstrap-", dir=folder))
        try:
            root = work / "root"
            result = subprocess.run(
                [binary, "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(root), mirror],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=DEBOOTSTRAP_TIMEOUT_S, check=False,
            )
            _unmount_under(work)  # debootstrap mounts proc/sys in the root; a failed run may leave them
            assert result.returncode == 0, f"debootstrap failed: {result.stdout.decode(errors='replace')[-3000:]}"
            for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for item in (root / leftover).glob("*"):
                    if item.is_file():
                        item.unlink()
            partial = work / "root.tar"
            subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], check=True,
                           timeout=300)
            os.replace(partial, tarball)
        finally:
            _unmount_under(work)
            if not mounts_under(work):
                shutil.rmtree(work, ignore_errors=True)
        return tarball, time.monotonic() - start


def _add_file(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
    archive.addfile(info, io.BytesIO(data))


def import_base(client, tarball: Path, key: str) -> tuple[str, float | None]:
    """Import the root as BASE_REPO:BASE_TAG with this host's CA bundle; skipped when the tag already
    carries `key`. The image reference, and the seconds the import took (None: reused)."""
    import docker

    reference = f"{BASE_REPO}:{BASE_TAG}"
    try:
        if client.images.get(reference).labels.get(KEY_LABEL) == key:
            return reference, None
    except docker.errors.ImageNotFound:
        pass
    start = time.monotonic()
    extra = {
        "./etc/ssl/certs/ca-certificates.crt": HOST_CA_BUNDLE.read_bytes(),
        "./etc/pip.conf": b"[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n",
    }
    with tempfile.TemporaryDirectory(prefix="mrtr-base-") as tmp:
        copy = Path(tmp) / "base.tar"
        # docker import refuses duplicate paths: copy the root, swapping in the host's files.
        with tarfile.open(tarball) as source, tarfile.open(copy, "w", format=tarfile.GNU_FORMAT) as target:
            for member in source:
                if member.name in extra:
                    continue
                target.addfile(member, source.extractfile(member) if member.isreg() else None)
            for name, data in extra.items():
                _add_file(target, name, data)
        client.api.import_image_from_file(
            str(copy), repository=BASE_REPO, tag=BASE_TAG,
            changes=[f"ENV PATH={BASE_PATH}", f"LABEL {KEY_LABEL}={key}", 'CMD ["/bin/bash"]'],
        )
    return reference, time.monotonic() - start


def _report(request: pytest.FixtureRequest, lines: list[str]) -> None:
    """Show the timings in the test output even when it passes and output is captured."""
    for line in lines:
        request.node.user_properties.append(("timing", line))
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        for line in lines:
            reporter.write_line(f"[dockerfile build] {line}")


def _seconds(value: float | None, what: str) -> str:
    return f"{what}: cached" if value is None else f"{what}: {value:.1f} s"


def test_the_real_dockerfile_builds_on_a_debootstrapped_base_and_the_image_runs(request: pytest.FixtureRequest):
    require_binary("debootstrap")  # dockerd: docker_engine() requires it when no engine answers
    started = time.monotonic()
    mirror = apt_mirror()
    key = root_key(mirror) + "-" + hashlib.sha256(HOST_CA_BUNDLE.read_bytes()).hexdigest()[:8]
    with docker_engine() as docker_host:
        import docker

        tarball, debootstrap_s = debootstrap_root_tarball(mirror)
        client = docker.from_env(timeout=BUILD_TIMEOUT_S)
        shared_engine = "/mrtr-dockerd-" not in docker_host
        app = f"{APP_REPO}:{APP_TAG}"
        try:
            base, import_s = import_base(client, tarball, key)

            build_start = time.monotonic()
            log: list[str] = []
            try:
                image, stream = client.images.build(
                    path=str(ROOT), tag=app, buildargs={"BASE_IMAGE": base}, network_mode="host",
                    rm=True, forcerm=True, timeout=BUILD_TIMEOUT_S,
                )
                log = [chunk.get("stream", "") for chunk in stream]
            except docker.errors.BuildError as exc:
                text = "".join(chunk.get("stream", "") or chunk.get("error", "") for chunk in exc.build_log)
                pytest.fail(f"docker build of the Dockerfile failed: {exc.msg}\n{text[-4000:]}", pytrace=False)
            build_s = time.monotonic() - build_start
            size_mb = image.attrs["Size"] / 1e6

            run_start = time.monotonic()
            version = client.containers.run(app, ["--version"], network_mode="host", remove=True)
            assert HARNESS_VERSION in version.decode(), version
            validated = client.containers.run(
                app, ["validate", "scenarios/smoke.toml"], network_mode="host", remove=True, stderr=True,
            )
            python = client.containers.run(
                app, ["-c", "import sys; print(sys.version_info[:2] >= (3, 11), sys.prefix)"],
                entrypoint="python3", network_mode="host", remove=True,
            ).decode()
            assert python.split() == ["True", "/opt/mrtr"], python
            user = client.containers.run(app, ["-u"], entrypoint="id", network_mode="host", remove=True)
            assert user.decode().strip() != "0", "the image must not run as root"
            run_s = time.monotonic() - run_start
        finally:
            if shared_engine:  # a private dockerd's data root is discarded anyway
                try:
                    client.images.remove(app, force=True)
                except docker.errors.ImageNotFound:
                    pass
            client.close()
    _report(request, [
        f"total {time.monotonic() - started:.1f} s ({'first run' if debootstrap_s is not None else 'cached root'})",
        _seconds(debootstrap_s, f"debootstrap root ({tarball})"),
        _seconds(import_s, f"docker import {base}"),
        f"docker build {app}: {build_s:.1f} s, image {size_mb:.0f} MB",
        f"docker run --version / validate / checks: {run_s:.1f} s",
        f"validate says: {validated.decode(errors='replace').strip()[:200]}",
        f"build log tail: {''.join(log).strip().splitlines()[-1] if log else ''}",
    ])
