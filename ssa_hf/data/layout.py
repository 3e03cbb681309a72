"""The offline data folder: what it holds, how to build it, how to check it.

The tiny pretraining configs, `ssa-hf eval --data-dir`, `ssa-hf probe`, `ssa-hf perplexity`, `ssa-hf uptrain-demo`
and `ssa-hf reproduce --scale cpu` read local copies of public data sets from one folder (`$SSA_HF_DATA_DIR`; see
docs/data.md). `download(to)` builds that folder from the Hub (through `datasets`) and, for the two sets that are
not on the Hub, from their GitHub repositories at a pinned commit (each file checked against its pinned SHA-256);
every set's folder gets a `SHA256SUMS` file (sha256sum's format) and a `SOURCE.json` saying where it came from.
`check(folder)` verifies a folder: every expected file present, every checksum equal.

The network is reached only through `load_hub_rows` and `fetch_url` (tests replace them with local readers).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..regular_files import sha256_file

CHECKSUM_FILE = "SHA256SUMS"
SOURCE_FILE = "SOURCE.json"
DOWNLOAD_HINT = "ssa-hf data download --to DIR"

AOCHILDES_COMMIT = "cb2735817e0eb227af844842305ca1126c93098e"
ZORRO_COMMITS = {"sentences": ("687ba433e91a3815e8204a8fc0cf0577303b1660", "sentences/babyberta"),
                 "sentences_conll2021": ("b2af8d51052fa9710f778040dde985d64791010d", "sentences/8192")}
C4_DOCUMENTS = 2000

# files fetched from GitHub at a pinned commit: their SHA-256, checked before anything is written
PINNED = {
    "aochildes/aochildes.train": "5ee5da81b84f7f1403e21567148e16ea257b2fd043a9cbabf78c3ab846c56cbe",
    "aochildes/aochildes.dev": "1ad5434489dea06d5102fc279a20d227610e0e502a0e1fedca1859aa44429a0f",
    "aochildes/aochildes.test": "f68b74ebe795924ed21c28f89468cb3594321f3b21aeecaf5cd7482262bc741d",
    "zorro/sentences/agreement_determiner_noun-across_1_adjective.txt": "6b766cba666910897b4781ade45b1cc66761268a474e2332e0daa5b4ade4fe79",
    "zorro/sentences/agreement_determiner_noun-between_neighbors.txt": "3c714bab3455e9e4915c246b1c6d4861a650acb769fc3b4839c69ba894fec5b2",
    "zorro/sentences/agreement_subject_verb-across_prepositional_phrase.txt": "bef90373f26b76e8bb8aed99ac6f03ce46328120fc1a35c26cfde1fd47c150c1",
    "zorro/sentences/agreement_subject_verb-across_relative_clause.txt": "2933b97d6812011d993f438b3d75d5394f39043b552847a78b94e59165945d2c",
    "zorro/sentences/agreement_subject_verb-in_question_with_aux.txt": "95e264cc02cab96b27e0bcfa40dcbe32d9ddc97d481dc638e45847a2f898662e",
    "zorro/sentences/agreement_subject_verb-in_simple_question.txt": "ddc8b0b3e417021cf560d871ad717b9b3bbd4f580ac07438737b7bda1b11cae4",
    "zorro/sentences/anaphor_agreement-pronoun_gender.txt": "c5f21030475f37f847c090d56e26e2d32530e4ca7e55ba3c02f62a8d38c16d72",
    "zorro/sentences/argument_structure-dropped_argument.txt": "77b79e08e9018f404a5319a6bdc788edf465ae324c380c1d42c0730b52b4d37f",
    "zorro/sentences/argument_structure-swapped_arguments.txt": "0a7907d468a15cbfe0d30fa9d8ce3bb4c30ca9f63966f9cc9fd24f4cfeed09d9",
    "zorro/sentences/argument_structure-transitive.txt": "c4e362226d927591573abc546326ca0e4053255e4b2aa0090e09a257c09fcaa3",
    "zorro/sentences/binding-principle_a.txt": "6fcf1c1a7ba111ecf977e8d7d0331bb770dc06f02c583c3243ee161b8b9b23f8",
    "zorro/sentences/case-subjective_pronoun.txt": "742776364f52edc3d876fb9bc9bb4cde7614cab6f669bfc5369271094727f8a2",
    "zorro/sentences/ellipsis-n_bar.txt": "9a6f08e310d9885361aefccb9c00d6a9bdec119ad1a132438ec2bfe6e023ef63",
    "zorro/sentences/filler-gap-wh_question_object.txt": "d71d8dd2e59c278139118c174b88f6e9b31f425ed12ffe9184473c59bb90161c",
    "zorro/sentences/filler-gap-wh_question_subject.txt": "2bc857ae020ef26b320f9e01f37ad7c43334faf4cb816503625227bb1f2b6dd7",
    "zorro/sentences/irregular-verb.txt": "bdd5c4a10ed981db4080004a07f998a60c55a5ebfaf0db2f834ca507c6674f40",
    "zorro/sentences/island-effects-adjunct_island.txt": "8eced9ad55772dd6f4a37c91912f420adbe8567fa03394bdd3e720e93b1984db",
    "zorro/sentences/island-effects-coordinate_structure_constraint.txt": "138d2d374086e4ff2a3148e160b0bc1a30993289b1f0cdaf3c632fe6194b128d",
    "zorro/sentences/local_attractor-in_question_with_aux.txt": "bbe12dd4f83688718c88de71fde36c97cd17af764f35ed59f345713d68fc40be",
    "zorro/sentences/npi_licensing-matrix_question.txt": "6f55dd4f06977f6c9af16dabbfa922993d315a84eed2c6da78d023638069a5da",
    "zorro/sentences/npi_licensing-only_npi_licensor.txt": "72e5893369ee5e7bad0e97e9f769bcc830e6ac652369807f83a11cc4b1361ea4",
    "zorro/sentences/quantifiers-existential_there.txt": "4251efa4448f82de3a59558dba4d76cb29868572cbafdf3caa10b8c433aa072c",
    "zorro/sentences/quantifiers-superlative.txt": "3be3cc13ce50314a085b4ccbb7e92742cae797b0ec7423a28605388d6adea559",
    "zorro/sentences_conll2021/agreement_determiner_noun-across_1_adjective.txt": "56bb9d472f48c1c4533fa09c77b5badb861f5a236537d5b26ec04bcdf7d3aa57",
    "zorro/sentences_conll2021/agreement_determiner_noun-between_neighbors.txt": "93ae9cdcddbeac0b9a20e439971132a826729d41ee1015186353f61c886d3165",
    "zorro/sentences_conll2021/agreement_subject_verb-across_prepositional_phrase.txt": "d1a2ffdc3b9e7ce811f3974b1b88467ba7843b67ce2f0a87e66d00b7dd91b7e6",
    "zorro/sentences_conll2021/agreement_subject_verb-across_relative_clause.txt": "2ef527e8d2bcfc95a1d5deedf2e4a4f018f07b11621a482ebb63be6cbbd28f3b",
    "zorro/sentences_conll2021/agreement_subject_verb-in_question_with_aux.txt": "56de415c53fddca603f6c16cdca1ed13cbae9316d3f673779f641c4df8da44c6",
    "zorro/sentences_conll2021/agreement_subject_verb-in_simple_question.txt": "053e9999f2ca56b4bbecd401256d27652aa6651ea9c9e6575f3f13fe3b1ceb17",
    "zorro/sentences_conll2021/anaphor_agreement-pronoun_gender.txt": "17d75013138837de4caab90be45a6b30c33f3cebff9096df07084cc77a91dabb",
    "zorro/sentences_conll2021/argument_structure-dropped_argument.txt": "e0be369e642a8bf1bd5e13b1bd6271f25a8782e1e81cbd04bcc09f38b8e6751b",
    "zorro/sentences_conll2021/argument_structure-swapped_arguments.txt": "64d69d22a33ea1fd94178d5b5ec6ca4b4ef9c01d73438bce37e7344deb68730d",
    "zorro/sentences_conll2021/argument_structure-transitive.txt": "bae322331be494860287ba962ddf697badecdd3f5cee44a02ab5a1e46bb1b301",
    "zorro/sentences_conll2021/binding-principle_a.txt": "301513833a5976616ba9235dffeb3911630764910fb6742c3652eb69e722e091",
    "zorro/sentences_conll2021/case-subjective_pronoun.txt": "97c0775bf51a15eacfa0afa2b18096e5478e6338f417890033a095d5d822926b",
    "zorro/sentences_conll2021/ellipsis-n_bar.txt": "811a402c4dd83b8c1e61c9f21690972bcc1697671dfe83ca09f1ed6fb0f995d8",
    "zorro/sentences_conll2021/filler-gap-wh_question_object.txt": "26d64484c1105ad3ec47f8db36b46682d3e6a84ec73a20336205d189b71f26aa",
    "zorro/sentences_conll2021/filler-gap-wh_question_subject.txt": "357c2fe0c0ecd3d14e1711973bb0f95399678f5e456a76018052f7811b72d615",
    "zorro/sentences_conll2021/irregular-verb.txt": "1b6b66d4ac525332cfdb5772d8b320dcb738c5e734e0e326a12081831582752b",
    "zorro/sentences_conll2021/island-effects-adjunct_island.txt": "b45f807d4304f3b1669577a497bc1a782f779e727cb85d9457458bc280ee496b",
    "zorro/sentences_conll2021/island-effects-coordinate_structure_constraint.txt": "8eb377ed1559e4eeace90a815abf3a3ace2735b48838a67873b12e350615b99c",
    "zorro/sentences_conll2021/local_attractor-in_question_with_aux.txt": "31c309db48a9b8bda7f8a5f5640c82dd4402532b16fedb1ede43b1a79c1a37a6",
    "zorro/sentences_conll2021/npi_licensing-matrix_question.txt": "86baf32e7c84ae1184fe80852712718ab147d480367ab11c280ec3e57ab82b04",
    "zorro/sentences_conll2021/npi_licensing-only_npi_licensor.txt": "93939e60e2185a6b9ee3cb2f2482596637e935123ab644e4790f229f994bff11",
    "zorro/sentences_conll2021/quantifiers-existential_there.txt": "97a4aeaa2dcb5a7fd7abf297dce639bef27ea2fe905ce4203bbb5c30eb2bd4a0",
    "zorro/sentences_conll2021/quantifiers-superlative.txt": "2f15d7453a4cf12c42da2c08672fa4ba96efe2f9d0ed450961f6869e1ae0d184",
}
ZORRO_PARADIGMS = sorted({Path(name).stem for name in PINNED if name.startswith("zorro/")})


# ------------------------------------------------------------------------------------------- the network
def load_hub_rows(repo_id: str, config: str | None, split: str, limit: int | None = None) -> Iterator[dict]:
    """The rows of one split of a Hub data set, in order (streamed when only the first `limit` are wanted)."""
    try:
        from datasets import load_dataset
    except ImportError:
        raise SystemExit("ssa-hf data download needs `datasets`: pip install 'ssa-hf[train]'") from None
    rows = load_dataset(repo_id, config, split=split, streaming=limit is not None)
    for index, row in enumerate(rows):
        if limit is not None and index >= limit:
            return
        yield dict(row)


def fetch_url(url: str) -> bytes:
    """The bytes at `url` (https only)."""
    from urllib.request import urlopen

    if not url.startswith("https://"):
        raise ValueError(f"refusing to fetch {url!r}: https only")
    with urlopen(url, timeout=120) as response:  # noqa: S310 (https checked above)
        return response.read()


# ------------------------------------------------------------------------------------------- builders
def _jsonl(rows: Iterable[dict]) -> bytes:
    return "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows).encode("utf-8")


def _build_arc(folder: Path) -> dict:
    for subset in ("ARC-Easy", "ARC-Challenge"):
        for split in ("train", "validation", "test"):
            rows = ({k: row[k] for k in ("id", "question", "choices", "answerKey")}
                    for row in load_hub_rows("allenai/ai2_arc", subset, split))
            (folder / f"{subset}-{split}.jsonl").write_bytes(_jsonl(rows))
    return {"hub": "allenai/ai2_arc", "configs": ["ARC-Easy", "ARC-Challenge"], "splits": ["train", "validation", "test"]}


def _build_boolq(folder: Path) -> dict:
    rows = ({"question": r["question"], "passage": r["passage"], "answer": bool(r["answer"])}
            for r in load_hub_rows("google/boolq", None, "validation"))
    (folder / "validation.jsonl").write_bytes(_jsonl(rows))
    return {"hub": "google/boolq", "splits": ["validation"]}


def _hellaswag_text(text: str) -> str:
    """HellaSwag's WikiHow markup removed, as lm-eval's stock task does before scoring."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def _build_hellaswag(folder: Path) -> dict:
    def records():
        for row in load_hub_rows("Rowan/hellaswag", None, "validation"):
            context = row["ctx_a"] + " " + row["ctx_b"].capitalize()
            yield {"ind": row.get("ind"), "query": _hellaswag_text(row["activity_label"] + ": " + context),
                   "label": int(row["label"]), "endings": [_hellaswag_text(e) for e in row["endings"]]}

    (folder / "hellaswag_val.jsonl.gz").write_bytes(gzip.compress(_jsonl(records()), mtime=0))
    return {"hub": "Rowan/hellaswag", "splits": ["validation"],
            "note": "query = activity_label: ctx_a Ctx_b, markup removed as lm-eval's stock task does"}


