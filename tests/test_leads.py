"""Simulated leads: valid form answers, the answer mix, wire shapes, determinism, seeding."""

from __future__ import annotations

import datetime as dt
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import mcp_types
import pytest
from pydantic import ValidationError

from harness.config.leads import LeadProfile
from harness.config.think import ConstantThink, LognormalThink
from harness.leads.answers import UnanswerableRequest, UnanswerableSchema, answer_form
from harness.leads.lead import Action, Lead, capabilities
from harness.load.seeding import FlowStream, FlowStreams, derive_seed, stream

SEEDS = range(300)

RELEASE_FORM = {
    "type": "object",
    "properties": {"release": {"type": "boolean", "title": "Release"}},
    "required": ["release"],
}

RETURN_REASONS = ["damaged in transit", "wrong item sent", "missing part", "arrived late", "changed mind"]
RETURN_FORM = {
    "type": "object",
    "properties": {
        "reason": {"type": "string", "title": "Reason", "enum": RETURN_REASONS},
        "restock": {"type": "boolean", "title": "Restock"},
        "note": {"type": "string", "title": "Note", "maxLength": 200},
    },
    "required": ["reason", "restock"],
}

EVERY_FEATURE_FORM = {
    "type": "object",
    "properties": {
        "flag": {"type": "boolean", "default": True},
        "plain": {"type": "string"},
        "short": {"type": "string", "minLength": 3, "maxLength": 5},
        "long": {"type": "string", "minLength": 150, "maxLength": 160},
        "exact": {"type": "string", "minLength": 7, "maxLength": 7},
        "color": {"type": "string", "enum": ["red", "green"], "default": "green"},
        "legacy": {"type": "string", "enum": ["a", "b"], "enumNames": ["A", "B"]},
        "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
        "email": {"type": "string", "format": "email"},
        "email_bounded": {"type": "string", "format": "email", "minLength": 30, "maxLength": 32},
        "site": {"type": "string", "format": "uri"},
        "site_short": {"type": "string", "format": "uri", "maxLength": 25},
        "day": {"type": "string", "format": "date"},
        "when": {"type": "string", "format": "date-time", "default": "2026-07-28T09:00:00Z"},
        "count": {"type": "integer"},
        "bounded_int": {"type": "integer", "minimum": 3, "maximum": 5},
        "tight_int": {"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 5},
        "one_int": {"type": "integer", "minimum": 2.5, "maximum": 3.5},
        "below_int": {"type": "integer", "maximum": -1000},
        "amount": {"type": "number", "minimum": 0.01, "maximum": 150.0},
        "open_amount": {"type": "number", "exclusiveMinimum": 0},
        "tiny": {"type": "number", "exclusiveMinimum": 1.0, "exclusiveMaximum": 1.001},
        "mixed_low": {"type": "number", "minimum": 0, "exclusiveMinimum": 10, "maximum": 11},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y", "z"]}, "minItems": 1, "maxItems": 2},
        "titled_tags": {
            "type": "array",
            "items": {"anyOf": [{"const": "p", "title": "P"}, {"const": "q", "title": "Q"}]},
            "minItems": 2,
            "default": ["p", "q"],
        },
        "any_tags": {"type": "array", "items": {"type": "string", "enum": ["m", "n"]}},
    },
}
EVERY_FEATURE_FORM["required"] = list(EVERY_FEATURE_FORM["properties"])


def _format_checker() -> jsonschema.FormatChecker:
    """jsonschema's checker, plus the two formats it checks only with optional packages."""
    checker = jsonschema.FormatChecker()

    @checker.checks("date-time", raises=ValueError)
    def _date_time(value: object) -> bool:
        return not isinstance(value, str) or (value.endswith("Z") and dt.datetime.fromisoformat(value) is not None)

    @checker.checks("uri")
    def _uri(value: object) -> bool:
        if not isinstance(value, str):
            return True
        parts = urlsplit(value)
        return bool(parts.scheme and parts.netloc)

    return checker


FORMATS = _format_checker()


def _validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    """A checked, format-aware validator; built once per schema, as validate() would per call."""
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=FORMATS)


