"""benchmarks.convergence --merge: a rerun of some compressors replaces their rows in the
blocks it redoes and keeps the other rows, only against the same dense run; a rerun of every
row replaces the block."""
import pytest

from benchmarks.convergence.__main__ import merged_block
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS


def row(setting, label, final):
    return {"setting": setting, "label": label, "final": final}


def block(runs, dense_final=0.989, command="run", date="today"):
    return {"dense": {"final": dense_final, "steps_to_target": 44}, "runs": runs, "command": command,
            "machine": {"date": date}}


EARLIER = block([row("recommended", "DGC(0.1)", 0.98), row("recommended", "DRAGONN(0.1)", 0.97),
                 row("candidates", "DGC(0.1, candidates_per_slot=1)", 0.96),
                 row("candidates", "DRAGONN(0.1, candidates_per_slot=2)", 0.95),
                 row("masking", "DRAGONN(0.1, momentum_masking=0)", 0.94)], command="first", date="monday")


def test_a_rerun_of_one_compressor_replaces_its_rows_in_place_and_keeps_the_rest():
    rerun = block([row("recommended", "DRAGONN(0.1)", 0.99),
                   row("candidates", "DRAGONN(0.1, candidates_per_slot=1)", 0.98)], command="second")
    merged = merged_block(EARLIER, rerun, settings=["recommended", "candidates"], compressors=["DRAGONN"])
    assert [(r["label"], r["final"]) for r in merged["runs"]] == [
        ("DGC(0.1)", 0.98), ("DRAGONN(0.1)", 0.99),  # replaced where it stood
        ("DGC(0.1, candidates_per_slot=1)", 0.96),
        # the rerun's candidates no longer include DRAGONN at 2: that row goes, its new one joins its setting
        ("DRAGONN(0.1, candidates_per_slot=1)", 0.98),
        ("DRAGONN(0.1, momentum_masking=0)", 0.94)]  # a setting the rerun did not run: kept
    assert merged["commands"] == [("first", "monday"), ("second", "today")]


def test_without_a_compressor_filter_every_row_of_the_settings_run_is_redone():
    rerun = block([row("recommended", "DGC(0.1)", 0.9)])
    merged = merged_block(EARLIER, rerun, settings=["recommended"], compressors=[])
    assert [r["label"] for r in merged["runs"]] == ["DGC(0.1)", "DGC(0.1, candidates_per_slot=1)",
                                                    "DRAGONN(0.1, candidates_per_slot=2)",
                                                    "DRAGONN(0.1, momentum_masking=0)"]


def test_rows_against_another_dense_run_are_refused():
    with pytest.raises(ValueError, match="dense training came out differently"):
        merged_block(EARLIER, block([], dense_final=0.9), settings=["recommended"], compressors=["DRAGONN"])


def test_a_rerun_of_every_row_replaces_the_block_even_against_another_dense_run():
    # A task's learning rate changed: its blocks are redone whole, the other tasks' blocks kept.
    rerun = block([row("recommended", "DGC(0.1)", 0.9)], dense_final=0.9, command="second")
    replaced = merged_block(EARLIER, rerun, settings=["recommended", "candidates", "masking"], compressors=[])
    assert replaced["runs"] == rerun["runs"] and replaced["dense"]["final"] == 0.9
    assert "commands" not in replaced  # only the rerun's command made it
