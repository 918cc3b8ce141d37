"""Runs a guide page as it is written (docs/guide/your-data.md): its fenced blocks in order, in an empty
directory holding my_corpus.jsonl (the tiny corpus's 400 lines, as {"text": ...}), with trident's directory
first on the PATH. Blocks tagged `sh` run in one bash (set -euo pipefail), `toml` blocks are written to the
file their first line names (`# NAME.toml: ...`), `python` blocks run in this Python; `console`, `json` and
`text` blocks are shown, not run. Every `trident train` gets the --set overrides of SHRINK appended (the
page says so), so the page runs in seconds. Then checks what each step should leave: the evaluations'
perplexities, the exported directories, the Python blocks' output and the one line of a run without
validation data.
    walkthrough_test.py TRIDENT PAGE.md"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
from common import fresh_dir, require, tiny_corpus_lines  # noqa: E402

SHRINK = ["model.n_layer=1", "model.n_head=2", "model.d_model=32", "model.max_seq_len=64", "train.seq_len=32",
          "train.micro_batch_size=2", "train.steps=4", "train.log_interval=2", "train.eval_interval=2",
          "train.eval_steps=2", "schedule.warmup_steps=1", "log.progress=off", "train.peak_gflops=1"]


def blocks(page):
    """The page's fenced blocks as (tag, text), in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", open(page).read(), re.S | re.M)


def script(page, python):
    """The bash script that runs the page's blocks."""
    shrink = " ".join(f"--set {s}" for s in SHRINK)
    lines = ["set -euo pipefail",
             f'trident() {{ if [[ $1 == train ]]; then command trident "$@" {shrink}; else command trident "$@"; fi; }}']
    for i, (tag, text) in enumerate(blocks(page)):
        if tag == "sh":
            lines += [f"echo '>>> sh block {i}'", text]
        elif tag == "toml":
            name = re.match(r"# ([\w.-]+\.toml)", text)
            if not name:
                sys.exit(f"FAIL: {page}: a toml block does not open with '# NAME.toml': {text.splitlines()[0]!r}")
            lines += [f"cat > {name.group(1)} <<'TOML_EOF'", text.rstrip("\n"), "TOML_EOF"]
        elif tag == "python":
            with open(f"block_{i}.py", "w") as f:
                f.write(text)
            lines += [f"echo '>>> python block {i}'", f"{python} block_{i}.py"]
        elif tag not in ("console", "json", "text"):
            sys.exit(f"FAIL: {page}: a block tagged {tag!r}: run it (sh, toml, python) or show it (console, json, text)")
    return "\n".join(lines) + "\n"


def main():
    trident, page = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    require("torch")
    require("transformers")
    work = fresh_dir("/tmp/trident-walkthrough")
    os.chdir(work)
    with open("my_corpus.jsonl", "w") as f:
        for i, line in enumerate(tiny_corpus_lines()):
            f.write(f'{{"id": "doc-{i}", "text": "{line}"}}\n')
    env = dict(os.environ, PATH=os.path.dirname(trident) + os.pathsep + os.environ["PATH"],
               TRIDENT_NUM_THREADS="1", TRANSFORMERS_VERBOSITY="error", HF_HUB_OFFLINE="1")
    p = subprocess.run(["bash", "-c", script(page, sys.executable)], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    out = p.stdout
    print(out)
    if p.returncode != 0:
        sys.exit(f"FAIL: {page}'s commands exit {p.returncode}")
    failures = []

    def expect(what, ok):
        print(f"{'ok' if ok else 'FAIL'}: {what}")
        if not ok:
            failures.append(what)

    expect("every evaluation printed a perplexity (GPT-2 twice, LLaMA, BERT)",
           len(re.findall(r"^eval: .*perplexity [0-9.]+", out, re.M)) == 4)
    expect("training evaluated on the validation data", re.search(r"^eval at step 4: val loss", out, re.M))
    for name in ("gpt2", "llama", "bert"):
        expect(f"hf/{name} holds config.json, model.safetensors and tokenizer.json",
               all(os.path.exists(f"hf/{name}/{f}") for f in ("config.json", "model.safetensors", "tokenizer.json")))
    python_out = out.split(">>> python block")
    expect("transformers generated text from hf/gpt2", len(python_out) == 3 and "To reset the router" in python_out[1])
    expect("the fill-mask pipeline printed five guesses",
           len(python_out) == 3 and len(re.findall(r"^ *\S+  [01]\.\d{3}$", python_out[2], re.M)) >= 5)
    expect("the run without validation data said so in one line",
           len(re.findall(r"^no evaluation will run: ", out, re.M)) == 1)
    if failures:
        sys.exit(f"FAIL: {len(failures)} check(s) of {page}")
    print(f"ok: {page} runs as written")


if __name__ == "__main__":
    main()
