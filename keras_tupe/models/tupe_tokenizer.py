"""The WordPiece tokenizer of keras_tupe encoders."""

import keras

import keras_hub

from keras_tupe.models.preset_folders import StagedPresetSaving, check_backbone_vocabulary_size
from keras_tupe.models.tupe_backbone import TupeBackbone


def add_special_tokens(tokenizer, cls, sep, pad, mask):
    """Declares a BERT-style tokenizer's special tokens, as keras-hub's `BertTokenizer` does
    (`_add_special_token` is the subclass hook keras-hub provides): `cls` also starts and
    `sep` also ends every segment."""
    for token, name in ((cls, "cls_token"), (sep, "sep_token"), (pad, "pad_token"),
                        (mask, "mask_token"), (cls, "start_token"), (sep, "end_token")):
        tokenizer._add_special_token(token, name)


def special_ids(tokenizer):
    """`(cls_id, sep_id, pad_id)` of a keras-hub tokenizer's vocabulary, which packing needs."""
    ids, missing = [], []
    for token in ("[CLS]", "[SEP]", "[PAD]"):
        try:
            ids.append(int(tokenizer.token_to_id(token)))
        except (ValueError, KeyError):
            missing.append(token)
    if missing:
        raise ValueError(f"The tokenizer's vocabulary has no {', '.join(missing)} token, which "
                         "packing needs ([CLS], [SEP], [PAD]).")
    return tuple(ids)



@keras.saving.register_keras_serializable(package="keras_tupe")
class TupeTokenizer(StagedPresetSaving, keras_hub.tokenizers.WordPieceTokenizer):
    """keras-hub's `WordPieceTokenizer` with the special tokens of keras_tupe vocabularies.

    Like `keras_hub.models.BertTokenizer`: `[CLS]` starts and `[SEP]` ends every
    segment, `[PAD]` pads, `[MASK]` masks, `[UNK]` is the out-of-vocabulary
    token. Vocabularies trained by `keras_tupe.data.train_vocabulary` hold them
    at ids 0-4 (`[PAD] [CLS] [SEP] [UNK] [MASK]`). `save_to_preset` writes the
    vocabulary into the preset (`assets/tokenizer/vocabulary.txt`), so
    `from_preset(dir)` needs nothing else.

    Args:
        vocabulary: a list of tokens or the path of a vocabulary file, one token
            a line.
        lowercase: bool. Lowercase the text first; must match the vocabulary's
            training. Defaults to `True` (keras_tupe trains lowercased
            vocabularies).
        **kwargs: other `keras_hub.tokenizers.WordPieceTokenizer` arguments.

    Example:
    >>> tokenizer = TupeTokenizer.from_preset("runs/tupe_r_mini/preset")
    >>> tokenizer("a fine film")
    """

    backbone_cls = TupeBackbone

    def __init__(self, vocabulary=None, lowercase=True, **kwargs):
        add_special_tokens(self, cls="[CLS]", sep="[SEP]", pad="[PAD]", mask="[MASK]")
        kwargs.setdefault("oov_token", "[UNK]")
        super().__init__(vocabulary=vocabulary, lowercase=lowercase, **kwargs)

    def load_preset_assets(self, preset):
        """Loads a preset folder's vocabulary, checked against the backbone's size
        (`check_backbone_vocabulary_size`: on every keras-hub `from_preset` route)."""
        super().load_preset_assets(preset)
        check_backbone_vocabulary_size(preset)