def _build_piqa(folder: Path) -> dict:
    rows = list(load_hub_rows("baber/piqa", None, "validation"))
    (folder / "valid.jsonl").write_bytes(_jsonl({k: r[k] for k in ("goal", "sol1", "sol2")} for r in rows))
    (folder / "valid-labels.lst").write_text("".join(f"{int(r['label'])}\n" for r in rows))
    return {"hub": "baber/piqa", "splits": ["validation"]}


def _build_wikitext(folder: Path) -> dict:
    for split, name in (("validation", "valid"), ("test", "test")):
        lines = (row["text"] if row["text"].endswith("\n") else row["text"] + "\n"
                 for row in load_hub_rows("Salesforce/wikitext", "wikitext-2-raw-v1", split))
        (folder / f"wiki.{name}.raw").write_text("".join(lines), encoding="utf-8")
    return {"hub": "Salesforce/wikitext", "configs": ["wikitext-2-raw-v1"], "splits": ["validation", "test"]}


def _build_webtext(folder: Path) -> dict:
    rows = ({k: r[k] for k in ("text", "url", "timestamp") if k in r}
            for r in load_hub_rows("allenai/c4", "en", "validation", limit=C4_DOCUMENTS))
    (folder / "c4_en_validation_2k.jsonl.gz").write_bytes(gzip.compress(_jsonl(rows), mtime=0))
    return {"hub": "allenai/c4", "configs": ["en"], "splits": ["validation"],
            "note": f"the first {C4_DOCUMENTS} documents of the validation split, in the Hub's order"}


