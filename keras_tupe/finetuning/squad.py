"""SQuAD v1.1 fine-tuning: the library behind `training.finetune_squad`."""

import contextlib
import dataclasses
import json
import os
import time

import keras

from keras_tupe.data import squad
from keras_tupe.finetuning.batches import batches, resolve_loader
from keras_tupe.finetuning.glue import fit_task, task_tokenizer
from keras_tupe.finetuning.loading import FINETUNING_RECORD, load_backbone
from keras_tupe.finetuning.protocol import Protocol
from keras_tupe.finetuning.summary import append_result, read_results
from keras_tupe.metrics import squad_evaluate
from keras_tupe.models import TupeSpanQA, TupeSpanQAPreprocessor
from keras_tupe.models.preset_folders import refuse_existing_folder, write_preset_folder
from keras_tupe.models.span_windows import postprocess
from keras_tupe.models.tupe_span_qa_preprocessor import check_question_room
from keras_tupe_base.output_lock import output_lock
from keras_tupe_base.progress import Heartbeat
from keras_tupe_base.settings import SquadConfig
from keras_tupe_base.staging import write_json, write_text


def finetune_squad(config):
    """Fine-tunes a span-QA head; returns official EM/F1 on the evaluation questions.

    The task owns its data path: `TupeSpanQA` with a `TupeSpanQAPreprocessor` on the
    encoder's tokenizer, whose `featurize_articles` windows the raw questions and
    contexts (each token's characters from tensorflow-text, or in pure Python where it
    is absent: `keras_tupe.models.wordpiece_offsets`); `fit` and `predict` take the
    windows in batches on tf.data, or on Grain where TensorFlow is absent
    (`config.data_loader`). So it runs on a JAX machine without TensorFlow.
    """
    # Before the encoder, the data and the windowing: a mistake in the settings alone.
    check_question_room(config.seq_len, config.max_query_length, ("seq_len", "max_query_length"))
    loader = resolve_loader(config.data_loader)
    if config.save_dir:  # refused before any training
        refuse_existing_folder(config.save_dir)
    keras.utils.set_random_seed(config.seed)
    backbone = load_backbone(config.init)
    backbone.check_sequence_length(config.seq_len)
    tokenizer = task_tokenizer(config.init, backbone, config.vocab, config.lowercase)
    preprocessor = TupeSpanQAPreprocessor(tokenizer, sequence_length=config.seq_len,
                                          doc_stride=config.doc_stride,
                                          max_query_length=config.max_query_length)
    if config.offline_split:
        articles = squad.load_squad(config.offline_split)
        split_seed = config.seed if config.split_seed is None else config.split_seed
        train_articles, eval_articles = squad.split_articles(
            articles, eval_fraction=config.eval_fraction, seed=split_seed)
        label = (f"article-level split of {config.offline_split} "
                 f"({1 - config.eval_fraction:.0%}/{config.eval_fraction:.0%}, seed {split_seed}); "
                 "NOT the official SQuAD train/dev split")
        train_source = eval_source = config.offline_split
    else:
        train_articles, eval_articles = squad.load_squad(config.train), squad.load_squad(config.eval)
        label = f"train={config.train}, eval={config.eval}"
        train_source, eval_source = config.train, config.eval
    talk = config.verbose == 0  # progress lines of our own instead of Keras's
    if talk:
        print(f"Windowing the questions into {config.seq_len}-token features ({label}) ...",
              flush=True)
    train_features = preprocessor.featurize_articles(train_articles, training=True)
    if config.max_train_examples:
        train_features = train_features.head(config.max_train_examples)
    if not len(train_features):
        raise ValueError(
            f"SQuAD {train_source}: no training question has its first answer's text in its "
            "context at the given answer_start (or nearby), so nothing is left to train on.")
    eval_features = preprocessor.featurize_articles(eval_articles, training=False)
    if not len(eval_features):
        raise ValueError(f"SQuAD {eval_source}: no question to evaluate on.")
    labels = {"start_positions": train_features.start_positions,
              "end_positions": train_features.end_positions}
    train, steps_per_epoch = batches(train_features.inputs, labels, config.batch_size,
                                     shuffle=True, seed=config.seed, epochs=config.epochs,
                                     loader=loader)
    model = TupeSpanQA(backbone, preprocessor=preprocessor)
    train_seconds, epoch_seconds = fit_task(model, train, config, config.epochs,
                                            steps_per_epoch, talk)
    if talk:
        print(f"Evaluating on {len(eval_features.token_ids):,} features ...", flush=True)
    with Heartbeat("  evaluating") if talk else contextlib.nullcontext():
        dataset, _ = batches(eval_features.inputs, batch_size=config.batch_size, loader=loader)
        outputs = model.predict(dataset, verbose=0)
    predictions = postprocess(eval_features, outputs["start_positions"],
                              outputs["end_positions"], eval_articles)
    result = {"data": label, **squad_evaluate(eval_articles, predictions),
              "train_features": int(len(train_features.token_ids)),
              "train_seconds": train_seconds, "epoch_seconds": epoch_seconds,
              "eval_questions": len(predictions), "data_loader": loader}
    if config.save_dir:
        write_preset_folder(model, config.save_dir, FINETUNING_RECORD,
                            {"task": "squad", "config": dataclasses.asdict(config),
                             "result": result})
    if config.out:
        with output_lock(config.out, command="finetune_squad", flag="`out=`"):
            os.makedirs(config.out, exist_ok=True)
            write_json(os.path.join(config.out, "squad_results.json"),
                       {"config": dataclasses.asdict(config), "result": result})
            write_text(os.path.join(config.out, "squad_predictions.json"), json.dumps(predictions))
    return result


