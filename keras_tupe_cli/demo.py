"""`make demo`: the whole story in a few CPU minutes.

1. pre-train a tiny TUPE-R (masked LM) on real text for a few hundred steps,
2. fine-tune it on SST-2,
3. export the encoder (TF-Hub encoder API, with `.mlm`), its preprocessor and the
   classifier (raw strings in, probabilities out) as versioned SavedModels,
4. load the classifier SavedModel in a fresh process that imports no keras_tupe model,
   and print its predictions for a few sentences.

    keras-tupe-demo [--data-dir ../shared/data] [--out runs/demo] \\
        [--export-dir saved_models] [--steps 300]

Text: `DATA/enwiki/train.txt` (and `valid.txt`) when the data directory has them,
else IMDB reviews from tensorflow-datasets (online). SST-2: `DATA/glue/SST-2`, else
tensorflow-datasets `glue/sst2`. Each run writes a new run directory and new export
versions; nothing earlier is replaced.
"""

import os
import subprocess
import sys
import time

# keras_tupe (with Keras: seconds) is imported inside the functions, after the flags parse.
from keras_tupe_cli.common import at_least, command_parser, entry_point

SENTENCES = [
    "a gripping , beautifully acted film that stays with you .",
    "the plot is dull and the jokes fall flat .",
    "I loved every minute of it!",
    "Une œuvre très médiocre, franchement ennuyeuse.",
    "",
]


def parse_args(argv=None):
    p = command_parser("keras-tupe-demo", __doc__)
    p.add_argument("--data-dir", default=os.environ.get("KERAS_TUPE_DATA_DIR") or None,
                   help="data folder (enwiki/, glue/); default $KERAS_TUPE_DATA_DIR, else online")
    p.add_argument("--out", default=os.path.join("runs", "demo"),
                   help="parent of this run's directory (a new one each time)")
    p.add_argument("--export-dir", default="saved_models", help="where the SavedModels go")
    p.add_argument("--preset", default="tupe_r_tiny")
    p.add_argument("--steps", type=at_least(1), default=300, help="pre-training steps")
    p.add_argument("--vocabulary-size", type=at_least(1), default=4000)
    p.add_argument("--vocab-lines", type=at_least(1), default=4000)
    p.add_argument("--finetune-examples", type=at_least(1), default=8000,
                   help="SST-2 training examples used (of 67,349)")
    p.add_argument("--epochs", type=at_least(1), default=2, help="fine-tuning epochs")
    return p.parse_args(argv)


def corpora(data_dir):
    enwiki = os.path.join(data_dir or "", "enwiki")
    if data_dir and os.path.exists(os.path.join(enwiki, "train.txt")):
        return [os.path.join(enwiki, "train.txt")], [os.path.join(enwiki, "valid.txt")]
    print("No enwiki/ in the data directory: IMDB reviews from tensorflow-datasets (online).")
    return ["tfds:imdb_reviews:unsupervised"], ["tfds:imdb_reviews:test"]


def step(title):
    print(f"\n=== {title} ===", flush=True)
    return time.perf_counter()


@entry_point()
def main(argv=None):
    args = parse_args(argv)
    from keras_tupe.export import export_classifier, export_encoder, export_preprocessor
    from keras_tupe.finetuning import finetune_glue, load_classifier
    from keras_tupe.pretraining import console_command, pretrain
    from keras_tupe_base.settings import FinetuneConfig, PretrainConfig
    from keras_tupe_base.progress import Heartbeat

    run = os.path.join(args.out, time.strftime("%Y%m%d-%H%M%S"))
    train_corpus, valid_corpus = corpora(args.data_dir)
    glue_dir = os.path.join(args.data_dir, "glue") if args.data_dir else None
    start = time.perf_counter()

    began = step(f"1. Pre-training {args.preset} (masked LM) for {args.steps} steps -> {run}")
    pretrain(PretrainConfig(
        preset=args.preset, corpus=train_corpus, valid_corpus=valid_corpus, out=run,
        vocabulary_size=args.vocabulary_size, vocab_lines=args.vocab_lines, steps=args.steps,
        batch_size=32, seq_len=128, learning_rate=1e-3, warmup_ratio=0.06,
        eval_every=args.steps // 3 if args.steps % 3 == 0 else args.steps, valid_batches=10, max_lines=50_000,
        shuffle_buffer=2_000, verbose=2))
    preset = os.path.join(run, "preset")
    print(f"[{time.perf_counter() - began:.0f}s] metrics: {run}/metrics.csv; keras-hub preset "
          f"folder: {preset}")

    began = step(f"2. Fine-tuning on SST-2 ({args.finetune_examples} examples, "
                 f"{args.epochs} epochs)")
    classifier_dir = os.path.join(run, "sst2")
    result = finetune_glue(FinetuneConfig(
        task="sst2", init=preset, learning_rate=1e-3, epochs=args.epochs, seq_len=64,
        data_dir=glue_dir, max_train_examples=args.finetune_examples, save_dir=classifier_dir,
        progress=True))
    accuracy = result["dev"]["validation"]["accuracy"]
    print(f"[{time.perf_counter() - began:.0f}s] SST-2 dev accuracy: {100 * accuracy:.1f}% "
          f"(872 sentences; a majority guess gets 50.9%)")

    began = step("3. Exporting SavedModels")
    name = f"demo_{args.preset}"
    import keras_hub

    from keras_tupe.models.preset_folders import VOCABULARY_ASSET

    with Heartbeat("  exporting"):  # loading, tracing and saving print nothing
        # The masked LM (encoder + head) straight from the preset folder, as keras-hub loads it.
        encoder = export_encoder(keras_hub.models.MaskedLM.from_preset(preset),
                                 os.path.join(args.export_dir, f"{name}_encoder"))
        preprocessor = export_preprocessor(os.path.join(preset, VOCABULARY_ASSET),
                                           os.path.join(args.export_dir, f"{name}_preprocessor"))
        classifier, vocab, info = load_classifier(classifier_dir)
        served = export_classifier(classifier, vocab,
                                   os.path.join(args.export_dir, f"{name}_sst2"),
                                   seq_length=info["seq_len"], label_names=info["label_names"])
    for kind, path in (("encoder (+ .mlm)", encoder), ("preprocessor", preprocessor),
                       ("classifier", served)):
        print(f"{kind:<17} {path}")
    print(f"[{time.perf_counter() - began:.0f}s]")

    began = step("4. The classifier SavedModel in a fresh process (no keras_tupe model)")
    with Heartbeat("  loading the SavedModel in a new process"):
        answer = subprocess.run([sys.executable, "-m", "keras_tupe_cli.predict", served,
                                 *SENTENCES],
                                capture_output=True, text=True)
    print(answer.stdout, end="")
    if answer.returncode:
        print(answer.stderr[-3000:], file=sys.stderr)
        return answer.returncode
    print(f"[{time.perf_counter() - began:.0f}s]")
    print(f"\nDone in {time.perf_counter() - start:.0f}s. Serve it: point TensorFlow Serving at "
          f"{os.path.dirname(served)}, or try\n  {console_command('keras-tupe-predict')} "
          f"{os.path.dirname(served)} \"what a film\"\n  "
          f"{console_command('keras-tupe-saved-model-cli')} run --dir {served} "
          "--tag_set serve --signature_def serving_default "
          "--input_exprs 'sentence=[\"what a film\"]'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
