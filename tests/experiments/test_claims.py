"""`experiments.claims`: T2 as the step at which TUPE-A reaches BERT-A's final loss, the two
pipelines' comparison and the plateau control, their runs named by the `claims` entry of
`experiments/studies.json`."""

import os

import pytest

from experiments import claims
from experiments import config as study_config
from experiments.config import StudyError

COLUMNS = "step,loss,accuracy,val_loss,val_accuracy,learning_rate,tokens_per_second,elapsed_seconds"


def _record(folder, rows):
    """A record's metrics.csv with `(step, val_loss or None, elapsed_seconds)` rows."""
    folder.mkdir(parents=True)
    lines = [COLUMNS] + [f"{step},7.0,0.1,{'' if val is None else val},0.1,1e-3,100,{elapsed}"
                         for step, val, elapsed in rows]
    (folder / "metrics.csv").write_text("\n".join(lines) + "\n")
    return str(folder)


def test_the_fast_run_reaches_the_slow_runs_final_loss_at_its_first_evaluation_at_or_below(
        tmp_path):
    # The slow run ends at 5.0 after 8 steps in 40 s. The fast run is at 5.1 at step 4 (not
    # yet), exactly 5.0 at step 6 (reached) and 4.5 at step 8, at 6 s a step; a row without
    # an evaluation (step 3, loss 1.0 in no column that counts) is passed over.
    slow = _record(tmp_path / "slow", [(2, 6.0, 10), (4, 5.5, 20), (6, 5.2, 30), (8, 5.0, 40)])
    fast = _record(tmp_path / "fast", [(2, 5.8, 12), (3, None, 18), (4, 5.1, 24),
                                       (6, 5.0, 36), (8, 4.5, 48)])
    result = claims.reach_final_loss(fast, slow, fast_step_flops=3.0, slow_step_flops=2.0)
    assert result["slow_steps"] == 8 and result["slow_final"] == 5.0
    assert result["step"] == 6
    assert result["step_share"] == pytest.approx(6 / 8)
    assert result["flop_share"] == pytest.approx(6 * 3.0 / (8 * 2.0))  # 1.125: more FLOPs
    assert result["time_share"] == pytest.approx(6 * 6.0 / 40)  # 48 s / 8 steps = 6 s a step


def test_a_fast_run_that_never_reaches_the_final_loss_has_no_step_and_no_shares(tmp_path):
    slow = _record(tmp_path / "slow", [(2, 6.0, 10), (4, 4.0, 20)])
    fast = _record(tmp_path / "fast", [(2, 5.0, 10), (4, 4.01, 20)])
    result = claims.reach_final_loss(fast, slow)
    assert result["step"] is None
    assert (result["step_share"], result["flop_share"], result["time_share"]) == (None,) * 3
    assert "| never |" in claims.t2_table([{"study": "s", "seed": 0, "flop_ratio": 1.0,
                                            **result}], "tupe_a", "bert_a")


def test_a_record_without_evaluations_is_refused_naming_it(tmp_path):
    slow = _record(tmp_path / "slow", [(2, None, 10)])
    fast = _record(tmp_path / "fast", [(2, 5.0, 10)])
    with pytest.raises(StudyError, match="slow has no logged evaluation"):
        claims.reach_final_loss(fast, slow)


def test_the_long_runs_t2_table_from_the_committed_records(capsys, tmp_path):
    assert claims.main(["--out", str(tmp_path)]) == 0
    # The committed plateau page is what the committed records make.
    page = study_config.load_config("claims", kind="claims")["plateau"]["page"]
    committed = open(os.path.join("docs", "results", f"{page}.md")).read()
    assert (tmp_path / f"{page}.md").read_text() == committed
    table = capsys.readouterr().out
    # Seed by seed, TUPE-A's first evaluation at or below its paired BERT-A's final loss
    # (read off the records' metrics.csv by hand: BERT-A ends at 4.37508, 3.75371, 3.95302).
    assert "| long_v2_jax | 0 | 4.375 (16,000) | 2,800 | 17.50% |" in table
    assert "| long_v2_jax_seed1 | 1 | 3.754 (16,000) | 5,400 | 33.75% |" in table
    assert "| long_v2_jax_seed2 | 2 | 3.953 (16,000) | 4,600 | 28.75% |" in table
    # The FLOP ratio by hand for mini (4 layers, d 256, d_ff 1,024) at n = 128, batch 32:
    # BERT-A's forward per token is 4 x (2 (4 d^2 + 2 d d_ff) + 4 n d) = 6,815,744; TUPE-A
    # adds its untied correlation once a batch, (4 n d^2 + 2 n^2 d) / (32 n) = 10,240.
    assert f"costs {(6_815_744 + 10_240) / 6_815_744:.4f} x a bert_a step" in table
    # The CPU run of TUPE-A against the GPU runs' band (results.md, sections 3 and 12).
    assert "above the band at 34, below it at 1" in table
    assert ("from step 4,000 (61 evaluations): above the band's mean at 60; the difference "
            "from the mean +0.046 on average (-0.004 to +0.077)") in table


