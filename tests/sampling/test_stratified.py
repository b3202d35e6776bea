from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import delta_eval as de
from delta_eval.demo import airline_task_type
from delta_eval.exceptions import ConfigError, SampleWarning, SourceWarning
from delta_eval.sampling import build_population, draw_sample, iter_selected
from delta_eval.schema import ErrorRecord


def sample(source: de.ConversationSource, spec: de.Stratified) -> tuple[object, list[ErrorRecord]]:
    errors: list[ErrorRecord] = []
    population = build_population(source, spec, errors.append)
    return draw_sample(population, spec), errors


def test_proportional_sample_is_seeded_reproducible_and_weighted(tau_source: de.ConversationSource) -> None:
    spec = de.Stratified(by=["task_type"], n=50, seed=7, derived={"task_type": airline_task_type})
    first, errors = sample(tau_source, spec)
    again, _ = sample(tau_source, spec)
    other, _ = sample(tau_source, spec.model_copy(update={"seed": 8}))
    assert errors == []
    assert first.selected == again.selected
    assert first.selected != other.selected
    assert len(first.selected) == 50
    assert first.population == 200
    by_stratum = Counter(h for h, _ in first.selected.values())
    for row in first.strata:
        assert by_stratum[row.stratum] == row.sampled
        assert row.weight == pytest.approx(row.population / row.sampled)
    # Weights reweight the sample back to the population size.
    assert sum(w for _, w in first.selected.values()) == pytest.approx(200)


def test_growing_n_only_adds_conversations(tau_source: de.ConversationSource) -> None:
    small, _ = sample(tau_source, de.Stratified(by=["reward"], n=20, seed=3))
    large, _ = sample(tau_source, de.Stratified(by=["reward"], n=60, seed=3))
    assert set(small.selected) <= set(large.selected)


def test_sql_derived_stratum_over_metadata(tau_source: de.ConversationSource) -> None:
    spec = de.Stratified(
        by=["outcome"],
        n=40,
        derived={"outcome": "CASE WHEN reward = '1.0' THEN 'solved' ELSE 'failed' END"},
    )
    result, _ = sample(tau_source, spec)
    assert {row.stratum: row.population for row in result.strata} == {"outcome=failed": 116, "outcome=solved": 84}


def test_selected_conversations_are_read_back_by_position(tau_source: de.ConversationSource) -> None:
    result, _ = sample(tau_source, de.Stratified(n=5, seed=1))
    picked = list(iter_selected(tau_source, result.selected))
    assert [p for p, _ in picked] == sorted(result.selected)


def test_unknown_stratum_and_bad_sql_are_config_errors(tau_source: de.ConversationSource) -> None:
    with pytest.raises(ConfigError, match="neither a metadata field nor a derived stratum"):
        sample(tau_source, de.Stratified(by=["nope"], n=5))
    with pytest.raises(ConfigError, match="derived stratum's SQL failed"):
        sample(tau_source, de.Stratified(by=["x"], n=5, derived={"x": "no_such_column + 1"}))


def test_failing_stratum_function_is_an_error_row_not_a_crash(tau_source: de.ConversationSource) -> None:
    def fragile(conv: de.Conversation) -> str:
        if conv.id.startswith("3/"):
            raise KeyError("missing")
        return "ok"

    result, errors = sample(tau_source, de.Stratified(by=["k"], derived={"k": fragile}))
    assert result.population == 196
    assert len(errors) == 4
    assert errors[0].stage == "sample"
    assert errors[0].field == "k"
    assert errors[0].conversation_id == "3/0"


def test_config_file_form_of_derived_strata() -> None:
    spec = de.Stratified.model_validate(
        {"by": ["t", "s"], "derived": {"t": {"function": "delta_eval.demo:airline_task_type"}, "s": {"sql": "1"}}}
    )
    assert spec.python_strata()["t"] is airline_task_type
    assert spec.sql_strata() == {"s": "1"}
    assert spec.model_dump(mode="json")["derived"]["t"] == {"function": "delta_eval.demo:airline_task_type"}