def run_squad_protocol(init, out_dir, learning_rates=None, seeds=None, selection_seed=None,
                       edge_learning_rates=(), protocol=None, **config_kwargs):
    """`finetune_squad` over learning rates x seeds, resumable, as `run_protocol` for GLUE
    (`protocol`, a `Protocol`, or the four arguments that make one, as there).

    Each finished run is appended to `out_dir/results.jsonl` as a row of the GLUE
    protocol's form (`task` "squad", `learning_rate`, `seed`, `dev`: `{"eval":
    {"exact_match", "f1", "score"}}`, score = F1 / 100), so the GLUE summaries and
    study reports read it; a run already there is skipped. Returns every row.
    """
    if protocol is None:
        if learning_rates is None or seeds is None:
            raise ValueError("run_squad_protocol needs a `protocol` or `learning_rates` and "
                             "`seeds`.")
        protocol = Protocol(learning_rates, seeds, selection_seed, edge_learning_rates)
    with output_lock(out_dir, command="finetune_squad", flag="`out_dir=`"):
        os.makedirs(out_dir, exist_ok=True)
        results_path, rows = read_results(out_dir)
        for _, rate, seed in protocol.runs(rows, ["squad"]):
            number = protocol.run_number(rows, ["squad"])
            print(f"squad lr={rate:g} seed={seed}: fine-tuning ({number}) ...", flush=True)
            start = time.perf_counter()
            config = SquadConfig(init=init, learning_rate=rate, seed=seed, **config_kwargs)
            result = finetune_squad(config)
            row = {"task": "squad", "learning_rate": rate, "seed": seed, "epochs": config.epochs,
                   "data": result["data"], "train_features": result["train_features"],
                   "eval_questions": result["eval_questions"],
                   "train_seconds": result["train_seconds"],
                   "dev": {"eval": {"exact_match": result["exact_match"], "f1": result["f1"],
                                    "score": result["f1"] / 100}},
                   "wall_seconds": time.perf_counter() - start}
            rows.append(row)
            append_result(results_path, row)
            print(f"squad lr={rate:g} seed={seed}: EM {result['exact_match']:.2f}, "
                  f"F1 {result['f1']:.2f}", flush=True)
        return rows