def _fetch_pinned(folder: Path, name: str, url: str) -> None:
    """Fetch one GitHub file and write it once its SHA-256 is the pinned one."""
    data = fetch_url(url)
    digest = hashlib.sha256(data).hexdigest()
    relative = f"{folder.name.removeprefix('.').removesuffix('.partial')}/{name}"
    if digest != PINNED[relative]:
        raise ValueError(f"{url}: SHA-256 {digest} is not the pinned {PINNED[relative]}; nothing written")
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _build_aochildes(folder: Path) -> dict:
    base = f"https://raw.githubusercontent.com/Farnaz-BNF/BabyLM_GED/{AOCHILDES_COMMIT}/Data"
    for name, part in (("aochildes.train", "babylm_10M"), ("aochildes.dev", "babylm_dev"), ("aochildes.test", "babylm_test")):
        _fetch_pinned(folder, name, f"{base}/{part}/{name}")
    return {"github": "Farnaz-BNF/BabyLM_GED", "commit": AOCHILDES_COMMIT,
            "note": "the AO-CHILDES portion of the BabyLM 2023 release (10M-word training slice, dev, test)"}


def _build_zorro(folder: Path) -> dict:
    for version, (commit, path) in ZORRO_COMMITS.items():
        for paradigm in ZORRO_PARADIGMS:
            url = f"https://raw.githubusercontent.com/phueb/Zorro/{commit}/{path}/{paradigm}.txt"
            _fetch_pinned(folder, f"{version}/{paradigm}.txt", url)
    return {"github": "phueb/Zorro", "commits": {v: c for v, (c, _) in ZORRO_COMMITS.items()}}


