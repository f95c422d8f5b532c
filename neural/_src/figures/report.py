"""The main job (``neural demo --out DIR``): theory and experiment in one report.

Four parts, each in its own subdirectory of ``DIR``, then ``DIR/report.md``:

1. ``verify/``: every statement of Afonin & Karimireddy that ``fedkrr verify``
   checks, on its smallest instance (``verify.json``, a table in the report);
2. ``toy/``: the toy experiment of Fig. 3 (App. A), linear regression with AKD,
   AvgKD and EKD (``toy.png``, ``toy.csv``);
3. ``closed-forms/``: every protocol's closed form against its literal
   round-by-round runner on an embedded synthetic problem (``test_mse.png``);
4. ``mnist/``: AKD, AvgKD and EKD replayed with neural networks on the embedded
   MNIST subset on the CPU, each next to its closed-form twin with the networks'
   neural tangent kernels (``neural.compare``; ``mnist/<protocol>/compare.png``
   and ``mnist/side_by_side.png``), and FedAvg on AvgKD's split, scored both ways:
   by its clients after local training (as the paper scores it) and by its
   averaged model (``mnist/fedavg/``).

The report ends with a reading generated from the numbers, not written in advance.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import json
import os
from pathlib import Path
import platform
import time
from typing import Any
from typing import cast

import jax
from matplotlib.figure import Figure
import numpy as np

import fedkrr
from fedkrr.io import atomic_savefig
from fedkrr.io import atomic_write
from fedkrr.io import read_bytes
from fedkrr.io import read_json
from neural._src.choices import MAIN_JOB_PARTS
from neural._src.jobs.specs import load_spec
from neural._src.kd.compare import MIN_FIT_ROUNDS
from neural._src.kd.compare import compare
from neural._src.kd.experiment import train_and_evaluate
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.rundir import read_metrics

MNIST_CONFIG = "compare_small"
REPORT_FILE = "report.md"


@dataclasses.dataclass(frozen=True)
class MainJobSettings:
  """What the main job runs (defaults: the README's command, < 5 min on 2 CPU cores).

  Attributes:
    parts: a subset of ``MAIN_JOB_PARTS``, run in that order.
    rounds: rounds of the synthetic closed-form part.
    toy_rounds: rounds of the toy experiment (the paper: 250).
    verify_only: run only the checks whose id starts so (``None``: all of them).
    protocols: the protocols replayed on MNIST.
    mnist_config: the shipped config (or file) of the MNIST replay; its protocol
      is replaced by each of ``protocols``.
    mnist_overrides: config fields changed for the MNIST replay (tests use it).
    kernel: the theory's kernel option of ``neural.compare``.
    fedavg: with AvgKD among ``protocols``, also run FedAvg on its split and score
      it both ways (its clients after local training, as the paper does, and its
      averaged model) beside AvgKD.
    seed: the seed of every part.
  """

  parts: tuple[str, ...] = MAIN_JOB_PARTS
  rounds: int = 40
  toy_rounds: int = 250
  verify_only: str | None = None
  protocols: tuple[str, ...] = ("akd", "avgkd", "ekd")
  mnist_config: str = MNIST_CONFIG
  mnist_overrides: tuple[tuple[str, Any], ...] = ()
  kernel: str = "ntk"
  fedavg: bool = True
  seed: int = 0

  def __post_init__(self):
    unknown = [p for p in self.parts if p not in MAIN_JOB_PARTS]
    if unknown or not self.parts:
      raise ValueError(f"parts: expected names from {', '.join(MAIN_JOB_PARTS)}, got "
                       f"{', '.join(self.parts) or 'nothing'}")
    if self.rounds < 1:
      raise ValueError(f"rounds: expected an integer >= 1, got {self.rounds}")
    if self.toy_rounds < 2:
      raise ValueError(f"toy_rounds: expected an integer >= 2, got {self.toy_rounds}")


def run_main_job(out_dir: str | os.PathLike, settings: MainJobSettings = MainJobSettings(),
                 progress: bool = True) -> Path:
  """Runs the parts of ``settings`` into ``out_dir`` and writes ``report.md``.

  Returns:
    The path of the report.

  Raises:
    ValueError: bad settings (``ConfigError`` for a bad MNIST config).
  """
  out = Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  sections, readings, timings = [], [], {}
  steps = {"verify": _verify, "toy": _toy, "closed-forms": _closed_forms, "mnist": _mnist}
  start, cpu_start = time.perf_counter(), time.process_time()
  for i, part in enumerate(settings.parts):
    print(f"[{i + 1}/{len(settings.parts)}] {_TITLES[part]}", flush=True)
    t0 = time.perf_counter()
    section, reading = steps[part](out / part, settings, progress)
    timings[part] = time.perf_counter() - t0
    print(f"      done in {timings[part]:.0f} s", flush=True)
    sections.append(f"## {i + 1}. {_TITLES[part]}\n\n{section}")
    readings.extend(reading)
  total = time.perf_counter() - start
  cost = _cost(total, time.process_time() - cpu_start)
  path = out / REPORT_FILE
  atomic_write(path, _report(settings, sections, readings, timings, total, cost))
  atomic_write(out / "timings.json",
               json.dumps({**timings, "total": total, **cost}, indent=2) + "\n")
  print(f"wrote {path}", flush=True)
  print(f"cost: {_cost_text(timings, total, cost)}", flush=True)
  return path


def _cost(wall: float, cpu: float) -> dict[str, Any]:
  """CPU seconds, cores and the load average: what the wall time of a run means."""
  try:
    load = os.getloadavg()[0]
  except OSError:   # not every platform has it
    load = None
  return {"cpu_seconds": cpu, "cores": os.cpu_count(), "load_average": load}


def _cost_text(timings: dict[str, float], total: float, cost: dict[str, Any]) -> str:
  load = cost["load_average"]
  return (f"{total:.0f} s wall in all (" + ", ".join(f"{p} {s:.0f} s" for p, s in timings.items())
          + f"), {cost['cpu_seconds']:.0f} s of CPU time on {cost['cores']} cores"
          + (f", load average {load:.1f} at the end (above the number of cores, other work "
             f"was slowing it)" if load is not None and load > (cost["cores"] or 1) else
             f", load average {load:.1f} at the end" if load is not None else ""))


_TITLES = {
    "verify": "The propositions, checked numerically",
    "toy": "The toy experiment of Fig. 3 (linear regression)",
    "closed-forms": "Closed forms against literal round-by-round runs",
    "mnist": "Theory vs experiment: KD protocols with networks on the MNIST subset",
}


def _report(settings, sections, readings, timings, total, cost) -> str:
  head = [
      "# Model-agnostic federated learning by distillation: theory and experiment",
      "",
      "Afonin & Karimireddy, *Towards Model-Agnostic Federated Learning Using Knowledge "
      "Distillation* (ICLR 2022). Written by `neural demo` on "
      f"{time.strftime('%Y-%m-%d %H:%M')} ({platform.machine()}, "
      f"{jax.default_backend()}, JAX {jax.__version__}, "
      f"{'float64' if jax.config.read('jax_enable_x64') else 'float32'} theory). "
      f"It cost {_cost_text(timings, total, cost)}.",
      "",
      "## What it shows",
      "",
      *[f"- {r}" for r in readings],
      "",
  ]
  return "\n".join(head) + "\n" + "\n\n".join(sections) + "\n"


# ---------------------------------------------------------------------------
# Parts: each returns (markdown section, reading bullets)


def _verify(out: Path, settings: MainJobSettings, progress: bool):
  out.mkdir(parents=True, exist_ok=True)
  rows = fedkrr.paper.run_checks(seeds=(settings.seed,), only=settings.verify_only,
                           progress=progress, quick=True)
  fedkrr.paper.write_checks(rows, out / "verify.json")
  failed = fedkrr.paper.failed_checks(rows)
  findings = [r for r in rows if r.kind == "claim" and not r.holds]
  held = len(rows) - len(failed) - len(findings)
  section = (f"Each statement on its smallest instance, seed {settings.seed} "
             f"(`fedkrr verify` checks two sizes and two seeds). An *identity* is algebra the "
             f"toolkit relies on (a failure is a bug); a *claim* is the paper's statement "
             f"(a failure is a finding about the paper).\n\n"
             f"{fedkrr.paper.checks_table(rows)}\n\n"
             f"Rows: [verify/verify.json](verify/verify.json).")
  reading = [f"**Propositions**: {held} of {len(rows)} statements hold on these instances; "
             f"{len(failed)} identities failed"
             + (f"; claims that do not hold as printed: "
                f"{', '.join(r.id for r in findings)}" if findings else "") + "."]
  searched = fedkrr.paper.known_findings()
  broken = [r for r in searched if not r.holds]
  if broken:
    section += "\n\n" + _counterexamples(broken)
    reading.append(f"**Counterexamples**: `fedkrr search` broke {len(broken)} of "
                   f"{len(searched)} claims on instances their statements "
                   f"allow: {', '.join(r.claim for r in broken)}.")
  return section, reading


def _counterexamples(broken) -> str:
  """The shipped counterexamples, each residual recomputed now from its problem file."""
  lines = ["### Counterexamples known to the toolkit",
           "",
           "Found by `fedkrr search` over every instance each statement allows (kernel pairs of "
           "the catalogue, bandwidths and ridges over decades, 1-20 dimensions, shared to "
           "disjoint data), shrunk, and confirmed by literal rounds. The residual is "
           "recomputed now from the saved problem file; `fedkrr run --problem` replays it "
           "(the files are in `fedkrr.paper.findings_dir()`).",
           "",
           "| claim | counterexample | residual now | tolerance |",
           "| --- | --- | --- | --- |"]
  for r in broken:
    text = r.description.split("; replayed by")[0].replace("|", "\\|")
    lines.append(f"| {r.claim} | {text} | {fedkrr.paper.recheck_finding(r):.6g} | "
                 f"{r.tolerance:.3g} |")
  return "\n".join(lines)


def _toy(out: Path, settings: MainJobSettings, progress: bool):
  result = fedkrr.paper.toy_experiment(jax.random.key(settings.seed),
                                 fedkrr.paper.ToyConfig(rounds=settings.toy_rounds))
  fedkrr.paper.write_toy(result, out)
  lines = fedkrr.paper.toy_summary(result)
  section = ("Linear regression (d = 100, n = 150, 60 % of the points with agent 0): the "
             "loss on all n training points per round, as in the paper's figure; the dashed "
             "line is the centralised model.\n\n"
             "![toy experiment](toy/toy.png)\n\n" + "\n".join(f"- {line}" for line in lines))
  panels = range(len(result.config.panels))
  central = [float(result.central[p]) for p in panels]
  zero = float(result.zero)
  ekd_gap = max(abs(float(np.asarray(result.ekd[p])[-1]) / central[p] - 1) for p in panels)
  akd_end = [float(np.asarray(result.akd[p])[0, -1]) for p in panels]
  akd_to_zero = max(abs(a / zero - 1) for a in akd_end)
  avgkd_above = all(float(np.asarray(result.avgkd[p])[a, -1]) > central[p]
                    for p in panels for a in range(np.asarray(result.avgkd[p]).shape[0]))
  akd_note = ("it has degraded to the zero model, as Prop. II predicts"
              if akd_to_zero < 0.01 else
              "not yet within 1 %: Prop. II says it gets there with more rounds")
  parts = [
      f"AKD's last loss is {_spread(akd_end)}, within {akd_to_zero:.2%} of the zero "
      f"model's {zero:.4g} ({akd_note})",
      f"AvgKD's agents end {'above' if avgkd_above else 'not always above'} the "
      f"centralised loss (Prop. V: a limit that is not the centralised model)",
      f"EKD ends within {ekd_gap:.2%} of the centralised loss in every panel "
      f"(Prop. VII: with one shared kernel EKD's limit is the centralised model)"]
  return section, ["**Toy (Fig. 3)**: " + "; ".join(parts) + "."]


def _spread(values: list[float]) -> str:
  """``"69.06 in every panel"``, or ``"from 1.2 to 3.4 across the panels"`` (4 digits)."""
  low, high = f"{min(values):.4g}", f"{max(values):.4g}"
  return f"{low} in every panel" if low == high else f"from {low} to {high} across the panels"


def _closed_forms(out: Path, settings: MainJobSettings, progress: bool):
  fedkrr.paper.closed_form_demo(str(out), rounds=settings.rounds, seed=settings.seed)
  summary = read_json(out / "summary.json", "closed-form summary")
  table = read_bytes(out / "summary.md", 2**24, "closed-form table").decode("utf-8")
  worst = max(r["max_rel_gap"] for r in summary["protocols"])
  section = ("Two agents (120 and 80 points, RBF and Laplace kernels, c = 1e-3) on an "
             f"embedded synthetic regression problem, {settings.rounds} rounds; the closed "
             "form of every round against the literal protocol run with KRR learners.\n\n"
             f"![closed forms](closed-forms/test_mse.png)\n\n{table}\n"
             f"Largest relative gap between closed form and literal run: {worst:.1e}.")
  reading = [f"**Closed forms** reproduce the literal round-by-round runs of all "
             f"{len(summary['protocols'])} protocols to {worst:.1e} (relative)."]
  return section, reading


def _partition(config: ExperimentConfig) -> str:
  """``"iid"``, ``"label-split (alpha = 0.1)"``: the partition and its parameters."""
  params = ", ".join(f"{k} = {list(v) if isinstance(v, tuple) else v}"
                     for k, v in config.partition_params.items())
  return config.partition + (f" ({params})" if params else "")


def _standard_error(num_test: int, accuracy: float = 0.5) -> float:
  """The standard error of a difference of two accuracies near ``accuracy`` on ``num_test``
  points, ``sqrt(2 p (1 - p) / n)`` (binomial; p = 0.5 is its largest)."""
  return float(np.sqrt(2 * accuracy * (1 - accuracy) / max(num_test, 1)))


def _mnist(out: Path, settings: MainJobSettings, progress: bool):
  out.mkdir(parents=True, exist_ok=True)
  (_, base), = load_spec(settings.mnist_config).expand(
      {"seed": settings.seed, **dict(settings.mnist_overrides)})
  base = cast(ExperimentConfig, base)   # a KD experiment: compare raises otherwise
  results = {}
  for protocol in settings.protocols:
    print(f"      {protocol}: network run and its closed-form twin", flush=True)
    results[protocol] = compare(base.replace(protocol=protocol), out / protocol,
                                kernel=settings.kernel, progress=progress)
  _plot_side_by_side(results, out / "side_by_side.png")
  c = base
  num_test = int(cast(int, c.test_subset))   # the MNIST config evaluates on a test subset
  level = 2 * _standard_error(num_test)
  theory_kernel = {
      "ntk": "each agent's empirical NTK at its initialisation",
      "nngp": "each agent's analytic read-out (NNGP) kernel of its width",
      "relu-ntk": "each agent's analytic NTK of its width",
      "rbf": "an RBF kernel (a stand-in, not the networks' kernel)"}[settings.kernel]
  loss = {"mse": "squared loss on the softmax", "ce": "cross-entropy"}.get(c.loss, c.loss)
  fitted = any(r[k] is not None for comp in results.values() for r in comp.rates.values()
               for k in ("theory_fit_sq_error", "network_fit_sq_error"))
  widths = "default" if c.width is None else "/".join(str(w) for w in c.width)
  lines = [f"{c.agents} agents ({', '.join(c.agent_models)}, width {widths}) on "
           f"{c.train_subset} training points of the {c.dataset} set, partition "
           f"{_partition(c)}, {c.rounds} rounds of {c.epochs} epochs "
           f"(Adam, {loss}, weight decay {c.weight_decay:g}); test set of "
           f"{num_test} points, one seed ({settings.seed}). Theory: the closed form of the "
           f"same protocol on the same split with {theory_kernel} (kernel option "
           f"`{settings.kernel}`), ridge matched to the weight decay.",
           "", "![side by side](mnist/side_by_side.png)", "",
           "Rounds as the runs log them: round 0 is local training on the labels, and an "
           "AKD round is one agent's step (the paper's figures count an AKD round as M "
           "steps).", ""]
  head = ("| protocol | series | theory acc. (first / last) | network acc. (first / last) | "
          "mean abs. gap | spectral radius per round | degradation rate per cycle |")
  lines += [head + (" fitted rate per round, theory / network |" if fitted else ""),
            "| --- " * (8 if fitted else 7) + "|"]
  reading = []
  for protocol, comp in results.items():
    for series, rate in comp.rates.items():
      th, nn = _paired(comp.rows, series)
      gap = f"{np.mean(np.abs(np.subtract(th, nn))):.3f}" if nn else "-"
      cycle = (f"{comp.degradation_rate_per_cycle:.4f} ({c.agents} rounds)"
               if comp.degradation_rate_per_cycle is not None else "-")
      lines.append(f"| {fedkrr.display_name(protocol)} | {series} | {th[0]:.3f} / {th[-1]:.3f} | "
                   f"{_num(nn[0] if nn else None)} / {_num(nn[-1] if nn else None)} | {gap} | "
                   f"{rate['spectral_radius']:.4f} | {cycle} |"
                   + (f" {_num(rate['theory_fit_sq_error'])} / "
                      f"{_num(rate['network_fit_sq_error'])} |" if fitted else ""))
    reading.append(_mnist_reading(protocol, comp, num_test, c.agents))
  lines += ["", "The first and last columns are taken on the rounds where both the theory and "
            "the network have a value; the gap is the mean over those rounds. The spectral "
            "radius is the factor per round by which the theory's rounds approach their "
            "limit; AKD's and EKD's degradation rate rho is the factor per cycle of M rounds "
            "(rho = radius^M). "
            + ("A fitted rate is measured on the curve of the test squared error "
               "(`neural.evidence.geometric_rate`: least squares of log |v(t+1) - v(t)| on t)."
               if fitted else
               f"No rate is fitted to the curves: {c.rounds} rounds show the transient, not "
               f"the rate (`neural compare` fits curves of {MIN_FIT_ROUNDS} rounds or more)."),
            "",
            f"How sure: one seed and {num_test} test points. An accuracy on {num_test} points "
            f"has a standard error of up to {_standard_error(num_test) / np.sqrt(2):.3f}, a "
            f"difference of two up to {_standard_error(num_test):.3f}; the reading above "
            f"counts a change below two of these ({level:.3f}) as level. Agreement in "
            f"direction on one seed is an observation, not a test.", "",
            "Per-round tables: " + ", ".join(f"[{p}](mnist/{p}/compare.md)" for p in results)
            + "."]
  if settings.fedavg and "avgkd" in results:
    print("      fedavg: on AvgKD's split, scored by its clients and by its averaged model",
          flush=True)
    fedavg_rows = train_and_evaluate(base.replace(protocol="fedavg"), out / "fedavg",
                                     progress=progress)
    table, line = _fedavg_both_ways(read_metrics(out / "avgkd"), fedavg_rows, num_test,
                                    _partition(c))
    lines += ["", table]
    reading.append(line)
  return "\n".join(lines), reading


def _mean_by_round(rows: list[dict[str, Any]], keep: Callable[[Any], bool]) -> dict[int, float]:
  """Round -> the mean test accuracy of the rows whose agent ``keep`` accepts."""
  by: dict[int, list[float]] = {}
  for r in rows:
    if keep(r["agent"]):
      by.setdefault(int(r["round"]), []).append(float(r["test_accuracy"]))
  return {t: float(np.mean(v)) for t, v in sorted(by.items())}


def _fedavg_both_ways(avgkd_rows: list[dict[str, Any]], fedavg_rows: list[dict[str, Any]],
                      num_test: int, split: str = "") -> tuple[str, str]:
  """The table of AvgKD's agents beside FedAvg's clients and averaged model per round,
  and the reading: AvgKD's margin over FedAvg scored each way over the rounds after the
  first exchange (one seed: an observation; a margin under two standard errors of a
  difference counts as level)."""
  is_agent = lambda a: isinstance(a, int)
  avgkd = _mean_by_round(avgkd_rows, is_agent)
  clients = _mean_by_round(fedavg_rows, is_agent)
  server = _mean_by_round(fedavg_rows, lambda a: a == "server")
  rounds = [t for t in avgkd if t in clients and t in server]
  lines = ["AvgKD beside FedAvg on the same split (`mnist/fedavg/`), scored both ways: "
           "FedAvg's clients after local training (as the paper scores FedAvg in Figs. 6 "
           "and 8) and its averaged model (the server's, what FedAvg deploys).", "",
           "| paper round | AvgKD (agents' mean) | FedAvg: clients after local training | "
           "FedAvg: averaged model |", "| --- | --- | --- | --- |"]
  lines += [f"| {t + 1} | {avgkd[t]:.3f} | {clients[t]:.3f} | {server[t]:.3f} |"
            for t in rounds]
  later = [t for t in rounds if t >= 1] or rounds   # after the first exchange
  level = 2 * _standard_error(num_test)
  margins = {way: float(np.mean([avgkd[t] - ref[t] for t in later]))
             for way, ref in (("clients", clients), ("averaged model", server))}
  side = lambda m: "ahead" if m > level else ("behind" if m < -level else "level")
  span = (f"paper rounds {later[0] + 1}-{later[-1] + 1}" if len(later) > 1
          else f"paper round {later[0] + 1}")
  why = {"clients": "the paper's way", "averaged model": "what FedAvg deploys"}
  ways = "; ".join(f"scored by its {way} ({why[way]}), AvgKD is {side(m)} ({m:+.3f})"
                   for way, m in margins.items())
  agree = len({side(m) for m in margins.values()}) == 1
  text = (f"**AvgKD vs FedAvg, scored both ways** (mean over {span}, one seed, "
          f"{num_test} test points; a margin under {level:.3f} counts as level"
          + (f"; split {split}, where the paper's statement is about high data "
             f"heterogeneity" if split else "") + f"): {ways}. "
          + ("Both scorings agree here." if agree else
             "Which FedAvg model is scored decides the comparison here.")
          + " `neural reproduce --figure 6` decides the paper's \"AvgKD consistently "
          "outperforms FedAvg\" both ways over seeds.")
  return "\n".join(lines), text


def _num(value: Any) -> str:
  return "-" if value is None else f"{value:.3f}"


def _paired(rows: list[dict[str, Any]], series: str) -> tuple[list[float], list[float]]:
  """The theory's and the network's test accuracies of ``series`` on the rounds where both
  exist (the network list is empty if it has none)."""
  ours = [r for r in rows if r["series"] == series]
  both = [r for r in ours if r["network_accuracy"] is not None]
  if not both:
    return [r["theory_accuracy"] for r in ours], []
  return [r["theory_accuracy"] for r in both], [r["network_accuracy"] for r in both]


def _mnist_reading(protocol: str, comp: Any, num_test: int, agents: int) -> str:
  """One line per protocol from the numbers: direction of each curve, first to last round
  (a change below two standard errors of a difference of accuracies counts as level), and
  the mean gap between the curves; one seed, so an observation, not a verdict."""
  level = 2 * _standard_error(num_test)
  trend = lambda a, b: "falls" if b < a - level else ("rises" if b > a + level else "stays level")
  text = f"**{fedkrr.display_name(protocol)} on MNIST**"
  if comp.degradation_rate_per_cycle is not None:
    text += (f" (degradation rate rho = {comp.degradation_rate_per_cycle:.4f} per cycle of "
             f"{agents} rounds, {comp.spectral_radius_per_round:.4f} per round)")
  else:
    text += f" (spectral radius {comp.spectral_radius_per_round:.4f} per round)"
  parts, agree = [], []
  for series in comp.rates:
    th, nn = _paired(comp.rows, series)
    part = f"{series}: theory {trend(th[0], th[-1])} ({th[0]:.3f} -> {th[-1]:.3f})"
    if nn:
      part += (f", network {trend(nn[0], nn[-1])} ({nn[0]:.3f} -> {nn[-1]:.3f}), mean gap "
               f"{np.mean(np.abs(np.subtract(th, nn))):.3f}")
      agree.append(trend(th[0], th[-1]) == trend(nn[0], nn[-1]))
    parts.append(part)
  text += ": " + "; ".join(parts)
  if agree:
    text += (f". On this seed the theory and the network move the same way in "
             f"{agree.count(True)} of {len(agree)} series (a change under {level:.3f}, two "
             f"standard errors on {num_test} test points, counts as level)")
  return text + "."


def _plot_side_by_side(results: dict[str, Any], path: Path) -> None:
  fig = Figure(figsize=(4.2 * len(results), 4.4), layout="constrained")
  axes = fig.subplots(1, len(results), squeeze=False)
  for ax, (protocol, comp) in zip(axes[0], results.items()):
    for i, series in enumerate(comp.rates):
      rows = [r for r in comp.rows if r["series"] == series]
      t = [r["round"] for r in rows]
      color = f"C{i}"
      ax.plot(t, [r["theory_accuracy"] for r in rows], "--", color=color,
              label=f"{series}: theory")
      net = [(r["round"], r["network_accuracy"]) for r in rows
             if r["network_accuracy"] is not None]
      if net:
        ax.plot(*zip(*net), "o-", color=color, markersize=3, label=f"{series}: network")
    ax.set_title(fedkrr.display_name(protocol))
    ax.set_xlabel("round (0: local training on the labels)")
    ax.set_ylabel("test accuracy")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.22), ncols=2, frameon=False)
  atomic_savefig(fig, path, dpi=120)
