"""`mrtr-harness capacity`: the search, the TTL arithmetic and the report, then short real sweeps.

The real sweeps run the CLI in a subprocess against the embedded shop, as a user does.
No timing decides a test here: whether two replicas hold a higher rate than one depends on
the machine's spare cores, and is measured by `benchmarks/replica_scaling.py`.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from harness.capacity import json_fields
from harness.capacity.expiry import ExpiryMeasurement, measure, recommend_ttl, round_up_ttl, tolerance
from harness.capacity.search import Judgement, limit_of, search, step_through
from harness.capacity.sweep_plan import CapacityPlan, PlanError, RateSearch, parse_replicas, parse_search
from harness.config.scenario import parse_scenario
from harness.config.think import ConstantThink, ExponentialThink, LognormalThink, UniformThink
from harness.journal.writer import read_journal

ROOT = Path(__file__).resolve().parent.parent


def _threshold_judge(limit: float, saturated_from: float = math.inf, seen: list[float] | None = None):
    def judge(rate: float) -> Judgement:
        if seen is not None:
            seen.append(rate)
        if rate >= saturated_from:
            return Judgement.SATURATED
        return Judgement.HOLD if rate <= limit else Judgement.BREAK
    return judge


# --- the search (pure) -------------------------------------------------------------------------------


def test_search_doubles_until_a_break_then_bisects_between_the_last_hold_and_the_break():
    seen: list[float] = []
    tried = search(RateSearch(start=5, max=200, factor=2, refine=3), _threshold_judge(37, seen=seen))
    assert seen == [5, 10, 20, 40, 30, 35, 37.5]
    limit = limit_of(tried)
    assert (limit.held, limit.broke, limit.saturated, limit.found) == (35, 37.5, None, True)


def test_search_that_holds_up_to_its_max_reports_no_limit_found():
    tried = search(RateSearch(start=3, max=20, factor=2), _threshold_judge(1000))
    assert [t.rate for t in tried] == [3, 6, 12, 20]
    limit = limit_of(tried)
    assert limit.held == 20 and not limit.found


def test_search_whose_start_already_breaks_bisects_down_towards_zero():
    tried = search(RateSearch(start=40, max=80, refine=2), _threshold_judge(15))
    assert [t.rate for t in tried] == [40, 20, 10]
    assert limit_of(tried).held == 10 and limit_of(tried).broke == 20


def test_a_saturated_generator_stops_the_climb_and_is_never_reported_as_the_limit():
    judge = _threshold_judge(100, saturated_from=40)
    for tried in (search(RateSearch(start=10, max=320), judge), step_through([10, 20, 40, 80], judge)):
        assert [t.rate for t in tried] == [10, 20, 40]
        limit = limit_of(tried)
        assert limit.held == 20 and limit.broke is None and limit.saturated == 40 and not limit.found


def test_stepping_through_rates_stops_after_the_first_break():
    tried = step_through([16, 2, 8, 4], _threshold_judge(5))
    assert [(t.rate, t.judgement) for t in tried] == [(2, Judgement.HOLD), (4, Judgement.HOLD),
                                                      (8, Judgement.BREAK)]


def test_the_estimate_bounds_the_steps_a_search_or_a_rate_list_runs_and_says_when_it_is_a_bound():
    from harness.capacity.estimate import estimate
    from harness.capacity.search import most_steps

    plan = RateSearch(start=4, max=128, refine=2)  # 4, 8, ..., 128, then 2 bisections
    assert most_steps(plan) == 8
    ran = {limit: len(search(plan, _threshold_judge(limit))) for limit in (1, 5, 37, 100, 127, 1000)}
    assert max(ran.values()) == most_steps(plan) == ran[100] and ran[1000] == 6, ran  # a break at 128: the bound
    bound = estimate(CapacityPlan(search=plan, step="20s"), replica_counts=3, grace=8.0)
    assert (bound.steps, bound.exact, bound.per_step) == (24, False, 33.0)
    assert bound.line() == ("estimated duration: at most 13m12s (at most 24 steps × (20s load + up to 8s grace + "
                            "about 5s to start and report))")
    assert bound.left(done=4, spent=100.0) == "at most 8m20s left"  # 20 steps still possible, 25 s each so far
    one_rate = estimate(CapacityPlan(rates=[12], step="2s"), replica_counts=2, grace=1.0, local_workers=2)
    assert one_rate.exact and one_rate.line().startswith("estimated duration: about 22s (2 steps × (2s load")
    assert one_rate.left(done=2, spent=20.0) == ""


def test_more_replicas_start_from_the_rate_fewer_replicas_held(tmp_path):
    from harness.capacity.sweep import StepResult, Sweep

    text = _scenario_text()
    limits = {1: 10, 2: 20}

    def fake(step_scenario, replicas, rate):
        judgement = Judgement.HOLD if rate <= limits[replicas] else Judgement.BREAK
        assert step_scenario.target.replicas == replicas and step_scenario.load.arrival_rate == rate
        return StepResult(replicas, rate, tmp_path, 0, "completed", judgement)

    for every_rate, expected in ((False, [(1, 5), (1, 10), (1, 20), (2, 10), (2, 20), (2, 40)]),
                                 (True, [(1, 5), (1, 10), (1, 20), (2, 5), (2, 10), (2, 20), (2, 40)])):
        plan = CapacityPlan(rates=[5, 10, 20, 40], replicas=[1, 2], from_previous=not every_rate)
        result = Sweep(parse_scenario(text), text, plan, results_root=tmp_path / "results").run(fake)
        assert [(s.replicas, s.rate) for s in result.steps] == expected
        assert (result.limits[1].held, result.limits[2].held) == (10, 20)
    plan = CapacityPlan(search=RateSearch(start=5, max=80, refine=0), replicas=[1, 2])
    result = Sweep(parse_scenario(text), text, plan, results_root=tmp_path / "results").run(fake)
    assert [(s.replicas, s.rate) for s in result.steps] == [(1, 5), (1, 10), (1, 20), (2, 10), (2, 20), (2, 40)]


def test_plan_options_are_checked_before_anything_runs():
    assert parse_replicas("1-3,5") == [1, 2, 3, 5]
    assert parse_search("2:64") == (2.0, 64.0, None)
    with pytest.raises(PlanError):
        parse_search("2")
    with pytest.raises(ValueError, match="either rates or a search"):
        CapacityPlan(rates=[1], search=RateSearch(start=1, max=2))
    with pytest.raises(ValueError, match="warm-up"):
        CapacityPlan(rates=[1], step="10s", warmup="10s")
    plan = CapacityPlan(step="20s")
    assert plan.warmup_for(ramp=2.0) == 5.0 and plan.warmup_for(ramp=8.0) == 8.0
    assert plan.with_default_search(4).search == RateSearch(start=4, max=64)


def test_worker_options_that_do_not_go_together_exit_2_before_any_step(monkeypatch):
    """`capacity` reads `--workers`/`--master` as `run` does (`harness.run.load_processes`), before anything starts:
    a master of workers elsewhere needs the secret they share."""
    from harness.cli.main import build_parser
    from harness.errors import UsageError
    from harness.run import load_processes
    from harness.secrets import MissingSecret

    monkeypatch.delenv("MRTR_CLUSTER_SECRET", raising=False)
    with pytest.raises(MissingSecret, match="MRTR_CLUSTER_SECRET is not set"):
        load_processes.options(build_parser().parse_args(["capacity", "c.toml", "--master", "--expect-workers", "3"]))
    monkeypatch.setenv("MRTR_CLUSTER_SECRET", "a-cluster-secret-for-this-test")

    done = subprocess.run([sys.executable, "-m", "harness", "capacity", "scenarios/capacity.toml", "--master"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--master and --expect-workers N go together" in done.stderr, done.stderr
    with pytest.raises(UsageError, match="must be 0 or more"):
        load_processes.options(build_parser().parse_args(["capacity", "c.toml", "--workers", "-1"]))
    spread = load_processes.options(build_parser().parse_args(["capacity", "c.toml", "--master", "--expect-workers",
                                                                "3", "--master-bind-port", "6000"]))
    assert (spread["remote_workers"], spread["master_bind_port"], spread["workers_wait"]) == (3, 6000, 300.0)


def test_refine_reaches_the_default_search_as_it_does_a_search_given():
    from harness.capacity.cli import _plan
    from harness.cli.main import build_parser

    def plan(*options: str) -> CapacityPlan:
        return _plan(build_parser().parse_args(["capacity", "scenario.toml", *options]))

    assert plan("--refine", "5").with_default_search(4).search == RateSearch(start=4, max=64, refine=5)
    assert plan().with_default_search(4).search == RateSearch(start=4, max=64, refine=2)
    assert plan("--search", "2:64", "--refine", "5").search == RateSearch(start=2, max=64, refine=5)
    for options in (["--refine", "11"], ["--search", "2:64", "--refine", "11"]):
        with pytest.raises(PlanError, match="^--refine: "):
            plan(*options)
    document = json.loads(plan("--refine", "5").with_default_search(4).model_dump_json())  # as capacity.json has it
    assert "refine" not in document and document["search"]["refine"] == 5
    with pytest.raises(ValueError, match="default search only"):
        CapacityPlan(search=RateSearch(start=1, max=2), refine=3)


# --- think time against TTL (pure) -------------------------------------------------------------------


def test_recommended_ttl_is_the_think_quantile_for_the_target_rounded_up_to_a_sensible_unit():
    lognormal = LognormalThink(median="4m", p95="12m")
    # q(0.99) = 4m * exp(2.326 * ln(3) / 1.645) = 1135 s -> the next whole minute
    assert recommend_ttl(lognormal, 0.01) == 19 * 60
    assert recommend_ttl(ConstantThink(value="50s"), 0.01) == 51  # strictly above: a TTL equal to it expires it
    assert recommend_ttl(ConstantThink(value="2m"), 0.01) == 180  # past a minute, whole minutes
    assert recommend_ttl(ExponentialThink(mean="1m"), 0.05) == 180  # -60 ln 0.05 = 179.7 s
    assert recommend_ttl(UniformThink(low="1m", high="2m"), 0.1, overhead=0.5) == 120
    for think, target in ((lognormal, 0.01), (ExponentialThink(mean="1m"), 0.05), (ConstantThink(value=70), 0.01)):
        assert think.survival(recommend_ttl(think, target)) <= target
    assert [round_up_ttl(s) for s in (0.4, 59.2, 61, 3601, 90000)] == [1, 60, 120, 3900, 93600]


def test_expiry_is_measured_as_logged_expired_rejections_over_retries_sent():
    records = [{"type": "round", "round": 1, "outcome": "input_required"},
               {"type": "round", "round": 2, "outcome": "complete", "latency": 0.1},
               {"type": "round", "round": 1, "outcome": "input_required"},
               {"type": "round", "round": 2, "outcome": "invalid_state", "latency": 0.2},
               {"type": "rejection", "reason": "expired", "replica": "r1"},
               {"type": "rejection", "reason": "seal", "replica": "r1"},
               {"type": "round", "round": 1, "outcome": "input_required"},  # still thinking at the end
               {"type": "round", "round": 1, "outcome": "complete"}]
    measured = measure(records)
    assert measured == ExpiryMeasurement(states=3, retries=2, expired=1, retry_latencies=(0.1, 0.2))
    assert measured.share == 0.5 and measured.unanswered == 1
    # 50 s leads, a 60 s TTL, time scale 60: 0.1 s of latency is 6 modelled seconds (fits), 0.2 s is 12 (expires)
    assert measured.predicted_with_latency(ConstantThink(value=50), 60, 60) == 0.5
    assert measured.predicted_with_latency(ConstantThink(value=50), 60, 1) == 0.0
    assert tolerance(0.5, 100) == pytest.approx(3 * 0.05 + 0.02)
    assert tolerance(1.0, 100) == pytest.approx(0.02)


# --- the step verdict and the report, from made-up steps -----------------------------------------------

SCENARIO = """
name = "cap"
seed = 3
duration = "10s"
time_scale = 60
[target]
replicas = 1
ttl = "{ttl}"
[load]
arrival_rate = {rate}
[[flows]]
kind = "refund"
amount = "{amount}"
[leads]
think = {think}
[expect]
"round_duration" = "p(95) < {slo}"
completed_ratio = ">= 0.9"
invariant_violations = "== 0"
"""


def _scenario_text(*, ttl="10m", rate=8, amount="any", think='{ dist = "constant", value = "6s" }', slo="250ms",
                   grace="3s") -> str:
    return f'grace = "{grace}"\n' + SCENARIO.format(ttl=ttl, rate=rate, amount=amount, think=think, slo=slo)


def _fake_step(tmp_path: Path, name: str, *, latency: float, harness_seconds: float, flows: int = 100,
               expired: int = 0) -> Path:
    """A step's results folder as a run leaves it: a journal over 10 s of load and a summary."""
    folder = tmp_path / name
    folder.mkdir()
    t0 = 1000.0
    records = [{"type": "run", "event": "start", "t": t0 - 2}]
    for n in range(flows):
        t = t0 + 10 * n / flows
        records += [{"type": "start", "t": t, "flow": "refund", "flow_id": f"f{n}", "late": False},
                    {"type": "round", "t": t, "flow": "refund", "round": 1, "latency": latency,
                     "outcome": "input_required", "replica": "r1", "code": None},
                    {"type": "round", "t": t + 0.1, "flow": "refund", "round": 2, "latency": latency,
                     "outcome": "complete", "replica": "r1", "code": None},
                    {"type": "flow", "t": t + 0.1, "flow": "refund", "flow_id": f"f{n}", "outcome": "completed",
                     "rounds": 2, "calls": [{"rounds": 2}]}]
    records += [{"type": "rejection", "t": t0 + 1, "reason": "expired", "replica": "r1"}] * expired
    records += [{"type": "run", "event": "load-stopped", "t": t0 + 10}, {"type": "run", "event": "end", "t": t0 + 11}]
    (folder / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {"status": "completed", "extra": {"cpu": {"harness_seconds": harness_seconds}},
               "invariants": {"no_double_release": {"passed": True, "violations": 0}},
               "reconciliation": {"passed": True}}
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def test_a_step_is_judged_over_its_steady_window_and_flagged_when_the_harness_saturates(tmp_path):
    from harness.capacity.sweep import analyse_step

    scenario = parse_scenario(_scenario_text())
    plan = CapacityPlan(rates=[8], step="10s", warmup="2s")
    calm = analyse_step(_fake_step(tmp_path, "calm", latency=0.02, harness_seconds=1.0), scenario, plan, 1, 8, 0)
    assert calm.judgement is Judgement.HOLD and not calm.generator_saturated
    assert calm.window == pytest.approx(8.0) and calm.offered == pytest.approx(10.0, rel=0.05)
    assert calm.latency_p95 == pytest.approx(0.02) and calm.rounds_per_call["mean"] == 2
    slow = analyse_step(_fake_step(tmp_path, "slow", latency=0.8, harness_seconds=1.0), scenario, plan, 1, 8, 1)
    assert slow.judgement is Judgement.BREAK and "round_duration" in slow.reasons[0]
    # the same slow step, but the harness burned 9.5 s of CPU in ~10 s of load: not the server's limit
    busy = analyse_step(_fake_step(tmp_path, "busy", latency=0.8, harness_seconds=9.5), scenario, plan, 1, 8, 1)
    assert busy.judgement is Judgement.SATURATED and busy.generator_saturated
    assert busy.harness_cores == pytest.approx(0.95, rel=0.05)


def test_the_report_opens_with_the_recommendation_and_carries_table_plots_and_ttl(tmp_path):
    from harness.capacity.report import write_report
    from harness.capacity.sweep import Sweep, analyse_step

    text = _scenario_text(ttl="5s", think='{ dist = "lognormal", median = "4s", p95 = "12s" }')
    scenario = parse_scenario(text)
    plan = CapacityPlan(rates=[10, 20, 40], replicas=[1, 2], step="10s", warmup="2s", peak=15)
    sweep = Sweep(scenario, text, plan, results_root=tmp_path / "results")
    sweep.check()
    limits = {1: 10, 2: 20}

    def fake(step_scenario, replicas, rate):
        latency = 0.02 if rate <= limits[replicas] else 0.9
        folder = _fake_step(tmp_path, f"r{replicas}-{rate:g}", latency=latency, harness_seconds=1.0, expired=30)
        return analyse_step(folder, step_scenario, plan, replicas, rate, 0 if latency < 0.1 else 1)

    result = sweep.run(fake)
    assert result.status == "completed" and [s.rate for s in result.steps] == [10, 20, 10, 20, 40]
    paths = write_report(result)
    document = json.loads(paths["json"].read_text())
    rows = {row["replicas"]: row for row in document["capacity"]}
    assert rows[1]["highest_rate_holding_slo"] == 10 and rows[2]["highest_rate_holding_slo"] == 20
    assert rows[2]["round_latency_p95"] == pytest.approx(0.02) and rows[2]["completion_share"] == 1.0
    assert rows[2]["rejections_by_reason"] == {"expired": 30} and rows[2]["rounds_per_call"]["mean"] == 2
    assert document["recommendation"][0].startswith("2 replicas hold the planned peak of 15 flows/s with 33% headroom")
    expiry = document["expiry"]
    assert expiry["predicted_share"] == pytest.approx(LognormalThink(median=4, p95=12).survival(5), abs=1e-4)
    assert expiry["measured"]["retries"] == 300 and expiry["measured"]["expired"] == 90  # three held steps pooled
    assert not expiry["fits"] and expiry["recommended_ttl_seconds"] == 19
    html = paths["html"].read_text()
    assert html.index('class="recommendation"') < html.index("<table>")
    assert html.count("<svg") == 2 and "knee 2r: 20/s" in html
    assert paths["throughput"].read_text().startswith('<svg xmlns="http://www.w3.org/2000/svg"')


# --- real sweeps -------------------------------------------------------------------------------------------


def _start_capacity(scenario_text: str, folder: Path, *args: str, quiet: bool = True) -> subprocess.Popen:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "scenario.toml"
    path.write_text(scenario_text)
    return subprocess.Popen([sys.executable, "-m", "harness", "capacity", str(path), "--results",
                             str(folder / "results"), *(["--quiet"] if quiet else []), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=ROOT)


def _finish_capacity(process: subprocess.Popen, folder: Path, timeout: float = 150) -> tuple[dict, str]:
    """capacity.json and what the sweep printed (stdout and stderr in one): the estimate, even with --quiet."""
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    assert process.returncode == 0, output
    assert re.search(r"^estimated duration: (about|at most) ", output, re.M), output
    [results] = [p for p in (folder / "results").iterdir() if p.is_dir()]
    assert (results / "capacity.html").is_file() and (results / "latency.svg").is_file()
    document = json.loads((results / "capacity.json").read_text())
    _assert_documented_keys(document)
    return document, output


def _assert_documented_keys(document: dict) -> None:
    """Every real sweep's capacity.json has exactly the keys docs/capacity-planning.md documents (generated from
    `json_fields`), part by part: a key written and not documented, or documented and gone, fails."""
    assert set(document) == set(json_fields.TOP_LEVEL)
    assert document["capacity"] and document["steps"] and document["expiry"] is not None
    for row in document["capacity"]:
        assert set(row) == set(json_fields.CAPACITY_ROW), row
    assert set(document["expiry"]) == set(json_fields.EXPIRY)
    for step in document["steps"]:
        assert set(step) == set(json_fields.STEP), step


def test_other_load_leaves_out_the_replicas_the_zygote_forked_and_counts_them_by_pid(tmp_path):
    """The replicas are the zygote's children, not the harness's: no `os.times` sees their CPU, so the
    step's "other load" would count it. They are counted by PID instead; the API and the zygote, the
    harness's own children, reach `os.times` once they are stopped and are not counted twice."""
    from harness.capacity.other_load import OtherLoad
    from harness.targets.embedded import EmbeddedTarget

    scenario = parse_scenario('name = "other-load"\nduration = "5s"\n[target]\nkind = "embedded"\nreplicas = 2\n'
                              '[load]\narrival_rate = 1\n[[flows]]\nkind = "refund"\n')
    target = EmbeddedTarget(scenario, tmp_path / "target")
    other_load = OtherLoad(lambda: target)
    other_load.start()
    try:
        target.start()
        assert target.deployment is not None and target.deployment.api is not None
        replicas = {replica.pid for replica in target.deployment.replicas}
        own_children = {target.deployment.api.pid, target.deployment.zygote.process.pid}
        assert target.target_pids() >= replicas | own_children
        other_load.sample()
    finally:
        target.stop()
        other_load.stop()
    assert set(other_load.target_seconds) == replicas
    assert all(seconds > 0 for seconds in other_load.target_seconds.values())  # each built its app and served


def test_a_sweep_spreads_each_step_over_its_replicas_and_its_load_over_two_workers(tmp_path):
    """One sweep on 1, then 2 replicas, each step's load from two local workers (`--workers 2`, the path `run
    --workers 2` takes). Each step's rounds were served by as many replicas as the step names, and on two each
    served about half (round-robin), so each does half the work one did alone. That is what lets two replicas
    hold more; how much more depends on the machine's spare cores, a timing no pass/fail test can rely on on a
    shared box (`benchmarks/replica_scaling.py` measures it). Each step's flows came from both workers, and the
    estimated duration was printed before the first step's line (its format, never its accuracy)."""
    text = _scenario_text(rate=12, grace="1s").replace('kind = "refund"\namount = "any"', 'kind = "return"')
    process = _start_capacity(text, tmp_path, "--replicas", "1,2", "--rates", "12", "--step", "2s",
                              "--warmup", "0.5s", "--workers", "2", quiet=False)
    document, output = _finish_capacity(process, tmp_path)
    lines = output.splitlines()
    [estimate] = [n for n, line in enumerate(lines) if line.startswith("estimated duration:")]
    assert re.fullmatch(r"estimated duration: about \S+ \(2 steps × \(2s load \+ up to 1s grace \+ about \S+ to "
                        r"start and report\)\); each step's load from 2 local workers", lines[estimate]), output
    progress = [n for n, line in enumerate(lines) if re.match(r"\[\d/2\] ", line)]
    assert len(progress) == 2 and estimate < progress[0], output
    assert document["plan"]["workers"] == 2
    for step in document["steps"]:
        assert sorted(step["flows_by_worker"]) == ["w0", "w1"] and min(step["flows_by_worker"].values()) > 0, step
        assert sum(step["flows_by_worker"].values()) == step["flows"]
    [results] = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    assert [row["replicas"] for row in document["capacity"]] == [1, 2]
    served = {step["replicas"]: _rounds_by_replica(results / step["folder"]) for step in document["steps"]}
    assert sorted(served) == [1, 2], document["steps"]
    assert len(served[1]) == 1 and sum(served[1].values()) >= 10, served
    assert len(served[2]) == 2 and min(served[2].values()) >= 0.4 * sum(served[2].values()), served


def _rounds_by_replica(folder: Path) -> Counter[str]:
    """The rounds a step's journal (the master's part and each worker's) says each replica served."""
    return Counter(str(record["replica"]) for record in read_journal(*sorted(folder.glob("journal*.jsonl")))
                   if isinstance(record, dict) and record.get("type") == "round")


def test_predicted_expiry_share_matches_the_measured_one_for_constant_and_lognormal_leads(tmp_path):
    """Every flow is a refund above the limit (one question, one retry); one run per lead model, side by side.

    constant: every lead takes 70 s against a 60 s TTL (1.17 s against 1 s real): all states expire,
      whatever the load; 10 flows/s for 3 s on one replica (~30 retries) keeps this run short.
    lognormal: median 1m, p95 2m, TTL 1m (at the median): half expire. At time scale 40 the TTL is
      1.5 s real and the think's p99 4 s (grace 5 s); 30 flows/s for 5 s on two replicas, far from
      their limit, gives ~150 retries.
    The lead model alone predicts exactly 1 and 1/2. What it ignores is the response's trip after the
    mint and the retry's trip and queue before the check: ~20 ms against the 1.5 s TTL on a quiet box
    (~1.3 points at the lognormal's median), but hundreds of ms on a box busy with other work. So the
    measurement is held against the prediction with each retry's measured round latency added to its
    think time (within a point or two of the model's on a quiet box). Tolerance: 3 binomial standard
    errors of that predicted share at the measured number of retries, plus 0.02 for the answers cut
    off at the end of the step (the grace is past the think's p99) and the work after the check that
    the latency also counts. So the model's own prediction is met within that tolerance plus the
    measured latency's effect, which the report shows beside it.
    """
    cases = {  # name: (think, ttl, predicted share, time scale, grace, replicas, rate, step)
        "constant": ('{ dist = "constant", value = "70s" }', "60s", 1.0, 60, "2s", "1", "10", "3s"),
        "lognormal": ('{ dist = "lognormal", median = "1m", p95 = "2m" }', "1m", 0.5, 40, "5s", "2", "30", "5s"),
    }
    processes = {}
    for name, (think, ttl, _, time_scale, grace, replicas, rate, step) in cases.items():
        text = _scenario_text(ttl=ttl, rate=rate, amount="above-limit", think=think, grace=grace).replace(
            "time_scale = 60", f"time_scale = {time_scale}")
        processes[name] = _start_capacity(text, tmp_path / name, "--replicas", replicas, "--rates", rate,
                                          "--step", step, "--warmup", "0.5s")
    documents = {name: _finish_capacity(process, tmp_path / name)[0] for name, process in processes.items()}
    for name, (_, _, predicted, *_) in cases.items():
        expiry = documents[name]["expiry"]
        assert expiry["predicted_share"] == pytest.approx(predicted, abs=1e-6), name
        [step] = documents[name]["steps"]
        retries, expired = step["expiry"]["retries"], step["expiry"]["expired"]
        assert retries >= 20, (name, step)
        with_latency = step["expiry"]["predicted_share_with_latency"]
        assert with_latency >= predicted - 1e-9, (name, step)  # latency only ever adds to the gap
        measured = expired / retries
        allowed = 3 * math.sqrt(with_latency * (1 - with_latency) / retries) + 0.02
        assert abs(measured - with_latency) <= allowed, (name, measured, with_latency, predicted, allowed, step)


def test_capacity_html_draws_a_knee_only_where_a_rate_broke_the_slo(tmp_path):
    from harness.capacity.report import write_report
    from harness.capacity.sweep import Sweep, analyse_step

    text = _scenario_text(ttl="5s", think='{ dist = "lognormal", median = "4s", p95 = "12s" }')
    scenario = parse_scenario(text)
    plan = CapacityPlan(rates=[10, 20], replicas=[1, 2], step="10s", warmup="2s", peak=15)
    sweep = Sweep(scenario, text, plan, results_root=tmp_path / "results")
    sweep.check()

    def fake(step_scenario, replicas, rate):
        latency = 0.9 if replicas == 1 and rate > 10 else 0.02  # one replica breaks at 20/s; two hold every rate
        folder = _fake_step(tmp_path, f"r{replicas}-{rate:g}", latency=latency, harness_seconds=1.0)
        return analyse_step(folder, step_scenario, plan, replicas, rate, 0 if latency < 0.1 else 1)

    paths = write_report(sweep.run(fake))
    html = paths["html"].read_text()
    assert "knee 1r: 10/s, broke at 20/s" in html
    assert "knee 2r" not in html and "2r broke" not in html  # its highest rate held: nothing broke there
