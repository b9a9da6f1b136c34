"""Host time a fine-tuning step's batch costs: packed inside `fit`, or once before it.

    python -m benchmarks.finetune_input --init PRESET --data-dir GLUE [--task sst2]
        [--examples 10000] [--batch-size 32] [--seq-len 128] [--rounds 3]

Inside `fit` (the route before): the task's preprocessor packs every batch of raw
sentences, cut after its longest example (`pad_to_multiple_of=16`), every step of every
epoch. Once (`keras_tupe.finetuning.batches.packed`): the same preprocessor packs the
split once, and each step only gathers and cuts arrays. Without TensorFlow both run on
keras-hub's pure-Python path, the GPU stages' route. Prints the median milliseconds a
batch over `--rounds` passes of one epoch, the packing's one-time seconds, and the
machine, each round's median, and the versions as one JSON line.
"""

import json
import statistics
import time

from benchmarks.harness import command_line, load_average, machine_info, parser, versions

MODULE = "benchmarks.finetune_input"


def main(argv=None):
    p = parser(MODULE, __doc__)
    p.add_argument("--init", required=True, help="an encoder's preset folder")
    p.add_argument("--data-dir", required=True, help="the GLUE folder")
    p.add_argument("--task", default="sst2")
    p.add_argument("--examples", type=int, default=10000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)

    import numpy as np

    from keras_tupe.data import glue
    from keras_tupe.finetuning.batches import batches, packed, resolve_loader
    from keras_tupe.finetuning.glue import _head, _segments, task_tokenizer
    from keras_tupe.finetuning.loading import load_backbone
    from keras_tupe.models import TupeTextClassifierPreprocessor

    tokenizer = task_tokenizer(args.init, load_backbone(args.init))
    examples = _head(glue.load_glue(args.task, "train", args.data_dir), args.examples)
    segments, count = _segments(examples), len(examples.labels)
    per_batch = TupeTextClassifierPreprocessor(tokenizer, sequence_length=args.seq_len,
                                               pad_to_multiple_of=16)
    whole = TupeTextClassifierPreprocessor(tokenizer, sequence_length=args.seq_len)
    loader = resolve_loader(None)

    def rows(start):
        cut = slice(start, start + args.batch_size)
        if isinstance(segments, tuple):
            return tuple(np.asarray(part[cut], dtype=object) for part in segments)
        return np.asarray(segments[cut], dtype=object)

    inside, once, packing = [], [], []
    for _ in range(args.rounds):
        times = []
        for start in range(0, count, args.batch_size):
            begin = time.perf_counter()
            per_batch(rows(start))
            times.append(time.perf_counter() - begin)
        inside.append(statistics.median(times) * 1e3)
        begin = time.perf_counter()
        arrays = packed(whole, segments)
        packing.append(time.perf_counter() - begin)
        dataset, steps = batches(arrays, np.asarray(examples.labels), args.batch_size,
                                 shuffle=True, fill_last_batch=True, loader=loader,
                                 trim_to_multiple_of=16)
        times, iterator = [], iter(dataset)
        for _ in range(steps):
            begin = time.perf_counter()
            next(iterator)
            times.append(time.perf_counter() - begin)
        once.append(statistics.median(times) * 1e3)
    row = {"command": command_line(MODULE, argv), "task": args.task, "examples": count,
           "batch_size": args.batch_size, "loader": loader,
           "packed_inside_fit_ms_per_batch": inside, "packed_once_ms_per_batch": once,
           "packing_once_s": packing, "load_average": load_average(),
           "machine": machine_info(), "versions": versions()}
    print(f"packed inside fit: {statistics.median(inside):.2f} ms a batch; packed once: "
          f"{statistics.median(once):.3f} ms a batch after {statistics.median(packing):.1f} s "
          f"of packing ({count:,} examples, batch {args.batch_size}, {loader})")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
