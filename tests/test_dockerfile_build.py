"""The real `Dockerfile` builds and its image works, with no image registry: a debootstrapped Debian root as the base.

1. The Debian bookworm base of `tests/images.py`: a `debootstrap --variant=minbase` root, cached
   under /var/cache/mrtr-harness/ (MRTR_IMAGE_CACHE overrides) and shared with the compose
   stack's test (a lock file makes one of them debootstrap, the other wait), imported with this
   host's CA bundle. Only the first run on a machine pays for the root (about 2 minutes).
2. Build the repository's Dockerfile with `--build-arg BASE_IMAGE=...` and host networking
   (pip install reaches PyPI through the host's network).
3. Run the image: `--version`, `validate scenarios/smoke.toml`, its Python, its user.

The engine is the one that answers, or a private dockerd (stopped by PID, its data discarded).
Skipped when debootstrap or dockerd is missing, failed instead when MRTR_REQUIRE_SERVICES=1.
On a shared engine the built app image (hundreds of MB, not cached) is removed at the end; the
base image is kept (tagged with its cache key, so a later run reuses it without importing).
"""

from __future__ import annotations

import time

import pytest

from harness import __version__ as HARNESS_VERSION
from tests.images import build_app_image, debian_base
from tests.services import docker_engine, require_binary
from tests.timings import report, seconds

pytestmark = pytest.mark.services

APP_REPO, APP_TAG = "mrtr-harness", "test"
BUILD_TIMEOUT_S = 900


def test_the_real_dockerfile_builds_on_a_debootstrapped_base_and_the_image_runs(request: pytest.FixtureRequest):
    require_binary("debootstrap")  # dockerd: docker_engine() requires it when no engine answers
    started = time.monotonic()
    with docker_engine() as docker_host:
        import docker

        client = docker.from_env(timeout=BUILD_TIMEOUT_S)
        shared_engine = "/mrtr-dockerd-" not in docker_host
        app = f"{APP_REPO}:{APP_TAG}"
        try:
            base = debian_base(client)
            image, build_s, log = build_app_image(client, base.reference, app)
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
    report(request, "dockerfile build", [
        f"total {time.monotonic() - started:.1f} s ({'cached root' if base.debootstrap_s is None else 'first run'})",
        base.root_line,
        seconds(base.import_s, f"docker import {base.reference}"),
        f"docker build {app}: {build_s:.1f} s, image {size_mb:.0f} MB",
        f"docker run --version / validate / checks: {run_s:.1f} s",
        f"validate says: {validated.decode(errors='replace').strip()[:200]}",
        f"build log tail: {''.join(log).strip().splitlines()[-1] if log else ''}",
    ])
