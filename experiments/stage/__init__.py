"""The GPU window tool: plans, rehearses and runs the studies' GPU stages on a lent machine,
and brings their records home (`experiments/stage/README.md`). A tool beside the studies:
it runs their commands and files their records; the library knows nothing of it.

    .venv/bin/python -m experiments.stage prepare W1      # here: checks, data, wheels, command
    <the command prepare printed>                         # there
    .venv/bin/python -m experiments.stage collect W1 DIR  # here: the records

`specs` (the stages and what the steps share), `prepare` (here), `run` (there: the jobs in
the call, `window` their scheduler), `jobs` (the stage's own jobs), `collect` (here), `cli`
(the command); `budget` (a planned window's budget, from the card's first minute),
`calibrate` (S0's summary), `standin` (the lent machine rehearsed here: `make test-window`);
`stages.json` and `gpu_image.txt` (the stages, the machine's image).
"""
