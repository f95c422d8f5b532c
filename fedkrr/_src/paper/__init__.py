"""The paper's applications: the verify table, the counterexample search and its shipped
findings, the toy experiment, rate plots, the closed-form demo."""
