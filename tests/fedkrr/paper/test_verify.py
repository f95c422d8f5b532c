"""``fedkrr verify``: rows, table, JSON and exit status."""

import dataclasses
import json
import re

import pytest

import fedkrr
from fedkrr._src.cli import main
from fedkrr._src.paper import verify


def test_checks_have_unique_ids_and_kinds():
  ids = [c.id for c in verify.CHECKS]
  assert len(ids) == len(set(ids))
  assert {c.kind for c in verify.CHECKS} == {"identity", "claim"}


def test_quick_checks_hold_and_format(x64):
  rows = verify.run_checks(seeds=(0,), only="prop4-rate")
  assert [r.id for r in rows] == ["prop4-rate-cos2", "prop4-rate-geometry"]
  assert all(r.holds and r.residual < 1e-10 for r in rows)
  table = verify.checks_table(rows)
  assert table.count("\n") == 3 and "| prop4-rate-cos2 |" in table


def test_a_failing_claim_is_a_finding_and_a_failing_identity_an_error(x64, monkeypatch):
  bad_claim = dataclasses.replace(verify.CHECKS[0], id="x-claim", kind="claim",
                                  residual_fn=lambda seed, sizes: 1.0)
  bad_identity = dataclasses.replace(bad_claim, id="x-identity", kind="identity")
  monkeypatch.setattr(verify, "CHECKS", (bad_claim,))
  rows = verify.run_checks(seeds=(0,), only="x-")
  assert not rows[0].holds and verify.failed_checks(rows) == []
  assert "NO (finding)" in verify.checks_table(rows)
  assert main(["verify", "--only", "x-", "--seeds", "1"]) == 0
  monkeypatch.setattr(verify, "CHECKS", (bad_identity,))
  assert main(["verify", "--only", "x-", "--seeds", "1"]) == 1


def test_cli_writes_json_rows(tmp_path, x64, capsys):
  path = tmp_path / "rows.json"
  assert main(["verify", "--only", "prop3-idempotent", "--seeds", "1",
               "--json", str(path)]) == 0
  rows = json.loads(path.read_text())
  assert len(rows) == 1
  assert {"id", "statement", "source", "residual", "tolerance", "holds"} <= set(rows[0])
  assert rows[0]["holds"] is True
  assert "prop3-idempotent" in capsys.readouterr().out


def test_cli_rejects_unknown_prefix_and_bad_seeds(capsys):
  assert main(["verify", "--only", "nope"]) == 2
  assert "only" in capsys.readouterr().err
  assert main(["verify", "--seeds", "0"]) == 2
  with pytest.raises(SystemExit):
    main(["verify", "--seeds", "x"])


def test_quick_mode_checks_the_smallest_instance_only(monkeypatch):
  seen = []
  check = dataclasses.replace(verify.CHECKS[0], id="x-sizes", sizes=((3, 2), (9, 8)),
                              residual_fn=lambda seed, sizes: seen.append((seed, sizes)) or 0.0)
  monkeypatch.setattr(verify, "CHECKS", (check,))
  verify.run_checks(seeds=(0, 1), only="x-", quick=True)
  assert seen == [(0, (3, 2)), (1, (3, 2))]
  seen.clear()
  verify.run_checks(seeds=(0,), only="x-")
  assert seen == [(0, (3, 2)), (0, (9, 8))]


def test_the_table_keeps_eight_cells_when_a_statement_has_norm_bars():
  row = verify.CheckRow(id="x", statement="||C_1||_2 <= 1", source="App. B", kind="identity",
                        residual=0.0, tolerance=1e-8, holds=True)
  body = verify.checks_table([row]).splitlines()[2]
  cells = [c for c in re.split(r"(?<!\\)\|", body)[1:-1]]
  assert len(cells) == 8 and cells[1].strip() == r"\|\|C_1\|\|_2 <= 1"


def test_pkd_mean_rows_hold_on_the_seeded_instances_and_only_the_shared_one_is_proved(x64):
  rows = verify.run_checks(seeds=(0,), only="pkd-mean", quick=True)
  assert [r.id for r in rows] == ["pkd-mean-shared", "pkd-mean-different"]
  assert all(r.kind == "claim" and r.holds and r.residual < 1e-3 for r in rows)
  # the search held the shared statement and broke the different-kernel one
  found = {r.claim: r for r in fedkrr.paper.known_findings()}
  assert found["pkd-mean-shared"].holds and not found["pkd-mean-different"].holds
  assert rows[0].search == f"held on {found['pkd-mean-shared'].searched} searched"
  assert rows[1].search == "counterexample (pkd-mean-different.npz)"
