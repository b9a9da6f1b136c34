"""The one fairseq `dict.txt` reader, on the lines where the tokenizer's and the converter's
readers used to disagree (the converter skipped blank lines, read `#fairseq:overwrite`,
negative counts and empty tokens, and always added a `<mask>` row)."""

import pytest

from keras_tupe.convert.common import ConversionError
from keras_tupe.convert.fairseq import read_dictionary
from keras_tupe.models.tupe_bpe_tokenizer import (
    TupeBpeTokenizer,
    read_fairseq_dictionary,
    read_fairseq_dictionary_words,
)

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<file>", "<email>", "<url>"]


def write(tmp_path, text, newline="\n"):
    path = tmp_path / "dict.txt"
    path.write_bytes(text.replace("\n", newline).encode("utf-8"))
    return path


@pytest.mark.parametrize(
    "text, number, received",
    [
        ("the 10\n\nfilm 7\n", 2, "''"),  # the fork's rfind(" ") finds no space
        ("the 10\nfilm 7\n\n", 3, "''"),  # a trailing blank line too
        ("the 10\nfilm 7 #fairseq:overwrite\n", 2, "'film 7 #fairseq:overwrite'"),
        ("the 10\nfilm -7\n", 2, "'film -7'"),
        ("the 10\n 7\n", 2, "' 7'"),  # an empty token
        ("the 10\nfilm\n", 2, "'film'"),
        ("the 10\nfilm 7 \n", 2, "'film 7 '"),
    ],
)
def test_lines_the_fork_cannot_read_are_refused_by_every_reader(tmp_path, text, number,
                                                                 received):
    path = write(tmp_path, text)
    message = rf"dict\.txt, line {number}: expected `<token> <count>`.*Received: {received}"
    with pytest.raises(ValueError, match=message):
        read_fairseq_dictionary(path)
    with pytest.raises(ValueError, match=message):
        TupeBpeTokenizer(str(path), ["t h"])
    with pytest.raises(ConversionError, match=message):
        read_dictionary(path)


def test_mask_repeats_and_line_endings(tmp_path):
    # Split at the last space (a token may hold spaces), CRLF read as LF.
    path = write(tmp_path, "the 10\nof course 3\nthe 2\n", newline="\r\n")
    assert read_dictionary(path) == read_fairseq_dictionary_words(path) == [
        "the", "of course", "the"]
    tokenizer = TupeBpeTokenizer(str(path), ["t h"])
    # A repeated token takes a row each time; its id is the last one, as in the fork.
    assert tokenizer.get_vocabulary() == SPECIALS + ["the", "of course", "the", "<mask>"]
    assert tokenizer.token_to_id("the") == 9 and tokenizer.mask_token_id == 10
    # `<mask>` listed in dict.txt keeps its row; masked_lm's add_symbol adds none.
    path = write(tmp_path, "the 10\n<mask> 0\nfilm 7\n")
    assert read_fairseq_dictionary(path) == SPECIALS + ["the", "<mask>", "film"]
    assert TupeBpeTokenizer(str(path), ["t h"]).mask_token_id == 8
