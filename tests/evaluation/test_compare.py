"""`ssa-hf eval` (several models), `ssa-hf probe` and `ssa-hf compare` through the command line, and the
compare report's reading of results files."""

from __future__ import annotations

import json

import pytest

from ssa_hf.cli import main
from ssa_hf.evaluation.compare import CompareConfig, extract_perplexities, load_results, run_compare
from ssa_hf.evaluation.zorro import ZORRO_PARADIGMS

PARADIGMS = list(ZORRO_PARADIGMS[:3])


@pytest.fixture(scope="module")
def outputs(ssa_causal_dir, softmax_causal_dir, data_dir, zorro_root, tmp_path_factory):
    """An SSA model and its softmax twin through eval and probe (command line), plus perplexity files."""
    root = tmp_path_factory.mktemp("cli")
    rc = main(["eval", str(ssa_causal_dir), str(softmax_causal_dir), "--data-dir", str(data_dir), "--tasks",
               "boolq,arc_easy", "--batch-size", "4", "--device", "cpu", "--output-dir", str(root / "eval")])
    assert rc == 0
    for folder in (ssa_causal_dir, softmax_causal_dir):
        rc = main(["probe", str(folder), "--zorro-dir", str(zorro_root), "--paradigms", ",".join(PARADIGMS),
                   "--device", "cpu", "--no-progress", "--output-dir", str(root / f"probe-{folder.name}")])
        assert rc == 0
    for name, ppl in (("tiny-ssa", 120.5), ("tiny-softmax", 131.25)):
        # the layout `ssa-hf perplexity` writes: one record per data set
        records = [{"model": f"/runs/{name}", "data": data, "windows": 10, "mean_nll": 4.8, "perplexity": value}
                   for data, value in (("wikitext", ppl), ("webtext_c4", ppl + 10))]
        (root / f"ppl-{name}").mkdir()
        (root / f"ppl-{name}" / "perplexity.json").write_text(json.dumps(records))
    return root


def test_eval_of_two_models_writes_a_side_by_side_table(outputs):
    text = (outputs / "eval" / "eval.md").read_text()
    assert "| task | metric | tiny-ssa | tiny-softmax | chance | majority | n | shots |" in text
    runs = json.loads((outputs / "eval" / "eval_comparison.json").read_text())["runs"]
    assert [r["model"]["attention_scoring"] for r in runs] == ["ssa", "softmax"]
    for name in ("tiny-ssa", "tiny-softmax"):
        assert (outputs / "eval" / name / "eval.json").is_file()
    assert (outputs / "eval" / "eval.png").is_file()


def test_compare_builds_one_report_from_all_results(outputs, tmp_path, capsys):
    results = [str(outputs / "eval"), str(outputs / "probe-tiny-ssa"), str(outputs / "probe-tiny-softmax"),
               str(outputs / "ppl-tiny-ssa"), str(outputs / "ppl-tiny-softmax" / "perplexity.json")]
    assert main(["compare", *results, "--output-dir", str(tmp_path)]) == 0
    text = (tmp_path / "compare.md").read_text()
    assert "| evaluation set | tiny-ssa | tiny-softmax |" in text
    assert "| wikitext | 120.50 | 131.25 |" in text and "| webtext_c4 | 130.50 | 141.25 |" in text
    assert "| task | metric | tiny-ssa | tiny-softmax | chance | majority | n | shots |" in text
    assert "| paradigm | tiny-ssa loglik | tiny-softmax loglik |" in text
    evals = {r["name"]: r for r in json.loads((tmp_path / "compare.json").read_text())["lm_eval"]}
    boolq = evals["tiny-ssa"]["tasks"]["boolq"]["metrics"]["acc"]["value"]
    assert f"{boolq:.4f}" in text
    for figure in ("compare_lm_eval.png", "compare_zorro.png", "compare_perplexity.png"):
        assert (tmp_path / figure).stat().st_size > 1000, figure
    assert "wrote" in capsys.readouterr().out


