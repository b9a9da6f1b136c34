"""Fine-tuning pre-trained encoders on GLUE and SQuAD.

- `keras_tupe.finetuning.loading`: what `--init` names (`resolve_init`), the encoder,
  its vocabulary and the fine-tuned classifier as a preset folder (`load_backbone`,
  `default_vocabulary`, `save_classifier`, `load_classifier`, `load_matching_tokenizer`).
- `keras_tupe.finetuning.protocol`: the fine-tuning protocol as one object
  (`Protocol`: learning rates, seeds, selection seed, edge rates; its plan, chosen
  rate and medians), shared by the CLI, `run_protocol` and the studies.
- `keras_tupe.finetuning.glue`: one GLUE run (`FinetuneConfig`, `finetune_glue`: raw
  text through the classifier's own preprocessor) and the protocol over learning
  rates and seeds (`run_protocol`, `PAPER_*`).
- `keras_tupe.finetuning.batches`: a task's batches on tf.data where TensorFlow is,
  on Grain where it is not (`batches`, `resolve_loader`).
- `keras_tupe.finetuning.summary`: the protocol's plan and table as functions
  (`runs_to_do`, `chosen_learning_rate`, `summarize`, `write_tables`).
- `keras_tupe.finetuning.squad`: SQuAD v1.1 (`SquadConfig`, `finetune_squad`) and its
  grid over learning rates and seeds (`run_squad_protocol`).
"""

from keras_tupe.finetuning.batches import batches, resolve_loader
from keras_tupe.finetuning.glue import (
    SHORT_TASKS,
    FinetuneConfig,
    finetune_glue,
    paper_epochs,
    run_protocol,
)
from keras_tupe.finetuning.loading import (
    CLASSIFIER_FILE,
    CLASSIFIER_INFO,
    default_vocabulary,
    load_backbone,
    load_classifier,
    load_matching_tokenizer,
    resolve_init,
    save_classifier,
)
from keras_tupe.finetuning.protocol import PAPER_LEARNING_RATES, PAPER_SEEDS, Protocol
from keras_tupe.finetuning.squad import SquadConfig, finetune_squad, run_squad_protocol
from keras_tupe.finetuning.summary import (
    chosen_learning_rate,
    runs_to_do,
    summarize,
    write_tables,
)

__all__ = [
    "CLASSIFIER_FILE",
    "CLASSIFIER_INFO",
    "PAPER_LEARNING_RATES",
    "PAPER_SEEDS",
    "SHORT_TASKS",
    "FinetuneConfig",
    "Protocol",
    "SquadConfig",
    "batches",
    "chosen_learning_rate",
    "default_vocabulary",
    "finetune_glue",
    "finetune_squad",
    "load_backbone",
    "load_classifier",
    "load_matching_tokenizer",
    "paper_epochs",
    "resolve_init",
    "resolve_loader",
    "run_protocol",
    "run_squad_protocol",
    "runs_to_do",
    "save_classifier",
    "summarize",
    "write_tables",
]
