"""`[target]`: the deployment under test, and how its replicas may differ."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from harness.config.auth import ENV_NAME, TargetAuth
from harness.config.chaos import COMMAND_NAMES, DEPLOYMENT_COMMANDS
from harness.config.commands import REPLICA_PLACEHOLDERS, check_command
from harness.config.durations import Duration, PositiveDuration
from harness.config.logs import check_log_adapter, parse_log_location
from harness.config.strict import FieldProblem, Strict
from harness.config.urls import HostName, check_url
from harness.vocabulary import PAYMENT_ROUNDS


class ReplicaOverride(Strict):
    """How one replica of an embedded target differs from the others (1-based `replica`)."""

    replica: int = Field(ge=1, description="which replica (1-based) these settings apply to")
    name: str | None = Field(default=None, description="its server name, the audience its states are sealed for "
                                                       "(default: the target's name)")
    clock_offset: Duration | None = Field(default=None, description="how far its clock runs ahead (0 or more)")
    clock_behind: bool = Field(default=False, description="the clock_offset runs behind instead of ahead")
    leak: float = Field(default=0.0, ge=0, allow_inf_nan=False, description=(
        "MB a minute its memory grows while it serves: a planted leak, to see `replica_rss_growth` fail"))
    launch: Literal["cli", "module"] = Field(
        default="cli", description="how it is started: the harness command, or `python -m harness.shop.server` "
                                   "(the resolver's answer key then differs)")
    store: Literal["shared", "memory"] = Field(default="shared", description="memory: quotes and refunds only "
                                                                             "this process sees")
    answers_store: Literal["shared", "memory"] = Field(default="shared", description="memory: a once-only record "
                                                                                     "only this process sees")
    auth: bool = Field(default=True, description="false: with [target.auth], this replica is started without it (a "
                                                 "rollout that missed the auth config): it serves without a token, "
                                                 "and a state sealed to a token's principal fails `principal drift` "
                                                 "there")


STDIO_CHAOS = ("restart", "kill", "rolling-restart", "pause")
"""The chaos a stdio target can do: its processes are the harness's children, stopped, killed (SIGKILL) and paused
(SIGSTOP, SIGCONT) by their PID. Everything else acts on HTTP, a key ring or an authorization server it has not."""

STDIO_FLOWS = ("refund", "return", "payout", "call")
"""The flow kinds a stdio target runs: each of their rounds is a `tools/call` the SDK's client sends."""

STDIO_CLIENT_LABEL = "client"
"""The replica label every per-client stdio process is counted under (they come and go with their flows)."""


