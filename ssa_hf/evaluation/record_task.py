"""ReCoRD (SuperGLUE) for lm-eval, scored by this package: the stock task's prompt and choices, and a SQuAD-style
token F1 and exact match of our own.

lm-eval 0.4.13's stock ReCoRD scorer imports `transformers.data.metrics.squad_metrics`, which transformers 5
removed, so the stock task cannot load under this package's pins. The task `lm_tasks` writes for `record` names
these functions instead (`!function ssa_hf.evaluation.record_task.<name>`); the prompt is the stock one (the
passage, its highlights as bullets, each candidate entity put into the query's placeholder), the metrics are
the usual ReCoRD ones: the most likely entity, compared with every gold answer after SQuAD's normalisation
(lower case, no punctuation, no articles, single spaces), the best F1 and exact match over the answers.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

HIGHLIGHT = "\n@highlight\n"
PLACEHOLDER = "@placeholder"
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)


def process_docs(dataset):
    """Each document with its entities and answers de-duplicated and sorted (the order the choices are scored in)."""
    def one(doc: dict[str, Any]) -> dict[str, Any]:
        return {"passage": doc["passage"], "query": doc["query"], "entities": sorted(set(doc["entities"])),
                "answers": sorted(set(doc["answers"]))}

    return dataset.map(one)


def doc_to_text(doc: dict[str, Any]) -> str:
    """The passage's text, then its highlights as bullet lines."""
    text, *highlights = doc["passage"].strip().split(HIGHLIGHT)
    return text + "\n\n" + "".join(f"  - {highlight}.\n" for highlight in highlights)


def fill(query: str, entity: str) -> str:
    """One more bullet line: the query with `entity` in its placeholder."""
    return f"  - {query}".replace(PLACEHOLDER, entity)


def doc_to_choice(doc: dict[str, Any]) -> list[str]:
    return [fill(doc["query"], entity) for entity in doc["entities"]]


def doc_to_target(doc: dict[str, Any]) -> str:
    """The first gold answer's continuation (the metrics compare with every answer)."""
    return fill(doc["query"], doc["answers"][0])


def normalize(text: str) -> str:
    """SQuAD's answer normalisation: lower case, punctuation and the articles a/an/the removed, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize(prediction) == normalize(gold))


def token_f1(prediction: str, gold: str) -> float:
    """F1 of the normalised tokens in common (an empty side scores 1 only against another empty side)."""
    predicted, wanted = normalize(prediction).split(), normalize(gold).split()
    if not predicted or not wanted:
        return float(predicted == wanted)
    common = sum((Counter(predicted) & Counter(wanted)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(wanted)
    return 2 * precision * recall / (precision + recall)


def process_results(doc: dict[str, Any], results: list) -> dict[str, float]:
    """f1 and em of the entity the model finds most likely (`results`: one (log-likelihood, greedy) per choice)."""
    scores = [result[0] for result in results]
    prediction = doc["entities"][max(range(len(scores)), key=scores.__getitem__)]
    return {"f1": max(token_f1(prediction, gold) for gold in doc["answers"]),
            "em": max(exact_match(prediction, gold) for gold in doc["answers"])}


#: the task definition `lm_tasks` writes for `record` (instead of including the stock YAML, whose code cannot load)
DEFINITION: dict[str, Any] = {
    "output_type": "multiple_choice",
    **{name: f"ssa_hf.evaluation.record_task.{name}" for name in
       ("process_docs", "doc_to_text", "doc_to_target", "doc_to_choice", "process_results")},
    "metric_list": [{"metric": "f1", "aggregation": "mean", "higher_is_better": True},
                    {"metric": "em", "aggregation": "mean", "higher_is_better": True}],
}
FUNCTIONS = ("process_docs", "doc_to_text", "doc_to_target", "doc_to_choice", "process_results")
