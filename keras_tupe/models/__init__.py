"""keras_tupe's keras-hub model family: backbone, tokenizer, preprocessors, tasks, presets."""

from keras_tupe.models.task import PerReplicaXLATrainStep, TupeTask
from keras_tupe.models.tupe_backbone import TupeBackbone
from keras_tupe.models.tupe_bpe_tokenizer import TupeBpeTokenizer
from keras_tupe.models.tupe_masked_lm import TupeMaskedLM
from keras_tupe.models.tupe_masked_lm_preprocessor import TupeMaskedLMPreprocessor
from keras_tupe.models.tupe_span_qa import TupeSpanQA
from keras_tupe.models.tupe_span_qa_preprocessor import TupeSpanQAPreprocessor
from keras_tupe.models.tupe_text_classifier import TupeTextClassifier
from keras_tupe.models.tupe_text_classifier_preprocessor import TupeTextClassifierPreprocessor
from keras_tupe.models.tupe_tokenizer import TupeTokenizer

__all__ = [
    "PerReplicaXLATrainStep",
    "TupeBackbone",
    "TupeBpeTokenizer",
    "TupeMaskedLM",
    "TupeMaskedLMPreprocessor",
    "TupeSpanQA",
    "TupeSpanQAPreprocessor",
    "TupeTask",
    "TupeTextClassifier",
    "TupeTextClassifierPreprocessor",
    "TupeTokenizer",
]
