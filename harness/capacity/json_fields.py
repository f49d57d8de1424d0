"""What each key of capacity.json means: the field reference in docs/capacity-planning.md is generated from it.

A script that reads a sweep's capacity.json needs every key it can rely on. The keys are
written by `report.document` (the top level and the `capacity` rows), `expiry` (the
`expiry` object) and `sweep.StepResult.as_dict` (each of `steps`); the tests compare a
real sweep's capacity.json with these tables key for key, so a key added or dropped
without its line here fails. Times are seconds, rates flows per second, shares fractions.
"""

from __future__ import annotations

TOP_LEVEL: dict[str, str] = {
    "schema": "the layout's version (1): it goes up when a key changes meaning or goes away",
    "kind": "always `capacity`",
    "scenario": "the scenario swept: `name`, `seed`, `target` (its kind), `time_scale`, `ttl_seconds` "
                "(modelled), `think` (the lead model), `slo` (its `[expect]` table as written)",
    "status": "`completed`, `interrupted` or `target-error`: a sweep that did not finish keeps the steps that ran",
    "error": "why the sweep stopped early, or null",
    "started": "when the sweep started (Unix seconds)",
    "finished": "when it ended (Unix seconds)",
    "plan": "the options of the sweep as parsed: `rates` or `search`, `replicas`, `step`, `warmup`, `peak`, "
            "`headroom`, `expiry_target`, `saturation_cpu`, `saturation_late`, `from_previous`, `workers` "
            "(`--workers`: local worker processes each step's load is spread over; 0 is the sweep's own process), "
            "`remote_workers` (`--expect-workers`: workers elsewhere), ...",
    "warmup_seconds": "the warm-up cut from the start of each step before it is judged",
    "recommendation": "the report's opening statements, one string each: replicas for the peak, saturation, "
                      "the TTL",
    "capacity": "one object per replica count (below)",
    "expiry": "think time against the TTL, pooled over the steps that held (below); null if not assessed",
    "steps": "one object per step run, in the order they ran (below)",
}

CAPACITY_ROW: dict[str, str] = {
    "replicas": "the replica count",
    "highest_rate_holding_slo": "the highest arrival rate that held the SLO, or null when none did",
    "limit_found": "true when a higher rate broke the SLO (the knee); false when every rate tried held",
    "first_break": "the lowest rate that broke the SLO, or null",
    "generator_saturated_at": "the rate at which the load generator saturated, or null",
    "round_latency_p95": "p95 round latency (seconds) at the highest rate held, over its steady window",
    "rounds_per_call": "rounds per tool call at that rate: `mean`, `p95`, `max`",
    "rejections_by_reason": "rejections the replicas logged at that rate, by reason",
    "completion_share": "the share of flows completed at that rate",
    "throughput": "completed flows per second at that rate",
    "note": "the row in words: where the limit lies, or why none was found",
}

EXPIRY: dict[str, str] = {
    "think": "the lead model, e.g. `lognormal(median=4m, p95=12m)`",
    "ttl_seconds": "the scenario's TTL (modelled seconds); `ttl` the same as a duration",
    "ttl": "the TTL as a duration, e.g. `15m`",
    "time_scale": "the scenario's `time_scale`",
    "predicted_share": "P(think > TTL): the share of retries predicted to find their state expired",
    "target": "`--expiry-target`: the share accepted",
    "fits": "whether `predicted_share` is within `target`",
    "recommended_ttl_seconds": "the shortest round TTL that keeps the share under `target` (with the held steps' "
                               "p95 round latency added), or null when no finite TTL does",
    "recommended_ttl": "the same as a duration, or null",
    "predicted_share_with_latency": "the prediction with each pooled retry's measured latency added to the think "
                                    "time, or null without retries",
    "measured": "the pooled measurement: `states` minted, `retries` sent, `expired` rejections logged, `share` "
                "(expired / retries), `unanswered` (states with no retry), `retry_latency_p50`",
    "measured_from": "which steps were pooled: `steps that held`, `every step (none held)` or `no step`",
    "tolerance": "how far the measured share may sit from the prediction (3 binomial standard errors + 0.02)",
    "agrees": "whether the measured share is within the tolerance, or null without retries",
}

STEP: dict[str, str] = {
    "replicas": "the replica count",
    "rate": "the arrival rate asked (flows per second)",
    "folder": "the step's own results folder, relative to the sweep's",
    "exit_code": "the step's run exit code (1 is a broken threshold: a break, not an error)",
    "status": "the run's status from its summary.json",
    "judgement": "`hold`, `break` or `saturated`; null when the step was interrupted",
    "generator_saturated": "true when the harness itself ran out of CPU or started flows late",
    "reasons": "why the step broke or saturated, one string per reason",
    "window_seconds": "the steady window judged (the step without its warm-up)",
    "offered_rate": "arrivals per second over the steady window",
    "throughput": "completed flows per second over the steady window",
    "completion_share": "the share of flows completed over the steady window",
    "round_latency_p50": "median round latency (seconds) over the steady window",
    "round_latency_p95": "p95 round latency (seconds) over the steady window",
    "rounds_per_call": "rounds per tool call: `mean`, `p95`, `max`",
    "rejections_by_reason": "rejections the replicas logged over the whole step, by reason",
    "thresholds": "each `[expect]` condition judged over the steady window (as in summary.json's `thresholds`)",
    "harness_cpu_cores": "the harness's CPU over the load window, in cores (with workers: the master's process "
                         "only; a worker that cannot keep up shows in `late_start_share`)",
    "late_start_share": "the share of flows the generator started late",
    "flows": "flows started",
    "flows_by_worker": "flows started by each load process: `w0` alone without workers, `w0` ... `wN-1` with N",
    "expiry": "this step's `states`, `retries`, `expired`, `share`, `unanswered`, `retry_latency_p50` and "
              "`predicted_share_with_latency`",
    "wall_seconds": "how long the step took, start to report",
    "other_load_cores": "CPU used by other processes on the machine during the step, in cores",
    "latency_p95_by_half": "p95 round latency in the first and second half of the steady window",
    "still_rising": "true when the second half's p95 is above twice the first's: the queue had not settled",
}

PARTS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("capacity.json (the top level)", "The object the file holds.", TOP_LEVEL),
    ("capacity[]", "One per replica count swept, in the order of `--replicas`.", CAPACITY_ROW),
    ("expiry", "Think time against the TTL: predicted from the lead model, measured over the steps that held.",
     EXPIRY),
    ("steps[]", "One per step, a replica count at an arrival rate.", STEP),
)
"""(heading, what it is, its keys) for each part of capacity.json, in the order the reference lists them."""
