"""The plan tables in benchmarks/README.md and docs/design.md are the committed plan JSON's."""

from benchmarks import plan_tables


def test_plan_tables_match_their_json():
    assert plan_tables.main(["--check"]) == 0, "run python -m benchmarks.plan_tables"


def test_every_marked_table_is_known():
    for path in plan_tables.FILES:
        names = [m.group("name") for m in plan_tables.BLOCK.finditer(path.read_text())]
        assert set(names) <= set(plan_tables.TABLES), path
    assert "homogeneous" in names  # docs/design.md carries the homogeneous table
