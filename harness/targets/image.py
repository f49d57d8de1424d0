"""Images for the docker backend, and how to run the shop in one.

Two kinds of image run the shop:

- the *host-python* image: an empty root holding only the symlinks
  `bin, lib, lib64, sbin -> usr/...` and empty `tmp proc sys dev etc run`, imported in
  well under a second with no registry; containers run with host networking and
  read-only bind mounts of `/usr`, `/etc`, this interpreter's `sys.base_prefix`, the
  venv's `sys.prefix` and the folder the harness is imported from, so the container runs
  *this* harness with *this* interpreter. Tests and CI use it.
- an *installed* image (the project's Dockerfile), where `python -m harness`
  works on its own.

Either way the folders that replicas share with the harness (the key-ring folder, the
sqlite folder) are bind-mounted read-write at the same path, so a path means the same
thing on the host and in every container.
"""

from __future__ import annotations

import io
import os
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.telemetry.variables import otel_variables

HOST_PYTHON_IMAGE = "mrtr-harness/host-python:test"
RECIPE_LABEL = "mrtr-harness.recipe"
HOST_PYTHON_RECIPE = "host-python"

_SYMLINKS = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}
_EMPTY_DIRS = ("tmp", "proc", "sys", "dev", "etc", "run", "usr")


def empty_root_tarball() -> bytes:
    """The root filesystem of the host-python image, as an uncompressed tar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in _EMPTY_DIRS:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        for name, target in _SYMLINKS.items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            info.mode = 0o777
            tar.addfile(info)
    return buffer.getvalue()


def ensure_host_python_image(client: Any, tag: str = HOST_PYTHON_IMAGE) -> Any:
    """The host-python image `tag` (the engine's image object), imported from an empty root first if the engine
    lacks it."""
    import docker

    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        pass
    repository, _, version = tag.rpartition(":") if ":" in tag.rsplit("/", 1)[-1] else (tag, "", "latest")
    client.api.import_image_from_data(empty_root_tarball(), repository=repository, tag=version,
                                      changes=[f"LABEL {RECIPE_LABEL}={HOST_PYTHON_RECIPE}"])
    return client.images.get(tag)


def is_host_python(image: Any) -> bool:
    """True for an image made by `ensure_host_python_image` (it carries the recipe label)."""
    labels = (image.attrs.get("Config") or {}).get("Labels") or {}
    return labels.get(RECIPE_LABEL) == HOST_PYTHON_RECIPE


def harness_root() -> Path:
    """The folder `import harness` resolves from (the repository, for an editable install)."""
    import harness

    return Path(harness.__file__).resolve().parent.parent


@dataclass
class RunSpec:
    """How to start `python -m <module> ARGS` in a container of one image: the docker SDK's run options."""

    image: str
    python: list[str]
    volumes: dict[str, dict[str, str]] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    working_dir: str | None = None

    def module(self, module: str, *args: str) -> list[str]:
        """The container command (after the entrypoint, the interpreter) running `module` with `args`."""
        return ["-m", module, *args]

    def options(self) -> dict[str, Any]:
        """Keyword arguments for `client.containers.run` / `create` (besides command, labels and name); the
        environment carries the harness's OpenTelemetry variables, so a replica in a container exports as it would
        as a local process (the host's network: a loopback collector is reached)."""
        options: dict[str, Any] = {"image": self.image, "network_mode": "host", "volumes": dict(self.volumes),
                                   "environment": {**otel_variables(), **self.environment},
                                   "entrypoint": list(self.python)}
        if self.user:
            options["user"] = self.user
        if self.working_dir:
            options["working_dir"] = self.working_dir
        return options


def host_python_run_spec(shared: list[Path], image: str = HOST_PYTHON_IMAGE) -> RunSpec:
    """Run options for the host-python image: this interpreter and this harness, `shared` folders read-write.

    Folders are mounted at their own paths; one already inside another mounted folder is
    not mounted twice. Containers run as the calling user, so files they write in the
    shared folders stay the caller's.
    """
    read_only = [Path("/usr"), Path("/etc"), Path(sys.base_prefix), Path(sys.prefix), harness_root()]
    volumes: dict[str, dict[str, str]] = {}
    for path in _outermost([path.resolve() for path in read_only]):
        volumes[str(path)] = {"bind": str(path), "mode": "ro"}
    for path in _outermost([path.resolve() for path in shared]):
        path.mkdir(parents=True, exist_ok=True)
        volumes[str(path)] = {"bind": str(path), "mode": "rw"}
    environment = {"HOME": "/tmp", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
                   "PYTHONPATH": str(harness_root())}
    return RunSpec(image=image, python=[sys.executable], volumes=volumes, environment=environment,
                   user=f"{os.getuid()}:{os.getgid()}", working_dir="/tmp")


def installed_run_spec(image: str, shared: list[Path]) -> RunSpec:
    """Run options for an image with the harness installed (the project's Dockerfile)."""
    volumes = {str(path.resolve()): {"bind": str(path.resolve()), "mode": "rw"}
               for path in _outermost([path.resolve() for path in shared])}
    for path in shared:
        path.mkdir(parents=True, exist_ok=True)
    return RunSpec(image=image, python=["python"], volumes=volumes, environment={"PYTHONUNBUFFERED": "1"},
                   user=f"{os.getuid()}:{os.getgid()}")


def _outermost(paths: list[Path]) -> list[Path]:
    """`paths` without duplicates and without any path inside another one of them, in order."""
    kept: list[Path] = []
    for path in paths:
        if any(path == other or other in path.parents for other in kept):
            continue
        kept = [other for other in kept if path not in other.parents]
        kept.append(path)
    return kept
