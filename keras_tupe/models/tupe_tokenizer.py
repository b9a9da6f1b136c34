"""The WordPiece tokenizer of keras_tupe encoders."""

import keras

import keras_hub

from keras_tupe.models.preset_folders import StagedPresetSaving, check_backbone_vocabulary_size
from keras_tupe.models.tupe_backbone import TupeBackbone


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
        # keras-hub's BertTokenizer declares its special tokens the same way
        # (`_add_special_token` is the subclass hook keras-hub provides).
        self._add_special_token("[CLS]", "cls_token")
        self._add_special_token("[SEP]", "sep_token")
        self._add_special_token("[PAD]", "pad_token")
        self._add_special_token("[MASK]", "mask_token")
        self._add_special_token("[CLS]", "start_token")
        self._add_special_token("[SEP]", "end_token")
        kwargs.setdefault("oov_token", "[UNK]")
        super().__init__(vocabulary=vocabulary, lowercase=lowercase, **kwargs)

    def load_preset_assets(self, preset):
        """Loads a preset folder's vocabulary, checked against the backbone's size
        (`check_backbone_vocabulary_size`: on every keras-hub `from_preset` route)."""
        super().load_preset_assets(preset)
        check_backbone_vocabulary_size(preset)