# ------------------------------------------------------------------------------------------- the layout
@dataclass(frozen=True)
class DataSet:
    """One folder of the layout. `files`: what it must hold (relative to the folder)."""

    name: str
    title: str
    origin: str
    license: str
    used_by: tuple[str, ...]
    files: tuple[str, ...]
    build: Callable[[Path], dict] = field(repr=False)


DATASETS: dict[str, DataSet] = {d.name: d for d in (
    DataSet("webtext_c4", "web text (C4, English): a stand-in for FineWeb-Edu at CPU scale", "Hub: allenai/c4 (en)",
            "ODC-BY", ("configs/pretrain/tiny_causal.yaml", "ssa-hf uptrain-demo", "ssa-hf reproduce --scale cpu"),
            ("c4_en_validation_2k.jsonl.gz",), _build_webtext),
    DataSet("aochildes", "AO-CHILDES child-directed speech (the BabyLM 2023 slices)",
            "GitHub: Farnaz-BNF/BabyLM_GED (pinned commit)", "CHILDES / TalkBank rules",
            ("configs/pretrain/tiny_masked.yaml", "configs/pretrain/babyberta_aochildes_*.yaml",
             "ssa-hf reproduce --scale cpu"),
            ("aochildes.train", "aochildes.dev", "aochildes.test"), _build_aochildes),
    DataSet("zorro", "Zorro grammatical minimal pairs (23 paradigms, current and CoNLL-2021 versions)",
            "GitHub: phueb/Zorro (pinned commits)", "MIT", ("ssa-hf probe", "ssa-hf reproduce --scale cpu"),
            tuple(f"{v}/{p}.txt" for v in ZORRO_COMMITS for p in ZORRO_PARADIGMS), _build_zorro),
    DataSet("wikitext", "WikiText-2 (raw) validation and test", "Hub: Salesforce/wikitext (wikitext-2-raw-v1)",
            "CC BY-SA 3.0", ("ssa-hf perplexity", "ssa-hf reproduce --scale cpu"),
            ("wiki.valid.raw", "wiki.test.raw"), _build_wikitext),
    DataSet("arc", "ARC-Easy and ARC-Challenge, every split", "Hub: allenai/ai2_arc", "CC BY-SA 4.0",
            ("ssa-hf eval --data-dir", "ssa-hf reproduce --scale cpu"),
            tuple(f"{s}-{p}.jsonl" for s in ("ARC-Easy", "ARC-Challenge") for p in ("train", "validation", "test")),
            _build_arc),
    DataSet("boolq", "BoolQ validation", "Hub: google/boolq", "CC BY-SA 3.0",
            ("ssa-hf eval --data-dir", "ssa-hf reproduce --scale cpu"), ("validation.jsonl",), _build_boolq),
    DataSet("hellaswag", "HellaSwag validation, as lm-eval scores it", "Hub: Rowan/hellaswag", "MIT",
            ("ssa-hf eval --data-dir", "ssa-hf reproduce --scale cpu"), ("hellaswag_val.jsonl.gz",), _build_hellaswag),
    DataSet("piqa", "PIQA validation with its labels", "Hub: baber/piqa", "AFL 3.0",
            ("ssa-hf eval --data-dir",), ("valid.jsonl", "valid-labels.lst"), _build_piqa),
)}


