"""benchmarks/evidence.py: where a report goes when no --out is given."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from evidence import default_out  # noqa: E402


def test_two_specs_of_one_family_report_to_different_files():
    a = default_out(Path("configs/evidence_arith_chain.yaml"), "arith_chain")
    b = default_out(Path("configs/evidence_arith_chain_credit.yaml"), "arith_chain")
    assert a == Path("benchmarks/results/evidence_arith_chain") and b == Path(
        "benchmarks/results/evidence_arith_chain_credit"
    )
    # a spec not named evidence_* keeps the family's name
    assert default_out(Path("/tmp/my_rows.yaml"), "fs_chain") == Path("benchmarks/results/evidence_fs_chain")


def test_every_committed_spec_reports_to_its_committed_results():
    root = Path(__file__).resolve().parents[2]
    for spec in sorted(root.glob("configs/evidence_*.yaml")):
        out = root / default_out(spec, "unused")
        assert out.with_suffix(".md").is_file(), spec.name