def test_where_filters_the_population_before_counting(tau_source: de.ConversationSource) -> None:
    spec = de.Stratified(by=["reward"], n=20, seed=1, where="reward = '1.0' OR trial = '0'")
    result, _ = sample(tau_source, spec)
    # 84 solved, plus the unsolved first trials
    assert result.population + result.excluded == 200
    assert result.excluded > 0
    picked = list(iter_selected(tau_source, result.selected))
    assert all(c.metadata["reward"] == 1.0 or c.metadata["trial"] == 0 for _, c in picked)
    with pytest.raises(ConfigError, match="'where' condition failed"):
        sample(tau_source, de.Stratified(where="no_such_column > 1"))


def _convs(metadata: list[dict[str, object]]) -> list[de.Conversation]:
    from delta_eval.schema import Message

    return [
        de.Conversation(id=f"c{k}", messages=(Message(role="user", content="hi"),), metadata=m)
        for k, m in enumerate(metadata)
    ]


def test_a_misspelt_stratum_field_is_a_config_error_with_a_suggestion(tau_source: de.ConversationSource) -> None:
    with pytest.raises(ConfigError, match=r"stratum 'rewad' is neither .* did you mean 'reward'\?"):
        sample(tau_source, de.Stratified(by=["rewad"], n=5))


def test_a_declared_field_no_record_has_is_a_config_error(tmp_path: Path) -> None:
    # the mapping keeps 'tierr' (a typo of the records' 'tier') as None on every record: one '(missing)' stratum
    records = [{"id": f"c{k}", "messages": [{"role": "user", "content": "hi"}], "tier": "gold"} for k in range(4)]
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    source = de.read_conversations(path, metadata=["tierr", "tiers"])
    # Reading warns first (the paths are in no record, nearest 'tier'); sampling on one refuses.
    with (
        pytest.raises(ConfigError) as info,
        pytest.warns(SourceWarning, match="nearest names in the first record: tier"),
    ):
        sample(source, de.Stratified(by=["tierr"]))
    assert str(info.value) == (
        "stratum field 'tierr' is missing from all 4 conversations, which would all fall in one '(missing)' stratum "
        "(fields present: none)"
    )
    in_memory = _convs([{"tier": "gold", "tierr": None}, {"tier": "silver"}])
    with pytest.raises(ConfigError, match=r"'tierr' is missing from all 2 .* \(fields present: tier\); did you mean"):
        sample(de.ConversationSource.of(in_memory), de.Stratified(by=["tierr"]))


def test_a_field_missing_from_most_records_warns_and_is_noted() -> None:
    # an export whose field was renamed part way: most records say 'tiers'
    convs = _convs(
        [{"tier": "gold", "lang": "en"}, {"tiers": "gold", "lang": "de"}, {"tiers": "silver"}, {"tiers": "gold"}]
    )
    with pytest.warns(SampleWarning, match=r"'tier' is missing from 3 of 4 conversations") as caught:
        result, _ = sample(de.ConversationSource.of(convs), de.Stratified(by=["tier"]))
    assert len(caught) == 1
    assert result.notes == (
        "stratum field 'tier' is missing from 3 of 4 conversations, which fall in its '(missing)' stratum; did you "
        "mean 'tiers'?",
    )
    # half is not most: no word ('lang' is missing from 2 of 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        half, _ = sample(de.ConversationSource.of(convs), de.Stratified(by=["lang", "tiers"]))
    assert half.notes == ()