def _assert_valid(content: dict[str, Any], schema: dict[str, Any], validator: Any = None) -> None:
    """Valid by JSON Schema (formats included) and accepted by the SDK's own ElicitResult."""
    (validator or _validator(schema)).validate(content)
    mcp_types.ElicitResult(action="accept", content=content)


def _form_request(schema: dict[str, Any], message: str = "Please answer") -> dict[str, Any]:
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}


def _url_request(url: str) -> dict[str, Any]:
    return {"method": "elicitation/create", "params": {"mode": "url", "message": "Pay out", "url": url}}


# --- answers from a requestedSchema -------------------------------------------------------


@pytest.mark.parametrize("schema", [RELEASE_FORM, RETURN_FORM, EVERY_FEATURE_FORM], ids=["release", "return", "every"])
def test_form_answers_are_valid_for_many_seeds(schema: dict[str, Any]) -> None:
    validator = _validator(schema)
    for seed in SEEDS:
        content = answer_form(schema, random.Random(seed))
        _assert_valid(content, schema, validator)
        assert set(schema["required"]) <= content.keys()


def test_the_sdk_accepts_the_answers_as_an_elicit_result() -> None:
    content = answer_form(EVERY_FEATURE_FORM, random.Random(3))
    result = mcp_types.ElicitResult(action="accept", content=content)
    assert result.model_dump(exclude_none=True)["content"] == content
    mcp_types.ElicitRequestFormParams.model_validate(_form_request(RETURN_FORM)["params"])


def test_return_form_covers_every_reason_and_fills_the_note_about_half_the_time() -> None:
    answers = [answer_form(RETURN_FORM, random.Random(seed)) for seed in range(2000)]
    assert {a["reason"] for a in answers} == set(RETURN_REASONS)
    assert {a["restock"] for a in answers} == {True, False}
    with_note = sum("note" in a for a in answers) / len(answers)
    assert 0.45 < with_note < 0.55
    assert all(0 < len(a["note"]) <= 200 for a in answers if "note" in a)


def test_defaults_are_kept_about_half_the_time() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 10, "maximum": 99, "default": 1}}}
    answers = [answer_form({**schema, "required": ["n"]}, random.Random(seed))["n"] for seed in range(2000)]
    kept = answers.count(1) / len(answers)
    assert 0.45 < kept < 0.55


def test_titled_single_select_picks_a_const() -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "oneOf": [{"const": "a", "title": "A"}]}}}
    assert answer_form({**schema, "required": ["s"]}, random.Random(0)) == {"s": "a"}


def test_multi_select_respects_item_bounds_and_picks_distinct_options() -> None:
    schema = {
        "type": "object",
        "properties": {
            "t": {"type": "array", "items": {"type": "string", "enum": list("abcdef")}, "minItems": 2, "maxItems": 4}
        },
        "required": ["t"],
    }
    sizes = set()
    for seed in SEEDS:
        picked = answer_form(schema, random.Random(seed))["t"]
        assert len(set(picked)) == len(picked)
        sizes.add(len(picked))
    assert sizes == {2, 3, 4}


def test_overrides_win_for_known_fields_and_are_ignored_for_others() -> None:
    for seed in range(50):
        assert answer_form(RELEASE_FORM, random.Random(seed), overrides={"release": True}) == {"release": True}
        content = answer_form(RETURN_FORM, random.Random(seed), overrides={"release": True})
        assert "release" not in content
        _assert_valid(content, RETURN_FORM)


def test_override_fills_a_field_the_lead_could_not_answer() -> None:
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^R-[0-9]+$"}},
        "required": ["code"],
    }
    assert answer_form(schema, random.Random(0), overrides={"code": "R-1"}) == {"code": "R-1"}


