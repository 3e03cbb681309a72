"""Serving: `ssa-hf serve` (transformers' own server with ssa-hf's model loader) and plain `transformers serve` on a
folder saved with its code, queried with the `openai` client (Chat Completions plain and streaming, the Responses
API); the answers equal greedy `generate` of the chat-templated prompt. Each server listens on 127.0.0.1 on a free
port and stops by itself; about 40 s each on two busy cores (a server and its model process each import torch and
transformers), so they are marked slow."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from ssa_hf import SSALlamaForCausalLM
from tests.models.tiny import llama_config, tiny_tokenizer

pytest.importorskip("fastapi", reason="serving needs the [serve] extra")
openai = pytest.importorskip("openai", reason="the served-model tests query the server with the openai client")

CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")
MESSAGES = [{"role": "user", "content": "where did the cat sit"}]
NEW_TOKENS = 8
START_SECONDS = 240  # a server not answering /health by then fails the test


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    """A tiny SSALlama saved with its code (auto_map) and a tiny tokenizer with a chat template."""
    folder = tmp_path_factory.mktemp("served") / "tiny-ssa"
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    SSALlamaForCausalLM(llama_config(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _greedy_answer(folder: Path) -> tuple[str, int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = SSALlamaForCausalLM.from_pretrained(folder).eval()
    ids = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=NEW_TOKENS, do_sample=False)
    new = out[0, ids["input_ids"].shape[1]:]
    return tokenizer.decode(new, skip_special_tokens=True), len(new)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def _serve(command: list[str], port: int, tmp_path: Path):
    """Start a server (killed after 300 s whatever happens), wait for /health; yields its log file."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"),
           "TOKENIZERS_PARALLELISM": "false"}
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        process = subprocess.Popen(["timeout", "300", *command], stdout=out, stderr=subprocess.STDOUT, env=env,
                                   cwd=tmp_path)
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                    if json.load(answer).get("status") == "ok":
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield log
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _ask(port: int, model: str) -> dict:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", timeout=120)
    plain = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=NEW_TOKENS, temperature=0)
    stream = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=NEW_TOKENS, temperature=0,
                                            stream=True)
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    response = client.responses.create(model=model, input=MESSAGES, max_output_tokens=NEW_TOKENS, temperature=0)
    return {"plain": plain.choices[0].message.content, "tokens": plain.usage.completion_tokens, "streamed": streamed,
            "responses": response.output_text}


# the continuous-batching server runs by default (about 20 s: a server start and three requests); the plain one is slow
@pytest.mark.parametrize("batching", [pytest.param([], id="generate", marks=pytest.mark.slow),
                                      pytest.param(["--continuous-batching"], id="continuous-batching")])
def test_ssa_hf_serve_answers_as_greedy_generate(model_folder, tmp_path, batching):
    port = _free_port()
    command = [sys.executable, "-m", "ssa_hf.cli", "serve", str(model_folder), "--port", str(port), "--device", "cpu",
               "--exit-after", "280", *batching]
    with _serve(command, port, tmp_path) as log:
        answers = _ask(port, str(model_folder))
        assert "ssa_hf.models.modeling_ssa_llama.SSALlamaForCausalLM" in log.read_text()
    expected, count = _greedy_answer(model_folder)
    assert answers == {"plain": expected, "tokens": count, "streamed": expected, "responses": expected}


@pytest.mark.slow
def test_plain_transformers_serve_runs_the_saved_code_of_a_folder_without_architectures(model_folder, tmp_path):
    """The route for users without ssa-hf: `transformers serve --trust-remote-code` loads a model through
    AutoModelForCausalLM (hence its auto_map) when config.json names no architecture."""
    folder = tmp_path / "remote"
    shutil.copytree(model_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    config.pop("architectures")
    (folder / "config.json").write_text(json.dumps(config))
    transformers_cli = Path(sys.executable).with_name("transformers")
    port = _free_port()
    # no ssa_hf import in that process: the saved code is all it can load the model with
    command = [str(transformers_cli), "serve", str(folder), "--trust-remote-code", "--continuous-batching",
               "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    with _serve(command, port, tmp_path):
        answers = _ask(port, str(folder))
    expected, count = _greedy_answer(model_folder)
    assert answers == {"plain": expected, "tokens": count, "streamed": expected, "responses": expected}


def test_loader_resolves_ssa_classes_through_the_auto_classes_and_leaves_stock_ones_to_transformers(model_folder,
                                                                                                  tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from ssa_hf.serving.server import ScoredModelLoader

    loader = ScoredModelLoader(device="cpu", dtype="auto")
    model = loader._load_model(str(model_folder))
    assert type(model) is SSALlamaForCausalLM and model.config._attn_implementation == "ssa_auto"
    stock_folder = tmp_path / "stock"
    LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2)).save_pretrained(stock_folder)
    assert type(loader._load_model(str(stock_folder))) is LlamaForCausalLM
    with pytest.raises(ValueError, match="cannot run attention_scoring='ssa'"):
        ScoredModelLoader(device="cpu", attn_implementation="flash_attention_2")._load_model(str(model_folder))
