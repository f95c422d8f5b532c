"""AvgKD with disjoint labels: each agent's accuracy on its own classes and on the others'.

    python benchmarks/avgkd_alpha0_groups.py --config avgkd_alpha0_small --run base \
        --workdir runs/avgkd-alpha0

Runs one run of a config file or shipped config (``--run``: its name in the grid;
omit it for a file without a grid) in ``WORKDIR/RUN``, the directory
``neural run --config ... --workdir WORKDIR`` gives it, with the same metrics: it
calls ``neural.train_and_evaluate`` one round at a time (a resume, tested to give
the rows of an uninterrupted run) and, after each round, reads the agents' models
from the checkpoint and appends one line to ``WORKDIR/RUN/groups.jsonl``:

- ``acc_own``, ``acc_other``: the agent's test accuracy on the classes it holds
  and on the others (with Alpha = 0, agent 0 holds 0-4 and agent 1 holds 5-9);
- ``partner_acc``, ``partner_mass_other``: the other agents' mean prediction on
  this agent's training inputs (the half of its next targets that is not its
  labels), scored against its labels, and the mean probability it puts on the
  classes this agent does not hold: the "dark knowledge" this agent distills
  next round.

Start from an empty ``WORKDIR/RUN``: rounds done before (by ``neural run``) have no line.
AvgKD and PKD of networks only (the state must hold the targets of every agent).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import neural


def group_scores(config, data, variables, targets) -> dict[str, dict[str, float]]:
  """The numbers above for every agent, from the round's variables and next targets."""
  out = {}
  m = config.agents
  for a, (name, var) in enumerate(zip(config.agent_models, variables)):
    model = neural.training.FlaxModel(neural.get_model(name, data.num_classes, width=config.width,
                                              tiny=config.tiny, norm=config.norm), var)
    pred = np.asarray(model.predict(data.x_test)).argmax(1)
    own = np.isin(data.y_test, np.unique(data.labels[a]))
    other = np.setdiff1d(np.arange(data.num_classes), np.unique(data.labels[a]))
    target = targets[a].on(data.xs[a]) if hasattr(targets[a], "on") else targets[a]
    # AvgKD: target = (y + sum_{j != a} g_j(X_a)) / M, so the partners' mean is:
    partner = (m * np.asarray(target) - np.asarray(data.ys[a])) / (m - 1)
    out[str(a)] = dict(
        acc=float(np.mean(pred == data.y_test)),
        acc_own=float(np.mean(pred[own] == data.y_test[own])),
        acc_other=float(np.mean(pred[~own] == data.y_test[~own])),
        partner_acc=float(np.mean(partner.argmax(1) == data.labels[a])),
        partner_mass_other=float(partner[:, other].sum(1).mean()))
  return out


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--config", required=True, help="config file or shipped config name")
  parser.add_argument("--run", default="", help="the run's name in the config's grid")
  parser.add_argument("--workdir", required=True)
  args = parser.parse_args()
  runs = dict(neural.load_spec(args.config).expand())
  if args.run not in runs:
    parser.error(f"--run: one of {', '.join(sorted(runs))}")
  config = runs[args.run]
  if config.protocol != "avgkd":
    parser.error("--config: an AvgKD run")
  workdir = Path(args.workdir) / args.run
  data = neural.load_run_data(config)
  while True:
    rows = neural.train_and_evaluate(config, workdir, max_rounds=1)
    t = max(r["round"] for r in rows)
    done = workdir / "groups.jsonl"
    if done.exists() and any(json.loads(line)["round"] == t for line in done.open()):
      break   # the run had already finished
    checkpoint = neural.load_run_checkpoint(config, workdir)   # restored into the config's state
    line = {"round": t, **group_scores(config, data, checkpoint["inits"],
                                       checkpoint["state"].targets)}
    with done.open("a") as f:
      f.write(json.dumps(line) + "\n")
    print(json.dumps(line), flush=True)
    if t + 1 >= config.rounds:
      break


if __name__ == "__main__":
  main()
