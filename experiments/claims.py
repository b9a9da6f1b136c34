"""`python -m experiments.claims [--out DIR]`: the numbers `docs/results.md` quotes for the
papers' claims that no other page prints (T2 in loss, the two pipelines, the plateau
control); written by `experiments.report.claims`, like every page from the committed records
alone."""

from experiments.report import claims as main

if __name__ == "__main__":
    raise SystemExit(main())
