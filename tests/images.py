"""Images for the container tests, made here with no image registry.

No registry is reachable where the tests run, only Debian's package mirror and PyPI, so
every image a test needs is made from those:

1. :func:`debootstrap_root_tarball`: `debootstrap --variant=minbase` a Debian bookworm root
   (python3, venv, CA certificates) from the mirror this machine's apt uses. The root's
   tarball is cached under /var/cache/mrtr-harness/ (MRTR_IMAGE_CACHE overrides), keyed by
   a hash of suite, mirror and package list, so only the first run on a machine pays for it
   (about 2 minutes). A lock file makes parallel tests (pytest-xdist workers) wait for the
   one that is making it instead of debootstrapping twice.
2. :func:`import_base`: `docker import` that root as BASE_IMAGE, adding this host's CA bundle
   (pip and apt may go through a TLS-intercepting egress proxy) and a pip.conf that points
   pip at it. Host-specific things live in this test base only, never in the Dockerfile.
3. :func:`build_app_image`: the repository's Dockerfile with `--build-arg BASE_IMAGE=...` and
   host networking (pip reaches PyPI through the host's network).
4. :func:`build_stand_ins`: stand-ins for the public images docker-compose.yml pulls (Redis,
   Prometheus, HAProxy), from Debian's packages on the same base, tagged with the names the
   compose file uses and behaving like those images where the file relies on them
   (entrypoint, default command, user, working folder).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.services import _unmount_under, fail_or_skip, mounts_under, require_binary

ROOT = Path(__file__).resolve().parent.parent
SUITE = "bookworm"
PACKAGES = ("python3", "python3-pip", "python3-venv", "ca-certificates")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
CACHE_ENV = "MRTR_IMAGE_CACHE"
DEFAULT_CACHE = Path("/var/cache/mrtr-harness")
BASE_REPO, BASE_TAG = "mrtr-harness/debian-base", "test"
KEY_LABEL = "org.mrtr-harness.base-key"
STAND_IN_LABEL = "org.mrtr-harness.stand-in"
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


def import_base(client: Any, tarball: Path, key: str) -> tuple[str, float | None]:
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


@dataclass
class Base:
    """The imported Debian base on one engine, and what making it cost."""

    reference: str
    key: str
    tarball: Path
    debootstrap_s: float | None
    """Seconds the debootstrap took; None when the cached root was used."""
    root_s: float
    """Seconds until the root was there: the debootstrap, or the wait for another test's (its lock)."""
    import_s: float | None
    """Seconds the `docker import` took; None when the engine had it already."""

    @property
    def root_line(self) -> str:
        """How the root was had, for a test's timing lines."""
        if self.debootstrap_s is not None:
            return f"debootstrap root ({self.tarball}): {self.debootstrap_s:.1f} s"
        return f"debootstrap root ({self.tarball}): cached ({self.root_s:.1f} s waiting for its lock)"


def debian_base(client: Any) -> Base:
    """The Debian base on `client`'s engine: the cached root (debootstrapped first if missing), imported once."""
    require_binary("debootstrap")
    mirror = apt_mirror()
    key = root_key(mirror) + "-" + hashlib.sha256(HOST_CA_BUNDLE.read_bytes()).hexdigest()[:8]
    start = time.monotonic()
    tarball, debootstrap_s = debootstrap_root_tarball(mirror)
    root_s = time.monotonic() - start
    reference, import_s = import_base(client, tarball, key)
    return Base(reference, key, tarball, debootstrap_s, root_s, import_s)


def build_app_image(client: Any, base: str, tag: str) -> tuple[Any, float, list[str]]:
    """Build the repository's Dockerfile on `base` as `tag`: the image, the seconds it took, its build log.

    Fails the test with the build's last lines when the build fails.
    """
    import docker

    start = time.monotonic()
    try:
        image, stream = client.images.build(
            path=str(ROOT), tag=tag, buildargs={"BASE_IMAGE": base}, network_mode="host",
            rm=True, forcerm=True, timeout=BUILD_TIMEOUT_S,
        )
    except docker.errors.BuildError as exc:
        pytest.fail(f"docker build of the Dockerfile failed: {exc.msg}\n{_build_text(exc.build_log)[-4000:]}",
                    pytrace=False)
    return image, time.monotonic() - start, [chunk.get("stream", "") for chunk in stream]


def _build_text(log: Any) -> str:
    return "".join(chunk.get("stream", "") or chunk.get("error", "") for chunk in log)


# --- stand-ins for the public images of docker-compose.yml ---------------------------------------

STAND_IN_PACKAGES = ("redis-server", "prometheus", "haproxy")

# One layer with the three servers from Debian's packages (apt through the host's network);
# policy-rc.d keeps the packages' maintainer scripts from starting services in the build.
_PACKAGES_DOCKERFILE = f"""\
FROM {{base}}
RUN printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \\
 && apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends {' '.join(STAND_IN_PACKAGES)} \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /var/cache/apt/*.bin
"""

