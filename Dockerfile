# The harness and the reference shop in one image: every service of docker-compose.yml
# (API, replicas, harness) runs it with a different command.
# The base is a public Python image; a build argument swaps it (e.g. a local base
# imported with debootstrap where no registry is reachable, see README).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# A venv works on both the official image and a plain Debian base (where pip refuses to
# install into the system Python, PEP 668); the base needs python3 >= 3.11 and its venv module.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/mrtr PATH=/opt/mrtr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /app
COPY pyproject.toml README.md ./
COPY harness ./harness
RUN python3 -m venv /opt/mrtr && pip install --no-compile .
COPY scenarios ./scenarios
COPY dashboards ./dashboards

# No secrets in the image: key rings are mounted at run time. /keys is where docker-compose.yml
# mounts its ring volume: owned by the image's user, so a fresh volume is too (the engine copies
# the folder's owner into a new volume) and the key-ring service, running as that user, writes a
# ring the replicas can read.
RUN install -d -o nobody -g nogroup -m 0700 /keys
USER nobody
ENTRYPOINT ["mrtr-harness"]
CMD ["--help"]