def test_a_run_against_a_band_counts_the_evaluations_all_of_them_logged(tmp_path):
    # The band of two runs at steps 2, 4, 6, 8 (the second lacks step 6, so it is left out);
    # the single run is above the band at 2, below it at 4, inside at 8. From step 4 on:
    # differences from the band's mean -0.5 (step 4) and +0.1 (step 8).
    records_dir = tmp_path / "records"
    _record(records_dir / "cpu" / "v", [(2, 6.0, 1), (4, 4.0, 2), (6, 9.0, 3), (8, 3.2, 4)])
    _record(records_dir / "gpu0" / "v", [(2, 5.0, 1), (4, 4.4, 2), (6, 4.0, 3), (8, 3.0, 4)])
    _record(records_dir / "gpu1" / "v", [(2, 5.2, 1), (4, 4.6, 2), (8, 3.2, 4)])
    result = claims.band_position(str(tmp_path), ("cpu", "v"), (("gpu0", "v"), ("gpu1", "v")),
                                  from_step=4)
    assert {k: result[k] for k in ("evaluations", "above", "below", "late",
                                   "late_above_mean")} == {
        "evaluations": 3, "above": 1, "below": 1, "late": 2, "late_above_mean": 1}
    assert [result[k] for k in ("late_mean", "late_min", "late_max")] == pytest.approx(
        [-0.2, -0.5, 0.1])
    with pytest.raises(StudyError, match="no evaluation in common"):
        claims.band_position(str(tmp_path), ("cpu", "v"), (("absent", "v"),), from_step=4)


def test_the_plateau_table_gives_each_runs_first_evaluation_below_the_line(tmp_path):
    # Three runs: one crosses 6.0 between steps 1,000 and 1,500 (6.0 itself is not below),
    # one never does in its 2,000 steps, one was stopped at step 1,000 still above it; a
    # run without a record is left out.
    records_dir = tmp_path / "records"
    crossing = _record(records_dir / "s" / "fast", [(500, 6.5, 1), (1000, 6.0, 2),
                                                    (1500, 5.2, 3), (2000, 4.8, 4)])
    _record(records_dir / "s" / "slow", [(1000, 6.3, 1), (2000, 6.1, 2)])
    _record(records_dir / "t" / "stopped", [(500, 6.9, 1), (1000, 6.4, 2)])
    for folder, status in ((crossing, "finished"), (str(records_dir / "s" / "slow"), "finished"),
                           (str(records_dir / "t" / "stopped"), "stopped at step 1000")):
        (tmp_path / folder / "run_config.json").write_text(f'{{"status": "{status}"}}')
    runs = (("fast one", "s", "fast"), ("slow one", "s", "slow"), ("stopped one", "t", "stopped"),
            ("absent", "s", "absent"))
    rows = claims.plateau_rows(str(tmp_path), runs, 6.0)
    assert [(r["label"], r["below"], r["at_1000"], r["at_2000"]) for r in rows] == [
        ("fast one", 1500, 6.0, 4.8), ("slow one", None, 6.3, 6.1),
        ("stopped one", None, 6.4, None)]
    page, figure = claims.plateau_page(rows, str(tmp_path), 6.0, "plateau")
    assert page == str(tmp_path / "plateau.md") and figure == str(tmp_path / "plateau.png")
    text = open(page).read()
    assert "| fast one | s | finished | 1,500 | 6.000 | 4.800 |" in text
    assert "| slow one | s | finished | never | 6.300 | 6.100 |" in text
    assert "| stopped one | t | stopped at step 1000 | not by 1,000 | 6.400 | – |" in text
    assert open(figure, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