# The official redis image: docker-entrypoint.sh (flags alone run redis-server, which drops
# to the redis user), working folder /data. It is built with protected mode off, so other
# containers on the compose network reach it without a password; Debian's binary has it on,
# so the stand-in turns it off unless the command sets it (or only asks for the version).
_REDIS_ENTRYPOINT = """\
#!/bin/sh
set -e
case "$1" in -*|*.conf) set -- redis-server "$@" ;; esac
if [ "$1" = redis-server ]; then
    case " $* " in
        *" --protected-mode "*|*" -v "*|*" --version "*|*" -h "*|*" --help "*) ;;
        *) set -- "$@" --protected-mode no ;;
    esac
    if [ "$(id -u)" = 0 ]; then
        set -- setpriv --reuid=redis --regid=redis --init-groups "$@"
    fi
fi
exec "$@"
"""

# The official haproxy image: `haproxy ...` runs in master-worker mode in the foreground.
_HAPROXY_ENTRYPOINT = """\
#!/bin/sh
set -e
case "$1" in -*) set -- haproxy "$@" ;; esac
if [ "$1" = haproxy ]; then
    shift
    set -- haproxy -W -db "$@"
fi
exec "$@"
"""

STAND_INS: dict[str, tuple[str, dict[str, str]]] = {
    "redis:7-alpine": ("""\
FROM {packages}
COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod 755 /usr/local/bin/docker-entrypoint.sh && mkdir -p /data && chown redis:redis /data
VOLUME /data
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["redis-server"]
""", {"docker-entrypoint.sh": _REDIS_ENTRYPOINT}),
    "prom/prometheus:v2.53.0": ("""\
FROM {packages}
RUN mkdir -p /prometheus && chown nobody:nogroup /prometheus
USER nobody
VOLUME /prometheus
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
""", {}),
    "haproxy:2.9-alpine": ("""\
FROM {packages}
COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod 755 /usr/local/bin/docker-entrypoint.sh && mkdir -p /usr/local/etc/haproxy
USER haproxy
WORKDIR /var/lib/haproxy
STOPSIGNAL SIGUSR1
EXPOSE 8080
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["haproxy", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
""", {"docker-entrypoint.sh": _HAPROXY_ENTRYPOINT}),
}


@dataclass
class StandIns:
    """The stand-in images on one engine: tag -> image id, the tags this call made, and the seconds it took."""

    ids: dict[str, str]
    made: list[str]
    """Tags built here (the others were there already: stand-ins left by a run, or the real images)."""
    seconds: float


def stand_in_key(base: Base) -> str:
    """What the stand-ins are made of: the base and every Dockerfile and script above."""
    recipe = [base.key, _PACKAGES_DOCKERFILE, *(f"{tag}\n{text}\n{sorted(files.items())}"
                                               for tag, (text, files) in sorted(STAND_INS.items()))]
    return hashlib.sha256("\n".join(recipe).encode()).hexdigest()[:16]


def build_stand_ins(client: Any, base: Base) -> StandIns:
    """Every image STAND_INS names, on `client`'s engine, built on the Debian base unless the engine has it.

    A tag the engine already has is used as it is when it is not a stand-in (the real image,
    pulled by the engine's owner) or a stand-in of this very recipe.
    """
    import docker

    start = time.monotonic()
    key = stand_in_key(base)
    ids: dict[str, str] = {}
    missing = []
    for tag in STAND_INS:
        try:
            image = client.images.get(tag)
        except docker.errors.ImageNotFound:
            missing.append(tag)
            continue
        if image.labels.get(STAND_IN_LABEL, key) != key:
            missing.append(tag)  # a stand-in of an older recipe
        else:
            ids[tag] = image.id
    if missing:
        packages = f"mrtr-harness/stand-in-packages:{key}"
        _build(client, packages, _PACKAGES_DOCKERFILE.format(base=base.reference), {}, key)
        for tag in missing:
            text, files = STAND_INS[tag]
            ids[tag] = _build(client, tag, text.format(packages=packages), files, key).id
        client.images.remove(packages)  # the tag only: its layers are the stand-ins' own
    return StandIns(ids, missing, time.monotonic() - start)


def _build(client: Any, tag: str, dockerfile: str, files: dict[str, str], key: str) -> Any:
    """Build `dockerfile` (with `files` beside it) as `tag`, labelled with the stand-ins' recipe key."""
    import docker

    with tempfile.TemporaryDirectory(prefix="mrtr-stand-in-") as tmp:
        (Path(tmp) / "Dockerfile").write_text(dockerfile + f'LABEL {STAND_IN_LABEL}="{key}"\n')
        for name, text in files.items():
            (Path(tmp) / name).write_text(text)
        try:
            image, _ = client.images.build(path=tmp, tag=tag, network_mode="host", rm=True, forcerm=True,
                                           timeout=BUILD_TIMEOUT_S)
        except docker.errors.BuildError as exc:
            pytest.fail(f"docker build of the stand-in {tag} failed: {exc.msg}\n{_build_text(exc.build_log)[-4000:]}",
                        pytrace=False)
    return image