HOSTILE_NAMES = [
    "customer's tier",
    'tier"; DROP TABLE population; --',
    "x', 'y') AS stratum FROM population --",
    "multi\nline",
    "région ✈ 顧客",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_stratum_name_is_a_name_not_sql(name: str) -> None:
    # An apostrophe once gave a raw ParserException; a crafted name rewrote the sampling query.
    convs = _convs([{name: "gold"}, {name: "silver"}, {name: "gold"}, {}])
    result, _ = sample(de.ConversationSource.of(convs), de.Stratified(by=[name]))
    assert sorted(s.stratum for s in result.strata) == sorted([f"{name}=(missing)", f"{name}=gold", f"{name}=silver"])
    assert sum(s.population for s in result.strata) == 4


@given(name=st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), min_size=1))
@settings(max_examples=40, deadline=None)
def test_any_metadata_field_name_stratifies(name: str) -> None:
    convs = _convs([{name: "a"}, {name: "b'\"c"}])
    result, _ = sample(de.ConversationSource.of(convs), de.Stratified(by=[name]))
    assert sorted(s.stratum for s in result.strata) == sorted([f"{name}=a", f"{name}=b'\"c"])


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_derived_stratum_name(name: str) -> None:
    convs = _convs([{"tier": "gold"}, {"tier": "silver"}])
    spec = de.Stratified(by=[name], derived={name: "upper(tier)"})
    result, _ = sample(de.ConversationSource.of(convs), spec)
    assert sorted(s.stratum for s in result.strata) == [f"{name}=GOLD", f"{name}=SILVER"]


def test_the_population_keeps_only_the_fields_strata_and_where_name(tau_source: de.ConversationSource) -> None:
    # The demo keeps task_id, trial, reward and actions (a list): a population of all of them held each twice.
    base = {"position", "conversation_id", "n_messages"}
    plain = build_population(tau_source, de.Stratified(by=["reward"]), lambda e: None)
    assert set(plain.column_names) == base | {"reward"}
    where = de.Stratified(by=["reward"], where="CAST(TRIAL AS INTEGER) > 0", derived={"t": "upper(task_id)"})
    named = build_population(tau_source, where, lambda e: None)
    assert set(named.column_names) == base | {"reward", "trial", "task_id"}  # identifiers, whatever their case
    as_json = de.Stratified(where="json_array_length(json_extract(metadata, '$.actions')) > 3")
    assert set(build_population(tau_source, as_json, lambda e: None).column_names) == base | {"metadata"}
    # The same sample as from a population that kept everything, and every field still known to the errors.
    everything = de.Stratified(by=["reward"], where="metadata IS NOT NULL AND actions IS NOT NULL", n=40, seed=3)
    kept_all, _ = sample(tau_source, everything)
    assert draw_sample(plain, de.Stratified(by=["reward"], n=40, seed=3)).selected == kept_all.selected  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"known: actions, n_messages, reward, task_id, trial"):
        draw_sample(plain, de.Stratified(by=["nope"], n=5))


@pytest.mark.parametrize("n", [None, 200, 500])
def test_a_sample_of_everything_is_drawn_without_duckdb_as_sql_draws_it(
    tau_source: de.ConversationSource, n: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No strata, no where, no n below the population: every conversation, in one stratum of weight 1, as the SQL
    draws it, without starting DuckDB (most of a run's sampling when it replays its whole source)."""
    import duckdb

    from delta_eval.sampling import stratified

    population = build_population(tau_source, de.Stratified(), lambda e: None, counters={"one": lambda c: 1})
    spec = de.Stratified(n=n, seed=3)
    monkeypatch.setattr(stratified, "_takes_everything", lambda spec, size: False)
    in_sql = draw_sample(population, spec)
    monkeypatch.undo()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("DuckDB started")

    monkeypatch.setattr(duckdb, "connect", refuse)
    drawn = draw_sample(population, spec)
    assert drawn == in_sql
    assert list(drawn.selected) == list(in_sql.selected)  # in position order, as the SQL orders them
    assert len(drawn.selected) == population.num_rows == 200
    with pytest.raises(AssertionError, match="DuckDB started"):  # anything narrower still draws in SQL
        draw_sample(population, de.Stratified(n=199))