@pytest.mark.parametrize(
    "prop",
    [
        {"type": "object", "properties": {}},
        {"type": "null"},
        {"type": ["string", "null"]},
        {"type": "string", "format": "ipv4"},
        {"type": "string", "pattern": "^[A-Z]{3}$"},
        {"type": "integer", "minimum": 5, "maximum": 4},
        {"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 4},
        {"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1},
        {"type": "string", "minLength": 10, "maxLength": 5},
        {"type": "string", "format": "date", "maxLength": 8},
        {"type": "string", "format": "email", "maxLength": 10},
        {"type": "array", "items": {"type": "string"}},
        {"type": "array", "items": {"type": "string", "enum": ["a"]}, "minItems": 2},
        {"description": "no type at all"},
    ],
    ids=repr,
)
def test_required_field_the_lead_cannot_fill_raises(prop: dict[str, Any]) -> None:
    schema = {"type": "object", "properties": {"odd": prop, "ok": {"type": "boolean"}}, "required": ["odd", "ok"]}
    with pytest.raises(UnanswerableSchema, match="'odd'"):
        answer_form(schema, random.Random(0))


def test_optional_field_the_lead_cannot_fill_is_left_out() -> None:
    schema = {
        "type": "object",
        "properties": {"odd": {"type": "object"}, "ok": {"type": "boolean"}},
        "required": ["ok"],
    }
    for seed in range(50):
        assert set(answer_form(schema, random.Random(seed))) == {"ok"}


def test_required_field_without_a_definition_raises() -> None:
    schema = {"type": "object", "properties": {}, "required": ["ghost"]}
    with pytest.raises(UnanswerableSchema, match="ghost"):
        answer_form(schema, random.Random(0))


def test_a_schema_that_is_not_a_flat_object_raises() -> None:
    with pytest.raises(UnanswerableSchema, match="type 'object'"):
        answer_form({"type": "array"}, random.Random(0))


def test_same_seed_gives_the_same_answers() -> None:
    first = [answer_form(EVERY_FEATURE_FORM, random.Random(seed)) for seed in range(20)]
    again = [answer_form(EVERY_FEATURE_FORM, random.Random(seed)) for seed in range(20)]
    assert first == again
    assert len({repr(a) for a in first}) == len(first)


# --- the lead's decision per round --------------------------------------------------------

MIX = LeadProfile(decline=0.2, cancel=0.1, abandon=0.05, overrides={"release": True})
ROUNDS = 10_000


def test_answer_mix_matches_the_profile() -> None:
    lead = Lead(MIX, random.Random(11))
    counts = Counter(lead.respond({"confirm": _form_request(RELEASE_FORM)}).action for _ in range(ROUNDS))
    expected = {Action.ACCEPT: 0.65, Action.DECLINE: 0.2, Action.CANCEL: 0.1, Action.ABANDON: 0.05}
    for action, share in expected.items():
        assert counts[action] / ROUNDS == pytest.approx(share, abs=0.015), action
    assert MIX.accept == pytest.approx(0.65)


def test_think_times_follow_the_profile() -> None:
    lead = Lead(LeadProfile(), random.Random(2))
    times = sorted(lead.respond({"confirm": _form_request(RELEASE_FORM)}).think_seconds for _ in range(4000))
    assert times[len(times) // 2] == pytest.approx(120, rel=0.1)
    assert times[int(len(times) * 0.95)] == pytest.approx(720, rel=0.1)


def test_wire_shape_of_each_action() -> None:
    requests = {"confirm": _form_request(RELEASE_FORM), "inspect": _form_request(RETURN_FORM)}
    seen: dict[Action, Any] = {}
    lead = Lead(MIX, random.Random(4))
    while len(seen) < 4:
        response = lead.respond(requests)
        seen.setdefault(response.action, response)
    assert seen[Action.ABANDON].input_responses is None
    assert seen[Action.DECLINE].input_responses == {"confirm": {"action": "decline"}, "inspect": {"action": "decline"}}
    assert seen[Action.CANCEL].input_responses == {"confirm": {"action": "cancel"}, "inspect": {"action": "cancel"}}
    accepted = seen[Action.ACCEPT].input_responses
    assert accepted is not None and accepted.keys() == requests.keys()
    assert accepted["confirm"] == {"action": "accept", "content": {"release": True}}
    _assert_valid(accepted["inspect"]["content"], RETURN_FORM)
    for response in seen.values():
        assert response.think_seconds >= 0
        assert response.url_visits == []
        for answer in (response.input_responses or {}).values():
            mcp_types.ElicitResult.model_validate(answer)


def test_response_keys_equal_request_keys() -> None:
    requests = {f"q{i}": _form_request(RETURN_FORM) for i in range(5)}
    lead = Lead(MIX, random.Random(8))
    for _ in range(200):
        response = lead.respond(requests)
        if response.input_responses is not None:
            assert list(response.input_responses) == list(requests)


def test_form_request_without_mode_is_treated_as_a_form() -> None:
    request = {"method": "elicitation/create", "params": {"message": "Release?", "requestedSchema": RELEASE_FORM}}
    response = Lead(LeadProfile(), random.Random(0)).respond({"confirm": request})
    assert response.input_responses is not None
    assert response.input_responses["confirm"]["action"] == "accept"
    _assert_valid(response.input_responses["confirm"]["content"], RELEASE_FORM)


def test_url_accept_carries_no_content_and_yields_a_visit() -> None:
    profile = LeadProfile(url_completion=ConstantThink(value="45s"))
    url = "https://shop.example/payouts/P-1?flow=9"
    requests = {"connect": _url_request(url), "confirm": _form_request(RELEASE_FORM)}
    response = Lead(profile, random.Random(0)).respond(requests)
    assert response.action is Action.ACCEPT
    assert response.input_responses is not None
    assert response.input_responses["connect"] == {"action": "accept"}
    assert "content" in response.input_responses["confirm"]
    assert response.url_visits == [(url, 45.0)]
    mcp_types.ElicitRequestURLParams.model_validate(requests["connect"]["params"])


def test_url_decline_has_no_visit() -> None:
    response = Lead(LeadProfile(decline=1.0), random.Random(0)).respond({"connect": _url_request("https://x.example/")})
    assert response.input_responses == {"connect": {"action": "decline"}}
    assert response.url_visits == []


@pytest.mark.parametrize(
    "request_",
    [
        {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 10}},
        {"method": "roots/list"},
        {"method": "elicitation/create", "params": {"mode": "form", "message": "no schema"}},
        {"method": "elicitation/create", "params": {"mode": "url", "message": "no url"}},
        {"method": "elicitation/create", "params": {"mode": "telepathy", "message": "?"}},
        "not an object",
    ],
    ids=["sampling", "roots", "form-without-schema", "url-without-url", "unknown-mode", "not-an-object"],
)
def test_requests_a_lead_cannot_answer_raise_before_any_draw(request_: Any) -> None:
    rng = random.Random(0)
    state = rng.getstate()
    with pytest.raises(UnanswerableRequest, match="'odd'"):
        Lead(MIX, rng).respond({"ok": _form_request(RELEASE_FORM), "odd": request_})
    assert rng.getstate() == state


def test_accepting_a_form_with_an_unanswerable_required_field_raises_unanswerable_schema() -> None:
    schema = {"type": "object", "properties": {"blob": {"type": "object"}}, "required": ["blob"]}
    with pytest.raises(UnanswerableSchema, match="'inspect'.*'blob'"):
        Lead(LeadProfile(), random.Random(0)).respond({"inspect": _form_request(schema)})


def test_a_round_without_questions_is_not_the_leads_business() -> None:
    with pytest.raises(ValueError, match="no input requests"):
        Lead(LeadProfile(), random.Random(0)).respond({})


def test_same_seed_gives_identical_rounds() -> None:
    requests = {"inspect": _form_request(RETURN_FORM), "connect": _url_request("https://x.example/p")}
    profile = MIX.model_copy(update={"url_completion": LognormalThink(median="30s", p95="3m")})

    def run() -> list[Any]:
        lead = Lead(profile, stream(7, "worker", 0, "flow", 3))
        return [lead.respond(requests) for _ in range(300)]

    first, again = run(), run()
    assert first == again
    other = Lead(profile, stream(7, "worker", 0, "flow", 4))
    assert [other.respond(requests) for _ in range(300)] != first


def test_capabilities_declare_both_elicitation_modes() -> None:
    caps = capabilities(LeadProfile())
    assert caps == {"elicitation": {"form": {}, "url": {}}}
    mcp_types.ClientCapabilities.model_validate(caps)


# --- profile validation --------------------------------------------------------------------


def _locations(error: ValidationError) -> list[tuple[str | int, ...]]:
    return [e["loc"] for e in error.errors()]


@pytest.mark.parametrize("field", ["decline", "cancel", "abandon"])
def test_probability_outside_zero_one_names_the_field(field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        LeadProfile(**{field: -0.1})
    assert _locations(caught.value) == [(field,)]
    with pytest.raises(ValidationError) as caught:
        LeadProfile(**{field: 1.5})
    assert _locations(caught.value) == [(field,)]


def test_probabilities_summing_over_one_are_rejected() -> None:
    with pytest.raises(ValidationError, match=r"decline \+ cancel \+ abandon = 1.1 exceeds 1"):
        LeadProfile(decline=0.5, cancel=0.5, abandon=0.1)
    assert LeadProfile(decline=0.5, cancel=0.3, abandon=0.2).accept == pytest.approx(0.0)


def test_profile_think_with_p95_not_above_median_names_the_field() -> None:
    with pytest.raises(ValidationError, match="p95") as caught:
        LeadProfile.model_validate({"think": {"dist": "lognormal", "median": "2m", "p95": "1m"}})
    assert _locations(caught.value) == [("think", "lognormal", "p95")]


def test_profile_defaults_and_scenario_form() -> None:
    default = LeadProfile()
    assert default.think == LognormalThink(median=120, p95=720)
    assert default.url_completion == ConstantThink(value=30)
    assert default.accept == 1.0
    scenario = LeadProfile.model_validate(
        {"think": {"dist": "lognormal", "median": "2m", "p95": "12m"}, "decline": 0.05, "cancel": 0.02, "abandon": 0.01}
    )
    assert scenario.accept == pytest.approx(0.92)
    with pytest.raises(ValidationError) as caught:
        LeadProfile.model_validate({"declne": 0.1})
    assert _locations(caught.value) == [("declne",)]


# --- seeding -------------------------------------------------------------------------------


def test_stream_is_reproducible_and_independent_per_part() -> None:
    draws = [stream(7, "worker", 1, "flow", 2).random() for _ in range(3)]
    assert len(set(draws)) == 1
    assert stream(7, "worker", 1, "flow", 3).random() != draws[0]
    assert stream(8, "worker", 1, "flow", 2).random() != draws[0]
    assert derive_seed(7, "1") != derive_seed(7, 1)
    assert derive_seed(7, "ab", "c") != derive_seed(7, "a", "bc")


def test_a_flows_stream_is_the_same_whether_its_prefix_was_hashed_once_or_with_it() -> None:
    """The load's per-flow streams hash (seed, "worker", w, "flow") once: every flow must still draw what it did."""
    family = FlowStreams(7, "worker", 1, "flow")
    for number in (1, 2, 999_999):
        once, whole = family.stream(number), FlowStream(derive_seed(7, "worker", 1, "flow", number))
        assert [once.random() for _ in range(5)] == [whole.random() for _ in range(5)]
    assert family.stream(1).random() != FlowStreams(7, "worker", 2, "flow").stream(1).random()


def test_stream_is_the_same_in_another_process() -> None:
    code = "from harness.load.seeding import stream; print(repr(stream(7, 'worker', 1, 'flow', 2).random()))"
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo)
    assert float(out.stdout) == stream(7, "worker", 1, "flow", 2).random()


def test_stream_rejects_parts_that_could_be_ambiguous() -> None:
    with pytest.raises(TypeError):
        stream(7, 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        stream(7, True)


def test_a_pinned_list_is_choices_picked_with_one_draw_and_a_multi_select_is_a_list_inside_it() -> None:
    form = {"type": "object", "properties": {"sku": {"type": "string"}, "tags": {"type": "array"}}}
    pinned = {"sku": ["mug", "tee"], "tags": [["a", "b"]]}
    picks = [answer_form(form, random.Random(seed), pinned) for seed in SEEDS]
    assert {answer["sku"] for answer in picks} == {"mug", "tee"}
    assert all(answer["tags"] == ["a", "b"] for answer in picks)
    for seed in SEEDS[:20]:
        rng, twin = random.Random(seed), random.Random(seed)
        answer_form(form, rng, pinned)
        twin.choice(["mug", "tee"])
        twin.choice([["a", "b"]])
        assert rng.random() == twin.random(), "each pinned list draws exactly one choice, nothing else"
