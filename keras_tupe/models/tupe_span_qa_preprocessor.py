"""Raw questions and contexts to SQuAD windows for `TupeSpanQA`, and logits back to text."""

import keras
import keras_hub

from keras_tupe.models.preset_folders import StagedPresetSaving, preset_sequence_length
from keras_tupe.models.span_windows import featurize, postprocess
from keras_tupe.models.tupe_backbone import TupeBackbone
from keras_tupe.models.tupe_tokenizer import TupeTokenizer


# `[CLS] question [SEP] window [SEP]`: three special tokens and at least one context token.
QUESTION_OVERHEAD = 4


def check_question_room(sequence_length, max_query_length,
                        names=("sequence_length", "max_query_length")):
    """Raises ValueError unless a window of `sequence_length` tokens holds a question of
    `max_query_length` tokens, its special tokens and a context token. `names` are the
    caller's arguments for the two (`SquadConfig`'s `seq_len`), as the message names them."""
    if sequence_length >= max_query_length + QUESTION_OVERHEAD:
        return
    length, query = names
    fixes = f"`{length}=` of at least {max_query_length + QUESTION_OVERHEAD}"
    if sequence_length > QUESTION_OVERHEAD:
        fixes += f", or `{query}=` of at most {sequence_length - QUESTION_OVERHEAD}"
    raise ValueError(
        f"`{length}=` {sequence_length} leaves no room for a context window after the question "
        f"(`{query}=` {max_query_length} tokens) and the {QUESTION_OVERHEAD - 1} special "
        f"tokens: pass {fixes}.")


@keras.saving.register_keras_serializable(package="keras_tupe")
class TupeSpanQAPreprocessor(StagedPresetSaving, keras_hub.models.Preprocessor):
    """BERT's SQuAD windowing over raw strings, and the answer text from span logits.

    Span extraction does not fit keras-hub's one-example-in, one-example-out
    preprocessing: a long context becomes several windows (`[CLS] question [SEP]
    window [SEP]`, a new window every `doc_stride` tokens), and an answer is read
    back through each token's character span. So this preprocessor works on whole
    lists, outside the model's data pipeline (`keras_tupe.models.span_windows`'
    `featurize` / `postprocess`, the functions SQuAD fine-tuning uses):

    - `featurize(questions, contexts, answers=None, answer_starts=None)`: the
      windows as `SquadFeatures`; with answers (text and character start), the
      start/end token labels for `fit`.
    - `postprocess(features, start_logits, end_logits, contexts)`: the answer
      strings, exact substrings of the contexts.

    `TupeSpanQA.answer(questions, contexts)` chains them. Called by `fit` or
    `predict` (keras-hub's pipeline), packed features pass through unchanged.

    Args:
        tokenizer: a `TupeTokenizer`.
        sequence_length: int. Window length. Defaults to `384` (BERT's).
        doc_stride: int. Defaults to `128`.
        max_query_length: int. Defaults to `64`.
    """

    backbone_cls = TupeBackbone
    tokenizer_cls = TupeTokenizer

    def __init__(self, tokenizer, sequence_length=384, doc_stride=128, max_query_length=64,
                 **kwargs):
        super().__init__(**kwargs)
        self.tokenizer = tokenizer
        self.sequence_length = sequence_length
        self.doc_stride = doc_stride
        self.max_query_length = max_query_length

    def build(self, input_shape):
        # Nothing to build: windowing runs in NumPy (`featurize`), not in the graph.
        self.built = True

    @classmethod
    def _add_missing_kwargs(cls, loader, kwargs):
        # keras-hub's (private) hook for a preset folder without this preprocessor:
        # the folder's sequence length, capped at an absolute encoder's table.
        kwargs = super()._add_missing_kwargs(loader, kwargs)
        kwargs.setdefault("sequence_length", min(384, preset_sequence_length(loader)))
        return kwargs

    @staticmethod
    def articles(questions, contexts, answers=None, answer_starts=None):
        """The SQuAD structure of `keras_tupe.data.squad` for parallel lists."""
        for name, value in (("questions", questions), ("contexts", contexts)):
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"`{name}` must be a list of strings. Received: {value!r:.80}")
        if len(questions) != len(contexts):
            raise ValueError(f"One context per question. Received: {len(questions)} questions, "
                             f"{len(contexts)} contexts")
        if (answers is None) != (answer_starts is None):
            raise ValueError("Give both `answers` (texts) and `answer_starts` (character "
                             "offsets in the contexts), or neither.")
        paragraphs = []
        for i, (question, context) in enumerate(zip(questions, contexts)):
            qa = {"id": str(i), "question": question, "answers": []}
            if answers is not None:
                qa["answers"] = [{"text": answers[i], "answer_start": int(answer_starts[i])}]
            paragraphs.append({"context": context, "qas": [qa]})
        return [{"title": "", "paragraphs": paragraphs}]

    def featurize(self, questions, contexts, answers=None, answer_starts=None):
        """`SquadFeatures` of the questions over their contexts (labels with answers)."""
        articles = self.articles(questions, contexts, answers, answer_starts)
        return self.featurize_articles(articles, training=answers is not None)

    def featurize_articles(self, articles, training=True):
        """`SquadFeatures` of SQuAD v1.1 articles (`keras_tupe.data.squad.load_squad`).

        With `training`, each window gets its answer's token span, and the questions
        whose first answer is not found in their context are left out.
        """
        self.check_lengths()
        if not isinstance(self.tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
            raise ValueError(
                "SQuAD windowing maps WordPiece tokens back to characters; this "
                f"preprocessor's tokenizer is a {type(self.tokenizer).__name__}. Use an "
                "encoder with a WordPiece vocabulary (a TupeTokenizer).")
        return featurize(
            articles, self.tokenizer, sequence_length=self.sequence_length,
            doc_stride=self.doc_stride, max_query_length=self.max_query_length,
            training=training)

    def check_lengths(self):
        check_question_room(self.sequence_length, self.max_query_length)

    def postprocess(self, features, start_logits, end_logits, contexts, questions=None):
        """The answer string of each question (`""` where no valid span exists)."""
        questions = questions or [""] * len(contexts)
        predictions = postprocess(features, start_logits, end_logits,
                                  self.articles(list(questions), list(contexts)))
        return [predictions[str(i)] for i in range(len(contexts))]

    def call(self, x, y=None, sample_weight=None):
        if not isinstance(x, dict):
            raise ValueError(
                "TupeSpanQAPreprocessor windows raw text with `featurize(questions, contexts, "
                "answers, answer_starts)` (or `TupeSpanQA.answer(questions, contexts)`); "
                "`fit`/`predict` take its packed features (`features.inputs`). Received: "
                f"{type(x).__name__}")
        return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)

    def get_config(self):
        config = super().get_config()
        config.update({"sequence_length": self.sequence_length, "doc_stride": self.doc_stride,
                       "max_query_length": self.max_query_length})
        return config