class TargetConfig(Strict):
    """The deployment under test: embedded (the harness starts the shop), external, docker, or stdio."""

    kind: Literal["embedded", "external", "docker", "stdio"] = Field(
        default="embedded", description="embedded: the harness starts the shop; external: replicas at `urls`; "
                                        "docker: containers through the Docker engine; stdio: the harness starts "
                                        "each server as its child and speaks MCP over its stdin and stdout")
    replicas: int = Field(default=3, ge=1, le=32, description="how many MCP replicas (embedded, docker; stdio: its "
                                                                 "processes, per replica)")
    store: Literal["sqlite", "redis", "memory"] = Field(
        default="sqlite", description="where the shop keeps quotes, refunds and once-only records (embedded, and "
                                      "the shop over stdio); "
                                      "redis needs redis-server")
    keyring: Literal["file", "ephemeral"] = Field(
        default="file", description="sealing keys: a ring file per replica, re-read on change, or per-process "
                                    "keys that die with the process")
    ttl: PositiveDuration = Field(default=600.0, description="how long a requestState lives, modelled")
    name: str = Field(default="shop", description="the replicas' server name, the audience states are sealed for")
    principal_header: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9-]+$",
        description="a request header the replicas bind every requestState to (embedded, docker image: the shop's "
                    "replicas are started binding it; otherwise your deployment must): every round carries it, "
                    "valued `principal`, and the fuzzer's cross-principal mutant goes back under another value")
    principal: str = Field(default="mrtr-harness", min_length=1, pattern=r"^[\x21-\x7e]+$",
                           description="the principal_header's value on every round (printable, no spaces)")
    auth: TargetAuth | None = Field(
        default=None, description="OAuth: a token per lead on every round (an embedded shop then verifies tokens "
                                  "from its own authorization server)")
    overrides: list[ReplicaOverride] = Field(default_factory=list, description="replicas that differ from the rest")

    @property
    def sends_principal(self) -> bool:
        """Whether rounds go as a principal another round can be sent as instead (the fuzzer's cross-principal):
        a `principal_header`, or OAuth tokens of two principals or more."""
        return self.principal_header is not None or (self.auth is not None and self.auth.principals > 1)
    urls: list[str] = Field(default_factory=list, description="external: the replicas' (or the balancer's) MCP URLs")
    allow: list[HostName] = Field(
        default_factory=list,
        description="the hosts of `urls` that are not loopback and that chaos (any [[chaos]]) and fuzzing (a fuzz "
                    "flow) may act on, e.g. [\"staging.example\"] (host names or addresses, no scheme or port; "
                    "also `run --allow-host HOST`); loopback (127.0.0.0/8, ::1, localhost) and an embedded "
                    "target need none")
    api: str | None = Field(default=None, description="external: the shop API's base URL, whose `GET /ledger` "
                                                      "the invariants read; none: ledger invariants unchecked")
    health_urls: list[str] = Field(
        default_factory=list, description="external (Kubernetes, any deployment): each replica's Prometheus metrics "
        "URL, in `urls`' order, whose standard `process_*` metrics (resident memory, CPU, open descriptors, threads) "
        "the run samples as the replica's health; none: no health for this target (an embedded or docker target is "
        "read directly)")
    logs: list[str] = Field(default_factory=list, description="external: where the replicas log, each entry "
                            "`file:PATH[@LABEL]` (followed like tail -F; @LABEL names its replica, as `triage "
                            "--file PATH@LABEL` does), `command:COMMAND` (its output; its environment is the "
                            "commands', see `command_env`), `docker:LABEL=VALUE[,...]` (a container by its labels) or "
                            "`kubernetes:[NAMESPACE:]SELECTOR` (every pod the selector finds, followed as pods are "
                            "replaced: a watch, and one log stream per pod)")
    log_adapter: str = Field(
        default="python-sdk", description="how the replicas log a refused requestState, so the run can read its "
        "reason: `python-sdk` (the Python SDK's `mcp.server.request_state` WARNING), `typescript-sdk` "
        "(`@modelcontextprotocol/server` 2.x, through its onerror), or the path of a user's adapter in TOML "
        "(relative to the scenario; docs/your-deployment.md); a rejection no line of it explains is \"unexplained "
        "(no adapter for this server)\"")
    image: str | None = Field(default=None, description="docker: the image the harness starts the shop from")
    compose_project: str | None = Field(default=None, description="docker: a running compose deployment's project")
    compose_service: str | None = Field(default=None, description="docker: the replicas' compose service")
    commands: dict[str, list[str]] = Field(
        default_factory=dict,
        description="external, docker: chaos by command, an argv list per name (no shell unless you write "
                    "`sh -c`): restart, kill, pause, resume, add-key, promote-key, retire-key, set-ttl, rename, "
                    "clock-skew, scale, and for the authorization server token-expiry, token-expiry-end, revoke, "
                    "scope-loss, scope-restore, auth-down, auth-up, subject-drift. Placeholders: {replica} (r1, "
                    "...), {index} (0-based), {url}; the key steps {key_id} (a fingerprint) and {key_file} (the "
                    "new key, a 0600 file deleted after the run); set-ttl {ttl} (real seconds), rename {name}, "
                    "clock-skew {offset} (signed seconds), scale {replicas}; token-expiry {lifetime} (real "
                    "seconds), revoke and scope-loss {share} (0-1), scope-loss and scope-restore {scope}, "
                    "subject-drift {share} (0 at its end); with `sh -c`, give a placeholder as an argument after the "
                    "script and read it there as \"$1\", never in the script's text. Their environment: the "
                    "allow-list, `command_env` and `MRTR_RUN_ID`")
    command_env: list[Annotated[str, Field(pattern=ENV_NAME)]] = Field(
        default_factory=list, description="external, docker, stdio: the environment variables the commands (and a "
                                          "stdio_command) are given "
                                          "beside the allow-list (PATH, HOME, LANG, ...: docs/your-deployment.md) "
                                          "and MRTR_RUN_ID, e.g. [\"AWS_PROFILE\"]; no other reaches them")
    release_guard: bool = Field(
        default=True, description="embedded: false makes the shop's API release an already released refund again "
                                  "(no 409), so only the replicas' once-only record stops a replayed answer")
    command_timeout: PositiveDuration = Field(default=120.0, description="how long one command may run, real")
    ready_timeout: PositiveDuration = Field(default=60.0, description="after a command, how long the replica's "
                                                                      "URL may take to accept connections again")
    serve_2025: bool = Field(default=False, description="embedded, docker image: the shop serves 2025-era clients "
                             "too, asking them over their session (elicitation/create); false: it answers them with "
                             "input requests, which reach them as -32603")
    payment_rounds: int | None = Field(default=None, ge=0, le=100, description="embedded, docker image: after this "
                                       "many URL-mode rounds with the page unfinished, pay_refund answers "
                                       "\"Not paid\" (0: it asks until the client's cap; default: the shop's, "
                                       f"{PAYMENT_ROUNDS})")

    stdio_command: list[str] = Field(
        default_factory=list, description="stdio: the server's command, an argv list (no shell), started once per "
        "process with its log on stderr, its environment the allow-list and `command_env` (as a command's); empty: "
        "the shop (`mrtr-harness shop replica --transport stdio`, with its "
        "API, whose ledger the invariants read)")
    stdio_processes: Literal["per-replica", "per-client"] = Field(
        default="per-replica", description="stdio: per-replica starts `replicas` processes with the target, every "
        "flow's rounds shared among them (a host that keeps its servers running; chaos acts on them); per-client "
        "starts one for each flow at its first call and stops it at its end (a host that starts a server per "
        "task: every flow pays a cold start; no chaos), and one at the start to prove the command serves")

    @field_validator("commands")
    @classmethod
    def _known_commands(cls, commands: dict[str, list[str]]) -> dict[str, list[str]]:
        """Unknown names and placeholders are refused here, with their line, not when the action runs."""
        for name, argv in commands.items():
            if name not in COMMAND_NAMES:
                raise FieldProblem(f"unknown command name {name!r}: the names are {', '.join(COMMAND_NAMES)}", name)
            extra = COMMAND_NAMES[name] if name in DEPLOYMENT_COMMANDS else COMMAND_NAMES[name] | REPLICA_PLACEHOLDERS
            check_command(name, argv, extra)
        return commands

    @property
    def replica_count(self) -> int:
        """How many replicas chaos can name: the URLs of an external target, one for per-client stdio processes
        (they share the label `client`), else `replicas`."""
        if self.kind == "stdio" and self.stdio_processes == "per-client":
            return 1
        return len(self.urls) if self.kind == "external" else self.replicas

    def _stdio_fits(self) -> None:
        """What only a stdio target takes, and what a stdio target cannot take (HTTP's, commands', the shop's HTTP
        knobs), each refused in one line saying why."""
        if self.kind != "stdio":
            for name, unset in (("stdio_command", []), ("stdio_processes", "per-replica")):
                if getattr(self, name) != unset:
                    raise FieldProblem(f"{name} applies to kind = \"stdio\"", name)
            return
        http_only = {"urls": "a stdio server has no URL: the harness starts it (stdio_command)",
                     "health_urls": "the harness reads a stdio server's health from /proc itself",
                     "api": "the shop's API is started with the shop; another server's ledger is not read",
                     "logs": "a stdio server logs on its stderr, which the harness keeps and reads",
                     "principal_header": "a stdio request has no headers: its one client is the process that "
                                         "started it",
                     "auth": "OAuth is HTTP's: a stdio server takes its credentials from its environment",
                     "commands": "the harness does a stdio target's chaos itself, on the processes it started",
                     "overrides": "replica overrides start the shop's HTTP replicas differently",
                     "serve_2025": "the SDK's client speaks 2026-07-28 over stdio"}
        for name, why in http_only.items():
            if getattr(self, name):
                raise FieldProblem(f"{name} does not apply to a stdio target: {why}", name)
        if self.command_env and not self.stdio_command:
            raise FieldProblem("command_env names what a stdio_command is given: the shop over stdio needs none",
                               "command_env")
        if self.stdio_command and self.payment_rounds is not None:
            raise FieldProblem("payment_rounds starts the shop differently: with your own stdio_command, give your "
                               "server its options there", "payment_rounds")

    @field_validator("urls", "health_urls")
    @classmethod
    def _urls_parse(cls, urls: list[str]) -> list[str]:
        for index, url in enumerate(urls):
            check_url(url, index)
        return urls

    @field_validator("api")
    @classmethod
    def _api_parses(cls, api: str | None) -> str | None:
        if api is not None:
            check_url(api)
        return api

    @field_validator("log_adapter")
    @classmethod
    def _known_log_adapter(cls, value: str) -> str:
        return check_log_adapter(value)

    @field_validator("logs")
    @classmethod
    def _known_log_sources(cls, logs: list[str]) -> list[str]:
        """Each entry must be a log source the run can follow: refused here, not when the run starts."""
        for index, entry in enumerate(logs):
            parse_log_location(entry, index)
        return logs

    @model_validator(mode="after")
    def _fits_kind(self) -> TargetConfig:
        if self.kind == "external" and not self.urls:
            raise FieldProblem("an external target needs urls = [the replicas' or the balancer's MCP URLs]", "kind")
        if self.health_urls and (self.kind != "external" or len(self.health_urls) != len(self.urls)):
            raise FieldProblem("health_urls name one metrics URL per replica of an external target, in `urls`' "
                               "order", "health_urls")
        if self.kind == "docker" and (self.image is None) == (self.compose_project is None):
            raise FieldProblem("a docker target needs either image = \"...\" (the harness starts the shop from it, "
                               "e.g. \"mrtr-harness/host-python:test\") or compose_project = \"...\" (a running "
                               "compose deployment), not both", "image" if self.image else "kind")
        docker_only = [name for name in ("image", "compose_project", "compose_service") if getattr(self, name)]
        if self.kind != "docker" and docker_only:
            raise FieldProblem("image, compose_project and compose_service apply to kind = \"docker\" only",
                               docker_only[0])
        if self.kind != "embedded" and not self.release_guard:
            raise FieldProblem("release_guard applies to kind = \"embedded\": the harness starts that shop's API",
                               "release_guard")
        if self.kind == "embedded" and self.commands:
            raise FieldProblem("[target.commands] applies to external and docker targets: the harness runs an "
                               "embedded target's chaos itself", "commands")
        if self.kind == "embedded" and self.command_env:
            raise FieldProblem("command_env names what [target.commands] are given: an embedded target has none",
                               "command_env")
        if self.kind == "embedded" and self.auth is not None and (self.auth.kind != "client-credentials"
                                                                  or self.auth.token_url is not None):
            raise FieldProblem("an embedded shop runs its own authorization server, which issues client-credentials "
                               "tokens its replicas verify: use kind = \"client-credentials\" without token_url "
                               "(the token endpoint is discovered)", "auth", "kind")
        self._stdio_fits()
        for override in self.overrides:
            if override.replica > self.replicas:
                raise FieldProblem(f"overrides names replica {override.replica}, but there are {self.replicas}",
                                   "overrides")
        return self


