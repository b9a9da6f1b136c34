"""`python -m experiments.run`: an unknown study or a missing study config is one line."""

import os

from tests.commands.entry_points import run_main


def test_experiments_run_names_an_unknown_study_and_the_choices(tmp_path, capsys):
    from experiments import run as experiments_run
    from experiments.config import STUDIES_FILE, studies

    code, _, err = run_main(experiments_run.main, ["report", "--study", "nope"], capsys)
    assert (code, err) == (2, f"error: There is no study 'nope' in "
                              f"{os.path.relpath(STUDIES_FILE)}. Studies: "
                              f"{', '.join(sorted(studies()))}\n")
    code, _, err = run_main(experiments_run.main,
                            ["report", "--config", str(tmp_path / "x.json")], capsys)
    assert (code, err) == (2, f"error: Study config {tmp_path / 'x.json'} does not exist.\n")
    assert list(tmp_path.iterdir()) == []
