"""`keras-tupe-convert`: a fairseq checkpoint without its `dict.txt` names the flag."""

from tests.commands.entry_points import run_main


def test_convert_without_dict_txt_names_the_flag_not_the_argument(tmp_path, capsys):
    from keras_tupe_cli import convert as convert_cli

    (tmp_path / "model.pt").write_bytes(b"x")
    code, _, err = run_main(convert_cli.main, [
        "fairseq", str(tmp_path / "model.pt"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "pass it as `--dictionary`" in err and "dictionary=" not in err, err
