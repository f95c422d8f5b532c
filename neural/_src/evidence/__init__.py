"""The paper's units, curves, rules, statements and the authors' curves."""