def test_compare_names_and_clashes(outputs):
    probe = str(outputs / "probe-tiny-ssa")
    with pytest.raises(ValueError, match="both named"):
        load_results([probe, probe])
    renamed = load_results([probe, probe], names=["a", "b"])
    assert [r["name"] for r in renamed["zorro"]] == ["a", "b"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        run_compare(CompareConfig(results=[str(outputs / "nothing.json")]))


def test_compare_rejects_files_without_results(tmp_path):
    (tmp_path / "other.json").write_text(json.dumps({"loss": 2.0}))
    with pytest.raises(ValueError, match="no evaluation, probe or perplexity results"):
        load_results([str(tmp_path / "other.json")])


def test_perplexity_fields_are_found_in_any_layout():
    assert extract_perplexities({"perplexity": 3.0}) == {"perplexity": 3.0}
    assert extract_perplexities({"results": {"wiki": {"perplexity": 2.5}}, "config": {"perplexity": 1}}) == {"results/wiki": 2.5}
    assert extract_perplexities({"wikitext_ppl": 2.0, "settings": {"ppl": 9}}) == {"wikitext_ppl": 2.0}
    nested = {"datasets": [{"name": "wiki", "perplexity": 4.0, "perplexity_stderr": 0.1}, {"name": "c4", "ppl": 5.0}]}
    assert extract_perplexities(nested) == {"datasets/wiki": 4.0, "datasets/c4": 5.0}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["eval", "{model}", "--data-dir", "{data}", "--tasks", "lambada_openai"], "unknown task(s) ['lambada_openai']"),
        (["eval", "{model}", "--data-dir", "{tmp}", "--tasks", "boolq"], "missing data file"),
        (["eval", "{tmp}/missing-model", "--data-dir", "{data}", "--tasks", "boolq"], "does not exist"),
        (["eval", "{model}", "--data-dir", "{data}", "--tasks", "boolq", "--num-fewshot", "-1"], "num_fewshot"),
        (["probe", "{model}", "--zorro-dir", "{tmp}/no-zorro"], "is not a folder"),
        (["compare", "{tmp}/none.json"], "does not exist"),
    ],
)
def test_command_line_errors_name_what_to_fix(argv, message, ssa_causal_dir, data_dir, tmp_path, capsys):
    argv = [a.format(model=ssa_causal_dir, data=data_dir, tmp=tmp_path) for a in argv]
    assert main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err


def test_compare_flags_zorro_results_on_different_numbers_of_pairs(outputs, tmp_path):
    probe = json.loads((outputs / "probe-tiny-softmax" / "probe.json").read_text())
    assert main(["compare", str(outputs / "probe-tiny-ssa"), str(outputs / "probe-tiny-softmax"),
                 "--output-dir", str(tmp_path / "same")]) == 0
    assert "Not comparable" not in (tmp_path / "same" / "compare.md").read_text()
    paradigm = sorted(probe["settings"]["pairs_per_paradigm"])[0]
    probe["settings"]["pairs_per_paradigm"][paradigm] = 7
    (tmp_path / "limited").mkdir()
    (tmp_path / "limited" / "probe.json").write_text(json.dumps(probe))
    assert main(["compare", str(outputs / "probe-tiny-ssa"), str(tmp_path / "limited"),
                 "--output-dir", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "compare.md").read_text()
    assert "**Not comparable as they stand:**" in text and f"{paradigm}: tiny-ssa " in text and "limited 7" not in text
    assert f"{probe['name']} 7" in text and "same --limit" in text


def test_plot_labels_drop_folders():
    from ssa_hf.evaluation.report import short_label

    assert short_label("held-out documents of /data/aochildes/train.jsonl (1000)") == "held-out documents of\ntrain.jsonl (1000)"
    assert short_label("/work/shared/data/wikitext/wiki.test.raw") == "wiki.test.raw"
    assert short_label("results/wiki") == "results/wiki"  # not a path: a label made of keys, or a Hub name


def test_one_checkpoint_under_two_names_is_one_model(outputs, tmp_path):
    """The probe of tiny-ssa renamed `copy`: the weight hash says it is tiny-ssa, so the report shows one model."""
    result = run_compare(CompareConfig(results=[str(outputs / "eval"), str(outputs / "probe-tiny-ssa")],
                                       names=["", "copy"], output_dir=str(tmp_path)))
    text = result.markdown
    models = text.split("## Models")[1].split("##")[0]
    assert models.count("| tiny-ssa |") == 1 and "| copy |" not in models
    assert "`copy` has the same weights as `tiny-ssa`" in text
    assert result.zorro[0]["name"] == "tiny-ssa" and "copy loglik" not in text


@pytest.mark.parametrize("edit, message", [
    (lambda records: records[0].update(perplexity=-5.0), r"perplexity 'wikitext'.* is -5.0, which no evaluation"),
    (lambda records: records[0].update(perplexity=0.5), r"is 0.5, which no evaluation"),
    (lambda records: records[0].update(perplexity=float("nan")), r"is nan"),
])
def test_impossible_perplexities_are_refused(outputs, tmp_path, edit, message):
    records = json.loads((outputs / "ppl-tiny-ssa" / "perplexity.json").read_text())
    edit(records)
    (tmp_path / "perplexity.json").write_text(json.dumps(records))
    with pytest.raises(ValueError, match=message):
        load_results([str(tmp_path / "perplexity.json")])


def test_impossible_accuracies_are_refused(outputs, tmp_path):
    run = json.loads((outputs / "eval" / "tiny-ssa" / "eval.json").read_text())
    run["tasks"]["boolq"]["metrics"]["acc"]["value"] = 1.5
    (tmp_path / "eval.json").write_text(json.dumps(run))
    with pytest.raises(ValueError, match=r"boolq/acc is 1.5, which no evaluation produces"):
        load_results([str(tmp_path / "eval.json")])
    probe = json.loads((outputs / "probe-tiny-ssa" / "probe.json").read_text())
    paradigm = next(iter(probe["paradigms"]))
    probe["paradigms"][paradigm]["loglik"]["accuracy"] = -0.1
    (tmp_path / "probe.json").write_text(json.dumps(probe))
    with pytest.raises(ValueError, match=r"zorro accuracy .*loglik is -0.1"):
        load_results([str(tmp_path / "probe.json")])
