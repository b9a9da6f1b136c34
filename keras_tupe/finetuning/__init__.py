"""Fine-tuning pre-trained encoders on GLUE and SQuAD.

`loading`: what `--init` names, the encoder, its vocabulary, the classifier's preset
folder. `glue` and `squad`: a task's runs, one function each (`train_glue`, `train_squad`)
whose engine is an argument (`engines`: `FIT`, Keras's `fit` a run at a time, or a `Grid`,
every run in one compiled program), and the grid over learning rates and seeds;
`protocol` and `summary`: that grid's plan, choice and table.
`batches`: a task's batches on tf.data, or on Grain where TensorFlow is absent.
A run's settings, `FinetuneConfig` and `SquadConfig`, and a protocol's, `ProtocolConfig`,
are `keras_tupe_base.settings`'s (the standard library alone: a command reads their fields
before Keras is imported); `run_protocol` and `run_squad_protocol` take a protocol's and a
run's, as the commands parse them.
"""

from keras_tupe.finetuning.batches import batches, resolve_loader
from keras_tupe.finetuning.engines import FIT, Grid
from keras_tupe.finetuning.glue import (
    SHORT_TASKS,
    GlueData,
    GlueGrid,
    finetune_glue,
    glue_data,
    glue_grid,
    paper_epochs,
    run_protocol,
    train_glue,
)
from keras_tupe.finetuning.loading import (
    default_vocabulary,
    load_backbone,
    load_classifier,
    load_matching_tokenizer,
    resolve_init,
    save_classifier,
)
from keras_tupe.finetuning.protocol import Protocol
from keras_tupe.finetuning.squad import SquadData, finetune_squad, run_squad_protocol, train_squad
from keras_tupe.finetuning.summary import summarize, write_tables

__all__ = [
    "FIT",
    "SHORT_TASKS",
    "GlueData",
    "GlueGrid",
    "Grid",
    "Protocol",
    "SquadData",
    "batches",
    "default_vocabulary",
    "finetune_glue",
    "finetune_squad",
    "glue_data",
    "glue_grid",
    "load_backbone",
    "load_classifier",
    "load_matching_tokenizer",
    "paper_epochs",
    "resolve_init",
    "resolve_loader",
    "run_protocol",
    "run_squad_protocol",
    "save_classifier",
    "summarize",
    "train_glue",
    "train_squad",
    "write_tables",
]
