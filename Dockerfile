# The harness and the reference shop in one image: every service of docker-compose.yml
# (API, replicas, harness) runs it with a different command.
# The base is a public Python image; a build argument swaps it (e.g. a local base
# imported with debootstrap where no registry is reachable, see README).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY harness ./harness
RUN pip install --no-compile .
COPY scenarios ./scenarios
COPY dashboards ./dashboards

# No secrets in the image: key rings are mounted at run time.
USER nobody
ENTRYPOINT ["mrtr-harness"]
CMD ["--help"]