def selected(names: Iterable[str] | None) -> list[DataSet]:
    names = list(names or DATASETS)
    unknown = [n for n in names if n not in DATASETS]
    if unknown:
        raise ValueError(f"unknown data sets {unknown}; choose from {sorted(DATASETS)}")
    return [DATASETS[n] for n in names]


def _write_checksums(folder: Path) -> None:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in (CHECKSUM_FILE, SOURCE_FILE))
    text = "".join(f"{sha256_file(p)}  {p.relative_to(folder).as_posix()}\n" for p in files)
    (folder / CHECKSUM_FILE).write_text(text)


def check(root: str | os.PathLike, names: Iterable[str] | None = None) -> list[str]:
    """What is wrong with the data folder `root` (empty: every selected set complete and, where it has a
    SHA256SUMS file, every file's checksum equal; a folder without one is checked for its files only)."""
    root = Path(root).expanduser()
    if not root.is_dir():
        return [f"{root} is not a folder; build it with: {DOWNLOAD_HINT}"]
    problems = []
    for dataset in selected(names):
        folder = root / dataset.name
        if not folder.is_dir():
            problems.append(f"{dataset.name}/ is missing")
            continue
        problems += [f"{dataset.name}/{f} is missing" for f in dataset.files if not (folder / f).is_file()]
        sums = folder / CHECKSUM_FILE
        if not sums.is_file():
            continue
        for number, line in enumerate(sums.read_text().splitlines(), 1):
            digest, _, name = line.partition("  ")
            path = folder / name
            if not name or ".." in Path(name).parts or Path(name).is_absolute():
                problems.append(f"{dataset.name}/{CHECKSUM_FILE} line {number}: not '<sha256>  <relative path>'")
            elif path.is_file() and sha256_file(path) != digest:
                problems.append(f"{dataset.name}/{name}: checksum differs from {CHECKSUM_FILE}")
            elif not path.is_file() and name not in dataset.files:
                problems.append(f"{dataset.name}/{name} (listed in {CHECKSUM_FILE}) is missing")
    return problems


