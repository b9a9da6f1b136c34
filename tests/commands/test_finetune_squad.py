"""`keras-tupe-finetune-squad`: a window without room for the question is refused in flags,
before any work."""

import pytest

from tests.commands.entry_points import run_main


def test_finetune_squad_names_the_flags_of_a_window_without_room_before_any_work(capsys):
    """`--seq-len 64` with the default `--max-query-length` (64): was
    "`sequence_length` (64) must leave room for the question (max_query_length=64)", the
    Python names, after loading the encoder and the data. Now the first thing checked (the
    --init given does not exist), in flags, with the fix; the Python API keeps its names."""
    from keras_tupe.finetuning import finetune_squad
    from keras_tupe_base.settings import SquadConfig
    from keras_tupe.models import tupe_span_qa_preprocessor
    from keras_tupe_cli import finetune_squad as squad_cli

    code, out, err = run_main(squad_cli.main, ["--init", "nowhere", "--seq-len", "64"], capsys)
    assert (code, out) == (2, "")
    assert err == ("error: `--seq-len` 64 leaves no room for a context window after the "
                   "question (`--max-query-length` 64 tokens) and the 3 special tokens: pass "
                   "`--seq-len` of at least 68, or `--max-query-length` of at most 60.\n")
    with pytest.raises(ValueError, match=r"^`seq_len=` 64 leaves .* \(`max_query_length=` 64 "
                                         r"tokens\) .* pass `seq_len=` of at least 68, or "):
        finetune_squad(SquadConfig(init="nowhere", seq_len=64))
    with pytest.raises(ValueError, match=r"^`sequence_length=` 4 leaves .*: pass "
                                         r"`sequence_length=` of at least 6\.$"):
        tupe_span_qa_preprocessor.check_question_room(4, 2)