def has_checksums(root: str | os.PathLike, name: str) -> bool:
    return (Path(root).expanduser() / name / CHECKSUM_FILE).is_file()


def download(to: str | os.PathLike, names: Iterable[str] | None = None, *, log=print) -> list[Path]:
    """Build the selected data sets (default: all) under `to`, each in a temporary folder renamed into place once
    complete (with its SHA256SUMS and SOURCE.json). A set already there and passing `check` is kept; one there
    that fails is refused (remove it first)."""
    root = Path(to).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for dataset in selected(names):
        target = root / dataset.name
        if target.is_symlink():
            raise ValueError(f"{target} is a link; refusing to write through it")
        if target.exists():
            problems = check(root, [dataset.name])
            if problems:
                raise ValueError(f"{target} exists but fails the check ({problems[0]}); remove it and download again")
            log(f"{dataset.name}: already complete, kept")
            continue
        partial = root / f".{dataset.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        try:
            log(f"{dataset.name}: from {dataset.origin}")
            source = dataset.build(partial)
            missing = [f for f in dataset.files if not (partial / f).is_file()]
            if missing:
                raise ValueError(f"{dataset.name}: the build wrote no {missing[0]}")
            (partial / SOURCE_FILE).write_text(json.dumps({"data_set": dataset.name, "license": dataset.license,
                                                           **source}, indent=2) + "\n")
            _write_checksums(partial)
            partial.rename(target)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        written.append(target)
    return written


def missing_data_hint(path: str) -> str:
    """The end of a 'no data files' message for a path in the data folder."""
    return f" (the offline data folder is incomplete: build it with `{DOWNLOAD_HINT}` and set SSA_HF_DATA_DIR=DIR)"


__all__ = ["DATASETS", "DataSet", "check", "download", "missing_data_hint"]
